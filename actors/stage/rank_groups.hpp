// rank_groups: the groups one rank works in, by mesh axis (the role of Megatron-Core's
// process-group collection). The wiring (compose/mesh_links.hpp) makes one per rank; the stage's
// strategies read the groups they reduce or gather over from it.
#pragma once

#include <caf/actor.hpp>

#include <array>
#include <memory>

#include "kernels/tp_group.hpp"
#include "schedules/mesh.hpp"

namespace troupe {

struct rank_groups {
  static constexpr size_t axes = static_cast<size_t>(sched::axis::edp) + 1;

  // The member of the group along `a` that reduces gradient buckets: an actor, which runs the
  // collective apart from the stage (dp: the replicas; edp: the replicas holding the same
  // experts). Empty: no such group here (one replica, ep 1, or parameter servers instead).
  const caf::actor& reducer(sched::axis a) const { return reducers[at(a)]; }
  // The member of the group along `a` that the stage's own thread drives inside F and B (tp, cp,
  // ep: the layers' collectives; dp: ZeRO-3's parameter gathers). Null: that axis is 1 here, or
  // (dp) ZeRO-3 is off.
  const std::shared_ptr<tp_group>& member(sched::axis a) const { return members[at(a)]; }

  void set(sched::axis a, caf::actor reducer) { reducers[at(a)] = std::move(reducer); }
  void set(sched::axis a, std::shared_ptr<tp_group> member) { members[at(a)] = std::move(member); }

  static size_t at(sched::axis a) { return static_cast<size_t>(a); }

  std::array<caf::actor, axes> reducers;
  std::array<std::shared_ptr<tp_group>, axes> members;
  // The dp reducer sums on the rank's accelerator (NCCL, or the in-process device group): each
  // bucket is cut into device memory and handed over, and its sums come back there. Otherwise a
  // GPU's buckets go through pinned host memory.
  bool reduces_on_device = false;
};

}  // namespace troupe
