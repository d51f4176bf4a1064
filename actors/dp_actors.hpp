// Spawn functions of the data-parallel job's own actors. The data_loader, optimizer_shard and
// coordinator are the single-device ones (actors.hpp); only the stage differs: it hooks its
// gradient buckets into backward and all-reduces them through its rank's collective actor.
#pragma once

#include "actors/actors.hpp"
#include "actors/dp_buckets.hpp"

namespace troupe {

struct dp_stage_args {
  stage_args base;                  // model, seed, global_rows, total_steps, loader, optimizer, coordinator
  int rank = 0, ranks = 1;
  caf::actor collective;            // this rank's member of the group
  std::vector<grad_bucket> buckets; // from plan_buckets, bucket 0 first
  straggler_spec straggler;         // ms == 0: none
  int64_t trace_step = -1;          // the step whose events it sends to the coordinator
};
// Detached, like the single-device stage.
caf::actor spawn_dp_stage(caf::actor_system& sys, dp_stage_args args);

}  // namespace troupe

namespace troupe {

// The data-parallel part of a training job: for each rank a data_loader on its shard, an
// optimizer_shard (every rank steps the same replica), a dp_stage, plus the collective group.
struct dp_job_args {
  model_spec model;
  std::shared_ptr<const storage::dataset> train, eval;
  const train_config* cfg = nullptr;
  int64_t global_rows = 0, total_steps = 0, num_params = 0;
  caf::actor coordinator;
};
struct dp_job_parts {
  std::vector<caf::actor> stages;   // rank order
  std::vector<caf::actor> members;  // everything the coordinator monitors
  std::vector<caf::actor> collectives;  // the group, rank order: its logs go into a watchdog report
  std::vector<grad_bucket> buckets;
};
dp_job_parts spawn_dp_job(caf::actor_system& sys, const dp_job_args& args);

// The pieces spawn_dp_job is made of, for a job of one rank per process (process_job.cpp): the
// bucket plan, and one rank's loader, optimizer shard and stage around the collective member it
// is given (an in-process group member, or a net_collective: the stage cannot tell them apart).
std::vector<grad_bucket> plan_dp_buckets(const model_spec& model, double bucket_mb);
struct dp_rank_parts {
  caf::actor stage, optimizer, loader;
};
dp_rank_parts spawn_dp_rank(caf::actor_system& sys, const dp_job_args& args, int rank, caf::actor collective,
                            const std::vector<grad_bucket>& buckets);

}  // namespace troupe
