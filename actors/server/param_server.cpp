// param_server: the master parameters of one (pipeline stage, tp rank) slot and their optimizer,
// shared by every data-parallel replica of that slot. A replica's stage pushes its gradients
// (gradients_msg, tagged with its replica and step) and gets the parameters for its next step
// as the answer; when that answer goes out is the consistency model:
//   bsp  once every replica pushed this step: their sum in replica order, one optimizer step;
//   ssp  each push applied at once; the answer waits while the round it will be used for is more
//        than `staleness` rounds ahead of the rounds complete (every push of them applied);
//   asp  each push applied at once, answered at once.
// The clock is the round: dp batches, one global batch's worth. With bsp's fixed shares a round
// is a step and "rounds complete" is the slowest replica's step count; under ssp and asp batches
// are dispensed (batch_dispenser.cpp), so a fast replica may push several batches of one round,
// and the bound still says: parameters used for round c hold every update of rounds < c - s.
// At the end of a replica's run its answer waits for the whole run (the next run starts from it).
// Every applied push is recorded (train_summary::server_update): the checks of the consistency
// contracts read the records, not the timing.
#include <algorithm>
#include <map>

#include "actors/actor_failure.hpp"
#include "actors/actors.hpp"

namespace troupe {

namespace {

struct waiting_push {
  caf::response_promise reply;
  int64_t step = 0;
  tensor grads;
  int64_t need = 0;  // ssp and asp: rounds complete before the answer goes out
};

struct server_state {
  param_server_args args;
  tensor master;
  std::unique_ptr<optimizer> opt;
  int64_t version = 0;                 // updates applied
  int64_t complete = 0;                // rounds whose every push was applied
  std::map<int64_t, int32_t> applied;  // pushes applied of each round from `complete` on
  std::vector<int64_t> version_read;   // per replica: the version of the parameters it last got
  std::vector<int64_t> slowest_read;   // per replica: the rounds complete when it got them
  std::map<int64_t, std::map<int32_t, waiting_push>> bsp;  // by step, by replica
  std::map<int32_t, waiting_push> held;  // ssp: answers held back, by replica
  static inline const char* name = "param_server";
};

using self_ptr = caf::stateful_actor<server_state>*;

void count_applied(server_state& s, int64_t round, int32_t pushes) {
  s.applied[round] += pushes;
  for (auto it = s.applied.begin(); it != s.applied.end() && it->first == s.complete && it->second == s.args.replicas;
       it = s.applied.erase(it))
    ++s.complete;
}

// One optimizer step on the master copy: in place when no stage holds it any more, else into a
// fresh tensor (the stages still run on the previous one).
void apply(server_state& s, const float* grads) {
  tensor next = std::move(s.master);
  if (next.reclaim()) {
    s.opt->step(next.data(), grads, next.numel());
  } else {
    const tensor previous = std::move(next);
    next = tensor::uninitialized({previous.numel()});
    s.opt->step(next.data(), previous.data(), grads, previous.numel());
  }
  next.freeze();
  s.master = next;
  ++s.version;
}

// Fault injection (train_config::kill_server): the server dies as a crashed one would, and the
// job's report names it.
bool dies_now(self_ptr self) {
  auto& s = self->state;
  if (s.args.die_after < 0 || s.version < s.args.die_after) return false;
  self->quit(caf::make_error(caf::sec::runtime_error, "parameter server " + std::to_string(s.args.slot) +
                                                          " killed (fault injection) after " + std::to_string(s.version) +
                                                          " updates"));
  return true;
}

void record(server_state& s, int32_t replica, int64_t round, int64_t unit, bool held) {
  const auto r = static_cast<size_t>(replica);
  s.args.updates->push_back({s.args.slot, replica, round, unit, s.version_read[r], s.version - 1, s.slowest_read[r], held});
}

// Replica r gets the parameters for its step `step` + 1.
void answer(server_state& s, int32_t replica, int64_t step, caf::response_promise& reply) {
  const auto r = static_cast<size_t>(replica);
  s.version_read[r] = s.version;
  s.slowest_read[r] = s.complete;
  reply.deliver(params_msg{step, 0, s.master});
}

// Answers whose rounds are now complete enough go out.
void release_held(server_state& s) {
  for (auto it = s.held.begin(); it != s.held.end();) {
    if (s.complete < it->second.need) {
      ++it;
      continue;
    }
    answer(s, it->first, it->second.step, it->second.reply);
    it = s.held.erase(it);
  }
}

caf::result<params_msg> push(self_ptr self, gradients_msg& m) {
  auto& s = self->state;
  const int32_t r = m.replica;
  if (r < 0 || r >= s.args.replicas)
    return caf::make_error(caf::sec::invalid_argument, "param_server " + std::to_string(s.args.slot) + ": a push from replica " +
                                                           std::to_string(r) + " of " + std::to_string(s.args.replicas));
  if (m.grads.numel() != s.master.numel())
    return caf::make_error(caf::sec::invalid_argument, "param_server " + std::to_string(s.args.slot) + ": " +
                                                           std::to_string(m.grads.numel()) + " gradients for " +
                                                           std::to_string(s.master.numel()) + " parameters");
  auto reply = self->make_response_promise();
  if (s.args.consistency == consistency_model::bsp) {
    s.bsp[m.step][r] = waiting_push{reply, m.step, std::move(m.grads)};
    auto& all = s.bsp[m.step];
    if (static_cast<int>(all.size()) < s.args.replicas) return reply;
    // Replica order, so the sum is the same on every run (a ring all-reduce sums in its own order).
    std::vector<float> sum(static_cast<size_t>(s.master.numel()), 0.0f);
    for (auto& [replica, p] : all) {
      const float* g = std::as_const(p.grads).data();
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += g[i];
    }
    apply(s, sum.data());
    if (dies_now(self)) return reply;
    count_applied(s, m.step, s.args.replicas);
    for (auto& [replica, p] : all) record(s, replica, p.step, -1, false);
    for (auto& [replica, p] : all) answer(s, replica, p.step, p.reply);
    s.bsp.erase(m.step);
    return reply;
  }
  // A push on its own is a step on its replica's share of the batch: scaled back to a mean.
  // Scaled in place when the push is the server's alone (in one process it is; from the middleman too).
  tensor g = std::move(m.grads);
  if (!g.reclaim()) g = g.clone();
  for (int64_t i = 0; i < g.numel(); ++i) g.data()[i] *= static_cast<float>(s.args.replicas);
  apply(s, g.data());
  if (dies_now(self)) return reply;
  const int64_t round = m.unit >= 0 ? m.unit / s.args.replicas : m.step;
  const int64_t next = m.unit >= 0 ? m.next_round : m.step + 1;
  count_applied(s, round, 1);
  const bool ssp = s.args.consistency == consistency_model::ssp;
  const bool hold = ssp && !m.fresh && next - s.complete > s.args.staleness;
  const int64_t need = m.fresh ? next : ssp ? next - s.args.staleness : 0;
  record(s, r, round, m.unit, hold);
  if (s.complete < need) s.held[r] = waiting_push{reply, m.step, tensor(), need};
  else answer(s, r, m.step, reply);
  release_held(s);
  return reply;
}

caf::behavior param_server(self_ptr self, param_server_args args) {
  auto& st = self->state;
  name_failures(self, [self] { return std::make_pair("parameter server " + std::to_string(self->state.args.slot), self->state.version); });
  st.args = std::move(args);
  st.opt = make_optimizer(st.args.optim, st.args.size);
  st.version_read.assign(static_cast<size_t>(st.args.replicas), 0);
  st.slowest_read.assign(static_cast<size_t>(st.args.replicas), 0);
  return {
      // Every replica sends its initial parameters (the same values: one seed); the first is kept.
      [self](const params_msg& m) {
        auto& s = self->state;
        if (m.params.numel() != s.args.size)
          throw std::invalid_argument("param_server " + std::to_string(s.args.slot) + ": initial parameters of " +
                                      std::to_string(m.params.numel()) + " values for a server of " +
                                      std::to_string(s.args.size));
        if (s.master.empty()) {
          s.master = m.params;
          s.master.freeze();
        }
      },
      [self](gradients_msg& m) { return push(self, m); },
      // A server in a process of its own (--servers): process 0 reads the records at the job's end.
      [self](server_records_atom) { return server_records{*self->state.args.updates}; },
  };
}

}  // namespace

caf::actor spawn_param_server(caf::actor_system& sys, param_server_args args) {
  return sys.spawn<caf::detached>(param_server, std::move(args));
}

}  // namespace troupe
