// `troupe train`: flags and config file into a train_config, then run_training
// (actors/training_job.hpp), then a short report. The loop itself is in actors/coordinator.cpp.
#pragma once

#include <CLI/CLI.hpp>

namespace troupe::cli {

// Adds the `train` subcommand to app; the callback runs the job. Returns the exit code slot.
void add_train_command(CLI::App& app, int& exit_code);

}  // namespace troupe::cli
