// A rank's fault injection (rank_parts.hpp).
#include "actors/compose/rank_parts.hpp"

namespace troupe {

rank_faults compose_faults(const rank_site& r) {
  rank_faults f;
  f.drop_send = r.cfg.drop_send;
  for (const auto& st : r.cfg.stragglers)  // a straggling replica: its first stage sleeps, the rest wait for it
    if (st.rank == r.at.dp && r.at.pp == 0) f.straggler = st;
  if (r.replica == r.cfg.kill_replica) f.killed_at_step = r.cfg.kill_replica_step;
  for (const auto& j : r.cfg.jitter)
    if (j.rank == r.rank) f.jitter = j;
  return f;
}

}  // namespace troupe
