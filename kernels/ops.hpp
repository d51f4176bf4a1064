// CPU reference ops, llm.c style: every op is a *_forward / *_backward pair over raw pointers,
// arguments ordered (out, inputs..., sizes...), with the shape of each pointer in a comment.
// Parameter gradients accumulate (+=) so micro-batches can add into one buffer; input gradients
// are written (=). Nothing here allocates, logs or knows about layers.
#pragma once

#include <cstdint>

#include "kernels/half.hpp"

namespace troupe::ops {

// ---- dense (ops_dense.cpp) ----
// out = inp @ weight^T + bias. weight uses PyTorch's Linear layout (OC, C). bias may be null.
void matmul_forward(float* out,                                      // (N, OC)
                    const float* inp,                                // (N, C)
                    const float* weight, const float* bias,          // (OC, C), (OC)
                    int64_t N, int64_t C, int64_t OC);
// dinp = dout @ weight
void matmul_backward_input(float* dinp,                              // (N, C)
                           const float* dout, const float* weight,   // (N, OC), (OC, C)
                           int64_t N, int64_t C, int64_t OC);
// dweight += dout^T @ inp; dbias += sum over rows of dout (dbias may be null)
void matmul_backward_weight(float* dweight, float* dbias,            // (OC, C), (OC)
                            const float* dout, const float* inp,     // (N, OC), (N, C)
                            int64_t N, int64_t C, int64_t OC);

// The same three products over bf16 operands (half.hpp): each product of two bf16 values is exact
// in fp32, the sums are fp32, and so are the results and the bias gradient (summed from the bf16
// dout). For matmul_precision::bf16 (matmul_precision.hpp).
void matmul_forward_bf16(float* out, const bf16* inp, const bf16* weight, const float* bias, int64_t N, int64_t C,
                         int64_t OC);
void matmul_backward_input_bf16(float* dinp, const bf16* dout, const bf16* weight, int64_t N, int64_t C, int64_t OC);
void matmul_backward_weight_bf16(float* dweight, float* dbias, const bf16* dout, const bf16* inp, int64_t N,
                                 int64_t C, int64_t OC);
// out = inp rounded to bf16, to nearest even (half.hpp's to_bf16).
void round_to_bf16(bf16* out, const float* inp, int64_t n);

// a += b, element-wise (residual connections).
void add_into(float* a, const float* b, int64_t n);

void relu_forward(float* out, const float* inp, int64_t n);
// dinp = dout where out > 0, else 0
void relu_backward(float* dinp, const float* dout, const float* out, int64_t n);

// ---- loss (ops_loss.cpp) ----
// Row-wise softmax cross-entropy. Writes probs and returns the summed (not averaged) loss.
// Targets outside [0, V) throw std::out_of_range.
double softmax_cross_entropy_forward(float* probs,                   // (N, V)
                                     const float* logits,            // (N, V)
                                     const int32_t* targets,         // (N)
                                     int64_t N, int64_t V);
// dlogits = (probs - onehot(targets)) * scale
void softmax_cross_entropy_backward(float* dlogits,                  // (N, V)
                                    const float* probs,              // (N, V)
                                    const int32_t* targets,          // (N)
                                    int64_t N, int64_t V, float scale);

// ---- vocab-parallel cross-entropy (ops_loss.cpp) ----
// The three passes of loss.hpp's vocab_parallel_cross_entropy over one rank's columns
// [begin, begin + V) of the vocabulary; between them the group all-gathers every rank's peaks,
// then sums the sums. Targets are global columns, already checked to lie in the vocabulary.
// peaks (2N): each row's maximum here (-inf without columns), then its first arg-max as a global
// column (a float: exact below 2^24).
void vocab_peaks(float* peaks, const float* logits, int64_t N, int64_t V, int64_t begin);
// The rank whose peak is row n's maximum over the group (the lowest on a tie: the first arg-max,
// as cross_entropy picks), from all_peaks, the tp ranks' peaks one after the other.
inline int vocab_owner(const float* all_peaks, int tp, int64_t N, int64_t n) {
  int owner = 0;
  for (int q = 1; q < tp; ++q)
    if (all_peaks[2 * N * q + n] > all_peaks[2 * N * owner + n]) owner = q;
  return owner;
}
// probs (N, V) = exp(logits - the row's maximum over the group); sums (2N): each row's sum of
// probs here, then its target's logit where this rank holds that column (0 elsewhere, so the
// group's sum is exactly that logit).
void vocab_exp_sums(float* probs, float* sums, const float* all_peaks, int tp, const int32_t* targets,
                    const float* logits, int64_t N, int64_t V, int64_t begin);
// With sums summed over the group: probs normalized in place; dlogits, unless null, (probs -
// onehot) * scale on this rank's columns; row_stats, unless null, (N, 2): each row's loss and 1
// where the group's first arg-max is its target (cross_entropy's row_stats on a GPU).
void vocab_finish(float* row_stats, float* dlogits, float* probs, const float* sums, const float* all_peaks, int tp,
                  const int32_t* targets, int64_t N, int64_t V, int64_t begin, float scale);

// ---- transformer (ops_transformer.cpp) ----
// GELU, tanh approximation (as GPT-2 and PyTorch's approximate="tanh").
void gelu_forward(float* out, const float* inp, int64_t n);
void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n);
// pre += bias per row, then out = gelu(pre), in one pass: a linear's bias fused into its GELU.
// pre keeps the biased value, which gelu_backward reads.
void bias_gelu_forward(float* out, float* pre,                       // (N, OC), (N, OC)
                       const float* bias, int64_t N, int64_t OC);    // (OC)

// out = (inp - mean) * rstd * weight + bias, per row of C. Saves mean and rstd for backward.
void layernorm_forward(float* out, float* mean, float* rstd,         // (N, C), (N), (N)
                       const float* inp,                             // (N, C)
                       const float* weight, const float* bias,       // (C), (C)
                       int64_t N, int64_t C);
void layernorm_backward(float* dinp, float* dweight, float* dbias,   // (N, C), (C), (C)
                        const float* dout, const float* inp,         // (N, C), (N, C)
                        const float* weight, const float* mean, const float* rstd,
                        int64_t N, int64_t C);

// out[b, t] = wte[tokens[b, t]] + wpe[t]. Tokens are stored as floats holding integers.
void embedding_forward(float* out,                                   // (B, T, C)
                       const float* tokens,                          // (B, T)
                       const float* wte, const float* wpe,           // (V, C), (maxT, C)
                       int64_t B, int64_t T, int64_t C, int64_t V);
void embedding_backward(float* dwte, float* dwpe,                    // (V, C), (maxT, C)
                        const float* dout, const float* tokens,      // (B, T, C), (B, T)
                        int64_t B, int64_t T, int64_t C);

// The vocabulary-parallel halves of the embedding: rows [begin, begin + count) of wte live here.
// out[b, t] = wte_shard[tokens[b, t] - begin], or zeros for a token another rank holds; the sum
// over ranks is then the single-device lookup. Tokens outside [0, V) throw std::out_of_range.
void embedding_shard_forward(float* out,                             // (B, T, C)
                             const float* tokens,                    // (B, T)
                             const float* wte_shard,                 // (count, C)
                             int64_t B, int64_t T, int64_t C, int64_t V, int64_t begin, int64_t count);
// dwte_shard += dout rows of the tokens this shard holds.
void embedding_shard_backward(float* dwte_shard,                     // (count, C)
                              const float* dout, const float* tokens,  // (B, T, C), (B, T)
                              int64_t B, int64_t T, int64_t C, int64_t begin, int64_t count);
// out[b, t] += wpe[t];  dwpe[t] += sum over b of dout[b, t].
void position_forward(float* out, const float* wpe, int64_t B, int64_t T, int64_t C);
void position_backward(float* dwpe, const float* dout, int64_t B, int64_t T, int64_t C);

// Causal multi-head self-attention over a packed qkv input.
void attention_forward(float* out,                                   // (B, T, C)
                       float* att,                                   // (B, NH, T, T) softmaxed scores
                       const float* qkv,                             // (B, T, 3C)
                       int64_t B, int64_t T, int64_t C, int64_t NH);
void attention_backward(float* dqkv,                                 // (B, T, 3C), written
                        const float* dout,                           // (B, T, C)
                        const float* qkv, const float* att,          // (B, T, 3C), (B, NH, T, T)
                        int64_t B, int64_t T, int64_t C, int64_t NH);

}  // namespace troupe::ops
