// `troupe train`: flags and config file into a train_config, then run_training
// (actors/run/training_job.hpp), then a short report. The loop itself is in actors/coordinator/coordinator.cpp.
#pragma once

#include <CLI/CLI.hpp>

namespace troupe::cli {

// Adds the `train` subcommand to app; the callback runs the job. Returns the exit code slot.
// `troupe worker` (worker_command.hpp) is the same command for a rank other than 0.
void add_train_command(CLI::App& app, int& exit_code, const char* name = "train", bool worker = false);

}  // namespace troupe::cli
