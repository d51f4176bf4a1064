// The slow-rank detector names the rank its data-parallel group waits for, from the records the
// steps carry: once a window of steps shows it last in most of them by more than the threshold,
// with whether its own compute is slower; it says so once per change, and names no one for a lead
// of microseconds or for a rank that is last only now and then.
#include <gtest/gtest.h>

#include "actors/observe/slow_rank.hpp"

using namespace troupe;

namespace {

// One step of a dp 4 mesh: every rank hands in its last bucket at `base` + its own delay.
std::vector<stage_step_record> step(const std::vector<double>& delay_s, const std::vector<double>& compute_s) {
  std::vector<stage_step_record> out;
  for (int r = 0; r < 4; ++r) {
    stage_step_record x;
    x.rank = r;
    x.step_start = 0;
    x.step_end = 0.050;
    x.compute_seconds = compute_s[static_cast<size_t>(r)];
    x.bucket_sent = {0.010, 0.020 + delay_s[static_cast<size_t>(r)]};
    out.push_back(x);
  }
  return out;
}

sched::mesh dp4() {
  sched::mesh m;
  m.dp = 4;
  return m;
}

}  // namespace

TEST(SlowRank, NamesTheRankLastInMostStepsOnceSaysWhetherItsDeviceIsSlowerAndWhenItRecovers) {
  slow_rank_detector d(dp4(), {20, 0.75, 0.1, 1, 0});
  std::vector<std::string> lines;
  for (int s = 0; s < 40; ++s) {
    // Rank 2 is 10 ms late in 18 of every 20 steps (its compute 20 ms against 12); then it recovers.
    const bool late = s < 20 ? s % 10 != 3 : false;
    const std::string line = d.add(step({0, 0.001, late ? 0.010 : 0, 0.0005}, {0.012, 0.012, late ? 0.020 : 0.012, 0.012}));
    if (!line.empty()) lines.push_back(std::to_string(s) + ": " + line);
  }
  ASSERT_EQ(lines.size(), 2u) << ::testing::PrintToString(lines);
  EXPECT_EQ(lines[0].rfind("19: slow rank: rank 2 hands in its gradients last in 18 of the last 20 steps, 9.5 ms after the "
                           "rest of its data-parallel group (a step takes 50.0 ms)",
                           0),
            0u)
      << lines[0];
  EXPECT_NE(lines[0].find("its compute takes 20.0 ms against its peers' 12.0 ms (its device is slower)"), std::string::npos);
  // Still named while the window holds 15 late steps (0.75 of 20); at step 24 it holds 14.
  EXPECT_EQ(lines[1].rfind("24: ", 0), 0u) << lines[1];
  EXPECT_NE(lines[1].find("none any more"), std::string::npos);
}

TEST(SlowRank, NamesNoOneForMicrosecondsOrAnOccasionalLateRank) {
  slow_rank_detector d(dp4(), {20, 0.75, 0.1, 1, 0});
  for (int s = 0; s < 60; ++s) {
    EXPECT_EQ(d.add(step({0, 0.0001, 0, 0}, {0.01, 0.01, 0.01, 0.01})), "");  // last every step, by 0.1 ms
    const int who = s % 3;  // each of three ranks last a third of the time, by 10 ms
    std::vector<double> delay(4, 0);
    delay[static_cast<size_t>(who)] = 0.010;
    EXPECT_EQ(d.add(step(delay, {0.01, 0.01, 0.01, 0.01})), "");
  }
  EXPECT_EQ(d.current().rank, -1);
}

TEST(SlowRank, LooksAtNoStepOfTheWarmUp) {
  slow_rank_detector d(dp4(), {20, 0.75, 0.1, 1, 10});
  int named_at = -1;
  for (int s = 0; s < 40 && named_at < 0; ++s)
    if (!d.add(step({0, 0, 0.010, 0}, {0.01, 0.01, 0.02, 0.01})).empty()) named_at = s;
  EXPECT_EQ(named_at, 29);  // 10 steps of warm-up, then a full window of 20
}

TEST(SlowRank, IsOffWithAWindowOfZeroOrWithoutDataParallelism) {
  slow_rank_detector off(dp4(), {0, 0.75, 0.1, 1, 0});
  sched::mesh one;
  slow_rank_detector single(one, {20, 0.75, 0.1, 1, 0});
  for (int s = 0; s < 30; ++s) {
    EXPECT_EQ(off.add(step({0, 0, 0.02, 0}, {0.01, 0.01, 0.01, 0.01})), "");
    EXPECT_EQ(single.add(step({0, 0, 0.02, 0}, {0.01, 0.01, 0.01, 0.01})), "");
  }
}
