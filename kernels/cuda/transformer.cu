// Row-wise transformer ops (layernorm, softmax cross-entropy, attention), one thread block per
// row so a row's reductions stay in one block; the embedding. Sums over rows (parameter
// gradients) go column-wise in a fixed order, with no atomics, so every run gives the same bits.
// The attention is the plain O(T^2) formulation with the (T, T) probabilities materialized, as
// the CPU reference keeps them for backward: correct first; a fused (flash-style or cuDNN)
// kernel is later work.
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.hpp"

namespace troupe::cuda {

using detail::block_max;
using detail::block_sum;
using detail::blocks_for;
using detail::from_f;
using detail::threads;
using detail::to_f;

namespace {

void check_launch() { TROUPE_CUDA_CHECK(cudaGetLastError()); }

// ---- layernorm ----
template <class T>
__global__ void layernorm_forward_kernel(T* out, float* mean, float* rstd, const T* inp, const float* weight,
                                         const float* bias, int64_t C) {
  const int64_t n = blockIdx.x;
  const T* x = inp + n * C;
  float s = 0.0f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) s += to_f(x[c]);
  const float m = block_sum(s) / static_cast<float>(C);
  float v = 0.0f;  // two passes, as the CPU: E[x^2] - m^2 cancels badly
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    const float d = to_f(x[c]) - m;
    v += d * d;
  }
  const float r = 1.0f / sqrtf(block_sum(v) / static_cast<float>(C) + 1e-5f);
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
    out[n * C + c] = from_f<T>((to_f(x[c]) - m) * r * weight[c] + bias[c]);
  if (threadIdx.x == 0) {
    mean[n] = m;
    rstd[n] = r;
  }
}

template <class T>
__global__ void layernorm_backward_input_kernel(T* dinp, const T* dout, const T* inp, const float* weight,
                                                const float* mean, const float* rstd, int64_t C) {
  const int64_t n = blockIdx.x;
  const T* dy = dout + n * C;
  const T* x = inp + n * C;
  const float m = mean[n], s = rstd[n];
  float a = 0.0f, b = 0.0f;  // dx = (dnorm - mean(dnorm) - norm * mean(dnorm * norm)) * rstd
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    const float dnorm = weight[c] * to_f(dy[c]);
    a += dnorm;
    b += dnorm * (to_f(x[c]) - m) * s;
  }
  a = block_sum(a) / static_cast<float>(C);
  b = block_sum(b) / static_cast<float>(C);
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
    dinp[n * C + c] = from_f<T>((weight[c] * to_f(dy[c]) - a - (to_f(x[c]) - m) * s * b) * s);
}

template <class T>
__global__ void layernorm_backward_params_kernel(float* dweight, float* dbias, const T* dout, const T* inp,
                                                 const float* mean, const float* rstd, int64_t N, int64_t C) {
  detail::column_sum_into(dbias, N, C, [=] __device__(int64_t n, int64_t c) { return to_f(dout[n * C + c]); });
  detail::column_sum_into(dweight, N, C, [=] __device__(int64_t n, int64_t c) {
    return (to_f(inp[n * C + c]) - mean[n]) * rstd[n] * to_f(dout[n * C + c]);
  });
}

template <class T>
void layernorm_forward_impl(T* out, float* mean, float* rstd, const T* inp, const float* weight, const float* bias,
                            int64_t N, int64_t C, cudaStream_t s) {
  if (N <= 0) return;
  layernorm_forward_kernel<<<static_cast<unsigned>(N), threads, 0, s>>>(out, mean, rstd, inp, weight, bias, C);
  check_launch();
}

template <class T>
void layernorm_backward_impl(T* dinp, float* dweight, float* dbias, const T* dout, const T* inp, const float* weight,
                             const float* mean, const float* rstd, int64_t N, int64_t C, cudaStream_t s) {
  if (N <= 0) return;
  if (dweight && dbias) {
    layernorm_backward_params_kernel<<<static_cast<unsigned>((C + 31) / 32), dim3(32, 8), 0, s>>>(
        dweight, dbias, dout, inp, mean, rstd, N, C);
    check_launch();
  }
  if (dinp) {
    layernorm_backward_input_kernel<<<static_cast<unsigned>(N), threads, 0, s>>>(dinp, dout, inp, weight, mean, rstd, C);
    check_launch();
  }
}

// ---- embedding ----
__global__ void embedding_forward_kernel(float* out, const float* tokens, const float* wte, const float* wpe, int64_t BT,
                                         int64_t T, int64_t C, int64_t V) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < BT * C; e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = e / C, c = e % C;
    const float tok = tokens[i];
    const bool valid = tok >= 0.0f && tok < static_cast<float>(V) && tok == floorf(tok);
    out[e] = valid ? wte[static_cast<int64_t>(tok) * C + c] + wpe[(i % T) * C + c] : NAN;
  }
}

// One thread per channel adds every token's value in token order: two tokens may share a row,
// and this order needs no atomics and matches the CPU's. Parallel over C only, so it is slow for
// long batches; a sort-by-token version is later work.
__global__ void embedding_backward_wte_kernel(float* dwte, const float* dout, const float* tokens, int64_t BT,
                                              int64_t C) {
  const int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (c >= C) return;
  for (int64_t i = 0; i < BT; ++i) dwte[static_cast<int64_t>(tokens[i]) * C + c] += dout[i * C + c];
}

__global__ void embedding_backward_wpe_kernel(float* dwpe, const float* dout, int64_t B, int64_t T, int64_t C) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < T * C; e += int64_t{gridDim.x} * blockDim.x) {
    float s = 0.0f;
    for (int64_t b = 0; b < B; ++b) s += dout[b * T * C + e];
    dwpe[e] += s;
  }
}

// The vocabulary-parallel halves: rows [begin, begin + count) of wte live here.
__global__ void embedding_shard_forward_kernel(float* out, const float* tokens, const float* wte_shard, int64_t BT,
                                               int64_t C, int64_t V, int64_t begin, int64_t count) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < BT * C; e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = e / C, c = e % C;
    const float tok = tokens[i];
    if (!(tok >= 0.0f && tok < static_cast<float>(V) && tok == floorf(tok))) {
      out[e] = NAN;
      continue;
    }
    const int64_t row = static_cast<int64_t>(tok) - begin;
    out[e] = row >= 0 && row < count ? wte_shard[row * C + c] : 0.0f;
  }
}

// As embedding_backward_wte_kernel, over this shard's rows only.
__global__ void embedding_shard_backward_kernel(float* dwte_shard, const float* dout, const float* tokens, int64_t BT,
                                                int64_t C, int64_t begin, int64_t count) {
  const int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (c >= C) return;
  for (int64_t i = 0; i < BT; ++i) {
    const int64_t row = static_cast<int64_t>(tokens[i]) - begin;
    if (row >= 0 && row < count) dwte_shard[row * C + c] += dout[i * C + c];
  }
}

__global__ void position_forward_kernel(float* out, const float* wpe, int64_t BT, int64_t T, int64_t C) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < BT * C; e += int64_t{gridDim.x} * blockDim.x)
    out[e] += wpe[((e / C) % T) * C + e % C];
}

// ---- softmax cross-entropy ----
__global__ void softmax_cross_entropy_forward_kernel(float* probs, float* losses, const float* logits,
                                                     const int32_t* targets, int64_t V) {
  const int64_t n = blockIdx.x;
  const float* row = logits + n * V;
  float* p = probs + n * V;
  float mx = -INFINITY;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) mx = fmaxf(mx, row[v]);
  mx = block_max(mx);
  float s = 0.0f;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) s += expf(row[v] - mx);
  s = block_sum(s);
  const float inv = 1.0f / s;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) p[v] = expf(row[v] - mx) * inv;
  if (threadIdx.x == 0) {
    const int32_t t = targets[n];
    losses[n] = t >= 0 && t < V ? static_cast<float>(static_cast<double>(mx) + log(static_cast<double>(s)) - row[t]) : NAN;
  }
}

// Per row: (its loss, 1 if the arg-max of its probabilities is the target, else 0). The arg-max
// is the first of equal maxima, as the CPU's scan finds it.
__global__ void cross_entropy_row_stats_kernel(float* stats, const float* losses, const float* probs,
                                               const int32_t* targets, int64_t V) {
  const int64_t n = blockIdx.x;
  const float* p = probs + n * V;
  float best = -INFINITY;
  int64_t at = V;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x)
    if (p[v] > best) best = p[v], at = v;
  const float top = block_max(best);
  // The first index holding the maximum: the smallest candidate over the block.
  const float first = detail::block_reduce(best == top ? static_cast<float>(at) : static_cast<float>(V),
                                           static_cast<float>(V), detail::min_op{});
  if (threadIdx.x == 0) {
    stats[2 * n] = losses[n];
    stats[2 * n + 1] = static_cast<int64_t>(first) == targets[n] ? 1.0f : 0.0f;
  }
}

__global__ void softmax_cross_entropy_backward_kernel(float* dlogits, const float* probs, const int32_t* targets,
                                                      int64_t N, int64_t V, float scale) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < N * V; e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t n = e / V;
    dlogits[e] = probs[e] * scale - (e % V == targets[n] ? scale : 0.0f);
  }
}

// ---- vocab-parallel cross-entropy: a row per block, over this rank's V columns ----
// The rank whose peak is row n's maximum over the group, the lowest on a tie (ops.hpp's).
__device__ int vocab_owner(const float* all_peaks, int tp, int64_t N, int64_t n) {
  int owner = 0;
  for (int q = 1; q < tp; ++q)
    if (all_peaks[2 * N * q + n] > all_peaks[2 * N * owner + n]) owner = q;
  return owner;
}

__global__ void vocab_peaks_kernel(float* peaks, const float* logits, int64_t N, int64_t V, int64_t begin) {
  const int64_t n = blockIdx.x;
  const float* l = logits + n * V;
  float best = -INFINITY;
  int64_t at = V;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x)
    if (l[v] > best || at == V) best = l[v], at = v;
  const float top = block_max(best);
  const float first = detail::block_reduce(at < V && best == top ? static_cast<float>(at) : static_cast<float>(V),
                                           static_cast<float>(V), detail::min_op{});
  if (threadIdx.x == 0) {
    peaks[n] = V ? top : -INFINITY;
    peaks[N + n] = static_cast<float>(begin + (V ? static_cast<int64_t>(first) : 0));
  }
}

__global__ void vocab_exp_sums_kernel(float* probs, float* sums, const float* all_peaks, int tp,
                                      const int32_t* targets, const float* logits, int64_t N, int64_t V,
                                      int64_t begin) {
  const int64_t n = blockIdx.x;
  const float m = all_peaks[2 * N * vocab_owner(all_peaks, tp, N, n) + n];
  const float* l = logits + n * V;
  float* p = probs + n * V;
  float s = 0.0f;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) {
    p[v] = expf(l[v] - m);
    s += p[v];
  }
  s = block_sum(s);
  if (threadIdx.x == 0) {
    sums[n] = s;
    const int64_t t = targets[n] - begin;
    sums[N + n] = t >= 0 && t < V ? l[t] : 0.0f;
  }
}

__global__ void vocab_finish_kernel(float* row_stats, float* dlogits, float* probs, const float* sums,
                                    const float* all_peaks, int tp, const int32_t* targets, int64_t N, int64_t V,
                                    int64_t begin, float scale) {
  const int64_t n = blockIdx.x;
  float* p = probs + n * V;
  const float inv = 1.0f / sums[n];
  const int64_t t = targets[n] - begin;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) {
    p[v] *= inv;
    if (dlogits) dlogits[n * V + v] = p[v] * scale - (v == t ? scale : 0.0f);
  }
  if (row_stats && threadIdx.x == 0) {
    const int owner = vocab_owner(all_peaks, tp, N, n);
    const double m = all_peaks[2 * N * owner + n];
    row_stats[2 * n] = static_cast<float>(m + log(static_cast<double>(sums[n])) - sums[N + n]);
    row_stats[2 * n + 1] = static_cast<int32_t>(all_peaks[2 * N * owner + N + n]) == targets[n] ? 1.0f : 0.0f;
  }
}

// ---- attention ----
// Row t of head (b, h) per block: the scores q_t . k_j for j <= t into shared memory, their
// softmax (written to att, zeros above the diagonal), then out_t = sum_j p_j v_j with the threads
// over the head's channels. Shared memory: T + hs floats.
__global__ void attention_forward_kernel(float* out, float* att, const float* qkv, int64_t T, int64_t C, int64_t NH) {
  extern __shared__ float smem[];
  const int64_t hs = C / NH, C3 = 3 * C;
  const int64_t t = blockIdx.x % T, bh = blockIdx.x / T, b = bh / NH, h = bh % NH;
  float* row = smem;
  float* q = smem + T;
  const float* base = qkv + b * T * C3 + h * hs;
  for (int64_t j = threadIdx.x; j < hs; j += blockDim.x) q[j] = base[t * C3 + j];
  __syncthreads();
  const float scale = 1.0f / sqrtf(static_cast<float>(hs));
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j <= t; j += blockDim.x) {
    const float* k = base + j * C3 + C;
    float d = 0.0f;
    for (int64_t i = 0; i < hs; ++i) d += q[i] * k[i];
    row[j] = d * scale;
    mx = fmaxf(mx, row[j]);
  }
  mx = block_max(mx);
  float s = 0.0f;
  for (int64_t j = threadIdx.x; j <= t; j += blockDim.x) {
    row[j] = expf(row[j] - mx);
    s += row[j];
  }
  const float inv = 1.0f / block_sum(s);
  float* a = att + (bh * T + t) * T;
  for (int64_t j = threadIdx.x; j < T; j += blockDim.x) {
    const float p = j <= t ? row[j] * inv : 0.0f;
    if (j <= t) row[j] = p;
    a[j] = p;
  }
  __syncthreads();
  for (int64_t i = threadIdx.x; i < hs; i += blockDim.x) {
    float o = 0.0f;
    for (int64_t j = 0; j <= t; ++j) o += row[j] * base[j * C3 + 2 * C + i];
    out[(b * T + t) * C + h * hs + i] = o;
  }
}

// Row t of head (b, h) per block: dP_j = dy_t . v_j, dS_j = P_j (dP_j - sum_k P_k dP_k) scale
// (to scratch, zeros above the diagonal), then dq_t = sum_j dS_j k_j.
__global__ void attention_backward_query_kernel(float* dqkv, float* scratch, const float* dout, const float* qkv,
                                                const float* att, int64_t T, int64_t C, int64_t NH) {
  extern __shared__ float smem[];
  const int64_t hs = C / NH, C3 = 3 * C;
  const int64_t t = blockIdx.x % T, bh = blockIdx.x / T, b = bh / NH, h = bh % NH;
  float* row = smem;
  float* dy = smem + T;
  const float* base = qkv + b * T * C3 + h * hs;
  for (int64_t i = threadIdx.x; i < hs; i += blockDim.x) dy[i] = dout[(b * T + t) * C + h * hs + i];
  __syncthreads();
  const float* p = att + (bh * T + t) * T;
  float s = 0.0f;
  for (int64_t j = threadIdx.x; j <= t; j += blockDim.x) {
    const float* v = base + j * C3 + 2 * C;
    float d = 0.0f;
    for (int64_t i = 0; i < hs; ++i) d += dy[i] * v[i];
    row[j] = d;
    s += p[j] * d;
  }
  s = block_sum(s);
  const float scale = 1.0f / sqrtf(static_cast<float>(hs));
  float* ds = scratch + (bh * T + t) * T;
  for (int64_t j = threadIdx.x; j < T; j += blockDim.x) {
    const float g = j <= t ? p[j] * (row[j] - s) * scale : 0.0f;
    if (j <= t) row[j] = g;
    ds[j] = g;
  }
  __syncthreads();
  for (int64_t i = threadIdx.x; i < hs; i += blockDim.x) {
    float g = 0.0f;
    for (int64_t j = 0; j <= t; ++j) g += row[j] * base[j * C3 + C + i];
    dqkv[(b * T + t) * C3 + h * hs + i] = g;
  }
}

// Column j of head (b, h) per block: dk_j = sum_{t >= j} dS_tj q_t and dv_j = sum_{t >= j} P_tj dy_t,
// threads over the head's channels; each sum in t order, no atomics.
__global__ void attention_backward_key_value_kernel(float* dqkv, const float* scratch, const float* dout,
                                                    const float* qkv, const float* att, int64_t T, int64_t C,
                                                    int64_t NH) {
  const int64_t hs = C / NH, C3 = 3 * C;
  const int64_t j = blockIdx.x % T, bh = blockIdx.x / T, b = bh / NH, h = bh % NH;
  const float* base = qkv + b * T * C3 + h * hs;
  const float* dybase = dout + b * T * C + h * hs;
  for (int64_t i = threadIdx.x; i < hs; i += blockDim.x) {
    float dk = 0.0f, dv = 0.0f;
    for (int64_t t = j; t < T; ++t) {
      dk += scratch[(bh * T + t) * T + j] * base[t * C3 + i];
      dv += att[(bh * T + t) * T + j] * dybase[t * C + i];
    }
    dqkv[(b * T + j) * C3 + C + h * hs + i] = dk;
    dqkv[(b * T + j) * C3 + 2 * C + h * hs + i] = dv;
  }
}

unsigned rows_grid(int64_t rows) {
  if (rows > 0x7fffffff) throw error("attention: B * NH * T exceeds a grid's x dimension");
  return static_cast<unsigned>(rows);
}

size_t attention_smem(int64_t T, int64_t hs) {
  const size_t bytes = static_cast<size_t>(T + hs) * sizeof(float);
  if (bytes > 48 * 1024) throw error("attention: T + C / NH over 12288 floats of shared memory; not supported yet");
  return bytes;
}

}  // namespace

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
                       int64_t N, int64_t C, cudaStream_t s) {
  layernorm_forward_impl(out, mean, rstd, inp, weight, bias, N, C, s);
}
void layernorm_forward(bf16* out, float* mean, float* rstd, const bf16* inp, const float* weight, const float* bias,
                       int64_t N, int64_t C, cudaStream_t s) {
  layernorm_forward_impl(out, mean, rstd, inp, weight, bias, N, C, s);
}
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int64_t N, int64_t C,
                        cudaStream_t s) {
  layernorm_backward_impl(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, s);
}
void layernorm_backward(bf16* dinp, float* dweight, float* dbias, const bf16* dout, const bf16* inp,
                        const float* weight, const float* mean, const float* rstd, int64_t N, int64_t C,
                        cudaStream_t s) {
  layernorm_backward_impl(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, s);
}

void embedding_forward(float* out, const float* tokens, const float* wte, const float* wpe, int64_t B, int64_t T,
                       int64_t C, int64_t V, cudaStream_t s) {
  if (B * T * C <= 0) return;
  embedding_forward_kernel<<<blocks_for(B * T * C), threads, 0, s>>>(out, tokens, wte, wpe, B * T, T, C, V);
  check_launch();
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const float* tokens, int64_t B, int64_t T,
                        int64_t C, cudaStream_t s) {
  if (B * T * C <= 0) return;
  embedding_backward_wte_kernel<<<static_cast<unsigned>((C + 127) / 128), 128, 0, s>>>(dwte, dout, tokens, B * T, C);
  check_launch();
  embedding_backward_wpe_kernel<<<blocks_for(T * C), threads, 0, s>>>(dwpe, dout, B, T, C);
  check_launch();
}

void embedding_shard_forward(float* out, const float* tokens, const float* wte_shard, int64_t B, int64_t T, int64_t C,
                             int64_t V, int64_t begin, int64_t count, cudaStream_t s) {
  if (B * T * C <= 0) return;
  embedding_shard_forward_kernel<<<blocks_for(B * T * C), threads, 0, s>>>(out, tokens, wte_shard, B * T, C, V, begin,
                                                                           count);
  check_launch();
}

void embedding_shard_backward(float* dwte_shard, const float* dout, const float* tokens, int64_t B, int64_t T,
                              int64_t C, int64_t begin, int64_t count, cudaStream_t s) {
  if (B * T * C <= 0) return;
  embedding_shard_backward_kernel<<<static_cast<unsigned>((C + 127) / 128), 128, 0, s>>>(dwte_shard, dout, tokens,
                                                                                         B * T, C, begin, count);
  check_launch();
}

void position_forward(float* out, const float* wpe, int64_t B, int64_t T, int64_t C, cudaStream_t s) {
  if (B * T * C <= 0) return;
  position_forward_kernel<<<blocks_for(B * T * C), threads, 0, s>>>(out, wpe, B * T, T, C);
  check_launch();
}

void position_backward(float* dwpe, const float* dout, int64_t B, int64_t T, int64_t C, cudaStream_t s) {
  if (B * T * C <= 0) return;
  embedding_backward_wpe_kernel<<<blocks_for(T * C), threads, 0, s>>>(dwpe, dout, B, T, C);
  check_launch();
}

void cross_entropy_row_stats(float* stats, const float* losses, const float* probs, const int32_t* targets, int64_t N,
                             int64_t V, cudaStream_t s) {
  if (N <= 0) return;
  cross_entropy_row_stats_kernel<<<static_cast<unsigned>(N), threads, 0, s>>>(stats, losses, probs, targets, V);
  check_launch();
}

void softmax_cross_entropy_forward(float* probs, float* losses, const float* logits, const int32_t* targets, int64_t N,
                                   int64_t V, cudaStream_t s) {
  if (N <= 0) return;
  softmax_cross_entropy_forward_kernel<<<static_cast<unsigned>(N), threads, 0, s>>>(probs, losses, logits, targets, V);
  check_launch();
}

void vocab_peaks(float* peaks, const float* logits, int64_t N, int64_t V, int64_t begin, cudaStream_t s) {
  if (N <= 0) return;
  vocab_peaks_kernel<<<static_cast<unsigned>(N), threads, 0, s>>>(peaks, logits, N, V, begin);
  check_launch();
}

void vocab_exp_sums(float* probs, float* sums, const float* all_peaks, int tp, const int32_t* targets,
                    const float* logits, int64_t N, int64_t V, int64_t begin, cudaStream_t s) {
  if (N <= 0) return;
  vocab_exp_sums_kernel<<<static_cast<unsigned>(N), threads, 0, s>>>(probs, sums, all_peaks, tp, targets, logits, N, V,
                                                                     begin);
  check_launch();
}

void vocab_finish(float* row_stats, float* dlogits, float* probs, const float* sums, const float* all_peaks, int tp,
                  const int32_t* targets, int64_t N, int64_t V, int64_t begin, float scale, cudaStream_t s) {
  if (N <= 0) return;
  vocab_finish_kernel<<<static_cast<unsigned>(N), threads, 0, s>>>(row_stats, dlogits, probs, sums, all_peaks, tp,
                                                                   targets, N, V, begin, scale);
  check_launch();
}

void softmax_cross_entropy_backward(float* dlogits, const float* probs, const int32_t* targets, int64_t N, int64_t V,
                                    float scale, cudaStream_t s) {
  if (N * V <= 0) return;
  softmax_cross_entropy_backward_kernel<<<blocks_for(N * V), threads, 0, s>>>(dlogits, probs, targets, N, V, scale);
  check_launch();
}

void attention_forward(float* out, float* att, const float* qkv, int64_t B, int64_t T, int64_t C, int64_t NH,
                       cudaStream_t s) {
  if (B * T <= 0) return;
  attention_forward_kernel<<<rows_grid(B * NH * T), 128, attention_smem(T, C / NH), s>>>(out, att, qkv, T, C, NH);
  check_launch();
}

void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv, const float* att, int64_t B,
                        int64_t T, int64_t C, int64_t NH, cudaStream_t s) {
  if (B * T <= 0) return;
  attention_backward_query_kernel<<<rows_grid(B * NH * T), 128, attention_smem(T, C / NH), s>>>(
      dqkv, scratch, dout, qkv, att, T, C, NH);
  check_launch();
  attention_backward_key_value_kernel<<<rows_grid(B * NH * T), 64, 0, s>>>(dqkv, scratch, dout, qkv, att, T, C, NH);
  check_launch();
}

}  // namespace troupe::cuda
