// pipeline_job: a model cut into chunks, run by one pipeline_stage actor per device under any
// validated schedule, one step at a time, with a watchdog. run_pipeline_training is `troupe
// train --pp P`. This header holds no CAF type (the actors live in actors/pipeline_*.cpp); it
// does no data parallelism and no ZeRO (fetch/release actions are refused by name).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "actors/train_config.hpp"
#include "kernels/partition.hpp"
#include "schedules/schedule.hpp"
#include "schedules/timeline.hpp"

namespace troupe {

namespace storage {
class dataset;
}

struct pipeline_job_args {
  model_spec model;
  optimizer_config optim;
  uint64_t seed = 42;
  int64_t batch_size = 0;       // global batch in samples; a multiple of the schedule's M
  int64_t rows_per_sample = 1;  // loss rows per sample (the GPT's context)
  int64_t total_steps = 0;      // steps the data loader will be asked for
  std::shared_ptr<const storage::dataset> train;
  sched::schedule plan;          // complete (with send/recv and optimizer step): validated here
  std::vector<int64_t> cuts;     // first layers of model chunks 1..; empty: balanced by params
  double watchdog_seconds = 60;  // report and stop after this long without any progress
  bool pin_threads = false;      // pin stage d's thread to core d % cores
  std::string drop_send;         // fault injection for tests: a send ("0SA3>1") that is lost
};

struct pipeline_step_result {
  double loss_sum = 0.0;
  int64_t count = 0;
  int64_t correct = 0;
  double seconds = 0.0;         // wall time from the order to the last stage's report
  sched::timeline measured;     // per stage, every action with its start and end (seconds)
  double mean_loss() const { return count ? loss_sum / static_cast<double>(count) : 0.0; }
};

class pipeline_job {
 public:
  // Validates the plan (throws std::invalid_argument with validate()'s message, before any
  // actor exists), cuts the model and spawns the actors.
  explicit pipeline_job(pipeline_job_args args);
  ~pipeline_job();
  pipeline_job(const pipeline_job&) = delete;
  pipeline_job& operator=(const pipeline_job&) = delete;

  // Runs one step on every stage. Throws std::runtime_error with the watchdog's report (per
  // stage: the action it is blocked on and what it waits for) or a stage's failure.
  pipeline_step_result run_step(int64_t step);
  // The whole model's flat parameters, in the order of one layer_stack over all layers.
  tensor params();
  const std::vector<layer_range>& chunks() const;  // model chunk -> its layers
  // Per stage: the most activations it held at once, over every step run so far.
  const std::vector<int>& peak_live_activations() const;
  const sched::schedule& plan() const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

// `troupe train` with cfg.mesh.pp > 1: the training loop over a pipeline_job, metrics, evaluation at
// each epoch end, and the measured timeline of the last step (timeline.svg, timeline.json) with
// its bubble next to the simulated one, in cfg.out_dir.
train_summary run_pipeline_training(const train_config& cfg);

}  // namespace troupe
