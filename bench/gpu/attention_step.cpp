// attention_step: times troupe's causal attention on one GPU (kernels/flash_attention.hpp's
// kernels through kernels/cuda/ops.hpp: forward, then backward from the log-sum-exps), fp32, at
// GPT-2 small's shape by default (batch 8, T 1024, 12 heads of 64), and prints one JSON line:
// forward and backward ms and TFLOP/s. Its peer is bench/gpu/attention_torch.py (PyTorch's
// scaled_dot_product_attention on the same shape); bench/gpu/run.sh runs both and prints the
// ratio. The FLOPs are the causal half of the two products forward (4 B NH T^2 hs / 2) and of
// the four backward (8 B NH T^2 hs / 2), as FlashAttention's papers count them.
// Options: --batch --context --channels --heads --warmup --steps.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cuda/check.hpp"
#include "kernels/cuda/ops.hpp"

namespace {

struct options {
  int64_t batch = 8, context = 1024, channels = 768, heads = 12;
  int warmup = 3, steps = 20;
};

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    char* end = nullptr;
    const long v = std::strtol(argv[i + 1], &end, 10);
    if (!end || *end != '\0' || v <= 0) throw std::invalid_argument(k + " " + argv[i + 1] + ": expected a positive integer");
    if (k == "--batch") o.batch = v;
    else if (k == "--context") o.context = v;
    else if (k == "--channels") o.channels = v;
    else if (k == "--heads") o.heads = v;
    else if (k == "--warmup") o.warmup = static_cast<int>(v);
    else if (k == "--steps") o.steps = static_cast<int>(v);
    else throw std::invalid_argument("unknown option " + k);
  }
  if (o.channels % o.heads != 0) throw std::invalid_argument("--channels must be a multiple of --heads");
  return o;
}

float* device_buffer(size_t n, const std::vector<float>* values = nullptr) {
  void* p = nullptr;
  TROUPE_CUDA_CHECK(cudaMalloc(&p, n * sizeof(float)));
  if (values) TROUPE_CUDA_CHECK(cudaMemcpy(p, values->data(), n * sizeof(float), cudaMemcpyHostToDevice));
  return static_cast<float*>(p);
}

}  // namespace

int main(int argc, char** argv) try {
  const options o = parse(argc, argv);
  const int64_t B = o.batch, T = o.context, C = o.channels, NH = o.heads;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> qkv(static_cast<size_t>(B * T * 3 * C)), dout(static_cast<size_t>(B * T * C));
  for (auto& x : qkv) x = u(rng);
  for (auto& x : dout) x = u(rng);
  float* d_qkv = device_buffer(qkv.size(), &qkv);
  float* d_dout = device_buffer(dout.size(), &dout);
  float* d_out = device_buffer(dout.size());
  float* d_dqkv = device_buffer(qkv.size());
  float* d_lse = device_buffer(static_cast<size_t>(B * NH * T));
  float* d_D = device_buffer(static_cast<size_t>(B * NH * T));
  cudaStream_t s = nullptr;
  TROUPE_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t e0, e1, e2;
  TROUPE_CUDA_CHECK(cudaEventCreate(&e0));
  TROUPE_CUDA_CHECK(cudaEventCreate(&e1));
  TROUPE_CUDA_CHECK(cudaEventCreate(&e2));
  double fwd_ms = 0, bwd_ms = 0;
  for (int k = 0; k < o.warmup + o.steps; ++k) {
    TROUPE_CUDA_CHECK(cudaEventRecord(e0, s));
    troupe::cuda::attention_forward(d_out, d_lse, d_qkv, B, T, C, NH, s);
    TROUPE_CUDA_CHECK(cudaEventRecord(e1, s));
    troupe::cuda::attention_backward(d_dqkv, d_D, d_dout, d_qkv, d_lse, B, T, C, NH, s);
    TROUPE_CUDA_CHECK(cudaEventRecord(e2, s));
    TROUPE_CUDA_CHECK(cudaEventSynchronize(e2));
    float f = 0, b = 0;
    TROUPE_CUDA_CHECK(cudaEventElapsedTime(&f, e0, e1));
    TROUPE_CUDA_CHECK(cudaEventElapsedTime(&b, e1, e2));
    if (k >= o.warmup) fwd_ms += f / o.steps, bwd_ms += b / o.steps;
  }
  const double units = static_cast<double>(B) * NH * T * T * (C / NH);
  const double fwd_flops = 2.0 * units, bwd_flops = 4.0 * units;
  std::printf("{\"peer\":\"troupe\",\"precision\":\"fp32\",\"batch\":%lld,\"context\":%lld,\"heads\":%lld,"
              "\"head_size\":%lld,\"fwd_ms\":%.3f,\"bwd_ms\":%.3f,\"fwd_tflops\":%.2f,\"bwd_tflops\":%.2f}\n",
              static_cast<long long>(B), static_cast<long long>(T), static_cast<long long>(NH),
              static_cast<long long>(C / NH), fwd_ms, bwd_ms, fwd_flops / (fwd_ms * 1e-3) / 1e12,
              bwd_flops / (bwd_ms * 1e-3) / 1e12);
  for (float* p : {d_qkv, d_dout, d_out, d_dqkv, d_lse, d_D}) cudaFree(p);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "attention_step: %s\n", e.what());
  return 1;
}
