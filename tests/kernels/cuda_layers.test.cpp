// The layers on a GPU, through its device_ops (kernels/cuda/cuda_device_ops.hpp): a GPT and an
// MLP stack on cuda:0 against the same stack on the CPU, from the same seed and batch, plainly
// and through a cuda_queue whose completion is the only wait. Without a device the binary
// exits 77 (skipped).
//
// Tolerance: both sides compute in fp32, but in different orders (cuBLAS's GEMM tiles and the
// kernels' block reductions against OpenBLAS and the CPU loops), so values differ by rounding
// only: a few ulps per op, growing with depth. Every gradient and the loss must agree to 1e-4
// of the tensor's largest magnitude, far below what one wrong term (a missing scale, a
// transposed operand) would give, and far above fp32 reordering noise for these sizes.
//
// At matmul_precision::bf16 the rounding itself is exact on both sides (the same fp32 value
// gives the same bf16 bits), and so are the products of rounded operands: given the same fp32
// operands, the three products agree to the fp32 tolerance above. A whole stack is looser: a
// value within fp32 reordering noise of a bf16 rounding boundary rounds up on one side and down
// on the other, one operand element one bf16 ulp (2^-8 of itself) apart, so a stack's gradients
// agree to 4e-3 of the largest: still far below a wrong operand, not below bf16's own rounding.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <future>
#include <string>
#include <vector>

#include "kernels/batch.hpp"
#include "kernels/cuda/check.hpp"
#include "kernels/cuda/cuda_device_ops.hpp"
#include "kernels/cuda/cuda_queue.hpp"
#include "kernels/cuda/device_alloc.hpp"
#include "kernels/device_ops.hpp"
#include "kernels/layer_stack.hpp"
#include "kernels/model.hpp"
#include "kernels/optimizer.hpp"
#include "kernels/train_step.hpp"
#include "tests/kernels/token_batch.hpp"

using namespace troupe;
using troupe::test::token_batch;

namespace {

constexpr device gpu0{device_type::cuda, 0};

std::vector<float> host_values(const tensor& t) {
  if (t.where().is_cpu()) return {t.data(), t.data() + t.numel()};
  tensor h = cuda::to_device(t, device{}, nullptr);
  TROUPE_CUDA_CHECK(cudaStreamSynchronize(nullptr));
  return {h.data(), h.data() + h.numel()};
}

void expect_close(const std::vector<float>& want, const std::vector<float>& got, const std::string& what,
                  float tolerance = 1e-4f) {
  ASSERT_EQ(want.size(), got.size()) << what;
  float scale = 0.0f, worst = 0.0f;
  size_t at = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    scale = std::max(scale, std::fabs(want[i]));
    const float d = std::fabs(want[i] - got[i]);
    if (!(d <= worst)) worst = d, at = i;  // NaN counts as the worst
  }
  EXPECT_LE(worst, tolerance * std::max(scale, 1e-6f))
      << what << ": element " << at << " is " << got[at] << " on the GPU, " << want[at] << " on the CPU";
}

model_spec small_gpt() {
  model_spec spec;
  spec.kind = model_kind::gpt;
  spec.vocab = 65;
  spec.context = 32;
  spec.channels = 64;
  spec.heads = 4;
  spec.blocks = 2;
  return spec;
}

void expect_same_step(const model_spec& spec, const batch& b, matmul_precision p = matmul_precision::f32) {
  const float tolerance = p == matmul_precision::f32 ? 1e-4f : 4e-3f;
  cuda::install_cuda_ops(0);
  layer_stack cpu(build_layers(spec), 0, 42);
  layer_stack gpu(build_layers(spec), 0, 42, gpu0);
  cpu.set_matmul_precision(p);
  gpu.set_matmul_precision(p);
  ASSERT_EQ(gpu.params().where(), gpu0);
  ASSERT_EQ(host_values(cpu.params()), host_values(gpu.params())) << "the init is drawn on the host for every device";
  const float scale = 1.0f / static_cast<float>(2 * loss_rows(b));
  step_stats on_cpu, on_gpu;
  for (int m = 0; m < 2; ++m) {
    on_cpu.add(compute_gradients(cpu, b, scale));
    on_gpu.add(compute_gradients(gpu, b, scale));
  }
  EXPECT_EQ(on_gpu.count, on_cpu.count);
  EXPECT_NEAR(on_gpu.loss_sum, on_cpu.loss_sum, tolerance * on_cpu.loss_sum);
  EXPECT_NEAR(static_cast<double>(on_gpu.correct), static_cast<double>(on_cpu.correct), 1.0)
      << "an arg-max may flip only on a near tie";
  expect_close(host_values(cpu.grads()), host_values(gpu.grads()), "gradients", tolerance);
}

}  // namespace

TEST(CudaLayers, a_gpt_stack_on_the_gpu_gives_the_cpu_stacks_loss_and_gradients) {
  const model_spec spec = small_gpt();
  expect_same_step(spec, token_batch(spec, 4));
}

TEST(CudaLayers, a_gpt_stack_at_bf16_matmul_precision_on_the_gpu_gives_the_cpu_stacks_loss_and_gradients) {
  const model_spec spec = small_gpt();
  expect_same_step(spec, token_batch(spec, 4), matmul_precision::bf16);
}

// The rounding bit for bit, and the three products over the rounded operands (tensor cores on the
// GPU, widened sgemm on the CPU) to fp32 reordering, for a linear's shapes.
TEST(CudaLayers, the_bf16_rounding_and_the_products_of_bf16_operands_match_the_cpu) {
  const device_ops& g = cuda::install_cuda_ops(0);
  const device_ops& c = ops_for(device{});
  const int64_t N = 64, C = 256, OC = 192;
  auto values = [](int64_t n, float step) {
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = std::sin(step * static_cast<float>(i) + 0.3f);
    return tensor({n}, v);
  };
  const tensor x = values(N * C, 0.37f), w = values(OC * C, 0.11f), dy = values(N * OC, 0.23f), bias = values(OC, 0.5f);
  auto rounded = [](const device_ops& k, const tensor& t) {
    tensor out = k.empty({t.numel()}, dtype::bf16);
    k.round_to_bf16(out.data_as<bf16>(), f32(k.to_here(t)), t.numel());
    return out;
  };
  const tensor cx = rounded(c, x), cw = rounded(c, w), cdy = rounded(c, dy);
  const tensor gx = rounded(g, x), gw = rounded(g, w), gdy = rounded(g, dy);
  tensor back = cuda::to_device(gx, device{}, nullptr);
  TROUPE_CUDA_CHECK(cudaStreamSynchronize(nullptr));
  EXPECT_EQ(std::memcmp(back.raw(), cx.raw(), static_cast<size_t>(cx.nbytes())), 0) << "rounding differs";

  const tensor gbias = g.to_here(bias);
  tensor cy = c.empty({N, OC}), gy = g.empty({N, OC}), cdx = c.empty({N, C}), gdx = g.empty({N, C});
  tensor cdw = c.zeros({OC * C}), gdw = g.zeros({OC * C}), cdb = c.zeros({OC}), gdb = g.zeros({OC});
  c.matmul_forward_bf16(f32_out(cy), cx.data_as<bf16>(), cw.data_as<bf16>(), f32(bias), N, C, OC);
  g.matmul_forward_bf16(f32_out(gy), gx.data_as<bf16>(), gw.data_as<bf16>(), f32(gbias), N, C, OC);
  c.matmul_backward_input_bf16(f32_out(cdx), cdy.data_as<bf16>(), cw.data_as<bf16>(), N, C, OC);
  g.matmul_backward_input_bf16(f32_out(gdx), gdy.data_as<bf16>(), gw.data_as<bf16>(), N, C, OC);
  c.matmul_backward_weight_bf16(f32_out(cdw), f32_out(cdb), cdy.data_as<bf16>(), cx.data_as<bf16>(), N, C, OC);
  g.matmul_backward_weight_bf16(f32_out(gdw), f32_out(gdb), gdy.data_as<bf16>(), gx.data_as<bf16>(), N, C, OC);
  expect_close(host_values(cy), host_values(gy), "matmul_forward_bf16");
  expect_close(host_values(cdx), host_values(gdx), "matmul_backward_input_bf16");
  expect_close(host_values(cdw), host_values(gdw), "matmul_backward_weight_bf16 weight");
  expect_close(host_values(cdb), host_values(gdb), "matmul_backward_weight_bf16 bias");
}

TEST(CudaLayers, an_mlp_stack_on_the_gpu_gives_the_cpu_stacks_loss_and_gradients) {
  model_spec spec;
  spec.inputs = 784;
  spec.hidden = {256, 128};
  spec.classes = 10;
  batch b;
  std::vector<float> x;
  for (int64_t i = 0; i < 32 * spec.inputs; ++i) x.push_back(static_cast<float>((i * 37) % 101) / 101.0f);
  for (int64_t i = 0; i < 32; ++i) b.targets.push_back(static_cast<int32_t>(i % 10));
  b.inputs = tensor({32, spec.inputs}, x);
  expect_same_step(spec, b);
}

// The stage's way: the work is enqueued on a queue of its own stream, and the one wait is for
// the queue's completion callback; only then is the loss on the host.
TEST(CudaLayers, a_gpt_step_enqueued_on_a_cuda_queue_is_complete_when_its_completion_arrives) {
  const model_spec spec = small_gpt();
  const batch b = token_batch(spec, 4);
  cuda::install_cuda_ops(0);
  layer_stack cpu(build_layers(spec), 0, 7);
  layer_stack gpu(build_layers(spec), 0, 7, gpu0);
  const float scale = 1.0f / static_cast<float>(loss_rows(b));
  const step_stats want = compute_gradients(cpu, b, scale);

  // The stack's initial copies went to the legacy stream; the queue's stream does not wait for it.
  TROUPE_CUDA_CHECK(cudaDeviceSynchronize());
  cuda::cuda_queue q(0);
  loss_result r;
  q.enqueue([&] {
    EXPECT_EQ(cuda::current_stream(), q.stream()) << "the queue's work launches on the queue's stream";
    stack_context ctx;
    r = cross_entropy(gpu.forward(b.inputs, ctx), b.targets, scale);
    gpu.backward(r.dlogits, ctx, false);
  });
  EXPECT_EQ(cuda::current_stream(), nullptr) << "the stream guard ends with the work";
  std::promise<void> done;
  q.when_done([&] { done.set_value(); });
  ASSERT_EQ(done.get_future().wait_for(std::chrono::seconds(60)), std::future_status::ready);
  r.settle();
  EXPECT_EQ(r.count, want.count);
  EXPECT_NEAR(r.loss_sum, want.loss_sum, 1e-4 * want.loss_sum);
  expect_close(host_values(cpu.grads()), host_values(gpu.grads()), "gradients");
}

// The vocabulary-parallel halves of the embedding, which only tensor parallelism uses.
TEST(CudaLayers, the_sharded_embedding_and_position_ops_match_the_cpu) {
  const device_ops& g = cuda::install_cuda_ops(0);
  const device_ops& c = ops_for(device{});
  const int64_t B = 3, T = 5, C = 8, V = 20, begin = 6, count = 7;
  std::vector<float> tok, table, dy, wpe;
  for (int64_t i = 0; i < B * T; ++i) tok.push_back(static_cast<float>((i * 3) % V));
  for (int64_t i = 0; i < count * C; ++i) table.push_back(static_cast<float>(i % 13) * 0.25f - 1.0f);
  for (int64_t i = 0; i < B * T * C; ++i) dy.push_back(static_cast<float>(i % 7) * 0.5f - 1.5f);
  for (int64_t i = 0; i < T * C; ++i) wpe.push_back(static_cast<float>(i % 11) * 0.125f - 0.5f);
  const tensor h_tok({B, T}, tok), h_table({count, C}, table), h_dy({B, T, C}, dy), h_wpe({T, C}, wpe);
  const tensor d_tok = g.to_here(h_tok), d_table = g.to_here(h_table), d_dy = g.to_here(h_dy), d_wpe = g.to_here(h_wpe);

  tensor c_out = c.empty({B, T, C}), g_out = g.empty({B, T, C});
  c.embedding_shard_forward(f32_out(c_out), f32(h_tok), f32(h_table), B, T, C, V, begin, count);
  g.embedding_shard_forward(f32_out(g_out), f32(d_tok), f32(d_table), B, T, C, V, begin, count);
  c.position_forward(f32_out(c_out), f32(h_wpe), B, T, C);
  g.position_forward(f32_out(g_out), f32(d_wpe), B, T, C);
  expect_close(host_values(c_out), host_values(g_out), "embedding_shard_forward + position_forward");

  tensor c_dw = c.zeros({count, C}), g_dw = g.zeros({count, C}), c_dp = c.zeros({T, C}), g_dp = g.zeros({T, C});
  c.embedding_shard_backward(f32_out(c_dw), f32(h_dy), f32(h_tok), B, T, C, begin, count);
  g.embedding_shard_backward(f32_out(g_dw), f32(d_dy), f32(d_tok), B, T, C, begin, count);
  c.position_backward(f32_out(c_dp), f32(h_dy), B, T, C);
  g.position_backward(f32_out(g_dp), f32(d_dy), B, T, C);
  expect_close(host_values(c_dw), host_values(g_dw), "embedding_shard_backward");
  expect_close(host_values(c_dp), host_values(g_dp), "position_backward");
}

// The optimizer shard's update on a GPU (device_ops::optimizer_step) against the CPU's.
TEST(CudaLayers, the_devices_optimizer_step_matches_the_cpus_for_adamw_and_sgd) {
  const device_ops& g = cuda::install_cuda_ops(0);
  const int64_t n = 1000;
  std::vector<float> p0(n), grads(n);
  for (int64_t i = 0; i < n; ++i) p0[i] = std::sin(0.1f * static_cast<float>(i)), grads[i] = std::cos(0.07f * static_cast<float>(i));
  for (const char* kind : {"adamw", "sgd"}) {
    optimizer_config cfg;
    cfg.kind = *parse_optimizer_kind(kind);
    cfg.lr = 0.01f;
    const int k = make_optimizer(cfg, n)->state_floats();
    tensor hp({n}, p0), hs({2 * n}), dp = g.to_here(tensor({n}, p0)), ds = g.zeros({2 * n}), dg = g.to_here(tensor({n}, grads));
    float* h_arrays[2] = {hs.data(), hs.data() + n};
    float* d_arrays[2] = {f32_out(ds), f32_out(ds) + n};
    for (int64_t step = 1; step <= 3; ++step) {
      cpu_optimizer_step(hp.data(), hp.data(), grads.data(), h_arrays, n, cfg, step);
      g.optimizer_step(f32_out(dp), f32(dp), f32(dg), d_arrays, n, cfg, step);
    }
    expect_close(host_values(hp), host_values(dp), std::string(kind) + " parameters");
    if (k > 0) expect_close(host_values(hs), host_values(ds), std::string(kind) + " state");
  }
}

#define TROUPE_GPU_TEST_BINARY "kernels_cuda_layers_test"
#include "tests/gpu_test_main.hpp"
