// `troupe stress SCENARIO.toml`: one job under several training modes (sync DP, parameter
// servers under BSP, SSP and ASP) and injected scenarios (stragglers, a killed server), and one
// report folder comparing them (stress/stress_report.hpp). The runs and the report live in
// stress/; this file reads the flags and the file and reports what went wrong.
#pragma once

#include <CLI/CLI.hpp>

namespace troupe::cli {

// Exit 0: report written; 1: a run failed unexpectedly or the folder cannot be written (named);
// 2: a bad scenario file or flag, refused before anything runs.
void add_stress_command(CLI::App& app, int& exit_code);

}  // namespace troupe::cli
