// How soon the watchdog ends a pipeline step that lost a message, on the wall clock (perf label:
// run alone). What it reports is pipeline_watchdog.test.cpp's check.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "actors/run/training_job.hpp"
#include "schedules/builders.hpp"
#include "schedules/passes.hpp"
#include "tests/actors/pipeline_small_job.hpp"

using namespace troupe;

// The watchdog period is 0.3 s; ten seconds leaves a loaded machine room, and a hang none.
TEST(PipelineWatchdogTiming, LostActivationEndsTheJobWithinSecondsOfTheWatchdogPeriod) {
  auto c = test::small_job(sched::complete(sched::one_f_one_b(2, 4)));
  c.drop_send = "0SA1>1";  // microbatch 1's activation never reaches stage 1
  const auto t0 = std::chrono::steady_clock::now();
  const std::string what = test::message_of([&] { run_training(c); });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(what.find("watchdog: no progress for"), std::string::npos) << what;
  EXPECT_LT(seconds, 10.0);
}
