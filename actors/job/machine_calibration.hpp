// Measures this machine for the job forecast (job_forecast.hpp), on one thread as a rank runs:
// the project's own GEMM (OpenBLAS) at the shapes the model's layers multiply, fitted to a FLOP
// rate plus a byte rate; the attention kernel forward and backward; the elementwise passes; the
// job's optimizer step; a two-rank in-memory all-reduce at several sizes (latency and bandwidth).
// Then it runs the model itself as a single-device job for a few steps: what those steps take
// beyond the sum of their ops is the cost of running an action and a step (messages, the data
// loader, allocation), fitted from two micro-batch counts. A few seconds in all.
#pragma once

#include <functional>
#include <string>

#include "actors/job/job_forecast.hpp"

namespace troupe {

// cfg: the job whose model (and data) the calibration runs, on one device; its mesh and
// schedule are ignored. progress: called with what is being measured (may be empty).
machine_costs calibrate_machine(const train_config& cfg, const std::function<void(const std::string&)>& progress = {});

// Measured step time of a finished run: the median over its steps (the first two skipped as
// warm-up) of the slowest rank's wall time of that step.
double measured_step_seconds(const train_summary& run);

}  // namespace troupe
