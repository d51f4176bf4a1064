// The optimizers' updates (kernels/optimizer.cpp) as one fused pass over a flat fp32 shard: each
// element's parameter, gradient and state are read once and written once, with the optional
// bf16 copy of the new parameter written in the same pass. The per-step constants are computed
// on the host exactly as the CPU optimizer computes them.
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.hpp"

namespace troupe::cuda {

namespace {

struct adamw_constants {
  float b1, b2, eps, step_size, bc2_sqrt, decay;
};

__global__ void adamw_kernel(float* out, bf16* out_bf16, float* m, float* v, const float* p, const float* g, int64_t n,
                             adamw_constants k) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const float decayed = p[i] * k.decay;
    const float mi = k.b1 * m[i] + (1.0f - k.b1) * g[i];
    const float vi = k.b2 * v[i] + (1.0f - k.b2) * g[i] * g[i];
    const float o = decayed - k.step_size * mi / (sqrtf(vi) / k.bc2_sqrt + k.eps);
    m[i] = mi;
    v[i] = vi;
    out[i] = o;
    if (out_bf16) out_bf16[i] = __float2bfloat16(o);
  }
}

__global__ void sgd_kernel(float* out, bf16* out_bf16, float* buf, const float* p, const float* g, int64_t n, float lr,
                           float weight_decay, float momentum, bool first) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    float d = g[i] + weight_decay * p[i];
    if (buf) d = buf[i] = first ? d : momentum * buf[i] + d;
    const float o = p[i] - lr * d;
    out[i] = o;
    if (out_bf16) out_bf16[i] = __float2bfloat16(o);
  }
}

void check_step(int64_t step) {
  if (step < 1) throw error("optimizer step " + std::to_string(step) + ": steps count from 1");
}

}  // namespace

void adamw_step(float* out, bf16* out_bf16, float* m, float* v, const float* params, const float* grads, int64_t n,
                const optimizer_config& c, int64_t step, cudaStream_t s) {
  check_step(step);
  if (n <= 0) return;
  const float bc1 = 1.0f - std::pow(c.beta1, static_cast<float>(step));
  const float bc2 = 1.0f - std::pow(c.beta2, static_cast<float>(step));
  const adamw_constants k{c.beta1, c.beta2, c.eps, c.lr / bc1, std::sqrt(bc2), 1.0f - c.lr * c.weight_decay};
  adamw_kernel<<<detail::blocks_for(n), detail::threads, 0, s>>>(out, out_bf16, m, v, params, grads, n, k);
  TROUPE_CUDA_CHECK(cudaGetLastError());
}

void sgd_step(float* out, bf16* out_bf16, float* momentum, const float* params, const float* grads, int64_t n,
              const optimizer_config& c, int64_t step, cudaStream_t s) {
  check_step(step);
  if ((c.momentum != 0.0f) != (momentum != nullptr))
    throw error("sgd_step: a momentum buffer is needed exactly when momentum is not 0");
  if (n <= 0) return;
  sgd_kernel<<<detail::blocks_for(n), detail::threads, 0, s>>>(out, out_bf16, momentum, params, grads, n, c.lr,
                                                                 c.weight_decay, c.momentum, step == 1);
  TROUPE_CUDA_CHECK(cudaGetLastError());
}

}  // namespace troupe::cuda
