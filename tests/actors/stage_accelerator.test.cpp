// A stage on an accelerator (tests/kernels/fake_gpu.hpp's "cuda:7": host memory behind the CPU's
// ops, checking each pointer it is given is the device's): its parameters, gradients,
// activations and optimizer state live and are updated there, data parallelism reduces there
// or through the host, ZeRO keeps its shards where the memory plan says, and the job matches
// the CPU's. The asynchronous-device half (a stage never blocks its thread) is
// stage_device.test.cpp.
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


// A stage on an accelerator: its chunks' parameters, gradients and activations live in the
// device's memory and every op runs through the device's ops (tests/kernels/fake_gpu.hpp's
// "cuda:7": host memory behind the CPU's ops, which checks each pointer it is given is the
// device's), and its optimizer shard keeps the master copy and the state there and updates them
// there. The parameters are bitwise the CPU job's; the losses agree to
// float rounding (a device's loss reaches the host as one float per row, the CPU sums doubles).
namespace {

struct accelerator_case {
  std::string model, optim;
  int pp = 1;
  std::string schedule = "1f1b";
  int dp = 1;
  int zero = 0;
};

std::string accelerator_case_name(const ::testing::TestParamInfo<accelerator_case>& info) {
  std::string s = info.param.schedule;
  std::replace(s.begin(), s.end(), '-', '_');
  return info.param.model + "_" + info.param.optim + "_dp" + std::to_string(info.param.dp) + "_pp" +
         std::to_string(info.param.pp) + "_" + s + (info.param.zero ? "_zero" + std::to_string(info.param.zero) : "");
}

void PrintTo(const accelerator_case& c, std::ostream* os) { *os << accelerator_case_name({c, 0}); }


}  // namespace

class StageOnAnAcceleratorMatchesTheCpu : public ::testing::TestWithParam<accelerator_case> {};

TEST_P(StageOnAnAcceleratorMatchesTheCpu, SameFinalParametersBitwiseAndLossesToFloatRounding) {
  const accelerator_case c = GetParam();
  auto config = [&](const std::string& tag) {
    train_config cfg = tiny_mesh_config(c.model, c.optim, c.dp, c.pp, 1, c.pp > 1 ? 4 : 1);
    cfg.schedule = c.schedule;
    cfg.zero = c.zero;
    cfg.bucket_mb = 0.0005;  // several buckets per stage, each copied to the host as backward reaches it
    cfg.out_dir = out_dir("accelerator-" + accelerator_case_name({c, 0}) + "-" + tag);
    return cfg;
  };
  const train_summary cpu = run_training(config("cpu"));
  const train_config cfg = config("gpu");
  const auto devices = accelerators_for(cfg);
  const int before = fake_ops().calls("matmul_forward"), updates = fake_ops().calls("optimizer_step");
  job_extras extras = on_devices(devices);
  extras.device_collectives = host_only();  // the buckets through pinned host memory and the actors' ring
  const train_summary gpu = run_training(cfg, extras);
  ASSERT_EQ(gpu.losses.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(cpu.losses.size(), gpu.losses.size());
  for (size_t i = 0; i < cpu.losses.size(); ++i) EXPECT_NEAR(gpu.losses[i], cpu.losses[i], 1e-6 * cpu.losses[i]) << i;
  EXPECT_TRUE(same_bits(cpu.final_params, gpu.final_params));
  EXPECT_GE(fake_ops().calls("matmul_forward") - before, kSteps) << "the layers ran on the device";
  if (c.zero == 0) {
    EXPECT_GE(fake_ops().calls("optimizer_step") - updates, kSteps) << "the optimizer shard updated on the device";
  } else {  // ZeRO's shard keeps its segments on the host and updates them there
    EXPECT_EQ(fake_ops().calls("optimizer_step") - updates, 0);
  }
  for (const auto& d : devices) EXPECT_GE(d->completions(), 2 * kSteps);
  // Each replica's first stage took every microbatch's inputs onto the device as its batch came,
  // and every rank each step's host values through the upload stream: its all-reduced buckets
  // (zero 0 and 1) and its all-gathered parameters (zero 1 and 2); ZeRO-2's reduce-scattered
  // segments stay on the host with the shard.
  const int64_t M = cfg.micro_batches;
  const job_plan plan = plan_job(cfg, prepare_job(cfg));
  for (size_t r = 0; r < devices.size(); ++r) {
    const sched::mesh_coords at = cfg.mesh.coords_of(static_cast<int>(r));
    int64_t buckets = 0;
    for (const auto& chunk : plan.buckets.at(plan.slot(at.pp, at.tp))) buckets += static_cast<int64_t>(chunk.size());
    if (cfg.mesh.dp == 1) buckets = 0;
    const int64_t per_step = buckets * ((c.zero <= 1 ? 1 : 0) + (c.zero >= 1 ? 1 : 0));
    EXPECT_EQ(devices[r]->staged(), (r % static_cast<size_t>(c.pp) == 0 ? kSteps * M : 0) + kSteps * per_step)
        << "rank " << r;
  }
}

// A bucket leaves the device on its copy stream and may reach the stage after the backward that
// cut it has completed (a GPU's copy finishing after the compute's completion): R still waits for
// it. Here the download stream lets each copy wait 20 ms, so each replica's one bucket always
// arrives after its backward's completion. Found by the strict fake device: R passed with no
// bucket pending yet, and the optimizer stepped on unreduced gradients (then the job stalled).
TEST(StageOnAnAccelerator, ABucketArrivingAfterItsBackwardsCompletionIsStillReducedBeforeTheUpdate) {
  auto config = [](const std::string& tag) {
    train_config cfg = tiny_mesh_config("mlp", "sgd", 2, 1, 1, 1);
    cfg.out_dir = out_dir("late-bucket-" + tag);
    return cfg;
  };
  const train_summary cpu = run_training(config("cpu"));
  const train_config cfg = config("gpu");
  fake_ops();
  std::vector<std::shared_ptr<fake_device>> devices;
  for (int r = 0; r < cfg.mesh.ranks(); ++r)
    devices.push_back(std::make_shared<fake_device>(fake_gpu, false, std::chrono::milliseconds(20)));
  job_extras extras = on_devices(devices);
  extras.device_collectives = host_only();  // the buckets through host memory, after their copy
  expect_cpu_training(run_training(cfg, extras), cpu);
}

namespace {

// dp 2 plain, ZeRO 1 and ZeRO 2, each as an MLP alone and a GPT over two stages: through the host
// (StageOnAnAcceleratorMatchesTheCpu) and through a device engine (StageOnAnAcceleratorReducesThere).
const std::vector<accelerator_case> kDataParallelCases = {
    accelerator_case{"mlp", "sgd", 1, "1f1b", 2},      accelerator_case{"gpt", "adamw", 2, "1f1b", 2},
    accelerator_case{"mlp", "sgd", 1, "1f1b", 2, 1},   accelerator_case{"gpt", "adamw", 2, "1f1b", 2, 1},
    accelerator_case{"mlp", "adamw", 1, "1f1b", 2, 2}, accelerator_case{"gpt", "sgd", 2, "1f1b", 2, 2}};

std::vector<accelerator_case> pipelines_and_data_parallel() {
  std::vector<accelerator_case> out = {accelerator_case{"mlp", "sgd", 1}, accelerator_case{"mlp", "adamw", 2},
                                       accelerator_case{"gpt", "sgd", 2}, accelerator_case{"gpt", "adamw", 1},
                                       accelerator_case{"gpt", "adamw", 2, "interleaved"},
                                       accelerator_case{"mlp", "sgd", 2, "zb-h1"}};
  out.insert(out.end(), kDataParallelCases.begin(), kDataParallelCases.end());
  return out;
}

}  // namespace

INSTANTIATE_TEST_SUITE_P(PipelinesAndDataParallel, StageOnAnAcceleratorMatchesTheCpu,
                         ::testing::ValuesIn(pipelines_and_data_parallel()), accelerator_case_name);

// --matmul-precision bf16 reaches every stage of every replica: on the device no linear takes an
// fp32 product, the job is bitwise the CPU's at the same precision, and its losses follow the
// fp32 job's to within bf16 rounding (measured 2.5e-4 relative at most over these 20 steps; bound 1%)
// without being the same numbers.
TEST(StageOnAnAccelerator, Bf16MatmulsReachEveryStageAndMatchTheCpuBitwiseAndFp32ToRounding) {
  auto config = [&](const std::string& tag, matmul_precision p) {
    train_config cfg = tiny_mesh_config("gpt", "adamw", 2, 2, 1, 4);
    cfg.matmul = p;
    cfg.out_dir = out_dir("accelerator-bf16-" + tag);
    return cfg;
  };
  const train_summary fp32 = run_training(config("fp32", matmul_precision::f32));
  const train_summary cpu = run_training(config("cpu", matmul_precision::bf16));
  const train_config cfg = config("gpu", matmul_precision::bf16);
  const auto devices = accelerators_for(cfg);
  const int fp32_products = fake_ops().calls("matmul_forward"), bf16_products = fake_ops().calls("matmul_forward_bf16");
  const train_summary gpu = run_training(cfg, on_devices(devices));
  EXPECT_EQ(fake_ops().calls("matmul_forward"), fp32_products) << "a linear on the device took an fp32 product";
  EXPECT_GE(fake_ops().calls("matmul_forward_bf16") - bf16_products, 4 * kSteps);
  EXPECT_TRUE(same_bits(cpu.final_params, gpu.final_params));
  ASSERT_EQ(cpu.losses.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(fp32.losses.size(), cpu.losses.size());
  ASSERT_EQ(gpu.losses.size(), cpu.losses.size());
  bool moved = false;
  for (size_t i = 0; i < cpu.losses.size(); ++i) {
    EXPECT_NEAR(gpu.losses[i], cpu.losses[i], 1e-6 * cpu.losses[i]) << i;
    EXPECT_NEAR(cpu.losses[i], fp32.losses[i], 1e-2 * fp32.losses[i]) << i;
    moved = moved || cpu.losses[i] != fp32.losses[i];
  }
  EXPECT_TRUE(moved) << "bf16 operands gave the fp32 job's losses bit for bit";
}

// ZeRO 1 and 2 on a GPU keep the shard (master copy and state) and, for zero 2, the gradient
// segments in host memory: the device's ledger holds the parameters, the gradients (zero 2: the
// buckets backward fills) and no optimizer state, as the memory plan predicts for such a rank.
// Every bucket leaves the device through the queue's stage_out (on a GPU, its copy stream, so
// backward goes on meanwhile): once per bucket and step on each rank.
TEST(StageOnAnAccelerator, ZeroOneAndTwoKeepTheShardOffTheDeviceAsTheMemoryPlanPredictsTheBucketsLeavingByStageOut) {
  for (int zero : {1, 2}) {
    SCOPED_TRACE("zero " + std::to_string(zero));
    train_config cfg = tiny_mesh_config("mlp", "adamw", 2, 1, 1, 1);
    cfg.zero = zero;
    cfg.bucket_mb = 0.0005;
    cfg.devices = {fake_gpu};  // what the memory plan reads; the job's devices are the fakes below
    cfg.out_dir = out_dir("accelerator-zero-memory-" + std::to_string(zero));
    const auto devices = accelerators_for(cfg);
    job_extras extras = on_devices(devices);
    const auto engine = host_only();
    extras.device_collectives = engine;
    const train_summary run = run_training(cfg, extras);
    const job_plan plan = plan_job(cfg, prepare_job(cfg));
    ASSERT_EQ(run.peak_memory.size(), 2u);
    const auto buckets = static_cast<int64_t>(plan.buckets.at(0).at(0).size());
    ASSERT_GT(buckets, 1);
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(devices[static_cast<size_t>(r)]->staged_out(), buckets * static_cast<int64_t>(run.losses.size()))
          << "rank " << r;
      const memory_figures want = predicted_model_states(cfg, plan, r, {engine});
      const memory_figures& got = run.peak_memory[static_cast<size_t>(r)];
      EXPECT_EQ(want.of(memory_kind::optimizer_state), 0);
      EXPECT_EQ(got.of(memory_kind::optimizer_state), 0) << "rank " << r;
      EXPECT_EQ(got.of(memory_kind::parameters), want.of(memory_kind::parameters)) << "rank " << r;
      if (zero == 1) {
        EXPECT_EQ(got.of(memory_kind::gradients), want.of(memory_kind::gradients)) << "rank " << r;
      } else {  // the buckets in flight: at least one, at most the plan's bound
        EXPECT_GT(got.of(memory_kind::gradients), 0) << "rank " << r;
        EXPECT_LE(got.of(memory_kind::gradients), want.of(memory_kind::gradients)) << "rank " << r;
      }
    }
  }
}

// Data parallelism on accelerators reduces there, through the job's device engine (NCCL on GPUs;
// here the fake one): each data-parallel group's first collective member makes the group's id
// and sends it to the others as an actor message, every member joins with it, and every bucket
// is reduced in the device's memory (the engine checks each pointer it gets) and copied back
// there. ZeRO 1 and 2 keep their shards on the device with it: the update runs there, the
// shard's gradients come from all-reduced (zero 1) or reduce-scattered (zero 2) buckets, and the
// updated segments are all-gathered in place. With two replicas the sums are the actors' ring's
// bit for bit, so every job is the CPU's.
namespace {

int64_t buckets_per_step(const train_config& cfg) {
  const job_plan plan = plan_job(cfg, prepare_job(cfg));
  int64_t n = 0;
  for (const auto& slot : plan.buckets)
    for (const auto& chunk : slot) n += static_cast<int64_t>(chunk.size());
  return n * cfg.mesh.dp;  // every replica's member reduces each of its stage's buckets
}

train_config engine_config(const accelerator_case& c, const std::string& tag) {
  train_config cfg = tiny_mesh_config(c.model, c.optim, c.dp, c.pp, 1, c.pp > 1 ? 4 : 1);
  cfg.zero = c.zero;
  cfg.bucket_mb = 0.0005;  // several buckets per stage
  cfg.out_dir = out_dir("accelerator-engine-" + accelerator_case_name({c, 0}) + "-" + tag);
  return cfg;
}

}  // namespace

class StageOnAnAcceleratorReducesThere : public ::testing::TestWithParam<accelerator_case> {};

TEST_P(StageOnAnAcceleratorReducesThere, BucketsShardAndUpdateStayOnTheDevicesThroughTheEngineBitwiseAsOnTheCpu) {
  const accelerator_case c = GetParam();
  const train_summary cpu = run_training(engine_config(c, "cpu"));
  const train_config cfg = engine_config(c, "gpu");
  auto engine = std::make_shared<fake_device_group_engine>();
  const int updates = fake_ops().calls("optimizer_step");
  const train_summary gpu = run_with_engine(cfg, engine);
  expect_cpu_training(gpu, cpu);
  const std::vector<std::string> ids = engine->ids();
  ASSERT_EQ(ids.size(), static_cast<size_t>(c.pp)) << "one id per data-parallel group: one per pipeline stage";
  for (const std::string& id : ids) {
    std::vector<int> members = engine->joined(id);
    std::sort(members.begin(), members.end());
    EXPECT_EQ(members, (std::vector<int>{0, 1})) << "every member joined with the id its first member made";
  }
  const int64_t every_bucket = kSteps * buckets_per_step(cfg);
  EXPECT_EQ(engine->all_reduces(), c.zero >= 2 ? 0 : every_bucket);
  EXPECT_EQ(engine->reduce_scatters(), c.zero >= 2 ? every_bucket : 0);
  EXPECT_EQ(engine->all_gathers(), c.zero >= 1 ? every_bucket : 0) << "ZeRO's updated segments gathered on the devices";
  EXPECT_GE(fake_ops().calls("optimizer_step") - updates, kSteps) << "every shard updated on its device";
  // The same job through the build's engine for replicas that share a GPU: the device's own ops.
  const int adds = fake_ops().calls("add_into"), local_updates = fake_ops().calls("optimizer_step");
  const train_config local_cfg = engine_config(c, "local");
  const auto local_devices = accelerators_for(local_cfg);
  const train_summary local = run_training(local_cfg, on_devices(local_devices));
  EXPECT_TRUE(same_bits(cpu.final_params, local.final_params));
  EXPECT_GE(fake_ops().calls("add_into") - adds, every_bucket / 2) << "each segment of each bucket summed on the device";
  EXPECT_GE(fake_ops().calls("optimizer_step") - local_updates, kSteps);
}

INSTANTIATE_TEST_SUITE_P(PlainAndZero, StageOnAnAcceleratorReducesThere, ::testing::ValuesIn(kDataParallelCases),
                         accelerator_case_name);

// A ZeRO shard on the devices with its group is counted on each GPU's ledger as the memory plan
// predicts for a rank whose group reduces there: the master copy and the state (its optimizer
// state), the parameters, and the gradients (zero 2: the shard's segments and the buckets in
// flight, within the plan's bound).
TEST(StageOnAnAccelerator, AZeroShardOnTheDevicesWithItsGroupIsCountedThereAsTheMemoryPlanPredicts) {
  for (int zero : {1, 2}) {
    SCOPED_TRACE("zero " + std::to_string(zero));
    train_config cfg = engine_config(accelerator_case{"mlp", "adamw", 1, "1f1b", 2, zero}, "memory");
    cfg.devices = {fake_gpu};  // what the memory plan reads; the job's devices are the fakes
    auto engine = std::make_shared<fake_device_group_engine>();
    const train_summary run = run_with_engine(cfg, engine);
    const job_plan plan = plan_job(cfg, prepare_job(cfg));
    ASSERT_EQ(run.peak_memory.size(), 2u);
    for (int r = 0; r < 2; ++r) {
      const memory_figures want = predicted_model_states(cfg, plan, r, {engine});
      const memory_figures& got = run.peak_memory[static_cast<size_t>(r)];
      EXPECT_GT(want.of(memory_kind::optimizer_state), 0);
      EXPECT_EQ(got.of(memory_kind::optimizer_state), want.of(memory_kind::optimizer_state)) << "rank " << r;
      EXPECT_EQ(got.of(memory_kind::parameters), want.of(memory_kind::parameters)) << "rank " << r;
      if (zero == 1) {
        EXPECT_EQ(got.of(memory_kind::gradients), want.of(memory_kind::gradients)) << "rank " << r;
      } else {
        EXPECT_GT(got.of(memory_kind::gradients), 0) << "rank " << r;
        EXPECT_LE(got.of(memory_kind::gradients), want.of(memory_kind::gradients)) << "rank " << r;
      }
    }
  }
}

// Where the engine refuses the group's devices (NCCL: two members on one GPU), and for an
// offloaded ZeRO shard, which lives on the host, the buckets meet on the host as before.
TEST(StageOnAnAccelerator, AGroupTheEngineRefusesAndAnOffloadedShardReduceThroughTheHostInstead) {
  for (const accelerator_case& c : {accelerator_case{"mlp", "sgd", 1, "1f1b", 2}, accelerator_case{"mlp", "adamw", 1, "1f1b", 2, 2}}) {
    SCOPED_TRACE(accelerator_case_name({c, 0}));
    train_config cpu_cfg = engine_config(c, "cpu"), gpu_cfg = engine_config(c, "gpu");
    if (c.zero) cpu_cfg.offload = gpu_cfg.offload = offload_what::optimizer;
    const train_summary cpu = run_training(cpu_cfg);
    auto engine = std::make_shared<fake_device_group_engine>(c.zero ? "" : "NCCL takes one member per GPU");
    const train_summary gpu = run_with_engine(gpu_cfg, engine);
    EXPECT_TRUE(same_bits(cpu.final_params, gpu.final_params));
    EXPECT_TRUE(engine->ids().empty());
    EXPECT_EQ(engine->all_reduces() + engine->reduce_scatters() + engine->all_gathers(), 0);
  }
}

// A member of a device group that fails (its peer died, in NCCL's terms) fails its stage and the
// job, with the reason; the other member, left waiting inside the engine for it, is released by
// the job's abort, so the job ends (no teardown guard ends the process) and the error names the
// failure.
TEST(StageOnAnAccelerator, AFailedDeviceCollectiveFailsTheJobNamingItAndTheAbortReleasesItsPeer) {
  for (int zero : {0, 2}) {
    SCOPED_TRACE("zero " + std::to_string(zero));
    const train_config cfg = engine_config(accelerator_case{"mlp", "sgd", 1, "1f1b", 2, zero}, "failed");
    auto engine = std::make_shared<fake_device_group_engine>();
    engine->fail(1, 7);  // in the second step: every step reduces 5 buckets
    try {
      run_with_engine(cfg, engine);
      ADD_FAILURE() << "the job finished";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("injected failure of member 1's collective 7"), std::string::npos) << e.what();
    }
    EXPECT_TRUE(engine->aborted());
  }
}

// A collective that hangs inside the engine (a wedged peer) stalls the step: the watchdog's
// report names it from each member's log (which answers while its thread is inside the engine:
// "inside fake-nccl") with each entry's time, the job stops with that report, and the abort
// releases the members.
TEST(StageOnAnAccelerator, AHungDeviceCollectiveIsNamedByTheWatchdogFromTheMembersLogs) {
  train_config cfg = engine_config(accelerator_case{"mlp", "sgd", 1, "1f1b", 2}, "hung");
  cfg.watchdog_seconds = 1;
  auto engine = std::make_shared<fake_device_group_engine>();
  engine->hold(1, 7);  // the second step's third bucket
  try {
    run_with_engine(cfg, engine);
    ADD_FAILURE() << "the job finished";
  } catch (const std::runtime_error& e) {
    const std::string report = e.what();
    EXPECT_NE(report.find("collectives:"), std::string::npos) << report;
    EXPECT_NE(report.find("collective rank 1/2 seq 7 all_reduce_sum"), std::string::npos) << report;
    EXPECT_NE(report.find("inside fake-nccl"), std::string::npos) << report;
    EXPECT_EQ(report.find("no answer"), std::string::npos) << "every member's log answered: " << report;
    // Each member's ledger: the hung one has waited over the watchdog's second, and both members'
    // last finished collectives say how long they took.
    const std::regex hung(R"(collective rank 1/2 seq 7 all_reduce_sum[^\n]*waiting (\d+)\.\d ms so far)");
    std::smatch m;
    ASSERT_TRUE(std::regex_search(report, m, hung)) << report;
    EXPECT_GE(std::stoi(m[1]), 1000) << report;
    for (const char* member : {"0/2", "1/2"})
      EXPECT_TRUE(std::regex_search(report, std::regex(std::string("collective rank ") + member +
                                                       R"( seq 6 all_reduce_sum[^\n]*done[^\n]*took \d+\.\d ms)")))
          << member << ": " << report;
  }
  EXPECT_TRUE(engine->aborted());
}

// Checkpoints from the devices and back onto them: a fake-GPU job saves at step 8, and one resumed
// from there ends bitwise as the uninterrupted CPU run. Its shards are on the device (plain; ZeRO 2
// over the device engine) or on the host (ZeRO 1 without an engine: ZeRO-Offload's placement).
TEST(StageOnAnAccelerator, AJobResumedOntoTheDevicesFromStep8EndsBitwiseAsTheUninterruptedCpuRun) {
  struct resume_case {
    accelerator_case job;
    bool engine;
  };
  for (const resume_case& r : {resume_case{{"gpt", "adamw", 1}, false}, resume_case{{"mlp", "adamw", 1, "1f1b", 2, 2}, true},
                               resume_case{{"mlp", "sgd", 1, "1f1b", 2, 1}, false}}) {
    const std::string name = accelerator_case_name({r.job, 0}) + (r.engine ? "_engine" : "");
    SCOPED_TRACE(name);
    const train_summary want = run_training(engine_config(r.job, "resume-cpu-" + name));
    auto engine = r.engine ? std::make_shared<fake_device_group_engine>() : nullptr;
    train_config saver = engine_config(r.job, "resume-saver-" + name);
    saver.checkpoint_dir = out_dir("resume-ckpt-" + name);
    saver.checkpoint_every = 8;
    saver.keep = 0;
    run_with_engine(saver, engine);
    train_config resumed = engine_config(r.job, "resume-resumed-" + name);
    resumed.resume = saver.checkpoint_dir + "/step-00000008";
    const train_summary got = run_with_engine(resumed, engine);
    EXPECT_EQ(got.first_step, 8);
    ASSERT_EQ(got.losses.size(), static_cast<size_t>(kSteps - 8));
    EXPECT_TRUE(same_bits(want.final_params, got.final_params));
  }
}

// A job whose device collective fails after its step-8 checkpoint restarts (--max-restarts) onto
// the devices from its latest checkpoint, or from the start when that one was not committed yet,
// and ends bitwise as the uninterrupted CPU run.
TEST(StageOnAnAccelerator, AJobWhoseDeviceCollectiveFailsRestartsFromItsCheckpointAndEndsBitwiseTheSame) {
  const accelerator_case c{"mlp", "adamw", 1, "1f1b", 2, 1};
  const train_summary want = run_training(engine_config(c, "restart-cpu"));
  train_config cfg = engine_config(c, "restart-gpu");
  cfg.checkpoint_dir = out_dir("restart-ckpt");
  cfg.checkpoint_every = 8;
  cfg.max_restarts = 1;
  auto engine = std::make_shared<fake_device_group_engine>();
  engine->fail(1, 10 * 5);  // step 10's first bucket (5 a step)
  const train_summary got = run_with_engine(cfg, engine);
  EXPECT_EQ(got.restarts, 1);
  EXPECT_TRUE(engine->aborted());
  EXPECT_TRUE(got.first_step == 8 || got.first_step == 0) << got.first_step;
  EXPECT_TRUE(same_bits(want.final_params, got.final_params));
}

// Parameter servers and gradient observers read gradients on the host: a GPU stage hands them a
// pinned copy. A bsp job over two fake-GPU replicas ends bitwise as the CPU's bsp job, and an
// observer hears the same bits from the devices as from the CPU, every rank every step.
namespace {

struct heard {
  std::mutex mu;
  std::map<std::pair<int64_t, int32_t>, std::vector<float>> grads;  // (step, rank)
};

caf::behavior listener(caf::event_based_actor*, std::shared_ptr<heard> out) {
  return {[out](const observed_gradients& g) {
    EXPECT_TRUE(g.grads.where().is_cpu()) << "an observer got gradients on " << g.grads.where().to_string();
    std::lock_guard<std::mutex> lock(out->mu);
    out->grads[{g.step, g.rank}] = g.grads.to_vector();
  }};
}

}  // namespace

TEST(StageOnAnAccelerator, ParameterServersAndGradientObserversGetTheDevicesGradientsOnTheHostBitwiseAsTheCpus) {
  {
    SCOPED_TRACE("bsp parameter servers");
    auto config = [](const std::string& tag) {
      train_config cfg = engine_config(accelerator_case{"mlp", "sgd", 1, "1f1b", 2}, "ps-" + tag);
      cfg.consistency = consistency_model::bsp;
      return cfg;
    };
    const train_summary cpu = run_training(config("cpu"));
    const train_summary gpu = run_with_engine(config("gpu"), nullptr);
    EXPECT_TRUE(same_bits(cpu.final_params, gpu.final_params));
    EXPECT_EQ(gpu.server_updates.size(), cpu.server_updates.size());
  }
  SCOPED_TRACE("observers");
  const train_config cfg = engine_config(accelerator_case{"gpt", "adamw", 2, "1f1b", 2}, "observed");
  auto run = [&](bool on_gpu) {
    auto out = std::make_shared<heard>();
    const auto devices = accelerators_for(cfg);
    job_extras extras = on_gpu ? on_devices(devices) : job_extras{};
    extras.gradient_observers.push_back([out](caf::actor_system& sys) { return sys.spawn(listener, out); });
    train_config c = cfg;
    c.out_dir += on_gpu ? "-gpu" : "-cpu";
    run_training(c, extras);
    std::lock_guard<std::mutex> lock(out->mu);
    return out->grads;
  };
  const auto cpu = run(false), gpu = run(true);
  EXPECT_EQ(cpu.size(), static_cast<size_t>(kSteps * 4)) << "every rank, every step";
  EXPECT_TRUE(cpu == gpu) << "the devices' gradients, as the observers heard them, are the CPU's";
}

// An engine whose devices serve one group at most (NCCL): with every rank on the one fake GPU,
// the first pipeline stage's group reduces there and the second's meets on the host, and the
// job is still the CPU's bit for bit.
TEST(StageOnAnAccelerator, ASecondGroupOnAnEngagedDeviceReducesThroughTheHostAndTheJobIsUnchanged) {
  const accelerator_case c{"gpt", "adamw", 2, "1f1b", 2};
  const train_summary cpu = run_training(engine_config(c, "cpu"));
  auto engine = std::make_shared<fake_device_group_engine>("", true);
  const train_config cfg = engine_config(c, "gpu");
  const train_summary gpu = run_with_engine(cfg, engine);
  EXPECT_TRUE(same_bits(cpu.final_params, gpu.final_params));
  EXPECT_EQ(engine->ids().size(), 1u);
  EXPECT_GT(engine->all_reduces(), 0);
  EXPECT_LT(engine->all_reduces(), kSteps * buckets_per_step(cfg));
}

// A process of a job over several opens the queues of its own ranks only, each once (the other
// ranks' GPUs are another machine's); a device nobody set up ops for is named before any actor.
TEST(StageOnAnAccelerator, AProcessOpensOnlyItsOwnRanksDevicesEachOnceAndNamesOneWithoutOps) {
  train_config cfg = tiny_mesh_config("mlp", "sgd", 2, 2, 1, 2);
  fake_ops();
  std::map<int, int> asked;
  std::vector<std::shared_ptr<fake_device>> gpus;
  for (int r = 0; r < 4; ++r) gpus.push_back(std::make_shared<fake_device>(fake_gpu));
  const rank_devices given = [&](int rank) -> std::shared_ptr<device_queue> {
    ++asked[rank];
    return gpus.at(static_cast<size_t>(rank));
  };
  const rank_devices mine = open_rank_devices(cfg, {2, 3}, given);
  EXPECT_EQ(asked, (std::map<int, int>{{2, 1}, {3, 1}}));
  EXPECT_EQ(mine(2), gpus[2]);
  EXPECT_EQ(mine(3), gpus[3]);
  EXPECT_EQ(mine(3), gpus[3]);
  EXPECT_EQ(mine(0), nullptr) << "another process's rank";
  EXPECT_EQ(asked, (std::map<int, int>{{2, 1}, {3, 1}})) << "asked again after opening";
  EXPECT_FALSE(open_rank_devices(cfg, {0, 1}, {})) << "no --device: every rank on the host";
  const auto unknown = std::make_shared<fake_device>(device{device_type::cuda, 5});
  try {
    open_rank_devices(cfg, {1}, [&](int) -> std::shared_ptr<device_queue> { return unknown; });
    FAIL() << "a device without ops was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:5"), std::string::npos) << e.what();
  }
}

// Without that GPU the job names it (and how many there are, or that troupe has no CUDA); with
// it, the job trains to the CPU's losses: one stage, and two stages sharing the GPU (each on a
// stream of its own, kernels/allocator.hpp).
TEST(StageOnAnAccelerator, DeviceFlagTrainsToTheCpuLossesOrNamesTheMissingGpu) {
  for (int pp : {1, 2}) {
    train_config cfg = tiny_mesh_config("mlp", "sgd", 1, pp, 1, pp > 1 ? 4 : 1);
    cfg.out_dir = out_dir("device-flag-cpu-pp" + std::to_string(pp));
    const train_summary cpu = run_training(cfg);
    cfg.out_dir = out_dir("device-flag-gpu-pp" + std::to_string(pp));
    cfg.devices = {device{device_type::cuda, 0}};
    train_summary gpu;
    try {
      gpu = run_training(cfg);
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
      continue;
    }
    ASSERT_EQ(gpu.losses.size(), cpu.losses.size());
    for (size_t i = 0; i < cpu.losses.size(); ++i)
      EXPECT_NEAR(gpu.losses[i], cpu.losses[i], 1e-4 * cpu.losses[i]) << "pp " << pp << " step " << i;
  }
}
