// gpt_step: times troupe's GPT training step on one GPU — forward, loss, backward through the
// layers' CUDA ops (kernels/cuda/cuda_device_ops.hpp) and AdamW fused over the flat fp32
// parameters, all on one stream, as a stage on a GPU runs them — and prints one JSON line: step
// time, tokens/s, model TFLOP/s and MFU against the GPU's dense bf16 peak (the yardstick PyTorch's
// peer, bench/gpu/gpt_step_torch.py, is measured against too). --matmul-precision bf16 puts every
// linear layer's products on bf16 operands (kernels/matmul_precision.hpp; fp32 elsewhere), the
// part of PyTorch's bf16 autocast that troupe has. Run by bench/gpu/run.sh; options: --batch
// --context --channels --heads --blocks --vocab --warmup --steps --peak-tflops --matmul-precision.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/batch.hpp"
#include "kernels/cuda/check.hpp"
#include "kernels/cuda/cuda_device_ops.hpp"
#include "kernels/cuda/ops.hpp"
#include "kernels/device_ops.hpp"
#include "kernels/layer_stack.hpp"
#include "kernels/model.hpp"

using namespace troupe;

namespace {

struct options {
  int64_t batch = 8, context = 1024, channels = 768, heads = 12, blocks = 12, vocab = 50304;
  int warmup = 3, steps = 10;
  double peak_tflops = 989.0;  // H200 (SXM) dense bf16
  matmul_precision matmul = matmul_precision::f32;
};

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--matmul-precision") {
      o.matmul = parse_matmul_precision(argv[i + 1]);
      continue;
    }
    char* end = nullptr;
    const double v = std::strtod(argv[i + 1], &end);
    if (!end || *end != '\0' || !(v > 0)) throw std::invalid_argument(k + " " + argv[i + 1] + ": expected a positive number");
    if (k == "--batch") o.batch = static_cast<int64_t>(v);
    else if (k == "--context") o.context = static_cast<int64_t>(v);
    else if (k == "--channels") o.channels = static_cast<int64_t>(v);
    else if (k == "--heads") o.heads = static_cast<int64_t>(v);
    else if (k == "--blocks") o.blocks = static_cast<int64_t>(v);
    else if (k == "--vocab") o.vocab = static_cast<int64_t>(v);
    else if (k == "--warmup") o.warmup = static_cast<int>(v);
    else if (k == "--steps") o.steps = static_cast<int>(v);
    else if (k == "--peak-tflops") o.peak_tflops = v;
    else throw std::invalid_argument("unknown option " + k);
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) try {
  const options o = parse(argc, argv);
  model_spec spec;
  spec.kind = model_kind::gpt;
  spec.vocab = o.vocab;
  spec.context = o.context;
  spec.channels = o.channels;
  spec.heads = o.heads;
  spec.blocks = o.blocks;
  const device gpu{device_type::cuda, 0};
  const device_ops& ops = cuda::install_cuda_ops(0);
  cudaStream_t stream = nullptr;
  TROUPE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cuda::stream_guard on(stream);

  layer_stack stack(build_layers(spec), 0, 42, gpu);
  stack.set_matmul_precision(o.matmul);
  const int64_t n = stack.num_params();
  tensor m = ops.zeros({n}), v = ops.zeros({n});
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int64_t> token(0, o.vocab - 1);
  batch b;
  std::vector<float> tokens;
  for (int64_t i = 0; i < o.batch * o.context; ++i) {
    tokens.push_back(static_cast<float>(token(rng)));
    b.targets.push_back(static_cast<int32_t>(token(rng)));
  }
  b.inputs = ops.to_here(tensor({o.batch, o.context}, tokens));
  optimizer_config adamw;
  adamw.lr = 3e-4f;
  const float scale = 1.0f / static_cast<float>(o.batch * o.context);

  std::vector<double> losses;
  auto step = [&](int64_t k) {
    stack.zero_grads();
    stack_context ctx;
    loss_result r = cross_entropy(stack.forward(b.inputs, ctx), b.targets, scale);
    stack.backward(r.dlogits, ctx, false);
    tensor& p = stack.params();
    cuda::adamw_step(f32_out(p), nullptr, f32_out(m), f32_out(v), f32(p), f32(stack.grads()), n, adamw, k, stream);
    return r;
  };
  for (int k = 1; k <= o.warmup; ++k) step(k);
  TROUPE_CUDA_CHECK(cudaStreamSynchronize(stream));
  cudaEvent_t start, stop;
  TROUPE_CUDA_CHECK(cudaEventCreate(&start));
  TROUPE_CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<loss_result> pending;
  TROUPE_CUDA_CHECK(cudaEventRecord(start, stream));
  for (int k = 1; k <= o.steps; ++k) pending.push_back(step(o.warmup + k));
  TROUPE_CUDA_CHECK(cudaEventRecord(stop, stream));
  TROUPE_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  TROUPE_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  for (auto& r : pending) {
    r.settle();
    losses.push_back(r.loss_sum / static_cast<double>(r.count));
  }
  const double step_ms = ms / o.steps;
  const double tokens_per_step = static_cast<double>(o.batch * o.context);
  // PaLM's count (Chowdhery et al. 2022, appendix B): 6 N per token for the weights, plus
  // 12 L T C per token for the attention scores and their use, forward and backward.
  const double flops = tokens_per_step * (6.0 * static_cast<double>(n) +
                                          12.0 * static_cast<double>(o.blocks * o.context * o.channels));
  const double tflops = flops / (step_ms * 1e-3) / 1e12;
  std::printf(
      "{\"peer\":\"troupe\",\"precision\":\"%s\",\"params\":%lld,\"batch\":%lld,\"context\":%lld,\"step_ms\":%.3f,"
      "\"tokens_per_s\":%.0f,\"tflops\":%.2f,\"mfu\":%.4f,\"peak_tflops\":%.0f,\"first_loss\":%.4f,\"last_loss\":%.4f}\n",
      o.matmul == matmul_precision::bf16 ? "bf16 matmuls" : "fp32", static_cast<long long>(n), static_cast<long long>(o.batch), static_cast<long long>(o.context), step_ms,
      tokens_per_step / (step_ms * 1e-3), tflops, tflops / o.peak_tflops, o.peak_tflops, losses.front(), losses.back());
  if (!std::isfinite(losses.back()) || !(losses.back() < losses.front())) {
    std::fprintf(stderr, "gpt_step: the loss did not fall (%.4f -> %.4f)\n", losses.front(), losses.back());
    return 1;
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "gpt_step: %s\n", e.what());
  return 2;
}
