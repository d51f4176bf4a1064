// A stage on an asynchronous device never blocks the thread it runs on (issue 16, must-show 3).
// The device is a fake (fake_device.hpp): its work runs on a thread of its own and the test holds
// its completions, so nothing depends on wall-clock time. With ONE scheduler thread for the
// whole job and a completion held, another actor on that thread still answers, and the stage
// itself answers its status naming the completion it waits for; released, the job finishes.
// And the split of each compute action (prepare, enqueue, finish on the completion message)
// changes no number: losses and final parameters are bitwise those of the synchronous CPU path.
#include <gtest/gtest.h>

#include <regex>

#include <caf/all.hpp>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <future>
#include <map>
#include <mutex>
#include <ostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "actors/plan/accelerators.hpp"
#include "actors/plan/job_plan.hpp"
#include "actors/plan/memory_plan.hpp"
#include "actors/run/training_job.hpp"
#include "actors/messages.hpp"
#include "tests/actors/stage_device_support.hpp"
#include "tests/actors/tiny_jobs.hpp"

using namespace troupe;
using namespace troupe::test;

namespace {

// Generous: a bound that turns a blocked thread into a failure, never a measured quantity.
constexpr auto kPatience = std::chrono::seconds(30);

std::vector<std::shared_ptr<fake_device>> devices_for(const train_config& cfg) {
  std::vector<std::shared_ptr<fake_device>> out;
  for (int r = 0; r < cfg.mesh.dp * cfg.mesh.pp * cfg.mesh.tp; ++r) out.push_back(std::make_shared<fake_device>(device{device_type::cpu, r}));
  return out;
}

}  // namespace

// device_queue::stage_out's stream-ordered default (what a fake GPU, and any queue without a copy
// stream of its own, does): the copy sees what the work enqueued before it wrote, and its `done`
// waits for the queue as a completion does, here while the fake holds its completions.
TEST(StageOnAsynchronousDevice, AValueStagedOutIsWhatTheEarlierWorkWroteAndArrivesOnlyWithTheQueue) {
  fake_ops();
  fake_device gpu(fake_gpu);  // its work runs on its own thread, in order
  const device_ops& k = ops_for(fake_gpu);
  tensor x = k.empty({4});
  gpu.enqueue([&] {
    const std::vector<float> v{1, 2, 3, 4};
    k.copy_floats(f32_out(x), v.data(), 4);
  });
  gpu.hold_completions();
  std::promise<tensor> out;
  gpu.stage_out(x, [&](tensor host) { out.set_value(std::move(host)); });
  ASSERT_TRUE(gpu.wait_until_holding(std::chrono::seconds(10)));
  auto arrived = out.get_future();
  EXPECT_EQ(arrived.wait_for(std::chrono::milliseconds(200)), std::future_status::timeout) << "done came before the queue";
  gpu.release_completions();
  ASSERT_EQ(arrived.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  const tensor host = arrived.get();
  EXPECT_TRUE(host.where().is_cpu());
  EXPECT_EQ(host.to_vector(), (std::vector<float>{1, 2, 3, 4}));
}

TEST(StageOnAsynchronousDevice, OneSchedulerThreadStillAnswersWhileTheDeviceHoldsACompletionThenTheStepCompletes) {
  train_config cfg = tiny_mesh_config("mlp", "sgd", 1, 2, 1, 4);  // two stages, 1F1B, 4 microbatches
  cfg.max_steps = 2;
  cfg.out_dir = out_dir("held");
  const auto devices = devices_for(cfg);
  devices[0]->hold_completions();  // stage 0's first forward (F0) computes, and its completion waits

  job_extras extras = on_devices(devices);
  struct seen {
    caf::actor_system* sys = nullptr;
    std::vector<caf::actor> stages;
    caf::actor echo;
    size_t workers = 0;
  } at_start;
  std::promise<void> spawned;
  extras.on_spawned = [&](caf::actor_system& sys, const std::vector<caf::actor>& stages) {
    at_start = {&sys, stages, sys.spawn([]() -> caf::behavior { return {[](int32_t x) { return x + 1; }}; }),
                sys.scheduler().num_workers()};
    spawned.set_value();
  };
  train_summary run;
  std::string error;
  std::thread job([&] {
    try {
      run = run_training(cfg, extras);
    } catch (const std::exception& e) {
      error = e.what();
    }
  });
  // Whatever fails below, the device lets go, the echo actor ends, and the job is waited for.
  struct finally {
    std::function<void()> f;
    ~finally() { f(); }
  } cleanup{[&] {
    if (at_start.echo) caf::anon_send_exit(at_start.echo, caf::exit_reason::user_shutdown);
    at_start = {};
    for (const auto& d : devices) d->release_completions();
    job.join();
  }};

  ASSERT_EQ(spawned.get_future().wait_for(kPatience), std::future_status::ready) << error;
  EXPECT_EQ(at_start.workers, 1u);
  ASSERT_TRUE(devices[0]->wait_until_holding(kPatience)) << "stage 0 never enqueued its first forward: " << error;
  // The probe asks from a thread of its own: a thread that made a scoped_actor holds CAF's
  // logger until it exits, and the job's actor system waits for that when it ends.
  int32_t echoed = 0;
  std::string why;
  std::vector<pipeline_status> status(2);
  std::thread([&] {
    caf::scoped_actor self{*at_start.sys};
    self->request(at_start.echo, kPatience, int32_t{41})
        .receive([&](int32_t x) { echoed = x; }, [&](caf::error& e) { why = self->system().render(e); });
    for (size_t r = 0; r < 2; ++r)
      self->request(at_start.stages[r], kPatience, pipeline_status_request{})
          .receive([&](pipeline_status& st) { status[r] = std::move(st); },
                   [&](caf::error& e) { status[r].waiting_for = "no answer: " + self->system().render(e); });
  }).join();
  EXPECT_EQ(echoed, 42) << "the one scheduler thread did not answer while the device held a completion: " << why;
  EXPECT_EQ(status[0].step, 0);
  EXPECT_EQ(status[0].action, "0F0");
  EXPECT_EQ(status[0].waiting_for, "the device's completion of F0");
  EXPECT_EQ(status[0].completed, 0);
  EXPECT_EQ(status[1].waiting_for.rfind("the activation of microbatch 0", 0), 0u) << status[1].waiting_for;
  EXPECT_EQ(devices[0]->completions(), 0);  // still held: nothing above waited for it

  cleanup.f();
  cleanup.f = [] {};
  ASSERT_EQ(error, "");
  ASSERT_EQ(run.losses.size(), 2u);
  const job_plan plan = plan_job(cfg, prepare_job(cfg));
  for (size_t r = 0; r < 2; ++r) {
    const auto& row = plan.schedule.stages[r];
    const auto computes = std::count_if(row.begin(), row.end(), [](const sched::action& a) { return sched::is_compute(a.kind); });
    EXPECT_EQ(devices[r]->completions(), 2 * computes) << "rank " << r;  // every F and B ran on its device
  }
}

namespace {

struct device_case {
  std::string model, optim;
  int dp, pp;
  int zero = 0;
};

std::string case_name(const ::testing::TestParamInfo<device_case>& info) {
  const device_case& c = info.param;
  return c.model + "_" + c.optim + "_dp" + std::to_string(c.dp) + "_pp" + std::to_string(c.pp) +
         (c.zero > 0 ? "_zero" + std::to_string(c.zero) : "");
}

// gtest names the case in ctest's list by this, not by the struct's bytes.
void PrintTo(const device_case& c, std::ostream* os) { *os << case_name({c, 0}); }

train_config config_of(const device_case& c, const std::string& tag) {
  train_config cfg = tiny_mesh_config(c.model, c.optim, c.dp, c.pp, 1, c.pp > 1 ? 4 : 1);
  cfg.zero = c.zero;
  cfg.bucket_mb = 0.0005;  // several buckets per stage: each is cut on the device's thread
  cfg.out_dir = out_dir(case_name({c, 0}) + "-" + tag);
  return cfg;
}

}  // namespace

class StageOnAsynchronousDeviceMatchesSynchronousCpu : public ::testing::TestWithParam<device_case> {};

TEST_P(StageOnAsynchronousDeviceMatchesSynchronousCpu, BitwiseSameLossesAndFinalParameters) {
  const device_case c = GetParam();
  const train_summary cpu = run_training(config_of(c, "cpu"));
  const train_config cfg = config_of(c, "fake");
  const auto devices = devices_for(cfg);
  const train_summary fake = run_training(cfg, on_devices(devices));
  ASSERT_EQ(fake.losses.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(cpu.losses.size(), fake.losses.size());
  EXPECT_EQ(std::memcmp(cpu.losses.data(), fake.losses.data(), cpu.losses.size() * sizeof(double)), 0);
  EXPECT_TRUE(same_bits(cpu.final_params, fake.final_params));
  for (const auto& d : devices) EXPECT_GE(d->completions(), 2 * kSteps);  // its F and B ran there, every step
}

INSTANTIATE_TEST_SUITE_P(
    SingleDevicePipelineAndDataParallel, StageOnAsynchronousDeviceMatchesSynchronousCpu,
    ::testing::Values(device_case{"mlp", "sgd", 1, 1}, device_case{"mlp", "adamw", 1, 1},
                      device_case{"mlp", "sgd", 1, 2}, device_case{"mlp", "adamw", 1, 2},
                      device_case{"gpt", "sgd", 1, 2}, device_case{"gpt", "adamw", 1, 2},
                      device_case{"mlp", "sgd", 2, 1}, device_case{"mlp", "adamw", 2, 1},
                      device_case{"gpt", "adamw", 2, 2}, device_case{"mlp", "adamw", 2, 1, 2},
                      device_case{"mlp", "sgd", 2, 1, 3}, device_case{"gpt", "adamw", 2, 1, 3}),
    case_name);
