// troupe stress, the runs: one job (a train_config) under several training modes and injected
// scenarios, every run through run_training, one after the other. What to run is plain data
// (stress_plan, filled by the CLI from a scenario file); the report is stress_report.hpp's.
// It does not run jobs over several processes (refused by plan_runs), so it has no slow link,
// paused or killed process among its faults.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "actors/config/train_config.hpp"

namespace troupe::stress {

struct mode {
  std::string name;  // "sync", "sync ready+H", "ps-bsp", "ps-ssp s=3", "ps-asp"
  consistency_model consistency = consistency_model::none;
  int staleness = 0;
  sched::dispatch_policy dispatch = sched::dispatch_policy::fixed;  // how each stage runs its row
  int ready_stash = 0;                                              // with ready: --ready-stash
};
// "sync", "ready" or "ready:H" (sync with ready dispatch and H activations of stash headroom),
// "bsp", "ssp:S" (or "ssp" for S = 1), "asp"; throws std::invalid_argument naming the text.
mode parse_mode(const std::string& text);

// A straggler's delay given as "rank:Nx[:kind[:param]]" is a multiple of sync DP's step time,
// measured by a calibration run before the others: the straggler sleeps (N - 1) x that step
// time on average, so it takes N times as long.
struct relative_straggler {
  std::string text;   // as written
  double times = 0;   // N; 0: `spec` is absolute
  straggler_spec spec;
};
// Parses either form; throws std::invalid_argument naming the text.
relative_straggler parse_relative_straggler(const std::string& text);

struct scenario {
  std::string name;
  std::vector<relative_straggler> stragglers;
  std::vector<jitter_spec> jitter;  // per mesh rank: each compute action's random extra time
  std::vector<slow_link_spec> slow_links;  // per mesh rank: its data-parallel ring's sends capped (sync modes only)
  int kill_server = -1;  // a parameter server's fault: sync DP is not run under it
  int64_t kill_server_after = 0;
  // An elastic job's membership (sync modes only: the server modes have none): replica
  // kill_replica's ranks die as step kill_replica_step begins, and a replica is admitted after
  // admit_after steps (-1: none).
  int kill_replica = -1;
  int64_t kill_replica_step = 0;
  int64_t admit_after = -1;
};

struct stress_plan {
  std::string source;  // the scenario file, for the report
  train_config job;    // the model, data, mesh and batch every run shares
  std::vector<mode> modes;
  std::vector<scenario> scenarios;
  double target_loss = 0;        // time to this training loss (0: sync DP's final loss under the same scenario)
  int64_t calibrate_steps = 40;  // the calibration run's steps (only when a straggler is relative)
  std::string out_dir = "runs/stress";
};

struct run {
  int index = 0;  // 1-based, in the order run
  mode how;
  std::string scenario;
  std::vector<std::string> faults;  // the injected faults, resolved ("straggler 0: fixed 12.4 ms")
  train_config cfg;
  std::string error;  // the job failed (a killed server): why; the summary is then empty
  train_summary summary;
};

// The runs of a plan, in order (scenario-major), with their train_configs validated (relative
// stragglers at a stand-in step time). Throws std::invalid_argument naming the scenario and mode
// of a combination the job refuses, before anything runs.
std::vector<run> plan_runs(const stress_plan& p);

struct results {
  double calibrated_step_s = 0;  // sync DP's step time the relative stragglers are multiples of (0: none)
  std::vector<run> runs;
};
// Runs everything into run_root/NN-mode-scenario/, logging a line per run. A failed run is
// recorded in its `error` and the next one goes on.
results run_stress(const stress_plan& p, const std::string& run_root);

}  // namespace troupe::stress
