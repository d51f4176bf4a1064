// Row-wise transformer ops (layernorm, softmax cross-entropy, attention), one thread block per
// row so a row's reductions stay in one block; the embedding. Sums over rows (parameter
// gradients) go column-wise in a fixed order, with no atomics, so every run gives the same bits.
// The attention is kernels/flash_attention.hpp's, which keeps a log-sum-exp per row, not the
// (T, T) probabilities.
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kernel_faults.hpp"
#include "kernels/cuda/ops.hpp"
#include "kernels/flash_attention.hpp"

namespace troupe::cuda {

using detail::block_max;
using detail::block_sum;
using detail::blocks_for;
using detail::from_f;
using detail::threads;
using detail::to_f;

namespace {

void check_launch() { TROUPE_CUDA_CHECK(cudaGetLastError()); }

// The current GPU's kernel_fault slot, as the device sees it.
kernel_fault* fault_slot_here() {
  int device = 0;
  TROUPE_CUDA_CHECK(cudaGetDevice(&device));
  void* on_device = nullptr;
  TROUPE_CUDA_CHECK(cudaHostGetDevicePointer(&on_device, kernel_fault_slot(device), 0));
  return static_cast<kernel_fault*>(on_device);
}

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
__device__ bool valid_token(float tok, int64_t V) { return tok >= 0.0f && tok < static_cast<float>(V) && tok == floorf(tok); }

// The first invalid token of any kernel since the host last looked (kernel_faults.hpp); the
// row's output is NaN as well.
__device__ void raise_token_fault(kernel_fault* f, kernel_fault_op op, int64_t i, int64_t T, float tok, int64_t V) {
  if (atomicCAS(&f->raised, 0, 1) != 0) return;
  f->op = op;
  f->b = i / T;
  f->t = i % T;
  f->value = tok;
  f->limit = V;
  __threadfence_system();
}

__global__ void embedding_forward_kernel(float* out, const float* tokens, const float* wte, const float* wpe, int64_t BT,
                                         int64_t T, int64_t C, int64_t V, kernel_fault* fault) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < BT * C; e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = e / C, c = e % C;
    const float tok = tokens[i];
    const bool valid = valid_token(tok, V);
    if (!valid && c == 0) raise_token_fault(fault, kernel_fault_op::embedding, i, T, tok, V);
    out[e] = valid ? wte[static_cast<int64_t>(tok) * C + c] + wpe[(i % T) * C + c] : NAN;
  }
}

// One thread per channel adds every token's value in token order: two tokens may share a row,
// and this order needs no atomics and matches the CPU's. Parallel over C only, so it is slow for
// long batches; a sort-by-token version is later work.
// A token outside the vocabulary (the forward raised it) adds nothing: its row is not there.
__global__ void embedding_backward_wte_kernel(float* dwte, const float* dout, const float* tokens, int64_t BT,
                                              int64_t C, int64_t V) {
  const int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (c >= C) return;
  for (int64_t i = 0; i < BT; ++i)
    if (valid_token(tokens[i], V)) dwte[static_cast<int64_t>(tokens[i]) * C + c] += dout[i * C + c];
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
                                               int64_t T, int64_t C, int64_t V, int64_t begin, int64_t count,
                                               kernel_fault* fault) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < BT * C; e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = e / C, c = e % C;
    const float tok = tokens[i];
    if (!valid_token(tok, V)) {
      if (c == 0) raise_token_fault(fault, kernel_fault_op::embedding_shard, i, T, tok, V);
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
    if (!(tokens[i] >= 0.0f && tokens[i] == floorf(tokens[i]))) continue;  // raised by the forward
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
// kernels/flash_attention.hpp's blocks with a thread per row: each() is one phase of the block,
// a barrier after it.
struct device_block {
  TROUPE_HD int64_t size() const {
#if defined(__CUDA_ARCH__)
    return blockDim.x;
#else
    return 0;
#endif
  }
  template <class F>
  TROUPE_HD void each(F f) const {
#if defined(__CUDA_ARCH__)
    f(static_cast<int64_t>(threadIdx.x));
    __syncthreads();
#else
    (void)f;
#endif
  }
};

__global__ void flash_forward_kernel(float* out, float* lse, const float* qkv, flash::dims d) {
  extern __shared__ float smem[];
  flash::forward_block(device_block{}, smem, out, lse, qkv, d, blockIdx.y, blockIdx.x);
}
__global__ void flash_query_grad_kernel(float* dqkv, float* D, const float* dout, const float* qkv, const float* lse,
                                        flash::dims d) {
  extern __shared__ float smem[];
  flash::query_grad_block(device_block{}, smem, dqkv, D, dout, qkv, lse, d, blockIdx.y, blockIdx.x);
}
__global__ void flash_key_grad_kernel(float* dqkv, const float* dout, const float* qkv, const float* lse,
                                      const float* D, flash::dims d) {
  extern __shared__ float smem[];
  flash::key_grad_block(device_block{}, smem, dqkv, dout, qkv, lse, D, d, blockIdx.y, blockIdx.x);
}

// A launch of one block per tile of rows (x) and head (y), and its shared bytes.
struct flash_launch {
  dim3 grid;
  unsigned threads;
  size_t smem;
};
flash_launch flash_shape(int64_t B, int64_t T, int64_t C, int64_t NH, int arrays, int scalars) {
  if (NH <= 0 || C % NH != 0) throw error("attention: C " + std::to_string(C) + " not a multiple of NH " + std::to_string(NH));
  if (B * NH > 65535) throw error("attention: B * NH over a grid's 65535 rows");
  const int64_t hs = C / NH;
  const int rows = flash::rows_per_block(hs, arrays, scalars);
  const int64_t tiles = (T + rows - 1) / rows;
  if (tiles > 0x7fffffff) throw error("attention: T over a grid's x dimension");
  return {dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(B * NH)), static_cast<unsigned>(rows),
          static_cast<size_t>(flash::shared_floats(rows, hs, arrays, scalars)) * sizeof(float)};
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
  embedding_forward_kernel<<<blocks_for(B * T * C), threads, 0, s>>>(out, tokens, wte, wpe, B * T, T, C, V,
                                                                     fault_slot_here());
  check_launch();
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const float* tokens, int64_t B, int64_t T,
                        int64_t C, int64_t V, cudaStream_t s) {
  if (B * T * C <= 0) return;
  embedding_backward_wte_kernel<<<static_cast<unsigned>((C + 127) / 128), 128, 0, s>>>(dwte, dout, tokens, B * T, C, V);
  check_launch();
  embedding_backward_wpe_kernel<<<blocks_for(T * C), threads, 0, s>>>(dwpe, dout, B, T, C);
  check_launch();
}

void embedding_shard_forward(float* out, const float* tokens, const float* wte_shard, int64_t B, int64_t T, int64_t C,
                             int64_t V, int64_t begin, int64_t count, cudaStream_t s) {
  if (B * T * C <= 0) return;
  embedding_shard_forward_kernel<<<blocks_for(B * T * C), threads, 0, s>>>(out, tokens, wte_shard, B * T, T, C, V,
                                                                           begin, count, fault_slot_here());
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

void attention_forward(float* out, float* lse, const float* qkv, int64_t B, int64_t T, int64_t C, int64_t NH,
                       cudaStream_t s) {
  if (B * T <= 0) return;
  const flash_launch f = flash_shape(B, T, C, NH, flash::forward_arrays, flash::forward_scalars);
  flash_forward_kernel<<<f.grid, f.threads, f.smem, s>>>(out, lse, qkv, flash::dims{T, C, NH});
  check_launch();
}

void attention_backward(float* dqkv, float* D, const float* dout, const float* qkv, const float* lse, int64_t B,
                        int64_t T, int64_t C, int64_t NH, cudaStream_t s) {
  if (B * T <= 0) return;
  const flash::dims d{T, C, NH};
  const flash_launch fq = flash_shape(B, T, C, NH, flash::query_grad_arrays, flash::query_grad_scalars);
  flash_query_grad_kernel<<<fq.grid, fq.threads, fq.smem, s>>>(dqkv, D, dout, qkv, lse, d);
  check_launch();
  const flash_launch fk = flash_shape(B, T, C, NH, flash::key_grad_arrays, flash::key_grad_scalars);
  flash_key_grad_kernel<<<fk.grid, fk.threads, fk.smem, s>>>(dqkv, dout, qkv, lse, D, d);
  check_launch();
}

}  // namespace troupe::cuda
