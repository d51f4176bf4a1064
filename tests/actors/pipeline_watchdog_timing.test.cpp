// How soon the pipeline watchdog ends a step that lost a message, on the wall clock (perf label:
// run alone). What it reports is pipeline_watchdog.test.cpp's check.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "actors/pipeline_job.hpp"
#include "schedules/builders.hpp"
#include "schedules/passes.hpp"
#include "tests/actors/pipeline_small_job.hpp"

using namespace troupe;

// The watchdog period is 0.3 s; ten seconds leaves a loaded machine room, and a hang none.
TEST(PipelineWatchdogTiming, LostActivationEndsTheStepWithinSecondsOfTheWatchdogPeriod) {
  auto a = test::small_job(sched::complete(sched::one_f_one_b(2, 4)));
  a.drop_send = "0SA1>1";  // microbatch 1's activation never reaches stage 1
  pipeline_job job(a);
  const auto t0 = std::chrono::steady_clock::now();
  const std::string what = test::message_of([&] { job.run_step(0); });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(what.find("pipeline watchdog: no progress for 0.3 s"), std::string::npos) << what;
  EXPECT_LT(seconds, 10.0);
}
