// Tensor parallelism and ZeRO-3 with every rank on a fake GPU (tests/kernels/fake_gpu.hpp): the
// same final parameters as the CPU job, bit for bit, through the test's engine and through the
// build's for ranks sharing a GPU, with the launches run in the stages' own calls (as cuda_queue
// runs them) on one scheduler thread; and the groups that cannot sum on the devices refused.
#include <gtest/gtest.h>

#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "actors/plan/job_plan.hpp"
#include "actors/plan/memory_plan.hpp"
#include "actors/run/training_job.hpp"
#include "tests/actors/stage_device_support.hpp"
#include "tests/actors/tiny_jobs.hpp"

using namespace troupe;
using namespace troupe::test;

// Tensor parallelism on the devices: every layer's partial results are summed (and sequence
// parallelism's shares gathered and scattered) through the engine in the stages' streams, the
// vocabulary-parallel loss runs its three passes on the device, and with two members per group
// the sums are the CPU's bit for bit, so every job ends with the CPU job's parameters. Then the
// same job through the build's engine for ranks sharing a GPU (the device's own ops).
namespace {

struct tp_case {
  std::string model, optim;
  int dp = 1, pp = 1;
  bool sequence_parallel = false;
};

std::string tp_case_name(const ::testing::TestParamInfo<tp_case>& info) {
  const tp_case& c = info.param;
  return c.model + "_" + c.optim + "_dp" + std::to_string(c.dp) + "_pp" + std::to_string(c.pp) + "_tp2" +
         (c.sequence_parallel ? "_sp" : "");
}

void PrintTo(const tp_case& c, std::ostream* os) { *os << tp_case_name({c, 0}); }

train_config tp_config(const tp_case& c, const std::string& tag) {
  train_config cfg = tiny_mesh_config(c.model, c.optim, c.dp, c.pp, 2, c.pp > 1 ? 4 : 2);
  cfg.sequence_parallel = c.sequence_parallel;
  cfg.out_dir = out_dir("accelerator-tp-" + tp_case_name({c, 0}) + "-" + tag);
  return cfg;
}

}  // namespace

class TensorParallelOnTheDevices : public ::testing::TestWithParam<tp_case> {};

TEST_P(TensorParallelOnTheDevices, LayersSumTheirPartialsThroughTheEngineInTheStreamsBitwiseAsOnTheCpu) {
  const tp_case c = GetParam();
  const train_summary cpu = run_training(tp_config(c, "cpu"));
  const train_config cfg = tp_config(c, "gpu");
  auto engine = std::make_shared<fake_device_group_engine>();
  const int peaks = fake_ops().calls("vocab_peaks"), finishes = fake_ops().calls("vocab_finish");
  const train_summary gpu = run_with_engine(cfg, engine);
  expect_cpu_training(gpu, cpu);
  const int ranks = c.dp * c.pp * 2;
  EXPECT_EQ(engine->in_stream_joins(), ranks) << "every rank joined its tensor-parallel group in its stream";
  EXPECT_GT(engine->all_reduces(), 0);
  if (c.sequence_parallel) {
    EXPECT_GT(engine->all_gathers(), 0);
    EXPECT_GT(engine->reduce_scatters(), 0);
  }
  if (c.model == "gpt") {  // the last stage's two tp ranks, per microbatch of every step
    const int losses = kSteps * cfg.micro_batches * c.dp * 2;
    EXPECT_GE(fake_ops().calls("vocab_peaks") - peaks, losses) << "the vocabulary-parallel loss ran on the device";
    EXPECT_GE(fake_ops().calls("vocab_finish") - finishes, losses);
  }
  // Through the local engine, whose members meet on the host, the launches run in the stages'
  // own calls as cuda_queue's do, on one scheduler thread: a stage that waited for its partner
  // there would hold the thread the partner needs, and the watchdog would end the job.
  const train_config local_cfg = tp_config(c, "local");
  const auto local_devices = accelerators_for(local_cfg, true);
  const train_summary local = run_training(local_cfg, on_devices(local_devices));
  EXPECT_TRUE(same_bits(cpu.final_params, local.final_params));
}

INSTANTIATE_TEST_SUITE_P(
    AloneAndInMeshes, TensorParallelOnTheDevices,
    ::testing::Values(tp_case{"gpt", "sgd"}, tp_case{"gpt", "adamw", 1, 1, true}, tp_case{"mlp", "adamw"},
                      tp_case{"gpt", "adamw", 2, 1}, tp_case{"gpt", "sgd", 1, 2, true}),
    tp_case_name);

// A tensor-parallel group with one rank on the host and one on the device has no place to sum
// its layers' partials: refused by name before the job starts.
TEST(StageOnAnAccelerator, ATensorParallelGroupHalfOnTheHostIsRefusedNamingIt) {
  train_config cfg = tiny_mesh_config("gpt", "sgd", 1, 1, 2, 1);
  cfg.out_dir = out_dir("accelerator-tp-mixed");
  fake_ops();
  const auto gpu = std::make_shared<fake_device>(fake_gpu);
  job_extras extras = on_devices({gpu, gpu});
  extras.device_of = [gpu](int rank) -> std::shared_ptr<device_queue> { return rank == 0 ? gpu : nullptr; };
  try {
    run_training(cfg, extras);
    FAIL() << "a tp group across host and device ran";
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("tensor-parallel group 0"), std::string::npos) << what;
    EXPECT_NE(what.find("on the host and on accelerators"), std::string::npos) << what;
  }
}

// ZeRO-3 on a GPU: the data-parallel group gathers each unit on the host, where the rank's
// segments and its optimizer shard stay (as DeepSpeed's ZeRO-3 with parameters and optimizer
// offloaded to the CPU), and the fetcher stages each unit onto the device as it is gathered (the
// queue's stage_in: on a GPU, its copy stream), ahead of the unit's first layer, every F and B
// of every microbatch once per unit; the buckets are reduce-scattered through pinned host memory. The launches run in
// the stages' own calls on one scheduler thread, as cuda_queue's do, so a stage that waited for
// a gather on the scheduler would stall the partner it waits for. Bitwise the CPU's ZeRO-3 job;
// the device's ledger holds no optimizer state and no more parameters and gradients than the
// memory plan says for a GPU rank.
TEST(StageOnAnAccelerator, ZeroThreeGathersEachUnitOnTheHostAndCopiesItInBitwiseAsOnTheCpuWithinTheMemoryPlan) {
  struct zero3_case {
    std::string model, optim;
    int dp, pp, tp;
  };
  for (const zero3_case& c : {zero3_case{"mlp", "adamw", 2, 1, 1}, zero3_case{"gpt", "sgd", 2, 2, 1},
                              zero3_case{"gpt", "adamw", 2, 1, 2}}) {
    const std::string tag = c.model + c.optim + std::to_string(c.dp) + std::to_string(c.pp) + std::to_string(c.tp);
    SCOPED_TRACE(tag);
    auto config = [&](const std::string& where) {
      train_config cfg = tiny_mesh_config(c.model, c.optim, c.dp, c.pp, c.tp, c.pp > 1 ? 4 : 1);
      cfg.zero = 3;
      cfg.bucket_mb = 0.0005;  // several units per stage
      cfg.out_dir = out_dir("accelerator-zero3-" + tag + "-" + where);
      return cfg;
    };
    const train_summary cpu = run_training(config("cpu"));
    train_config cfg = config("gpu");
    cfg.devices = {fake_gpu};  // what the memory plan reads; the job's devices are the fakes below
    const auto devices = accelerators_for(cfg, true);
    const int updates = fake_ops().calls("optimizer_step"), matmuls = fake_ops().calls("matmul_forward");
    const train_summary gpu = run_training(cfg, on_devices(devices));
    expect_cpu_training(gpu, cpu);
    EXPECT_GE(fake_ops().calls("matmul_forward") - matmuls, kSteps) << "the layers ran on the device";
    EXPECT_EQ(fake_ops().calls("optimizer_step") - updates, 0) << "the shard updates on the host";
    const job_plan plan = plan_job(cfg, prepare_job(cfg));
    ASSERT_EQ(gpu.peak_memory.size(), static_cast<size_t>(cfg.mesh.ranks()));
    for (int r = 0; r < cfg.mesh.ranks(); ++r) {
      const sched::mesh_coords at = cfg.mesh.coords_of(r);
      const auto units = static_cast<int64_t>(plan.buckets.at(plan.slot(at.pp, at.tp)).at(0).size());
      EXPECT_GE(devices[static_cast<size_t>(r)]->staged(), kSteps * 2 * cfg.micro_batches * units)
          << "rank " << r << ": every unit of every F and B staged in";
      const memory_figures want = predicted_model_states(cfg, plan, r);
      const memory_figures& got = gpu.peak_memory[static_cast<size_t>(r)];
      EXPECT_EQ(want.of(memory_kind::optimizer_state), 0);
      EXPECT_EQ(got.of(memory_kind::optimizer_state), 0) << "rank " << r;
      EXPECT_GT(got.of(memory_kind::parameters), 0) << "rank " << r << ": no unit was copied in";
      EXPECT_LE(got.of(memory_kind::parameters), want.of(memory_kind::parameters)) << "rank " << r;
      EXPECT_GT(got.of(memory_kind::gradients), 0) << "rank " << r;
      EXPECT_LE(got.of(memory_kind::gradients), want.of(memory_kind::gradients)) << "rank " << r;
    }
  }
}

