// troupe stress, the report: from the runs' summaries to one folder of
//   report.json, report.csv   every number of the table, per-step losses and their wall times,
//                             step times per rank and staleness histograms (report.json)
//   plots/*.svg, plots/*.png  loss against steps and against wall time per scenario (a line per
//                             mode), the staleness histogram per scenario, each run's step time
//                             per rank
//   index.html                the table and the plots
//   runs/NN-mode-scenario/    each run's own outputs (metrics.jsonl, trace.json, ...)
// The folder is made under a temporary name and renamed at the end, so an existing report is
// only replaced by a whole one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "stress/stress_run.hpp"

namespace troupe::stress {

// One run's row of the table. NaN where there is nothing to show (no servers, no evaluation,
// a target never reached, no sync DP run to compare with).
struct run_metrics {
  double samples_per_s = 0, vs_sync = 0, train_seconds = 0;
  int64_t steps = 0;
  double step_ms_p50 = 0, step_ms_p90 = 0, step_ms_p99 = 0;  // between consecutive step ends
  // From the servers' update records: staleness in server updates (applied - read), and the
  // lead in rounds over the slowest replica (SSP's bound is on that lead).
  int64_t updates = 0, held = 0, lead_max = 0;
  double staleness_max = 0, staleness_mean = 0;
  std::vector<int64_t> staleness_histogram;  // [k]: updates applied k updates stale
  double final_loss = 0;  // the mean of the last (up to) 10 steps' losses
  double test_loss = 0, test_accuracy = 0, time_to_target = 0;
};
// `sync`: the sync DP run under the same scenario, or null.
run_metrics measure(const run& r, const run* sync, double target_loss);

// The mean of the last (up to) `window` steps' losses done by wall time t (all: t = infinity).
double loss_by(const train_summary& s, double t, size_t window = 10);

// Runs the plan (run_stress) and writes the report folder at p.out_dir; throws
// std::runtime_error when the folder cannot be written. Returns the runs that failed.
int run_and_report(const stress_plan& p);

}  // namespace troupe::stress
