// `troupe plan MODEL CLUSTER`: predicts memory per device by kind, step time, TFLOP/s per GPU and
// MFU for one plan (mesh, micro-batching, schedule, ZeRO stage, recomputation), or searches
// plans for the fastest that fit (--search). It runs nothing: schedules/plan/ is the model.
#pragma once

#include <CLI/CLI.hpp>

namespace troupe::cli {

// Adds the `plan` subcommand to app; the callback writes its exit code into exit_code.
void add_plan_command(CLI::App& app, int& exit_code);

}  // namespace troupe::cli
