// CUDA versions of the CPU reference ops (kernels/ops.hpp, kernels/optimizer.cpp), with the same
// names, argument order (out, inputs..., sizes...) and layouts, over raw device pointers; each
// call enqueues on the stream given last and returns without waiting. tests/kernels/
// cuda_ops.test.cpp checks every one against the CPU reference.
//
// Precision: float overloads compute in fp32 (cuBLAS without TF32). bf16 overloads take bf16
// activations (and bf16 matmul operands) and compute in fp32, rounding only what they store
// as bf16; layernorm and bias parameters, their gradients, weight gradients and optimizer state
// stay fp32 (the fp32 master copy; the optimizers can also write its bf16 copy).
//
// Differences from the CPU versions, all because a kernel cannot throw: an out-of-range token
// gives a NaN row (embedding_forward) and an out-of-range target a NaN loss
// (softmax_cross_entropy_forward) instead of std::out_of_range; the loss is left per row for the
// caller to sum; the attention keeps a log-sum-exp per row where the CPU keeps the probabilities
// (device_ops::attention_state_shape), and its backward takes a scratch buffer of one per row.
#pragma once

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/optimizer.hpp"

namespace troupe::cuda {

using bf16 = __nv_bfloat16;

// A cuBLAS handle. Not thread-safe: one per thread that enqueues matmuls. Each matmul sets the
// handle's stream to the one it is given.
class blas {
 public:
  blas();
  ~blas();
  blas(const blas&) = delete;
  blas& operator=(const blas&) = delete;
  cublasHandle_t handle() const { return h_; }

 private:
  cublasHandle_t h_ = nullptr;
};

// ---- dense (dense.cu) ----
// out = inp @ weight^T + bias; weight (OC, C) as PyTorch's Linear; bias may be null.
void matmul_forward(float* out,                                      // (N, OC)
                    const float* inp,                                // (N, C)
                    const float* weight, const float* bias,          // (OC, C), (OC)
                    int64_t N, int64_t C, int64_t OC, blas& b, cudaStream_t stream);
void matmul_forward(float* out, const bf16* inp, const bf16* weight, const float* bias, int64_t N, int64_t C,
                    int64_t OC, blas& b, cudaStream_t stream);
void matmul_forward(bf16* out, const bf16* inp, const bf16* weight, const float* bias, int64_t N, int64_t C,
                    int64_t OC, blas& b, cudaStream_t stream);
// dinp = dout @ weight
void matmul_backward_input(float* dinp,                              // (N, C)
                           const float* dout, const float* weight,   // (N, OC), (OC, C)
                           int64_t N, int64_t C, int64_t OC, blas& b, cudaStream_t stream);
void matmul_backward_input(float* dinp, const bf16* dout, const bf16* weight, int64_t N, int64_t C, int64_t OC,
                           blas& b, cudaStream_t stream);
void matmul_backward_input(bf16* dinp, const bf16* dout, const bf16* weight, int64_t N, int64_t C, int64_t OC,
                           blas& b, cudaStream_t stream);
// dweight += dout^T @ inp; dbias += column sums of dout (dbias may be null). Both fp32.
void matmul_backward_weight(float* dweight, float* dbias,            // (OC, C), (OC)
                            const float* dout, const float* inp,     // (N, OC), (N, C)
                            int64_t N, int64_t C, int64_t OC, blas& b, cudaStream_t stream);
void matmul_backward_weight(float* dweight, float* dbias, const bf16* dout, const bf16* inp, int64_t N, int64_t C,
                            int64_t OC, blas& b, cudaStream_t stream);

// a += b
void add_into(float* a, const float* b, int64_t n, cudaStream_t stream);
void add_into(bf16* a, const bf16* b, int64_t n, cudaStream_t stream);
void relu_forward(float* out, const float* inp, int64_t n, cudaStream_t stream);
void relu_forward(bf16* out, const bf16* inp, int64_t n, cudaStream_t stream);
// dinp = dout where out > 0, else 0
void relu_backward(float* dinp, const float* dout, const float* out, int64_t n, cudaStream_t stream);
void relu_backward(bf16* dinp, const bf16* dout, const bf16* out, int64_t n, cudaStream_t stream);
// GELU, tanh approximation (the formula of the CPU version; tanhf here, a rational fit there).
void gelu_forward(float* out, const float* inp, int64_t n, cudaStream_t stream);
void gelu_forward(bf16* out, const bf16* inp, int64_t n, cudaStream_t stream);
void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n, cudaStream_t stream);
void gelu_backward(bf16* dinp, const bf16* inp, const bf16* dout, int64_t n, cudaStream_t stream);
// pre += bias per row, then out = gelu(pre).
void bias_gelu_forward(float* out, float* pre,                       // (N, OC), (N, OC)
                       const float* bias, int64_t N, int64_t OC, cudaStream_t stream);  // (OC)
void bias_gelu_forward(bf16* out, bf16* pre, const float* bias, int64_t N, int64_t OC, cudaStream_t stream);

// fp32 <-> bf16 (round to nearest even), e.g. master weights to their bf16 copy.
void to_bf16(bf16* out, const float* inp, int64_t n, cudaStream_t stream);
void to_float(float* out, const bf16* inp, int64_t n, cudaStream_t stream);

// ---- transformer (transformer.cu) ----
// out = (inp - mean) * rstd * weight + bias per row of C, eps 1e-5; saves mean and rstd.
void layernorm_forward(float* out, float* mean, float* rstd,         // (N, C), (N), (N)
                       const float* inp,                             // (N, C)
                       const float* weight, const float* bias,       // (C), (C)
                       int64_t N, int64_t C, cudaStream_t stream);
void layernorm_forward(bf16* out, float* mean, float* rstd, const bf16* inp, const float* weight, const float* bias,
                       int64_t N, int64_t C, cudaStream_t stream);
// dinp written (may be null); dweight, dbias accumulated (both may be null).
void layernorm_backward(float* dinp, float* dweight, float* dbias,   // (N, C), (C), (C)
                        const float* dout, const float* inp,         // (N, C), (N, C)
                        const float* weight, const float* mean, const float* rstd,
                        int64_t N, int64_t C, cudaStream_t stream);
void layernorm_backward(bf16* dinp, float* dweight, float* dbias, const bf16* dout, const bf16* inp,
                        const float* weight, const float* mean, const float* rstd, int64_t N, int64_t C,
                        cudaStream_t stream);

// out[b, t] = wte[tokens[b, t]] + wpe[t]; tokens are floats holding integers, as on the CPU. A
// token outside [0, V) gives a NaN row and is recorded in the GPU's kernel_fault slot
// (kernel_faults.hpp), where the CPU's op would throw.
void embedding_forward(float* out,                                   // (B, T, C)
                       const float* tokens,                          // (B, T)
                       const float* wte, const float* wpe,           // (V, C), (maxT, C)
                       int64_t B, int64_t T, int64_t C, int64_t V, cudaStream_t stream);
// dwte, dwpe accumulated, each element's additions in token order (deterministic); a token
// outside [0, V) adds nothing to dwte (there is no row to write).
void embedding_backward(float* dwte, float* dwpe,                    // (V, C), (maxT, C)
                        const float* dout, const float* tokens,      // (B, T, C), (B, T)
                        int64_t B, int64_t T, int64_t C, int64_t V, cudaStream_t stream);

// The vocabulary-parallel halves (ops.hpp): rows [begin, begin + count) of wte live here; a
// token another rank holds gives zeros, an invalid one NaN.
void embedding_shard_forward(float* out, const float* tokens, const float* wte_shard, int64_t B, int64_t T, int64_t C,
                             int64_t V, int64_t begin, int64_t count, cudaStream_t stream);
void embedding_shard_backward(float* dwte_shard, const float* dout, const float* tokens, int64_t B, int64_t T,
                              int64_t C, int64_t begin, int64_t count, cudaStream_t stream);
// out[b, t] += wpe[t];  dwpe[t] += sum over b of dout[b, t].
void position_forward(float* out, const float* wpe, int64_t B, int64_t T, int64_t C, cudaStream_t stream);
void position_backward(float* dwpe, const float* dout, int64_t B, int64_t T, int64_t C, cudaStream_t stream);

// Causal multi-head self-attention over packed qkv (q, k, v each C wide, heads of C / NH), flash
// style (kernels/flash_attention.hpp): what backward needs is a log-sum-exp per row.
void attention_forward(float* out,                                   // (B, T, C)
                       float* lse,                                   // (B, NH, T)
                       const float* qkv,                             // (B, T, 3C)
                       int64_t B, int64_t T, int64_t C, int64_t NH, cudaStream_t stream);
void attention_backward(float* dqkv,                                 // (B, T, 3C), written
                        float* D,                                    // (B, NH, T), overwritten
                        const float* dout,                           // (B, T, C)
                        const float* qkv, const float* lse,          // (B, T, 3C), (B, NH, T)
                        int64_t B, int64_t T, int64_t C, int64_t NH, cudaStream_t stream);

// ---- loss (transformer.cu) ----
// Row-wise softmax cross-entropy: probs, and each row's loss (the CPU version returns their sum).
void softmax_cross_entropy_forward(float* probs, float* losses,      // (N, V), (N)
                                   const float* logits,              // (N, V)
                                   const int32_t* targets,           // (N)
                                   int64_t N, int64_t V, cudaStream_t stream);
// stats (N, 2): each row's loss (from losses) and 1 if its arg-max (the first of equal maxima,
// as on the CPU) is its target, else 0; what troupe::loss_result::settle adds up on the host.
void cross_entropy_row_stats(float* stats, const float* losses, const float* probs, const int32_t* targets, int64_t N,
                             int64_t V, cudaStream_t stream);
// dlogits = (probs - onehot(targets)) * scale
void softmax_cross_entropy_backward(float* dlogits,                  // (N, V)
                                    const float* probs,              // (N, V)
                                    const int32_t* targets,          // (N)
                                    int64_t N, int64_t V, float scale, cudaStream_t stream);

// troupe::ops' three passes of the vocab-parallel cross-entropy (kernels/ops.hpp), a row per
// block: the same values, the sums in the block's order.
void vocab_peaks(float* peaks, const float* logits, int64_t N, int64_t V, int64_t begin, cudaStream_t stream);
void vocab_exp_sums(float* probs, float* sums, const float* all_peaks, int tp, const int32_t* targets,
                    const float* logits, int64_t N, int64_t V, int64_t begin, cudaStream_t stream);
void vocab_finish(float* row_stats, float* dlogits, float* probs, const float* sums, const float* all_peaks, int tp,
                  const int32_t* targets, int64_t N, int64_t V, int64_t begin, float scale, cudaStream_t stream);

// ---- optimizers (optimizer.cu) ----
// One step of troupe::optimizer's update over a flat fp32 shard, fused: out may be params (in
// place); step counts from 1 (the CPU optimizer's steps() after begin_step). out_bf16, if not
// null, receives the new parameters rounded to bf16 in the same pass.
// AdamW: m and v are its moments (zeros before the first step).
void adamw_step(float* out, bf16* out_bf16, float* m, float* v, const float* params, const float* grads, int64_t n,
                const optimizer_config& cfg, int64_t step, cudaStream_t stream);
// SGD: momentum is the momentum buffer, null when cfg.momentum is 0.
void sgd_step(float* out, bf16* out_bf16, float* momentum, const float* params, const float* grads, int64_t n,
              const optimizer_config& cfg, int64_t step, cudaStream_t stream);

}  // namespace troupe::cuda
