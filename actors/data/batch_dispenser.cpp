// batch_dispenser: the batches of parameter servers under ssp and asp, handed out on demand. A
// run of rounds [run, until) is a pool of (until - run) x replicas batches (units), each one
// replica's share of a global batch; a replica that finished its step takes the next unit, so
// a fast replica computes more of them than a slow one, and the run ends when the pool is empty.
// Each replica's first unit of a run is its own in the run's first round; the rest go in order.
// It decides which unit, not what is in it (the data loader gathers a unit's samples), and it
// does not gate staleness (the parameter servers do).
#include <map>
#include <tuple>
#include <vector>

#include <spdlog/spdlog.h>

#include "actors/actors.hpp"

namespace troupe {

namespace {

struct grant {
  int64_t unit = -1;
  int32_t asked = 0;  // ranks of the replica that have it; forgotten once all have
};

struct dispenser_state {
  batch_dispenser_args args;
  int64_t run = -1;     // the run being dispensed (its first round)
  int64_t next = 0;     // its next unit after the first round's
  int64_t end = 0;      // its units end here
  std::vector<bool> started;  // by replica: it has had its first unit of the run
  std::map<std::tuple<int64_t, int32_t, int64_t>, grant> given;  // by (run, replica, step)
  static inline const char* name = "batch_dispenser";
};

using self_ptr = caf::stateful_actor<dispenser_state>*;

caf::result<unit_grant> dispense(self_ptr self, const unit_request& r) {
  auto& s = self->state;
  if (r.replica < 0 || r.replica >= s.args.replicas || r.run < 0 || r.until < r.run)
    return caf::make_error(caf::sec::invalid_argument,
                           "batch_dispenser: a request from replica " + std::to_string(r.replica) + " of " +
                               std::to_string(s.args.replicas) + " for rounds [" + std::to_string(r.run) + ", " +
                               std::to_string(r.until) + ")");
  // A rank that asks late for a run that is over gets nothing: its replica is in the next run.
  if (r.run < s.run) return unit_grant{r.run, r.step, -1};
  if (r.run > s.run) {
    if (s.run >= 0 && s.next < s.end)
      spdlog::warn("batch dispenser: run {} left {} of its batches undispensed", s.run, s.end - s.next);
    s.run = r.run;
    s.next = (r.run + 1) * s.args.replicas;
    s.end = r.until * s.args.replicas;
    s.started.assign(static_cast<size_t>(s.args.replicas), false);
  }
  // The first rank of the replica to ask decides; its pipeline peers and tp peers get the same.
  // A replica's first unit of a run is its own in the run's first round: every replica starts a
  // run from the same parameters (all of the rounds before it), so a replica that asks late
  // must not get a round more than s ahead of them, which no server could hold back any more.
  grant& g = s.given[{r.run, r.replica, r.step}];
  if (g.asked == 0) {
    const auto rep = static_cast<size_t>(r.replica);
    if (!s.started[rep]) {
      s.started[rep] = true;
      g.unit = r.run * s.args.replicas + r.replica;
    } else if (s.next < s.end) {
      g.unit = s.next++;
    }
    if (s.args.record && g.unit >= 0) s.args.record->push_back({r.replica, r.step, g.unit});
  }
  const unit_grant out{r.run, r.step, g.unit};
  if (++g.asked == s.args.ranks_per_replica) s.given.erase({r.run, r.replica, r.step});
  return out;
}

caf::behavior batch_dispenser(self_ptr self, batch_dispenser_args args) {
  self->state.args = std::move(args);
  return {
      [self](const unit_request& r) { return dispense(self, r); },
  };
}

}  // namespace

caf::actor spawn_batch_dispenser(caf::actor_system& sys, batch_dispenser_args args) {
  return sys.spawn(batch_dispenser, std::move(args));
}

}  // namespace troupe
