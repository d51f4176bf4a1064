// Measures this machine for the job forecast (job_forecast.hpp), on one thread as a rank runs:
// the project's own GEMMs at the shapes the model's layers multiply, fitted to one FLOP rate; the
// attention kernel forward and backward; the elementwise passes; the job's optimizer step; a
// two-rank in-memory all-reduce at several sizes (latency and bandwidth). Then it runs the model
// itself, each run three times and the fastest kept: as a single-device job at the batch
// (measured / the ops' sum is the scale for what the op list leaves out: allocation, cache
// misses) and at a quarter of it (what it takes beyond its scaled ops is the cost of running its
// two actions: messages, the data loader), and as two data-parallel replicas of the whole batch
// each, whose step against the same forecast alone is what ranks side by side cost each other
// (shared caches, memory bandwidth, vCPUs). About a minute for the GPT.
#pragma once

#include <functional>
#include <string>

#include "actors/plan/job_forecast.hpp"

namespace troupe {

// cfg: the job whose model (and data) the calibration runs, on one device; its mesh and
// schedule are ignored. progress: called with what is being measured (may be empty).
machine_costs calibrate_machine(const train_config& cfg, const std::function<void(const std::string&)>& progress = {});

// Measured step time of a finished run: the median over its steps (the first two skipped as
// warm-up) of the slowest rank's wall time of that step.
double measured_step_seconds(const train_summary& run);

}  // namespace troupe
