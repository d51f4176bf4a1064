// What updates a rank's parameters (rank_parts.hpp): its optimizer shard, or a parameter server.
#include "actors/compose/rank_parts.hpp"

namespace troupe {

void compose_optimizer(const rank_site& r, stage_args& a, const shard_placement& shard,
                       const std::vector<caf::actor>& servers, const caf::actor& dispenser, rank_spawned& out) {
  if (r.cfg.consistency != consistency_model::none) {
    // Parameter servers: the replicas meet at their slot's server, not in a collective.
    a.groups.set(sched::axis::dp, caf::actor{});
    a.updates.host_gradients = true;
    if (shard.floats > 0) a.partners.optimizer = servers.at(r.slot());
    a.updates.dispenser = dispenser;
  } else if (shard.floats > 0) {  // a stage of ReLUs alone has nothing to optimize
    a.partners.optimizer = spawn_optimizer_shard(r.sys, r.cfg.optim, 0, shard.floats, shard.where);
    out.add(a.partners.optimizer);
  }
}

}  // namespace troupe
