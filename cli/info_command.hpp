// `troupe info`: what this build and machine give a job: the version, the OpenBLAS kernels every
// program of the project runs with, and the cores. It starts no actor and reads no data.
#pragma once

#include <CLI/CLI.hpp>

namespace troupe::cli {

// Adds the `info` subcommand to app; the callback writes its exit code into exit_code.
void add_info_command(CLI::App& app, int& exit_code);

}  // namespace troupe::cli
