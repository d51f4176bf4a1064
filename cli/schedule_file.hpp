// Schedule files: a pipeline schedule in its text form (sched::to_string) on disk, so a user can
// save a built-in schedule, edit it by hand and draw or train it without writing C++. Reading
// one parses, range-checks and validates it; it does not fit it to a job (train_command.cpp
// does that: --pp, --micro-batches, the batch).
#pragma once

#include <string>

#include "schedules/schedule.hpp"

namespace troupe::cli {

// The file's text with its '#' comment lines and blank lines left out, then sched::parse_schedule,
// the header's P, M and v checked against the ranges of --pp, --micro-batches and
// --virtual-stages, then sched::validate. Throws std::invalid_argument "<path>:<line>: <problem>",
// the line being the file's own (comments counted): the malformed line, or the row of the
// stage whose instruction validate refuses (which the message names, e.g. "(RG0<1)").
sched::schedule read_schedule_file(const std::string& path);

// What read_schedule_file reads back as s: a comment line saying where it came from (`origin`,
// e.g. the command that made it), then sched::to_string(s).
std::string schedule_file_text(const sched::schedule& s, const std::string& origin);

}  // namespace troupe::cli
