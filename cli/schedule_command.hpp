// `troupe schedule`: builds a pipeline schedule (any builder, completed with communication and
// the optimizer step) or reads one from a schedule file, validates it, simulates it under uniform
// costs and draws it: a text table on the terminal, an SVG timeline and Chrome trace JSON on
// request; --save writes its text form for --schedule-file. It trains nothing.
#pragma once

#include <CLI/CLI.hpp>

namespace troupe::cli {

// Adds the `schedule` subcommand to app; the callback writes its exit code into exit_code.
void add_schedule_command(CLI::App& app, int& exit_code);

}  // namespace troupe::cli
