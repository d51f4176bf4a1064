// Offload to NVMe for a rank (rank_parts.hpp): its optimizer shard's tiles in a store, and
// ZeRO-3's parameter segments in a file.
#include <unistd.h>

#include <filesystem>

#include "actors/compose/rank_parts.hpp"
#include "actors/plan/memory_plan.hpp"
#include "actors/store/offload_store.hpp"

namespace troupe {

void compose_offload(const rank_site& r, stage_args& a, shard_placement& shard, rank_spawned& out) {
  const train_config& cfg = r.cfg;
  const offload_target opt_to = optimizer_offload(cfg), params_to = params_offload(cfg);
  if (shard.floats == 0 || (opt_to != offload_target::nvme && params_to != offload_target::nvme)) return;
  storage::uring_options io;
  io.block_size = cfg.aio_block_size;
  io.queue_depth = cfg.aio_queue_depth;
  auto offload_path = [&](const char* what) {
    return (std::filesystem::path(cfg.offload_dir) /
            ("troupe-" + std::to_string(::getpid()) + "-rank" + std::to_string(r.rank) + "." + what))
        .string();
  };
  shard_memory& where = shard.where;
  const std::shared_ptr<device_memory>& host = a.device.host_memory;
  if (where.ledger == host) {
    where.state_in_store = opt_to == offload_target::nvme;
    where.tile_floats = offload_tile_floats(cfg);
    where.pipeline = cfg.offload_pipeline;
    where.host = host;
    const int64_t tiles = (shard.floats + where.tile_floats - 1) / where.tile_floats;
    const int64_t slot_floats = where.tile_floats * (1 + (where.state_in_store ? optimizer_state_floats(cfg.optim) : 0));
    where.store = spawn_offload_store(r.sys, offload_path("optimizer"),
                                      tiles * slot_floats * static_cast<int64_t>(sizeof(float)), io, host);
    out.add(where.store);
  }
  if (a.groups.member(sched::axis::dp) && params_to == offload_target::nvme) {
    // ZeRO-Infinity's parameters: the stage's segments, one piece per bucket, in a file its
    // param_fetcher reads each unit's piece from ahead of the unit's gather.
    std::vector<storage::segment_file::piece> pieces;
    for (const shard_piece& p : a.zero.shard) pieces.push_back({p.at_shard, p.count});
    a.zero.param_file = std::make_shared<storage::segment_file>(offload_path("params"), std::move(pieces), io);
  }
}

}  // namespace troupe
