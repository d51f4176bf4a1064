// Device helpers shared by the .cu files: float <-> storage type, launch sizes, block reductions.
#pragma once

#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/check.hpp"

namespace troupe::cuda::detail {

__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
template <class T>
__device__ __forceinline__ T from_f(float x);
template <>
__device__ __forceinline__ float from_f<float>(float x) { return x; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float x) { return __float2bfloat16(x); }

constexpr int threads = 256;

// Blocks for a grid-stride loop over n elements: enough to fill the GPU, capped so the count fits
// a grid dimension whatever n is.
inline unsigned blocks_for(int64_t n) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>((n + threads - 1) / threads, 65536)));
}

struct sum_op {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct max_op {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct min_op {
  __device__ float operator()(float a, float b) const { return fminf(a, b); }
};

template <class Op>
__device__ __forceinline__ float warp_reduce(float v, Op op) {
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// op over the block, returned to every thread; blockDim.x a multiple of 32. The leading barrier
// lets a kernel call it several times over the one shared array.
template <class Op>
__device__ __forceinline__ float block_reduce(float v, float identity, Op op) {
  __shared__ float part[32];
  const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_reduce(v, op);
  __syncthreads();
  if (lane == 0) part[warp] = v;
  __syncthreads();
  return warp_reduce(lane < warps ? part[lane] : identity, op);
}
__device__ __forceinline__ float block_sum(float v) { return block_reduce(v, 0.0f, sum_op{}); }
__device__ __forceinline__ float block_max(float v) { return block_reduce(v, -INFINITY, max_op{}); }

// dst[c] += sum over rows n of f(n, c) for c in [0, C), rows in a fixed order per column (the
// 8 strided partial sums of a column, then those 8 in order), so the result has the same bits
// on every run. Launch with dim3(32, 8) threads and (C + 31) / 32 blocks. The leading barrier
// lets a kernel call it twice: the second call's writes to part[] wait for the first's reads.
template <class F>
__device__ __forceinline__ void column_sum_into(float* dst, int64_t N, int64_t C, F f) {
  __shared__ float part[8][33];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  __syncthreads();
  float acc = 0.0f;
  if (c < C)
    for (int64_t n = threadIdx.y; n < N; n += 8) acc += f(n, c);
  part[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float s = 0.0f;
    for (int y = 0; y < 8; ++y) s += part[y][threadIdx.x];
    dst[c] += s;
  }
}

}  // namespace troupe::cuda::detail
