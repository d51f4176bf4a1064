// Parameter servers (actors/server/param_server.cpp): BSP gives collective sync DP's numbers
// (bitwise at dp 2, where a sum of two is the same in either order; within float rounding at
// dp 4, where the ring sums in another order); under SSP (batches dispensed on demand, the
// clock in rounds) no push is of a round more than s ahead of the rounds complete when its
// replica read its parameters, and with a straggler the fast ones do run exactly s ahead; under
// ASP every push is applied exactly once, some of them stale. A slot cut into key ranges over several
// servers gives the same numbers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>

#include "actors/run/training_job.hpp"
#include "tests/actors/tiny_jobs.hpp"
#include "tests/scratch_dir.hpp"

using namespace troupe;
using namespace troupe::test;

namespace {

struct ps_case {
  std::string model, optim;
  int dp = 2, pp = 1, tp = 1, M = 1;
};

std::string case_name(const ps_case& c) {
  return c.model + "_" + c.optim + "_dp" + std::to_string(c.dp) + "_pp" + std::to_string(c.pp) + "_tp" +
         std::to_string(c.tp);
}
void PrintTo(const ps_case& c, std::ostream* os) { *os << case_name(c); }

train_config config_for(const ps_case& c, consistency_model mode, const std::string& tag) {
  train_config cfg = tiny_mesh_config(c.model, c.optim, c.dp, c.pp, c.tp, c.M);
  cfg.consistency = mode;
  cfg.out_dir = test_support::scratch_dir("ps-" + case_name(c) + "-" + tag).string();
  return cfg;
}

class BspMatchesCollectiveDataParallel : public ::testing::TestWithParam<ps_case> {};

TEST_P(BspMatchesCollectiveDataParallel, TwentyStepsSameLossesAndParameters) {
  const ps_case& c = GetParam();
  const train_summary want = run_training(config_for(c, consistency_model::none, "collective"));
  const train_summary got = run_training(config_for(c, consistency_model::bsp, "bsp"));
  ASSERT_EQ(got.losses.size(), want.losses.size());
  const std::vector<float> a = got.final_params.to_vector(), b = want.final_params.to_vector();
  ASSERT_EQ(a.size(), b.size());
  if (c.dp == 2) {
    EXPECT_EQ(got.losses, want.losses);
    EXPECT_EQ(a, b);
  } else {
    for (size_t i = 0; i < want.losses.size(); ++i)
      EXPECT_NEAR(got.losses[i], want.losses[i], 1e-5 * std::abs(want.losses[i])) << "step " << i;
    float worst = 0;
    for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
    EXPECT_LT(worst, 1e-4f);
  }
  // Every replica's push of every step applied once per server, all with no staleness.
  const int servers = c.pp * c.tp;
  EXPECT_EQ(got.server_updates.size(), static_cast<size_t>(servers * c.dp * kSteps));
  for (const auto& u : got.server_updates) {
    EXPECT_EQ(u.version_applied - u.version_read, 0) << "replica " << u.replica << " step " << u.step;
    EXPECT_FALSE(u.held);
  }
}

INSTANTIATE_TEST_SUITE_P(Meshes, BspMatchesCollectiveDataParallel,
                         ::testing::Values(ps_case{"mlp", "sgd", 2}, ps_case{"mlp", "adamw", 2}, ps_case{"mlp", "adamw", 4},
                                           ps_case{"gpt", "adamw", 2}, ps_case{"gpt", "sgd", 4},
                                           ps_case{"mlp", "adamw", 2, 2, 1, 2}, ps_case{"gpt", "adamw", 2, 1, 2, 1}),
                         [](const auto& info) { return case_name(info.param); });

// Every push of every replica applied exactly once, versions in order on each server (0..n-1;
// under BSP a step's pushes share one update). BSP: (replica, step) pairs unique and complete.
// SSP and ASP, whose batches are dispensed: every unit of the job applied once, as the
// dispenser handed it out, to the replica it handed it to.
void expect_every_push_applied_once(const train_summary& s, int replicas, int servers, bool bsp = false,
                                    int64_t steps = kSteps) {
  std::map<int64_t, int32_t> dispensed_to;
  for (const auto& d : s.dispensed) EXPECT_TRUE(dispensed_to.emplace(d.unit, d.replica).second) << "unit " << d.unit << " dispensed twice";
  if (!bsp) {
    EXPECT_EQ(dispensed_to.size(), static_cast<size_t>(replicas * steps));
  }
  std::map<int32_t, std::vector<train_summary::server_update>> by_server;
  for (const auto& u : s.server_updates) by_server[u.server].push_back(u);
  ASSERT_EQ(static_cast<int>(by_server.size()), servers);
  for (const auto& [server, updates] : by_server) {
    ASSERT_EQ(updates.size(), static_cast<size_t>(replicas * steps)) << "server " << server;
    std::set<std::pair<int32_t, int64_t>> seen;
    std::set<int64_t> units;
    for (size_t i = 0; i < updates.size(); ++i) {
      const auto& u = updates[i];
      EXPECT_EQ(u.version_applied, static_cast<int64_t>(bsp ? i / static_cast<size_t>(replicas) : i));
      if (bsp) {
        EXPECT_EQ(u.unit, -1);
        EXPECT_TRUE(seen.emplace(u.replica, u.step).second) << "replica " << u.replica << " step " << u.step << " applied twice";
        continue;
      }
      EXPECT_TRUE(units.insert(u.unit).second) << "server " << server << ": unit " << u.unit << " applied twice";
      EXPECT_EQ(u.step, u.unit / replicas) << "unit " << u.unit << " is of round " << u.unit / replicas;
      auto to = dispensed_to.find(u.unit);
      if (to == dispensed_to.end()) ADD_FAILURE() << "server " << server << ": unit " << u.unit << " applied, never dispensed";
      else EXPECT_EQ(u.replica, to->second) << "unit " << u.unit << " pushed by another replica than it went to";
    }
  }
}

TEST(StaleSynchronousParallel, NoReplicaStartsARoundMoreThanSAheadAndTheFastOnesRunExactlySAhead) {
  for (int s : {1, 3}) {
    train_config cfg = config_for(ps_case{"mlp", "adamw", 3}, consistency_model::ssp, "ssp" + std::to_string(s));
    cfg.staleness = s;
    cfg.stragglers = {straggler_spec{0, 15}};  // replica 0 sleeps 15 ms before each step
    const train_summary got = run_training(cfg);
    expect_every_push_applied_once(got, 3, 1);
    int64_t lead = 0, held = 0;
    for (const auto& u : got.server_updates) {
      EXPECT_LE(u.step - u.slowest, s) << "replica " << u.replica << " began a batch of round " << u.step << " while "
                                       << u.slowest << " rounds were complete (bound " << s << ")";
      lead = std::max(lead, u.step - u.slowest);
      held += u.held;
    }
    EXPECT_EQ(lead, s) << "with a straggler, the fast replicas should run up to the bound";
    EXPECT_GT(held, 0) << "with a straggler, the fast replicas should have been held";
    // The tiny job's labels are random, so 20 steps barely learn; stale updates must not diverge.
    for (double l : got.losses) EXPECT_LT(l, 1.1 * got.losses.front());
  }
}

TEST(AsynchronousParallel, EveryPushIsAppliedOnceAndSomeAreStale) {
  train_config cfg = config_for(ps_case{"mlp", "adamw", 3}, consistency_model::asp, "asp");
  cfg.stragglers = {straggler_spec{0, 15}};
  const train_summary got = run_training(cfg);
  expect_every_push_applied_once(got, 3, 1);
  int64_t stale = 0, lead = 0;
  for (const auto& u : got.server_updates) {
    stale = std::max(stale, u.version_applied - u.version_read);
    lead = std::max(lead, u.step - u.slowest);
    EXPECT_FALSE(u.held);
  }
  EXPECT_GT(stale, 0) << "a straggler's pushes land after the others'";
  EXPECT_GT(lead, 1) << "nothing holds a fast replica back";
  for (double l : got.losses) EXPECT_LT(l, 1.1 * got.losses.front());  // stale, not divergent
}

// A slot's parameters over 3 servers (key ranges, behind a proxy) change no number: the update
// is element-wise, so BSP over 3 shards is BSP over one bit for bit (and collective DP's at dp 2);
// under SSP every shard keeps the bound on its own records.
TEST(ServerShards, ThreeKeyRangesGiveOneServersBitsAndEachKeepsTheSspBound) {
  const ps_case c{"gpt", "adamw", 2, 2, 1, 2};
  const train_summary one = run_training(config_for(c, consistency_model::bsp, "one-shard"));
  train_config cfg = config_for(c, consistency_model::bsp, "three-shards");
  cfg.server_shards = 3;
  const train_summary three = run_training(cfg);
  EXPECT_EQ(three.losses, one.losses);
  EXPECT_EQ(three.final_params.to_vector(), one.final_params.to_vector());
  expect_every_push_applied_once(three, 2, 2 * 3, true);  // 2 stages x 3 shards
  train_config ssp = config_for(ps_case{"mlp", "adamw", 3}, consistency_model::ssp, "three-shards-ssp");
  ssp.server_shards = 3;
  ssp.staleness = 1;
  ssp.stragglers = {straggler_spec{0, 15}};
  const train_summary got = run_training(ssp);
  expect_every_push_applied_once(got, 3, 3);
  for (const auto& u : got.server_updates) EXPECT_LE(u.step - u.slowest, 1) << "server " << u.server;
}

// A parameter server that dies (fault injection: after 7 updates) ends the job, and the report
// names it, in every mode; with shards, the one that died.
TEST(ParameterServers, AKilledServerEndsTheJobNamingIt) {
  for (auto mode : {consistency_model::bsp, consistency_model::ssp, consistency_model::asp}) {
    train_config cfg = config_for(ps_case{"mlp", "adamw", 2, 2, 1, 2}, mode, std::string("killed-") + to_string(mode));
    cfg.server_shards = 2;
    cfg.kill_server = 3;  // stage 1's second shard
    cfg.kill_server_after = 7;
    try {
      run_training(cfg);
      ADD_FAILURE() << to_string(mode) << ": the job went on without its server";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("parameter server 3 killed"), std::string::npos) << e.what();
    }
  }
}

TEST(ParameterServers, WithZeroAreRefusedByName) {
  train_config cfg = config_for(ps_case{"mlp", "adamw", 2}, consistency_model::ssp, "refused");
  cfg.zero = 1;
  try {
    run_training(cfg);
    FAIL() << "zero with parameter servers was not refused";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("consistency ssp"), std::string::npos) << e.what();
  }
}

}  // namespace
