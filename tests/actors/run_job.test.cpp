// run_job, the one runner body, against a fake placement that logs each call: the order every
// placement (the whole job, process 0, a worker, a server process) is driven in, and the one
// failure path. The fakes spawn a real actor that waits for messages, so a path that forgot to
// stop it would hang in ~actor_system and the test would time out.
#include "actors/run/run_job.hpp"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace troupe {
namespace {

class fake_placement final : public placement {
 public:
  std::vector<std::string> calls;
  std::string failure;        // what wait reports
  bool throw_in_start = false;

  void configure(caf::actor_system_config& sys_cfg) override {
    calls.push_back("configure");
    sys_cfg.set("scheduler.max-threads", 1);
  }
  void start(caf::actor_system& sys) override {
    calls.push_back("start");
    member_ = sys.spawn([]() -> caf::behavior { return {[](int x) { return x; }}; });
    if (throw_in_start) throw std::invalid_argument("device 3 does not exist");
  }
  std::string wait(caf::actor_system&) override {
    calls.push_back("wait");
    return failure;
  }
  void abort_waits(const std::string& why) override { calls.push_back("abort_waits: " + why); }
  void stop(caf::actor_system& sys) override {
    calls.push_back("stop");
    stop_all(sys, {member_});
    member_ = nullptr;
  }
  train_summary summary() override {
    calls.push_back("summary");
    train_summary s;
    s.steps = 7;
    return s;
  }

 private:
  caf::actor member_;
};

TEST(RunJob, AJobThatTrainedIsStoppedOnceAndSummarisedAfterItsActorsAreGone) {
  fake_placement p;
  const train_summary s = run_job(p);
  EXPECT_EQ(s.steps, 7);
  EXPECT_EQ(p.calls, (std::vector<std::string>{"configure", "start", "wait", "stop", "summary"}));
}

TEST(RunJob, AFailedJobEndsItsGroupWaitsThenStopsItsActorsAndThrowsTheReason) {
  fake_placement p;
  p.failure = "rank 2 lost during step 4";
  try {
    run_job(p);
    FAIL() << "a failed job returned";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), "rank 2 lost during step 4");
  }
  EXPECT_EQ(p.calls, (std::vector<std::string>{"configure", "start", "wait", "abort_waits: rank 2 lost during step 4",
                                               "stop"}));
}

TEST(RunJob, AThrowWhileStartingStillStopsWhatWasSpawnedAndKeepsTheErrorsKind) {
  fake_placement p;
  p.throw_in_start = true;
  // A refusal stays std::invalid_argument: run_training restarts only a job that failed running.
  EXPECT_THROW(run_job(p), std::invalid_argument);
  EXPECT_EQ(p.calls, (std::vector<std::string>{"configure", "start", "abort_waits: device 3 does not exist", "stop"}));
}

}  // namespace
}  // namespace troupe
