// job_plan: what every rank of a job runs, derived from the train_config and its data alone, so
// every process of a multi-process job derives the same plan. The schedule (the named one, or
// the user's), the model cut into its chunks, and each pipeline stage's gradient buckets. No CAF.
#pragma once

#include <vector>

#include "actors/plan/checkpointing.hpp"
#include "actors/plan/dp_buckets.hpp"
#include "actors/plan/prepared_job.hpp"
#include "actors/config/train_config.hpp"
#include "kernels/partition.hpp"
#include "schedules/schedule.hpp"

namespace troupe {

struct job_plan {
  sched::mesh mesh;
  sched::schedule schedule;         // complete and validated; one row per pipeline stage
  std::vector<layer_range> chunks;  // model chunk -> its layers
  // Per (pipeline stage, tp rank), at slot(stage, tp): per local chunk its gradient buckets
  // (offsets into that chunk's flat gradients), and its parameter count. Tensor parallelism
  // gives each tp rank its own share of a stage's layers, so its own sizes. Empty bucket lists
  // with one replica: nothing to reduce.
  std::vector<std::vector<std::vector<grad_bucket>>> buckets;
  std::vector<int64_t> stage_params;
  // The checkpoint the job continues from (cfg.resume), opened and checked; null: a fresh start.
  std::shared_ptr<const resume_point> resume;
  size_t slot(int stage, int tp) const { return static_cast<size_t>(stage * mesh.tp + tp); }
  // ZeRO: mesh rank `rank`'s segments of its stage's buckets (dp_buckets.hpp's shard_layout at
  // its place in the data-parallel group, and for the experts' buckets among the replicas
  // holding its experts).
  std::vector<shard_piece> shard_of(int rank) const;
  int buckets_of_stage(int stage, int tp = 0) const;
};

// Throws std::invalid_argument naming the problem: a schedule validate() refuses, one whose
// stage count is not mesh.pp, a batch too small for dp x M, a cut the model cannot take, model
// states that do not fit cfg.device_memory (memory_plan.hpp). A checkpoint to resume from that
// cannot be (checkpointing.hpp: open_resume) throws std::runtime_error naming it.
job_plan plan_job(const train_config& cfg, const prepared_job& data);

}  // namespace troupe
