// step_feed, the step bookkeeping of whole-model stages: it requests batches `prefetch` ahead and
// never past the last step, runs an ordered step only once its batch is here (whichever came
// first), and goes on to the next ordered step when one finishes, stopping at `until`.
#include <gtest/gtest.h>

#include "actors/step_feed.hpp"

using troupe::batch;
using troupe::step_feed;

TEST(StepFeed, RequestsPrefetchAheadAndNeverPastTheLastStep) {
  step_feed f(5, 2);
  EXPECT_EQ(f.requests(0), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(f.requests(0), (std::vector<int64_t>{}));  // each step is requested once
  EXPECT_EQ(f.requests(1), (std::vector<int64_t>{2}));
  EXPECT_EQ(f.requests(4), (std::vector<int64_t>{3, 4}));
}

TEST(StepFeed, AnOrderedStepRunsWhenOrderAndBatchHaveBothArrivedInEitherOrder) {
  step_feed f(10, 2);
  EXPECT_FALSE(f.arrive(0, batch{}));          // batch first: not ordered yet
  EXPECT_EQ(f.order(0, 3), std::optional<int64_t>(0));
  f.take(0);
  EXPECT_FALSE(f.finished(0));                 // step 1 ordered, batch missing
  EXPECT_EQ(f.arrive(1, batch{}), std::optional<int64_t>(1));
  f.take(1);
  EXPECT_FALSE(f.arrive(2, batch{}));          // arrives while step 1 runs
  EXPECT_EQ(f.finished(1), std::optional<int64_t>(2));
  f.take(2);
  EXPECT_FALSE(f.finished(2));                 // until = 3: the run of steps is over
  EXPECT_FALSE(f.arrive(3, batch{}));          // prefetched, but not ordered
  EXPECT_EQ(f.order(3, 4), std::optional<int64_t>(3));
}
