// What composes one rank: a function per feature, each in a file of its own (rank_*.cpp), that
// reads the job's configuration and plan and the rank's groups and fills the feature's part of
// the rank's stage_args (stage.hpp), spawning the actors the feature needs. spawn_ranks
// (mesh_job.cpp) calls them in order, one rank at a time: a later part may read an earlier one's
// (ZeRO reads the device; offload, ZeRO's shard; the optimizer, where offload put the shard).
// A new feature is a new part: its file, a field in stage_args, one call in spawn_ranks.
#pragma once

#include <caf/all.hpp>

#include <functional>
#include <memory>
#include <vector>

#include "actors/actors.hpp"
#include "actors/plan/job_plan.hpp"
#include "actors/plan/prepared_job.hpp"
#include "actors/stage/stage.hpp"

namespace troupe {

// One rank as its parts see it: the job, and where the rank sits in its mesh.
struct rank_site {
  caf::actor_system& sys;
  const train_config& cfg;
  const prepared_job& data;
  const job_plan& plan;
  int rank = 0;
  sched::mesh_coords at;
  int replica = 0;
  size_t slot() const { return plan.slot(at.pp, at.tp); }
};

// What spawning a rank's parts adds to the job: actors to monitor and stop, and of them those on
// threads of their own.
struct rank_spawned {
  std::vector<caf::actor> members, detached;
  void add(const caf::actor& a, bool own_thread = true) {
    members.push_back(a);
    if (own_thread) detached.push_back(a);
  }
};

// Where the rank's optimizer shard keeps its master copy and state, and how many floats it
// updates (0: a stage of ReLUs alone has nothing to optimize).
struct shard_placement {
  shard_memory where;
  int64_t floats = 0;
};

// rank_faults.cpp: what --straggler, --jitter, --kill-replica and --drop-send tell this rank.
rank_faults compose_faults(const rank_site& r);
// rank_device.cpp: its device queue (device_of; empty: the CPU), its memory ledgers, its core.
rank_device compose_device(const rank_site& r, const std::function<std::shared_ptr<device_queue>(int rank)>& device_of);
// rank_zero.cpp: ZeRO's part (its shard of the buckets, with a dp reducer) and where the shard
// lives: on the stage's device, or (offload, ZeRO-Offload's placement) on the host.
zero_part compose_zero(const rank_site& r, const stage_args& a);
shard_placement place_shard(const rank_site& r, const stage_args& a);
// rank_offload.cpp: offload to NVMe: the optimizer shard's store, ZeRO-3's parameter file.
void compose_offload(const rank_site& r, stage_args& a, shard_placement& shard, rank_spawned& out);
// rank_optimizer.cpp: what updates its parameters: its own optimizer shard, or (--consistency)
// its slot's parameter server, met instead of a dp reducer, and the batch dispenser.
void compose_optimizer(const rank_site& r, stage_args& a, const shard_placement& shard,
                       const std::vector<caf::actor>& servers, const caf::actor& dispenser, rank_spawned& out);

}  // namespace troupe
