// A pipeline never hangs: a deadlocking schedule is refused before any actor runs, a lost
// message is reported by the watchdog (per stage: the action it is blocked on and what it
// waits for, with the grid marked), an action the runtime cannot run fails naming it, and the
// model is cut where the user says (or refused with the bad cut named). How soon the watchdog
// acts is pipeline_watchdog_timing.test.cpp's (perf).
#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <regex>

#include <unistd.h>

#include <filesystem>

#include "actors/plan/job_plan.hpp"
#include "actors/run/training_job.hpp"
#include "schedules/builders.hpp"
#include "schedules/passes.hpp"
#include "storage/dataset.hpp"
#include "tests/actors/pipeline_small_job.hpp"

using namespace troupe;

namespace {

using test::message_of;
using test::small_job;

job_plan plan_of(const train_config& c) { return plan_job(c, prepare_job(c)); }

}  // namespace

TEST(PipelineRefuses, DeadlockingHandWrittenScheduleBeforeAnyActorRuns) {
  // Each stage first waits for what the other sends only later.
  const auto plan = sched::parse_schedule(
      "schedule crossed stages=2 microbatches=1 virtual=1\n"
      "stage 0: RG0<1 F0 SA0>1 B0\n"
      "stage 1: RA0<0 F0 B0 SG0>0\n");
  const std::string what = message_of([&] { run_training(small_job(plan)); });
  EXPECT_NE(what.find("refused before it runs"), std::string::npos) << what;
  EXPECT_NE(what.find("deadlock: stage 0 waits at action 0 (RG0<1), stage 1 waits at action 0 (RA0<0)"),
            std::string::npos)
      << what;
}

TEST(PipelineWatchdog, LostActivationIsReportedWithTheBlockedActionsInsteadOfAHang) {
  auto c = small_job(sched::complete(sched::one_f_one_b(2, 4)));
  c.drop_send = "0SA1>1";  // microbatch 1's activation never reaches stage 1
  const std::string what = message_of([&] { run_training(c); });
  EXPECT_NE(what.find("watchdog: no progress for"), std::string::npos) << what;
  EXPECT_NE(what.find("in step 0 (steps done: 0 of 2); mesh dp1.pp2.tp1, schedule 1f1b (P=2, M=4)"), std::string::npos)
      << what;
  // Stage 1 waits for the lost tensor; stage 0 ran ahead to the next gradient it needs, which
  // stage 1 sends only after the forward of the lost microbatch.
  EXPECT_NE(what.find("rank 1 (dp 0, pp 1): action 4 of 18 (1RA1<0): waits for the activation of microbatch 1 "
                      "across boundary 0 from stage 0"),
            std::string::npos)
      << what;
  EXPECT_NE(what.find("rank 0 (dp 0, pp 0): action 8 of 18 (0RG1<1): waits for the gradient of microbatch 1 "
                      "across boundary 0 from stage 1"),
            std::string::npos)
      << what;
  EXPECT_NE(what.find("[RA1<0]"), std::string::npos) << what;  // the grid with the mark
  // How long each has waited, by its own clock: at least the watchdog's 0.3 s without progress.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(what, m, std::regex(R"(from stage 0 \(([0-9.]+) s since its last action\))"))) << what;
  EXPECT_GE(std::stod(m[1]), 0.25) << what;
  // Each stage's pipeline ledger under its line: stage 0 sent microbatches 0 and 2 but not the
  // lost 1; stage 1 received only microbatch 0's activation.
  EXPECT_NE(what.find("  pipeline: sent the activation of microbatch 0 across boundary 0 to stage 1 ("), std::string::npos)
      << what;
  EXPECT_NE(what.find("  pipeline: sent the activation of microbatch 2 across boundary 0 to stage 1 ("), std::string::npos)
      << what;
  EXPECT_EQ(what.find("sent the activation of microbatch 1 "), std::string::npos) << what;
  EXPECT_NE(what.find("  pipeline: received the activation of microbatch 0 across boundary 0 from stage 0 ("),
            std::string::npos)
      << what;
  EXPECT_EQ(what.find("received the activation of microbatch 1 "), std::string::npos) << what;
}

TEST(PipelineWatchdog, LostActivationInADpByPpMeshNamesTheBlockedRanksAndTheWaitingAllReduce) {
  auto c = small_job(sched::complete(sched::one_f_one_b(2, 2)));
  c.mesh.dp = 2;
  c.drop_send = "0SA1>1";  // lost in both replicas: the dropped send is named by its action
  c.bucket_mb = 0;
  const std::string what = message_of([&] { run_training(c); });
  EXPECT_NE(what.find("mesh dp2.pp2.tp1"), std::string::npos) << what;
  EXPECT_NE(what.find("rank 1 (dp 0, pp 1): action"), std::string::npos) << what;
  EXPECT_NE(what.find("rank 3 (dp 1, pp 1): action"), std::string::npos) << what;
  EXPECT_NE(what.find("collectives:"), std::string::npos) << what;
}

// With tensor parallelism both tp ranks of stage 1 wait for the lost activation; the report names
// each by its three coordinates, and the job ends (no stage is left inside a tp collective).
TEST(PipelineWatchdog, LostActivationInAPpByTpMeshNamesBothTensorParallelRanks) {
  auto c = small_job(sched::complete(sched::one_f_one_b(2, 2)));
  c.mesh.tp = 2;
  c.drop_send = "0SA1>1";
  const std::string what = message_of([&] { run_training(c); });
  EXPECT_NE(what.find("mesh dp1.pp2.tp2"), std::string::npos) << what;
  EXPECT_NE(what.find("rank 2 (dp 0, pp 1, tp 0): action"), std::string::npos) << what;
  EXPECT_NE(what.find("rank 3 (dp 0, pp 1, tp 1): action"), std::string::npos) << what;
  EXPECT_NE(what.find("waits for the activation of microbatch 1"), std::string::npos) << what;
}

TEST(PipelineRefuses, FetchParamsItCannotRunIsAnErrorNamingTheAction) {
  auto plan = sched::complete(sched::gpipe(2, 2));
  for (int d = 0; d < 2; ++d) {
    auto& row = plan.stages[static_cast<size_t>(d)];
    row.insert(row.begin(), sched::action{d, sched::op::fetch_params, -1, 0, -1});
    row.push_back(sched::action{d, sched::op::release_params, -1, 0, -1});  // validate() wants it released
  }
  const std::string what = message_of([&] { run_training(small_job(plan)); });
  EXPECT_NE(what.find("action 0 (FP): fetch_params needs ZeRO-3"), std::string::npos) << what;
}

TEST(PipelineCuts, GivenCutPointsAreUsedAndDefaultBalancesParameters) {
  auto c = small_job(sched::complete(sched::one_f_one_b(2, 2)));
  // Layers: linear(6->8)=56, relu, linear(8->8)=72, relu, linear(8->3)=27.
  {
    const job_plan p = plan_of(c);
    ASSERT_EQ(p.chunks.size(), 2u);
    EXPECT_EQ(p.chunks[0].begin, 0);
    EXPECT_EQ(p.chunks[0].end, 2);  // 56 | 72+27 = 99; the ReLU stays with its linear
    EXPECT_EQ(p.chunks[1].end, 5);
    EXPECT_EQ(p.stage_params, (std::vector<int64_t>{56, 99}));
  }
  c.cuts = {4};
  const job_plan p = plan_of(c);
  EXPECT_EQ(p.chunks[0].end, 4);
  EXPECT_EQ(p.chunks[1].begin, 4);
  EXPECT_EQ(run_training(c).losses.size(), 2u);
}

TEST(PipelineCuts, BadCutAndMoreChunksThanLayersAreRefusedByName) {
  auto a = small_job(sched::complete(sched::one_f_one_b(2, 2)));
  a.cuts = {5};
  EXPECT_NE(message_of([&] { plan_of(a); }).find("cut point 5 must lie in (0, 5)"), std::string::npos);
  auto b = small_job(sched::complete(sched::interleaved_1f1b(4, 4, 2)));
  EXPECT_NE(message_of([&] { plan_of(b); }).find("5 layers, too few for 8 pipeline chunks"), std::string::npos);
}

TEST(PipelineRefuses, AScheduleForAnotherMeshIsRefusedNamingBoth) {
  auto c = small_job(sched::complete(sched::one_f_one_b(2, 2)));
  c.mesh.pp = 4;
  EXPECT_NE(message_of([&] { plan_of(c); }).find("the schedule has 2 stages but the mesh has pp 4"), std::string::npos);
}
