// Whole jobs with --device against the same jobs on the CPU: the layers' CUDA ops, the stage's
// CUDA queue and launches, the optimizer shard's update on the GPU; a 2-stage pipeline and two
// data-parallel replicas on two GPUs (skipped with one). fp32 on both sides, summed in different
// orders (cuBLAS, the kernels' reductions), so losses and parameters agree to rounding that
// grows over the steps: 1e-3 relative for the losses, 1e-3 of the largest parameter. Without a
// device the binary exits 77 (skipped).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <functional>
#include <string>

#include <cuda_runtime_api.h>

#include "actors/plan/accelerators.hpp"
#include "actors/run/training_job.hpp"
#include "comm/nccl_group.hpp"
#include "tests/actors/tiny_jobs.hpp"
#include "tests/scratch_dir.hpp"

using namespace troupe;
using namespace troupe::test;

namespace {

std::string out_dir(const std::string& name) {
  return test_support::scratch_dir("gpu-job-" + name).string();
}

int gpus() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

// Losses within 1e-3 relative, final parameters within 1e-3 of the largest (see the top).
void expect_same_training(const train_summary& gpu, const train_summary& cpu) {
  ASSERT_EQ(gpu.losses.size(), cpu.losses.size());
  for (size_t i = 0; i < cpu.losses.size(); ++i) EXPECT_NEAR(gpu.losses[i], cpu.losses[i], 1e-3 * cpu.losses[i]) << i;
  ASSERT_EQ(gpu.final_params.numel(), cpu.final_params.numel());
  float scale = 0.0f, worst = 0.0f;
  for (int64_t i = 0; i < cpu.final_params.numel(); ++i) {
    scale = std::max(scale, std::fabs(cpu.final_params[i]));
    const float d = std::fabs(cpu.final_params[i] - gpu.final_params[i]);
    if (!(d <= worst)) worst = d;
  }
  EXPECT_LE(worst, 1e-3f * scale);
}

// cfg on the CPU, then with rank r on GPU gpu_of(r), into out directories named by tag.
void expect_gpu_matches_cpu(train_config cfg, const std::string& tag, const std::function<int(int)>& gpu_of,
                            const job_extras& extras = {}) {
  cfg.out_dir = out_dir(tag + "-cpu");
  const train_summary cpu = run_training(cfg);
  cfg.out_dir = out_dir(tag + "-gpu");
  for (int r = 0; r < cfg.mesh.ranks(); ++r) cfg.devices.push_back(device{device_type::cuda, gpu_of(r)});
  expect_same_training(run_training(cfg, extras), cpu);
}

// The ranks dealt over the GPUs there are, round robin: on a one-GPU machine a pipeline's stages
// or the replicas share it, each on a stream of its own.
void expect_gpu_matches_cpu(const std::string& model, const std::string& optim, int pp, int dp = 1,
                            matmul_precision p = matmul_precision::f32, int zero = 0) {
  train_config cfg = tiny_mesh_config(model, optim, dp, pp, 1, pp > 1 ? 4 : 1);
  cfg.matmul = p;
  cfg.zero = zero;
  const std::string tag = model + optim + std::to_string(dp) + std::to_string(pp) + to_string(p) + std::to_string(zero);
  expect_gpu_matches_cpu(cfg, tag, [](int r) { return r % gpus(); });
}

}  // namespace

TEST(GpuJob, an_mlp_job_with_sgd_on_cuda0_trains_as_on_the_cpu) { expect_gpu_matches_cpu("mlp", "sgd", 1); }
TEST(GpuJob, a_gpt_job_with_adamw_on_cuda0_trains_as_on_the_cpu) { expect_gpu_matches_cpu("gpt", "adamw", 1); }
TEST(GpuJob, a_two_stage_gpt_pipeline_on_the_gpus_trains_as_on_the_cpu) { expect_gpu_matches_cpu("gpt", "adamw", 2); }
// Two replicas: on two GPUs their buckets are all-reduced by NCCL in the GPUs' memory; on one,
// where NCCL takes no second member, by that GPU's own ops (local_device_group.hpp), each
// replica summing its segment on the GPU.
TEST(GpuJob, two_data_parallel_replicas_on_the_gpus_train_as_on_the_cpu) {
  expect_gpu_matches_cpu("gpt", "adamw", 1, 2);
}

namespace {

// NCCL, counting what the job asks of it: ids made, members joined, all-reduces run.
class counting_nccl final : public net::device_group_engine {
 public:
  std::string name() const override { return inner_->name(); }
  std::string refuses(const std::vector<int>& devices) const override { return inner_->refuses(devices); }
  bool one_group_per_device() const override { return inner_->one_group_per_device(); }
  void abort(const std::string& why) override { inner_->abort(why); }
  std::string make_id() override {
    ++ids;
    return inner_->make_id();
  }
  std::unique_ptr<net::group_backend> join(const std::string& id, int rank, int world, int device) override {
    ++joins;
    return std::make_unique<counted>(inner_->join(id, rank, world, device), all_reduces);
  }
  std::unique_ptr<net::group_backend> join_in_stream(const std::string& id, int rank, int world, int device) override {
    ++joins;
    return std::make_unique<counted>(inner_->join_in_stream(id, rank, world, device), all_reduces);
  }
  std::atomic<int> ids{0}, joins{0}, all_reduces{0};

 private:
  class counted final : public net::group_backend {
   public:
    counted(std::unique_ptr<net::group_backend> b, std::atomic<int>& n) : b_(std::move(b)), n_(n) {}
    int rank() const override { return b_->rank(); }
    int world() const override { return b_->world(); }
    void all_reduce(float* d, int64_t n, net::reduce_op op) override {
      ++n_;
      b_->all_reduce(d, n, op);
    }
    void reduce_scatter(float* d, int64_t n, net::reduce_op op) override { b_->reduce_scatter(d, n, op); }
    void all_gather(float* d, int64_t n) override { b_->all_gather(d, n); }
    void broadcast(float* d, int64_t n, int root) override { b_->broadcast(d, n, root); }
    void shift(const float* s, int64_t ns, float* r, int64_t nr) override { b_->shift(s, ns, r, nr); }
    void all_to_all(const float* s, const std::vector<int64_t>& sc, float* r, const std::vector<int64_t>& rc) override {
      b_->all_to_all(s, sc, r, rc);
    }

   private:
    std::unique_ptr<net::group_backend> b_;
    std::atomic<int>& n_;
  };
  std::shared_ptr<net::device_group_engine> inner_ = gpu_group_engines().back();  // NCCL, with the stages' streams
};

}  // namespace

// The same replicas, one per GPU, against the CPU's job, and NCCL seen doing the reducing: one id
// (made by the first member's collective, sent to the other's as a message), two members, every
// bucket of every step.
TEST(GpuJob, two_replicas_on_two_gpus_all_reduce_their_buckets_through_nccl_as_the_cpus_ring_does) {
  if (gpus() < 2) GTEST_SKIP() << "NCCL takes one member per GPU: this needs 2 GPUs, the machine has " << gpus();
  train_config cfg = tiny_mesh_config("gpt", "sgd", 2, 1, 1, 1);
  cfg.out_dir = out_dir("nccl-dp2-cpu");
  const train_summary cpu = run_training(cfg);
  cfg.out_dir = out_dir("nccl-dp2-gpu");
  cfg.devices = {device{device_type::cuda, 0}, device{device_type::cuda, 1}};
  job_extras extras;
  auto nccl = std::make_shared<counting_nccl>();
  extras.device_collectives = nccl;
  const train_summary gpu = run_training(cfg, extras);
  expect_same_training(gpu, cpu);
  EXPECT_EQ(nccl->ids.load(), 1);
  EXPECT_EQ(nccl->joins.load(), 2);
  EXPECT_GE(nccl->all_reduces.load(), 2 * static_cast<int>(kSteps));
}

// ZeRO 1 and 2 with a GPU per replica: the shard on each GPU, its buckets through NCCL.
TEST(GpuJob, zero1_and_zero2_over_nccl_on_two_gpus_train_as_the_cpus_zero_jobs) {
  if (gpus() < 2) GTEST_SKIP() << "NCCL takes one member per GPU: this needs 2 GPUs, the machine has " << gpus();
  expect_gpu_matches_cpu("gpt", "sgd", 1, 2, matmul_precision::f32, 1);
  expect_gpu_matches_cpu("mlp", "adamw", 1, 2, matmul_precision::f32, 2);
}
// The same job at bf16 matmuls against the CPU's bf16 job. SGD: a bf16 rounding that goes the
// other way on the GPU moves a gradient by about 2^-8 of one term, which SGD passes on in
// proportion (AdamW's first steps could turn a near-zero gradient's sign into a full lr step).
TEST(GpuJob, a_dp2_pp2_gpt_job_with_sgd_at_bf16_matmuls_on_the_gpus_trains_as_the_cpus_bf16_job) {
  expect_gpu_matches_cpu("gpt", "sgd", 2, 2, matmul_precision::bf16);
}
// ZeRO-2: the buckets reduce-scattered into each GPU's shard (by NCCL with a GPU per replica, by
// the GPU's own ops on one), updated there and all-gathered back in place.
TEST(GpuJob, a_zero2_job_over_two_replicas_on_the_gpus_trains_as_the_cpus_zero2_job) {
  expect_gpu_matches_cpu("gpt", "sgd", 1, 2, matmul_precision::f32, 2);
}
// ZeRO-3: each unit gathered on the host and copied onto the GPU just before its first layer,
// the segments and the shard on the host; over two replicas alone and with two stages each.
TEST(GpuJob, zero3_jobs_on_the_gpus_gather_their_units_on_the_host_and_train_as_the_cpus_zero3_jobs) {
  expect_gpu_matches_cpu("mlp", "adamw", 1, 2, matmul_precision::f32, 3);
  expect_gpu_matches_cpu("gpt", "sgd", 2, 2, matmul_precision::f32, 3);
}
// dp 2 x pp 2 with SGD, which shows a wrong gradient scale that AdamW would hide.
TEST(GpuJob, a_dp2_pp2_mlp_job_with_sgd_on_the_gpus_trains_as_on_the_cpu) { expect_gpu_matches_cpu("mlp", "sgd", 2, 2); }

// Tensor parallelism: a group's partial results summed through NCCL where its ranks have a GPU
// each, through the GPU's own ops where they share one (a one-GPU machine), the vocab-parallel
// loss's passes as CUDA kernels. Where the job has more groups than GPUs, each tensor-parallel
// group is dealt a GPU of its own (NCCL takes one communicator per GPU): its ranks then share it.
namespace {
void expect_tp_job_matches_cpu(const std::string& model, const std::string& optim, int dp, int pp, bool sp) {
  train_config cfg = tiny_mesh_config(model, optim, dp, pp, 2, pp > 1 ? 4 : 1);
  cfg.sequence_parallel = sp;
  const std::string tag = "tp-" + model + optim + std::to_string(dp) + std::to_string(pp) + (sp ? "sp" : "");
  const int groups = dp * pp;
  expect_gpu_matches_cpu(cfg, tag, [groups](int r) { return groups == 1 ? r % gpus() : (r / 2) % gpus(); });
}
}  // namespace

TEST(GpuJob, a_tp2_gpt_job_with_adamw_and_sequence_parallelism_on_the_gpus_trains_as_on_the_cpu) {
  expect_tp_job_matches_cpu("gpt", "adamw", 1, 1, true);
}
TEST(GpuJob, a_tp2_mlp_job_with_sgd_on_the_gpus_trains_as_on_the_cpu) { expect_tp_job_matches_cpu("mlp", "sgd", 1, 1, false); }
TEST(GpuJob, a_dp2_tp2_gpt_job_with_sgd_on_the_gpus_trains_as_on_the_cpu) {
  expect_tp_job_matches_cpu("gpt", "sgd", 2, 1, false);
}
TEST(GpuJob, a_pp2_tp2_gpt_job_with_adamw_and_sequence_parallelism_on_the_gpus_trains_as_on_the_cpu) {
  expect_tp_job_matches_cpu("gpt", "adamw", 1, 2, true);
}

// A tensor-parallel pair on two GPUs sums through NCCL, seen doing it: one id, two members
// joined in the stages' streams, the row-parallel layers' and the loss's all-reduces every step.
TEST(GpuJob, a_tp2_pair_on_two_gpus_sums_its_partial_results_through_nccl_as_the_cpus_group_does) {
  if (gpus() < 2) GTEST_SKIP() << "NCCL takes one member per GPU: this needs 2 GPUs, the machine has " << gpus();
  job_extras extras;
  auto nccl = std::make_shared<counting_nccl>();
  extras.device_collectives = nccl;
  expect_gpu_matches_cpu(tiny_mesh_config("gpt", "sgd", 1, 1, 2, 1), "nccl-tp2", [](int r) { return r; }, extras);
  EXPECT_EQ(nccl->ids.load(), 1);
  EXPECT_EQ(nccl->joins.load(), 2);
  EXPECT_GE(nccl->all_reduces.load(), 2 * static_cast<int>(kSteps));
}

#define TROUPE_GPU_TEST_BINARY "actors_gpu_job_test"
#include "tests/gpu_test_main.hpp"
