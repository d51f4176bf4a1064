// The scenario file of `troupe stress`: the job in the tables of `troupe train --config`
// (config_file.hpp), plus [stress] (modes, target, output folder) and one [[scenario]] table per
// injected scenario. Everything is checked, every run's job validated, before anything runs.
#pragma once

#include <string>

#include "stress/stress_run.hpp"

namespace troupe::cli {

// Throws std::invalid_argument ("<file>:<line>: <key>: <problem>").
stress::stress_plan load_stress_file(const std::string& path);

// The keys of [stress] and [[scenario]], for --help.
extern const char* const stress_file_help;

}  // namespace troupe::cli
