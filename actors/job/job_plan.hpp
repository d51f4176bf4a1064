// job_plan: what every rank of a job runs, derived from the train_config and its data alone, so
// every process of a multi-process job derives the same plan. The schedule (the named one, or
// the user's), the model cut into its chunks, and each pipeline stage's gradient buckets. No CAF.
#pragma once

#include <vector>

#include "actors/stage/dp_buckets.hpp"
#include "actors/job/prepared_job.hpp"
#include "actors/job/train_config.hpp"
#include "kernels/partition.hpp"
#include "schedules/schedule.hpp"

namespace troupe {

struct job_plan {
  sched::mesh mesh;
  sched::schedule schedule;         // complete and validated; one row per pipeline stage
  std::vector<layer_range> chunks;  // model chunk -> its layers
  // [pipeline stage][local chunk]: its gradient buckets (offsets into that chunk's flat
  // gradients). Empty lists with one replica: nothing to reduce.
  std::vector<std::vector<std::vector<grad_bucket>>> buckets;
  std::vector<int64_t> stage_params;  // parameters per pipeline stage
  int buckets_of_stage(int stage) const;
};

// Throws std::invalid_argument naming the problem: a schedule validate() refuses, one whose
// stage count is not mesh.pp, a batch too small for dp x M, a cut the model cannot take.
job_plan plan_job(const train_config& cfg, const prepared_job& data);

}  // namespace troupe
