// Spawn functions of troupe's actors (DESIGN.md, actors/): what each one is given when it
// starts. Each actor's behavior lives in its own file, named for it.
#pragma once

#include <caf/all.hpp>

#include <memory>

#include "actors/messages.hpp"
#include "actors/train_config.hpp"
#include "storage/dataset.hpp"

namespace troupe {

class metrics_log;

using start_atom = caf::atom_constant<caf::atom("start")>;

// Serves this rank's share of each training batch and the held-out batches. Gathering a batch
// is a copy of a few hundred KB: short enough to run on CAF's scheduler threads.
struct data_loader_args {
  std::shared_ptr<const storage::dataset> train, eval;
  int64_t global_batch = 128;
  eval_plan held_out;  // held-out samples served, and per eval_batch_msg (train_config.hpp)
  uint64_t seed = 42;
  int rank = 0, ranks = 1;
};
caf::actor spawn_data_loader(caf::actor_system& sys, data_loader_args args);

// A stage holding the whole model (one stage, one device). Detached: it owns its thread, so its
// compute never blocks a scheduler thread.
struct stage_args {
  model_spec model;
  uint64_t seed = 42;
  int64_t global_rows = 0;   // loss rows of the global batch (for the gradient scale)
  int64_t total_steps = 0;   // steps it will be ordered to run (bounds the prefetch)
  int prefetch = 2;          // batches requested ahead of the one being computed
  caf::actor loader, optimizer, coordinator;
};
caf::actor spawn_stage(caf::actor_system& sys, stage_args args);

// Master parameters and optimizer state for the flat range it owns. Detached, like a stage.
caf::actor spawn_optimizer_shard(caf::actor_system& sys, optimizer_config cfg, int64_t offset, int64_t size);

// Drives the job: orders steps and evaluations, collects reports into the metrics log, and
// fills `summary` before it quits. Started with (start_atom, stage, members), or with
// (start_atom, std::vector<caf::actor> stages, members) for data parallelism: then it orders
// every rank and sums their dp_step_reports; the first stage evaluates. It monitors every other
// actor and stops the job with the reason when one of them dies; an error of its own (a metrics
// line it cannot write) stops the job the same way, so the job ends even then.
struct job_failure {
  std::string what;   // empty while the job runs, and after it ended well
  bool own = false;   // the coordinator's own error: a cause, not a symptom of a lost rank
};
struct coordinator_args {
  int64_t steps_per_epoch = 0;
  int64_t epochs = 0;
  int64_t total_steps = 0;
  int64_t samples_per_step = 0;
  std::shared_ptr<metrics_log> log;
  std::shared_ptr<train_summary> summary;
  std::shared_ptr<job_failure> failure;  // set when the job stopped on an error
  std::shared_ptr<std::vector<dp_trace_event>> trace;  // data parallel: the traced step's events
  double watchdog_seconds = 0;  // no step finished this long: report and stop (0: never)
};
// coordinator <- job: the collective group whose recent operations a watchdog report shows.
using watch_atom = caf::atom_constant<caf::atom("watch")>;
caf::actor spawn_coordinator(caf::actor_system& sys, coordinator_args args);

}  // namespace troupe
