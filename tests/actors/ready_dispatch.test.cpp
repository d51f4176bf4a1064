// Ready dispatch (schedules/dispatch.hpp) gives bitwise the losses and parameters of fixed
// dispatch: every built-in schedule at pp 2 and 4, with dp 2 and tp 2 meshes, an MLP and a GPT,
// SGD and AdamW, with and without injected jitter. Each run also shows that the stages really ran
// out of their rows' order where jitter made inputs late (else the comparison proves nothing),
// that each lane kept its row order, and that no stage held more stashed activations than the
// fixed order's peak.
#include <gtest/gtest.h>

#include <cstring>
#include <map>

#include "actors/run/training_job.hpp"
#include "schedules/dispatch.hpp"
#include "schedules/named.hpp"
#include "schedules/validate.hpp"
#include "tests/actors/tiny_jobs.hpp"
#include "tests/scratch_dir.hpp"

using namespace troupe;
using namespace troupe::test;

namespace {

struct dispatch_case {
  int dp, pp, tp;
  std::string schedule, model, optim;
  double jitter_ms;
  int M = 4;
  int headroom = 1;  // --ready-stash: at the fixed peak alone a 2-stage 1F1B row has nothing to move
};

std::string case_name(const ::testing::TestParamInfo<dispatch_case>& info) {
  const dispatch_case& c = info.param;
  std::string s = c.schedule;
  for (auto& ch : s)
    if (ch == '-') ch = '_';
  return "dp" + std::to_string(c.dp) + "_pp" + std::to_string(c.pp) + "_tp" + std::to_string(c.tp) + "_" + s + "_M" +
         std::to_string(c.M) + "_" + c.model + "_" + c.optim + (c.jitter_ms > 0 ? "_jitter" : "") + "_stash" +
         std::to_string(c.headroom);
}

train_summary run(const dispatch_case& c, sched::dispatch_policy d) {
  train_config cfg = tiny_mesh_config(c.model, c.optim, c.dp, c.pp, c.tp, c.M);
  cfg.schedule = c.schedule;
  cfg.dispatch = d;
  cfg.ready_stash = c.headroom;
  cfg.bucket_mb = 0.0005;
  for (int r = 0; c.jitter_ms > 0 && r < c.dp * c.pp * c.tp; ++r) cfg.jitter.push_back({r, c.jitter_ms});
  cfg.out_dir = test_support::scratch_dir("dispatch-" + std::string(sched::to_string(d)) + "-" + case_name({c, 0})).string();
  return run_training(cfg);
}

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

}  // namespace

class ReadyDispatch : public ::testing::TestWithParam<dispatch_case> {};

TEST_P(ReadyDispatch, GivesBitwiseTheLossesAndParametersOfFixedDispatchWithinTheStashBound) {
  const dispatch_case c = GetParam();
  const train_summary fixed = run(c, sched::dispatch_policy::fixed);
  const train_summary ready = run(c, sched::dispatch_policy::ready);
  ASSERT_EQ(ready.losses.size(), fixed.losses.size());
  for (size_t i = 0; i < fixed.losses.size(); ++i) EXPECT_TRUE(same_bits(ready.losses[i], fixed.losses[i])) << "step " << i;
  ASSERT_EQ(ready.final_params.numel(), fixed.final_params.numel());
  EXPECT_EQ(std::memcmp(ready.final_params.data(), fixed.final_params.data(),
                        sizeof(float) * static_cast<size_t>(fixed.final_params.numel())),
            0);

  const sched::schedule plan = sched::make_named_schedule(c.schedule, c.pp, c.M, 2);
  const auto peak = sched::validate(plan).peak_live_activations;
  for (int r = 0; r < c.dp * c.pp * c.tp; ++r)
    EXPECT_LE(ready.peak_live_activations.at(static_cast<size_t>(r)), peak[(r / c.tp) % c.pp] + c.headroom) << "rank " << r;
  // Every recent step: each stage ran its row's actions once each, each lane in row order.
  int reordered = 0;
  for (const auto& t : ready.recent)
    for (size_t d = 0; d < plan.stages.size(); ++d) {
      const auto& row = plan.stages[d];
      ASSERT_EQ(t.stages[d].size(), row.size());
      std::map<sched::lane, std::vector<sched::action>> ran, written;
      for (const auto& a : row) written[sched::lane_of(a.kind)].push_back(a);
      for (size_t i = 0; i < row.size(); ++i) {
        ran[sched::lane_of(t.stages[d][i].what.kind)].push_back(t.stages[d][i].what);
        reordered += t.stages[d][i].what == row[i] ? 0 : 1;
      }
      EXPECT_EQ(ran, written) << "stage " << d << ": a lane left its row order";
    }
  if (c.jitter_ms > 0 && c.pp > 1) {
    EXPECT_GT(reordered, 0) << "jitter never made a stage run out of its row's order";
  }
}

namespace {
std::vector<dispatch_case> all_cases() {
  std::vector<dispatch_case> out;
  for (const char* model : {"mlp", "gpt"})
    for (const char* optim : {"sgd", "adamw"})
      for (int pp : {2, 4})
        for (const char* sch : {"gpipe", "1f1b", "interleaved", "zb-h1"})
          for (double jitter : {0.0, 1.0}) out.push_back({1, pp, 1, sch, model, optim, jitter, pp * 2});
  // At the fixed order's peak alone (no headroom) only backwards and receives move, on 4 stages.
  for (const char* sch : {"1f1b", "interleaved", "zb-h1"}) out.push_back({1, 4, 1, sch, "gpt", "adamw", 1.0, 8, 0});
  for (const char* sch : {"1f1b", "interleaved", "zb-h1"})
    for (auto [dp, tp] : {std::pair{2, 1}, {1, 2}}) {
      out.push_back({dp, 2, tp, sch, "gpt", "sgd", 1.0});
      out.push_back({dp, 2, tp, sch, "mlp", "adamw", 1.0});
    }
  return out;
}
}  // namespace

INSTANTIATE_TEST_SUITE_P(EveryScheduleAndMesh, ReadyDispatch, ::testing::ValuesIn(all_cases()), case_name);
