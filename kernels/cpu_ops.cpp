// The CPU's device_ops: ops.hpp, inline on the caller's thread.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <stdexcept>

#include "kernels/device_ops.hpp"
#include "kernels/ops.hpp"
#include "kernels/parallel.hpp"

namespace troupe {

namespace {

class cpu_device_ops final : public device_ops {
 public:
  device where() const override { return {device_type::cpu, 0}; }

  void copy_bytes(void* dst, const void* src, int64_t bytes) const override {
    if (bytes > 0) std::memcpy(dst, src, static_cast<size_t>(bytes));
  }
  void fill_zero(void* p, int64_t bytes) const override {
    if (bytes > 0) std::memset(p, 0, static_cast<size_t>(bytes));
  }
  void synchronize() const override {}

  void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int64_t N, int64_t C,
                      int64_t OC) const override {
    ops::matmul_forward(out, inp, weight, bias, N, C, OC);
  }
  void matmul_backward_input(float* dinp, const float* dout, const float* weight, int64_t N, int64_t C,
                             int64_t OC) const override {
    ops::matmul_backward_input(dinp, dout, weight, N, C, OC);
  }
  void matmul_backward_weight(float* dweight, float* dbias, const float* dout, const float* inp, int64_t N, int64_t C,
                              int64_t OC) const override {
    ops::matmul_backward_weight(dweight, dbias, dout, inp, N, C, OC);
  }
  void round_to_bf16(bf16* out, const float* inp, int64_t n) const override { ops::round_to_bf16(out, inp, n); }
  void matmul_forward_bf16(float* out, const bf16* inp, const bf16* weight, const float* bias, int64_t N, int64_t C,
                           int64_t OC) const override {
    ops::matmul_forward_bf16(out, inp, weight, bias, N, C, OC);
  }
  void matmul_backward_input_bf16(float* dinp, const bf16* dout, const bf16* weight, int64_t N, int64_t C,
                                  int64_t OC) const override {
    ops::matmul_backward_input_bf16(dinp, dout, weight, N, C, OC);
  }
  void matmul_backward_weight_bf16(float* dweight, float* dbias, const bf16* dout, const bf16* inp, int64_t N,
                                   int64_t C, int64_t OC) const override {
    ops::matmul_backward_weight_bf16(dweight, dbias, dout, inp, N, C, OC);
  }
  void add_into(float* a, const float* b, int64_t n) const override { ops::add_into(a, b, n); }
  void relu_forward(float* out, const float* inp, int64_t n) const override { ops::relu_forward(out, inp, n); }
  void relu_backward(float* dinp, const float* dout, const float* out, int64_t n) const override {
    ops::relu_backward(dinp, dout, out, n);
  }

  void gelu_forward(float* out, const float* inp, int64_t n) const override { ops::gelu_forward(out, inp, n); }
  void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) const override {
    ops::gelu_backward(dinp, inp, dout, n);
  }
  void bias_gelu_forward(float* out, float* pre, const float* bias, int64_t N, int64_t OC) const override {
    ops::bias_gelu_forward(out, pre, bias, N, OC);
  }
  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                         const float* bias, int64_t N, int64_t C) const override {
    ops::layernorm_forward(out, mean, rstd, inp, weight, bias, N, C);
  }
  void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                          const float* weight, const float* mean, const float* rstd, int64_t N,
                          int64_t C) const override {
    ops::layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
  }
  void embedding_forward(float* out, const float* tokens, const float* wte, const float* wpe, int64_t B, int64_t T,
                         int64_t C, int64_t V) const override {
    ops::embedding_forward(out, tokens, wte, wpe, B, T, C, V);
  }
  void embedding_backward(float* dwte, float* dwpe, const float* dout, const float* tokens, int64_t B, int64_t T,
                          int64_t C, int64_t /*V: the forward threw on a token outside it*/) const override {
    ops::embedding_backward(dwte, dwpe, dout, tokens, B, T, C);
  }
  void embedding_shard_forward(float* out, const float* tokens, const float* wte_shard, int64_t B, int64_t T,
                               int64_t C, int64_t V, int64_t begin, int64_t count) const override {
    ops::embedding_shard_forward(out, tokens, wte_shard, B, T, C, V, begin, count);
  }
  void embedding_shard_backward(float* dwte_shard, const float* dout, const float* tokens, int64_t B, int64_t T,
                                int64_t C, int64_t begin, int64_t count) const override {
    ops::embedding_shard_backward(dwte_shard, dout, tokens, B, T, C, begin, count);
  }
  void position_forward(float* out, const float* wpe, int64_t B, int64_t T, int64_t C) const override {
    ops::position_forward(out, wpe, B, T, C);
  }
  void position_backward(float* dwpe, const float* dout, int64_t B, int64_t T, int64_t C) const override {
    ops::position_backward(dwpe, dout, B, T, C);
  }
  void attention_forward(float* out, float* att, const float* qkv, int64_t B, int64_t T, int64_t C,
                         int64_t NH) const override {
    ops::attention_forward(out, att, qkv, B, T, C, NH);
  }
  void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att, int64_t B, int64_t T,
                          int64_t C, int64_t NH) const override {
    ops::attention_backward(dqkv, dout, qkv, att, B, T, C, NH);
  }

  void optimizer_step(float* out, const float* params, const float* grads, float* const* state, int64_t n,
                      const optimizer_config& cfg, int64_t step) const override {
    cpu_optimizer_step(out, params, grads, state, n, cfg, step);
  }

  void vocab_peaks(float* peaks, const float* logits, int64_t N, int64_t V, int64_t begin) const override {
    ops::vocab_peaks(peaks, logits, N, V, begin);
  }
  void vocab_exp_sums(float* probs, float* sums, const float* all_peaks, int tp, const int32_t* targets,
                      const float* logits, int64_t N, int64_t V, int64_t begin) const override {
    ops::vocab_exp_sums(probs, sums, all_peaks, tp, targets, logits, N, V, begin);
  }
  void vocab_finish(float* row_stats, float* dlogits, float* probs, const float* sums, const float* all_peaks, int tp,
                    const int32_t* targets, int64_t N, int64_t V, int64_t begin, float scale) const override {
    ops::vocab_finish(row_stats, dlogits, probs, sums, all_peaks, tp, targets, N, V, begin, scale);
  }
  loss_result cross_entropy(const tensor& logits, const std::vector<int32_t>& targets,
                            float grad_scale) const override {
    const int64_t V = logits.size(-1);
    const int64_t N = logits.numel() / V;
    loss_result r;
    r.count = N;
    tensor probs = tensor::uninitialized({N, V});
    r.loss_sum = ops::softmax_cross_entropy_forward(probs.data(), logits.data(), targets.data(), N, V);
    const float* p = probs.data();
    std::atomic<int64_t> correct{0};  // a count: the same whatever order the chunks add theirs
    parallel_for(N, rows_per_chunk(V), [&](int64_t begin, int64_t end) {
      int64_t here = 0;
      for (int64_t n = begin; n < end; ++n) {
        int64_t best = 0;
        for (int64_t v = 1; v < V; ++v)
          if (p[n * V + v] > p[n * V + best]) best = v;
        here += best == targets[static_cast<size_t>(n)];
      }
      correct.fetch_add(here, std::memory_order_relaxed);
    });
    r.correct += correct.load();
    if (grad_scale != 0.0f) {
      r.dlogits = tensor::uninitialized(logits.shape());
      ops::softmax_cross_entropy_backward(r.dlogits.data(), p, targets.data(), N, V, grad_scale);
    }
    return r;
  }
};

}  // namespace

const device_ops& cpu_ops() {
  static const cpu_device_ops ops;
  return ops;
}

}  // namespace troupe
