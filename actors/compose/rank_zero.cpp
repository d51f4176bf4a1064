// ZeRO's part of a rank, and where its optimizer shard lives (rank_parts.hpp).
#include "actors/compose/rank_parts.hpp"

namespace troupe {

namespace {
bool sharded(const rank_site& r, const stage_args& a) {  // ZeRO needs a data-parallel group
  return r.cfg.zero >= 1 && a.groups.reducer(sched::axis::dp);
}
}  // namespace

zero_part compose_zero(const rank_site& r, const stage_args& a) {
  zero_part z;
  z.stage = r.cfg.zero;
  if (!sharded(r, a)) return z;
  z.shard = r.plan.shard_of(r.rank);  // the shard keeps this rank's segments, its own copy
  if (r.cfg.zero >= 3) z.prefetch = r.cfg.prefetch;  // ZeRO-3: units gathered ahead
  z.params_offloaded = params_offload(r.cfg) != offload_target::none;
  return z;
}

shard_placement place_shard(const rank_site& r, const stage_args& a) {
  shard_placement s;
  const rank_device& d = a.device;
  s.floats = r.plan.stage_params.at(r.slot());
  shard_memory& where = s.where;  // plain: the stage runs on the shard's tensor, counted as its parameters
  where.ledger = d.memory;
  if (d.queue && !d.queue->where().is_cpu()) {  // the update runs there too, on the stage's stream
    where.where = d.queue->where();
    where.queue = d.queue;
  }
  if (!sharded(r, a)) return s;
  s.floats = shard_size(a.zero.shard);
  const offload_target opt_to = optimizer_offload(r.cfg), params_to = params_offload(r.cfg);
  // ZeRO-3's stage runs on the shard's tensor (its segments), as plain DP's does on the whole.
  where.master_kind = r.cfg.zero >= 3 ? memory_kind::parameters : memory_kind::optimizer_state;
  // Off the device: the master copy goes with the optimizer or (fp32: the same values) with the
  // parameters; the state only with the optimizer.
  if (opt_to != offload_target::none || params_to != offload_target::none) where.ledger = d.host_memory;
  where.state_ledger = opt_to != offload_target::none ? d.host_memory : d.memory;
  if (where.queue && !a.groups.reduces_on_device) {
    // A GPU stage whose group reduces its buckets on the host keeps the shard's segments of the
    // master copy and the state there with its update (ZeRO-Offload's placement): the GPU keeps
    // the parameters, the gradients (ZeRO-2: its segments) and activations. Where the group
    // reduces on the GPUs (NCCL), the shard stays on the GPU with them.
    where.where = device{};
    where.queue = nullptr;
    where.ledger = where.state_ledger = d.host_memory;
  }
  return s;
}

}  // namespace troupe
