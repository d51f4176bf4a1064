// Ready dispatch adds no deadlock and keeps its stash bound: every state reachable under its rules
// (schedules/dispatch.hpp), explored exhaustively for the built-in schedules on 2 and 3 stages,
// with and without ZeRO-3's fetches and stash headroom. A stage may run any of its candidates
// whose input has arrived (which over-approximates every arrival timing: the runtime takes the
// first in priority order), a receive has arrived once its send ran, and a state where some stage
// has work left but no stage can move is a deadlock. dispatch.hpp gives the argument; this checks
// it where the state space is small enough to enumerate.
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "schedules/dispatch.hpp"
#include "schedules/named.hpp"
#include "schedules/validate.hpp"

namespace troupe::sched {
namespace {

struct explored {
  size_t states = 0;
  std::string deadlock;  // empty: none reachable
  bool over_bound = false;
  int most_stashed = 0;
};

explored explore(const schedule& s, int headroom) {
  const size_t P = s.stages.size();
  std::vector<ready_row> plans;
  for (const auto& row : s.stages) plans.push_back(plan_ready_row(row, headroom));
  // A state: which actions of each stage ran (lanes in order make this a small set).
  using state = std::vector<std::vector<bool>>;
  auto stashed = [&](const state& st, size_t d) {
    int n = 0;
    for (size_t i = 0; i < st[d].size(); ++i) {
      if (!st[d][i]) continue;
      const op k = s.stages[d][i].kind;
      n += k == op::forward ? 1 : (k == op::backward || k == op::backward_weight) ? -1 : 0;
    }
    return n;
  };
  auto sent = [&](const state& st, const message_key& key) {
    for (size_t d = 0; d < P; ++d)
      for (size_t i = 0; i < st[d].size(); ++i)
        if (st[d][i] && is_send(s.stages[d][i].kind) && key_of(s, s.stages[d][i]) == key) return true;
    return false;
  };
  explored out;
  state start(P);
  for (size_t d = 0; d < P; ++d) start[d].assign(s.stages[d].size(), false);
  std::set<state> seen{start};
  std::vector<state> todo{start};
  while (!todo.empty() && out.deadlock.empty()) {
    const state st = todo.back();
    todo.pop_back();
    ++out.states;
    bool moved = false, finished = true;
    for (size_t d = 0; d < P; ++d) {
      row_progress p;
      p.reset(st[d].size());
      for (size_t i = 0; i < st[d].size(); ++i)
        if (st[d][i]) p.mark(i);
      finished = finished && p.earliest == st[d].size();
      const int now = stashed(st, d);
      out.most_stashed = std::max(out.most_stashed, now);
      out.over_bound = out.over_bound || now > plans[d].stash_bound;
      for (size_t i : next_candidates(plans[d], s.stages[d], p, dispatch_policy::ready, now)) {
        const action& a = s.stages[d][i];
        if (is_recv(a.kind) && !sent(st, key_of(s, a))) continue;
        moved = true;
        state next = st;
        next[d][i] = true;
        if (seen.insert(next).second) todo.push_back(std::move(next));
      }
    }
    if (!moved && !finished) {
      for (size_t d = 0; d < P; ++d) {
        size_t e = 0;
        while (e < st[d].size() && st[d][e]) ++e;
        out.deadlock += "stage " + std::to_string(d) + " at " + (e < st[d].size() ? to_string(s.stages[d][e]) : "end") + "; ";
      }
    }
  }
  return out;
}

TEST(ReadyDispatchModelCheck, EveryReachableStateOfEveryBuiltInScheduleCanMoveAndKeepsTheStashBound) {
  size_t total = 0;
  for (const char* name : {"gpipe", "1f1b", "interleaved", "zb-h1"})
    for (auto [P, M] : {std::pair{2, 4}, {2, 6}, {3, 3}, {3, 6}})
      for (bool fetches : {false, true})
        for (int headroom : {0, 1, 3}) {
          if (std::string(name) == "interleaved" && M % P != 0) continue;
          const schedule s = fetches ? make_named_schedule_with_fetches(name, P, M, 2) : make_named_schedule(name, P, M, 2);
          ASSERT_TRUE(validate(s).ok()) << name;
          const explored e = explore(s, headroom);
          EXPECT_EQ(e.deadlock, "") << name << " P=" << P << " M=" << M << " fetches " << fetches << " headroom "
                                    << headroom;
          EXPECT_FALSE(e.over_bound) << name << " P=" << P << " M=" << M;
          total += e.states;
        }
  std::printf("explored %zu states\n", total);
  EXPECT_GT(total, 10000u);  // the check reached well beyond the fixed order's single path
}

// The checker finds a deadlock where one exists. Stage 0 sends microbatch 1's activation only after
// microbatch 0's gradient came back, and stage 1 sends that gradient only after microbatch 1's
// activation came: a cycle fixed order cannot run (validate refuses it). Ready dispatch runs it
// only if stage 0 may forward microbatch 1 ahead of the late gradient, i.e. with stash headroom:
// at the fixed order's peak (1) it is stuck, as the checker shows.
TEST(ReadyDispatchModelCheck, FindsTheDeadlockOfAScheduleThatHasOneAndTheHeadroomThatLifts) {
  auto at = [](int stage, op k, int m, int peer = -1) { return action{stage, k, m, 0, peer}; };
  schedule bad;
  bad.name = "cyclic";
  bad.num_stages = 2;
  bad.num_microbatches = 2;
  bad.virtual_stages = 1;
  bad.stages = {{at(0, op::forward, 0), at(0, op::send_act, 0, 1), at(0, op::recv_grad, 0, 1), at(0, op::backward, 0),
                 at(0, op::forward, 1), at(0, op::send_act, 1, 1), at(0, op::recv_grad, 1, 1), at(0, op::backward, 1)},
                {at(1, op::recv_act, 0, 0), at(1, op::forward, 0), at(1, op::recv_act, 1, 0), at(1, op::forward, 1),
                 at(1, op::backward, 1), at(1, op::send_grad, 1, 0), at(1, op::backward, 0), at(1, op::send_grad, 0, 0)}};
  EXPECT_FALSE(validate(bad).ok());
  EXPECT_NE(explore(bad, 0).deadlock, "");
  EXPECT_EQ(explore(bad, 1).deadlock, "");
  EXPECT_EQ(explore(make_named_schedule("1f1b", 2, 2, 1), 0).deadlock, "");
}

}  // namespace
}  // namespace troupe::sched
