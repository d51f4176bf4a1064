// Elastic training in one process (issue 42): membership events drop or admit data-parallel
// replicas at step boundaries, and the job goes on from the image its live optimizer shards hand
// in, in memory, with the global batch kept. Proved for plain DP, ZeRO 1 and 2, a pipeline and
// expert parallelism, with SGD and AdamW (under ZeRO a dropped replica's optimizer state comes from
// the job's newest checkpoint, the one at the change): the losses and final parameters are bitwise those of
// the runs that save a checkpoint at each change and resume it at the new dp (the image is the
// checkpoint's arrays), and within float rounding those of the job that never changed (the
// global batch is the same samples). No file is read: the elastic job has no checkpoint folder.
// A replica killed mid-run is dropped and the job finishes every step with the losses of the run
// told the same change as an event, bitwise (under ZeRO too); a loss below --min-replicas ends
// the job naming why. Also the events' text form and what is refused.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "actors/config/membership.hpp"
#include "actors/run/training_job.hpp"
#include "tests/actors/tiny_jobs.hpp"
#include "tests/scratch_dir.hpp"

using namespace troupe;
using namespace troupe::test;

namespace {

namespace fs = std::filesystem;

membership_event lose(int64_t step, int replica) { return {step, membership_change::lose, replica}; }
membership_event admit(int64_t step) { return {step, membership_change::admit, -1}; }

struct elastic_case {
  std::string name, model, optim;
  int dp = 2, pp = 1, M = 1, zero = 0, ep = 1;
  std::vector<membership_event> events;  // at multiples of 4: the oracle checkpoints every 4 steps
  // The elastic job's own checkpoints: under ZeRO a dropped replica's optimizer state comes from
  // the newest (here the one at the change, so the oracle's state), else it starts from zero.
  int64_t checkpoint_every = 0;
};

void PrintTo(const elastic_case& c, std::ostream* os) { *os << c.name; }

train_config config_for(const elastic_case& c, int dp, const fs::path& out) {
  train_config cfg = tiny_mesh_config(c.model, c.optim, dp, c.pp, 1, c.M);
  if (c.optim == "sgd") cfg.optim.momentum = 0.9f;  // a state array to carry over
  if (c.model == "moe") cfg.model.aux_loss_coefficient = 0;  // each token's routing its own at any dp
  cfg.mesh.ep = c.ep;
  cfg.zero = c.zero;
  cfg.bucket_mb = 0.0005;  // several buckets: ZeRO's shards are strided pieces
  cfg.out_dir = out.string();
  return cfg;
}

class ElasticMembership : public ::testing::TestWithParam<elastic_case> {};

TEST_P(ElasticMembership, EventsGiveTheCheckpointAndResumeRunsLossesBitwiseAndTheUnchangedJobsWithinRounding) {
  const elastic_case& c = GetParam();
  const fs::path dir = test_support::scratch_dir("elastic-" + c.name);
  fs::remove_all(dir);
  // The elastic job.
  train_config el = config_for(c, c.dp, dir / "elastic");
  el.elastic = true;
  el.membership_events = c.events;
  if (c.checkpoint_every > 0) {
    el.checkpoint_dir = (dir / "elastic-ckpt").string();
    el.checkpoint_every = c.checkpoint_every;
  }
  const train_summary got = run_training(el);
  ASSERT_EQ(got.losses.size(), static_cast<size_t>(kSteps));
  EXPECT_EQ(got.membership, c.events);
  // The oracle: each membership's steps as a job of its own, resumed from the checkpoint the one
  // before it saved at the change.
  std::vector<double> want;
  train_summary last;
  int dp = c.dp;
  int64_t from = 0;
  std::vector<int64_t> bounds;
  for (const auto& e : c.events)
    if (bounds.empty() || bounds.back() != e.step) bounds.push_back(e.step);
  bounds.push_back(kSteps);
  for (size_t i = 0; i < bounds.size(); ++i) {
    train_config part = config_for(c, dp, dir / ("part" + std::to_string(i)));
    part.checkpoint_dir = (dir / "ckpt").string();
    part.checkpoint_every = 4;
    if (from > 0) part.resume = (dir / "ckpt" / fmt::format("step-{:08d}", from)).string();
    last = run_training(part);
    want.insert(want.end(), last.losses.begin(), last.losses.begin() + (bounds[i] - from));
    dp = replicas_after(events_at(c.events, bounds[i]), dp);
    from = bounds[i];
  }
  EXPECT_EQ(got.losses, want);
  EXPECT_EQ(got.final_params.to_vector(), last.final_params.to_vector());
  // The job that kept its first membership: the same samples each step, summed in another order.
  const train_summary same = run_training(config_for(c, c.dp, dir / "unchanged"));
  for (size_t i = 0; i < same.losses.size(); ++i)
    EXPECT_NEAR(got.losses[i], same.losses[i], 1e-4 * std::abs(same.losses[i])) << "step " << i;
}

INSTANTIATE_TEST_SUITE_P(
    OneProcess, ElasticMembership,
    ::testing::Values(
        elastic_case{"mlp_sgd_dp3_lose_replica_2_at_8", "mlp", "sgd", 3, 1, 1, 0, 1, {lose(8, 2)}},
        elastic_case{"mlp_adamw_dp3_lose_replica_0_at_4_admit_at_12", "mlp", "adamw", 3, 1, 1, 0, 1, {lose(4, 0), admit(12)}},
        elastic_case{"mlp_adamw_zero2_dp3_lose_replica_1_at_8_state_from_its_checkpoint", "mlp", "adamw", 3, 1, 1, 2, 1,
                     {lose(8, 1)}, 4},
        elastic_case{"gpt_sgd_zero2_pp2_dp3_lose_replica_0_at_4_admit_at_12_state_from_its_checkpoint", "gpt", "sgd", 3, 2, 2,
                     2, 1, {lose(4, 0), admit(12)}, 4},
        elastic_case{"mlp_sgd_zero1_dp2_admit_two_at_4", "mlp", "sgd", 2, 1, 1, 1, 1, {admit(4), admit(4)}},
        elastic_case{"gpt_adamw_pp2_dp2_lose_replica_1_at_4_admit_at_8", "gpt", "adamw", 2, 2, 2, 0, 1, {lose(4, 1), admit(8)}},
        elastic_case{"moe_adamw_dp4_ep2_lose_replicas_3_and_0_at_8", "moe", "adamw", 4, 1, 1, 0, 2, {lose(8, 3), lose(8, 0)}}),
    [](const auto& info) { return info.param.name; });

// A replica killed as a step begins (--kill-replica): the coordinator sees its stages go down, the
// step in flight is dropped on every survivor, and the job goes on from their state.
struct kill_case {
  std::string name, model, optim;
  int dp = 3, pp = 1, M = 1, replica = 1;
  int64_t step = 7;
  int zero = 0;  // ZeRO 1 and 2: the lost shards' optimizer state starts again from zero, in both runs
};
void PrintTo(const kill_case& c, std::ostream* os) { *os << c.name; }

class ElasticKill : public ::testing::TestWithParam<kill_case> {};

TEST_P(ElasticKill, KilledReplicaIsDroppedAndTheLossesAreTheEventFileRunsBitwise) {
  const kill_case& k = GetParam();
  const fs::path dir = test_support::scratch_dir("elastic-kill-" + k.name);
  fs::remove_all(dir);
  elastic_case c{k.name, k.model, k.optim, k.dp, k.pp, k.M, k.zero, 1, {}, 0};
  train_config killed = config_for(c, k.dp, dir / "killed");
  killed.elastic = true;
  killed.kill_replica = k.replica;
  killed.kill_replica_step = k.step;
  const train_summary got = run_training(killed);
  ASSERT_EQ(got.losses.size(), static_cast<size_t>(kSteps)) << "every step trained";
  ASSERT_EQ(got.membership.size(), 1u);
  EXPECT_EQ(got.membership[0].change, membership_change::lose);
  EXPECT_EQ(got.membership[0].replica, k.replica);
  // It ran ahead by at most the step it was killed in: the survivors may have ended the step before.
  EXPECT_GE(got.membership[0].step, k.step - 1);
  EXPECT_LE(got.membership[0].step, k.step);
  // The same change given as an event.
  train_config told = config_for(c, k.dp, dir / "told");
  told.elastic = true;
  told.membership_events = got.membership;
  const train_summary want = run_training(told);
  EXPECT_EQ(got.losses, want.losses);
  EXPECT_EQ(got.final_params.to_vector(), want.final_params.to_vector());
}

INSTANTIATE_TEST_SUITE_P(OneProcess, ElasticKill,
                         ::testing::Values(kill_case{"mlp_sgd_dp3_kill_replica_1_at_7", "mlp", "sgd", 3, 1, 1, 1, 7},
                                           kill_case{"mlp_adamw_dp3_kill_replica_0_at_12", "mlp", "adamw", 3, 1, 1, 0, 12},
                                           kill_case{"gpt_adamw_pp2_dp2_kill_replica_1_at_5", "gpt", "adamw", 2, 2, 2, 1, 5},
                                           kill_case{"mlp_adamw_zero2_dp3_kill_replica_1_at_7", "mlp", "adamw", 3, 1, 1, 1, 7, 2},
                                           kill_case{"gpt_sgd_zero1_dp3_kill_replica_0_at_9", "gpt", "sgd", 3, 1, 1, 0, 9, 1}),
                         [](const auto& info) { return info.param.name; });

void expect_fails(train_config cfg, const std::string& words) {
  try {
    run_training(cfg);
    FAIL() << "the job finished";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

TEST(ElasticKill, ALossBelowMinReplicasEndsTheJobNamingWhyAndWithoutElasticAnyLossDoes) {
  const fs::path dir = test_support::scratch_dir("elastic-kill-refused");
  fs::remove_all(dir);
  elastic_case c{"x", "mlp", "adamw", 2, 1, 1, 0, 1, {}, 0};
  train_config cfg = config_for(c, 2, dir / "min");
  cfg.elastic = true;
  cfg.min_replicas = 2;
  cfg.kill_replica = 1;
  cfg.kill_replica_step = 5;
  expect_fails(cfg, "replica 1 lost (rank 1: exit_reason(kill)); the elastic job cannot go on: 1 replica would be left, "
                    "fewer than --min-replicas 2");
  cfg.min_replicas = 1;
  cfg.elastic = false;
  expect_fails(cfg, "an actor of the job stopped");
}

TEST(MembershipEvents, TextFormRoundTripsAndIgnoresCommentsAndBlankLines) {
  const std::vector<membership_event> ev{lose(4, 2), admit(9), admit(9), lose(12, 0)};
  EXPECT_EQ(to_text(ev), "after step 4: lose replica 2\nafter step 9: admit a replica\nafter step 9: admit a replica\n"
                         "after step 12: lose replica 0\n");
  EXPECT_EQ(parse_membership_events("# a kill and a join\n\n" + to_text(ev), "f"), ev);
}

void expect_refused(const std::string& text, const std::string& words) {
  try {
    parse_membership_events(text, "events.txt");
    FAIL() << "accepted: " << text;
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

TEST(MembershipEvents, MalformedLinesAndStepsOutOfOrderAreRefusedNamingFileAndLine) {
  expect_refused("after step 4: lose replica 2\nafter step 5: drop replica 1\n",
                 "events.txt:2: \"after step 5: drop replica 1\" is not");
  expect_refused("# x\nafter step 8: admit a replica\nafter step 4: lose replica 0\n",
                 "events.txt:3: after step 4 comes before the line above's step 8");
  expect_refused("after step 0: admit a replica\n", "events.txt:1: a membership changes after step 1 at the earliest");
}

// Issue 57, item 10: a line of 50,000 spaces crashed the parser (std::regex recursed per
// character); a binary line was echoed whole into the log.
TEST(MembershipEvents, AHugeOrBinaryLineIsRefusedWithoutCrashingAndQuotedShortAndPrintable) {
  expect_refused("after step 4:" + std::string(50000, ' ') + "lose replica 2\n", "(50027 bytes)");
  const std::string binary = std::string("after step 4: \x01\xff\x00zap", 20) + std::string(200, 'x') + "\n";
  try {
    parse_membership_events(binary, "events.txt");
    FAIL() << "accepted a binary line";
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("\"after step 4: \\x01\\xff\\x00zap"), std::string::npos) << what;
    EXPECT_LT(what.size(), 300u) << what;
    for (char c : what) EXPECT_TRUE(c >= 0x20 && c < 0x7f) << "a byte " << int(static_cast<unsigned char>(c)) << " in " << what;
  }
  // 50,000 spaces either side of a valid line: the regular expression's recursion overflowed the
  // stack here (SIGSEGV); the line is an event like any other.
  const std::string wide = std::string(50000, ' ') + "after step 4: lose replica 1" + std::string(50000, ' ') + "\n";
  EXPECT_EQ(parse_membership_events(wide, "f"), (std::vector<membership_event>{lose(4, 1)}));
  // Spaces around a line are still allowed, as the text form always allowed them.
  EXPECT_EQ(parse_membership_events("  after step 4: lose replica 2 \t\r\n", "f"), (std::vector<membership_event>{lose(4, 2)}));
  expect_refused("after step 4: lose replica 2x\n", "is not");
  expect_refused("after step 1234567890123: admit a replica\n", "is not");
}

void expect_invalid(const train_config& cfg, const std::string& words) {
  try {
    validate(cfg);
    FAIL() << "accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

TEST(ElasticJob, MembershipsThatCannotTrainAreRefusedBeforeItStartsNamingTheEvent) {
  train_config cfg = tiny_mesh_config("mlp", "adamw", 3, 1, 1, 1);
  cfg.membership_events = {lose(4, 1)};
  expect_invalid(cfg, "membership events need an elastic job (--elastic)");
  cfg.elastic = true;
  cfg.min_replicas = 3;
  expect_invalid(cfg, "after step 4: lose replica 1: it leaves 2 replicas, fewer than the 3 of --min-replicas");
  cfg.min_replicas = 1;
  cfg.membership_events = {lose(4, 3)};
  expect_invalid(cfg, "after step 4: lose replica 3: the job has replicas 0..2 then");
  cfg.membership_events = {};
  cfg.zero = 3;
  expect_invalid(cfg, "under zero 3 would lose a lost replica's parameters");
  train_config moe = tiny_mesh_config("moe", "adamw", 4, 1, 1, 1);
  moe.mesh.ep = 2;
  moe.elastic = true;
  moe.membership_events = {lose(8, 1)};
  expect_invalid(moe, "after step 8: lose replica 1 leaves dp 3: mesh dp3.pp1.tp1.ep2");
}

}  // namespace
