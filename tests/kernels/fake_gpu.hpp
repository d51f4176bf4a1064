// fake_gpu: a device that is not the CPU, for host-side tests: "cuda:7", whose memory is host
// memory that knows its blocks and starts as NaN (a read of what nothing wrote shows), and whose ops are the CPU's over raw pointers, counting every
// call and checking every pointer it is given lies in the device's memory. Like a GPU's, its
// loss reaches loss_sum and correct only through row_stats and settle(). use_flash_attention()
// gives it the CUDA attention (its blocks run on the host) in place of the CPU's. fake_ops()
// installs it (once per process: the allocator and ops tables are process-wide).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kernels/allocator.hpp"
#include "kernels/device_ops.hpp"
#include "kernels/ops.hpp"
#include "tests/kernels/flash_host.hpp"

namespace troupe::test {

inline constexpr device fake_gpu{device_type::cuda, 7};

// Host memory that says it is cuda:7, and knows its blocks.
class host_backed_allocator final : public allocator {
 public:
  void* allocate(size_t bytes) override {
    void* p = cpu_allocator()->allocate(bytes);
    std::memset(p, 0xFF, bytes);  // poisoned as a GPU's fresh block is garbage: NaN floats until written
    std::lock_guard<std::mutex> lock(mu_);
    live_[static_cast<const char*>(p)] = bytes;
    return p;
  }
  void deallocate(void* p, size_t bytes) noexcept override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      live_.erase(static_cast<const char*>(p));
    }
    cpu_allocator()->deallocate(p, bytes);
  }
  void zero(void* p, size_t bytes) override { std::memset(p, 0, bytes); }
  device where() const override { return fake_gpu; }
  bool owns(const void* p) const {
    const char* c = static_cast<const char*>(p);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.upper_bound(c);
    if (it == live_.begin()) return false;
    --it;
    return c < it->first + std::max<size_t>(it->second, 1);
  }

 private:
  mutable std::mutex mu_;
  std::map<const char*, size_t> live_;
};

inline const std::shared_ptr<host_backed_allocator>& fake_memory() {
  static const auto a = std::make_shared<host_backed_allocator>();
  return a;
}

class counting_ops final : public device_ops {
 public:
  device where() const override { return fake_gpu; }
  int calls(const std::string& op) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = calls_.find(op);
    return it == calls_.end() ? 0 : it->second;
  }

  void copy_bytes(void* dst, const void* src, int64_t bytes) const override {
    count("copy");
    if (bytes == 0) return;
    EXPECT_TRUE(fake_memory()->owns(dst) || fake_memory()->owns(src)) << "a copy between two host buffers";
    std::memcpy(dst, src, static_cast<size_t>(bytes));
  }
  void fill_zero(void* p, int64_t bytes) const override {
    count("fill_zero", {p});
    std::memset(p, 0, static_cast<size_t>(bytes));
  }
  void synchronize() const override { count("synchronize"); }
  void matmul_forward(float* out, const float* inp, const float* w, const float* b, int64_t N, int64_t C,
                      int64_t OC) const override {
    count("matmul_forward", {out, inp, w, b});
    ops::matmul_forward(out, inp, w, b, N, C, OC);
  }
  void matmul_backward_input(float* dinp, const float* dout, const float* w, int64_t N, int64_t C,
                             int64_t OC) const override {
    count("matmul_backward_input", {dinp, dout, w});
    ops::matmul_backward_input(dinp, dout, w, N, C, OC);
  }
  void round_to_bf16(bf16* out, const float* inp, int64_t n) const override {
    count("round_to_bf16", {out, inp});
    ops::round_to_bf16(out, inp, n);
  }
  void matmul_forward_bf16(float* out, const bf16* inp, const bf16* w, const float* b, int64_t N, int64_t C,
                           int64_t OC) const override {
    count("matmul_forward_bf16", {out, inp, w, b});
    ops::matmul_forward_bf16(out, inp, w, b, N, C, OC);
  }
  void matmul_backward_input_bf16(float* dinp, const bf16* dout, const bf16* w, int64_t N, int64_t C,
                                  int64_t OC) const override {
    count("matmul_backward_input_bf16", {dinp, dout, w});
    ops::matmul_backward_input_bf16(dinp, dout, w, N, C, OC);
  }
  void matmul_backward_weight_bf16(float* dw, float* db, const bf16* dout, const bf16* inp, int64_t N, int64_t C,
                                   int64_t OC) const override {
    count("matmul_backward_weight_bf16", {dw, db, dout, inp});
    ops::matmul_backward_weight_bf16(dw, db, dout, inp, N, C, OC);
  }
  void matmul_backward_weight(float* dw, float* db, const float* dout, const float* inp, int64_t N, int64_t C,
                              int64_t OC) const override {
    count("matmul_backward_weight", {dw, db, dout, inp});
    ops::matmul_backward_weight(dw, db, dout, inp, N, C, OC);
  }
  void add_into(float* a, const float* b, int64_t n) const override {
    count("add_into", {a, b});
    ops::add_into(a, b, n);
  }
  void relu_forward(float* out, const float* inp, int64_t n) const override {
    count("relu_forward", {out, inp});
    ops::relu_forward(out, inp, n);
  }
  void relu_backward(float* dinp, const float* dout, const float* out, int64_t n) const override {
    count("relu_backward", {dinp, dout, out});
    ops::relu_backward(dinp, dout, out, n);
  }
  void gelu_forward(float* out, const float* inp, int64_t n) const override {
    count("gelu_forward", {out, inp});
    ops::gelu_forward(out, inp, n);
  }
  void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) const override {
    count("gelu_backward", {dinp, inp, dout});
    ops::gelu_backward(dinp, inp, dout, n);
  }
  void bias_gelu_forward(float* out, float* pre, const float* bias, int64_t N, int64_t OC) const override {
    count("bias_gelu_forward", {out, pre, bias});
    ops::bias_gelu_forward(out, pre, bias, N, OC);
  }
  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w, const float* b,
                         int64_t N, int64_t C) const override {
    count("layernorm_forward", {out, mean, rstd, inp, w, b});
    ops::layernorm_forward(out, mean, rstd, inp, w, b, N, C);
  }
  void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp, const float* w,
                          const float* mean, const float* rstd, int64_t N, int64_t C) const override {
    count("layernorm_backward", {dinp, dw, db, dout, inp, w, mean, rstd});
    ops::layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
  }
  void embedding_forward(float* out, const float* tokens, const float* wte, const float* wpe, int64_t B, int64_t T,
                         int64_t C, int64_t V) const override {
    count("embedding_forward", {out, tokens, wte, wpe});
    ops::embedding_forward(out, tokens, wte, wpe, B, T, C, V);
  }
  void embedding_backward(float* dwte, float* dwpe, const float* dout, const float* tokens, int64_t B, int64_t T,
                          int64_t C, int64_t /*V*/) const override {
    count("embedding_backward", {dwte, dwpe, dout, tokens});
    ops::embedding_backward(dwte, dwpe, dout, tokens, B, T, C);
  }
  void embedding_shard_forward(float* out, const float* tokens, const float* wte, int64_t B, int64_t T, int64_t C,
                               int64_t V, int64_t begin, int64_t n) const override {
    count("embedding_shard_forward", {out, tokens, wte});
    ops::embedding_shard_forward(out, tokens, wte, B, T, C, V, begin, n);
  }
  void embedding_shard_backward(float* dwte, const float* dout, const float* tokens, int64_t B, int64_t T, int64_t C,
                                int64_t begin, int64_t n) const override {
    count("embedding_shard_backward", {dwte, dout, tokens});
    ops::embedding_shard_backward(dwte, dout, tokens, B, T, C, begin, n);
  }
  void position_forward(float* out, const float* wpe, int64_t B, int64_t T, int64_t C) const override {
    count("position_forward", {out, wpe});
    ops::position_forward(out, wpe, B, T, C);
  }
  void position_backward(float* dwpe, const float* dout, int64_t B, int64_t T, int64_t C) const override {
    count("position_backward", {dwpe, dout});
    ops::position_backward(dwpe, dout, B, T, C);
  }
  // Flash attention (the CUDA kernels' blocks run on the host) instead of the CPU's: the layers
  // then keep a log-sum-exp per row, as on a GPU. Process-wide, like the device.
  void use_flash_attention(bool on) const { flash_ = on; }
  std::vector<int64_t> attention_state_shape(int64_t B, int64_t NH, int64_t T) const override {
    if (flash_) return {B, NH, T};
    return {B, NH, T, T};
  }
  void attention_forward(float* out, float* att, const float* qkv, int64_t B, int64_t T, int64_t C,
                         int64_t NH) const override {
    count("attention_forward", {out, att, qkv});
    if (flash_) return flash_forward_on_host(out, att, qkv, B, T, C, NH);
    ops::attention_forward(out, att, qkv, B, T, C, NH);
  }
  void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att, int64_t B, int64_t T,
                          int64_t C, int64_t NH) const override {
    count("attention_backward", {dqkv, dout, qkv, att});
    if (flash_) return flash_backward_on_host(dqkv, dout, qkv, att, B, T, C, NH);
    ops::attention_backward(dqkv, dout, qkv, att, B, T, C, NH);
  }
  void optimizer_step(float* out, const float* params, const float* grads, float* const* state, int64_t n,
                      const optimizer_config& cfg, int64_t step) const override {
    count("optimizer_step", {out, params, grads});
    cpu_optimizer_step(out, params, grads, state, n, cfg, step);
  }
  void vocab_peaks(float* peaks, const float* logits, int64_t N, int64_t V, int64_t begin) const override {
    count("vocab_peaks", {peaks, logits});
    ops::vocab_peaks(peaks, logits, N, V, begin);
  }
  void vocab_exp_sums(float* probs, float* sums, const float* all_peaks, int tp, const int32_t* targets,
                      const float* logits, int64_t N, int64_t V, int64_t begin) const override {
    count("vocab_exp_sums", {probs, sums, all_peaks, targets, logits});
    ops::vocab_exp_sums(probs, sums, all_peaks, tp, targets, logits, N, V, begin);
  }
  void vocab_finish(float* row_stats, float* dlogits, float* probs, const float* sums, const float* all_peaks, int tp,
                    const int32_t* targets, int64_t N, int64_t V, int64_t begin, float scale) const override {
    count("vocab_finish", {row_stats, dlogits, probs, sums, all_peaks, targets});
    ops::vocab_finish(row_stats, dlogits, probs, sums, all_peaks, tp, targets, N, V, begin, scale);
  }
  loss_result cross_entropy(const tensor& logits, const std::vector<int32_t>& targets,
                            float grad_scale) const override {
    count("cross_entropy", {logits.raw()});
    const int64_t V = logits.size(-1), N = logits.numel() / V;
    const float* l = f32(logits);
    std::vector<float> probs(static_cast<size_t>(N * V));
    loss_result r;
    r.count = N;
    r.row_stats = tensor({N, 2});
    for (int64_t n = 0; n < N; ++n) {
      float* p = probs.data() + n * V;
      const double loss = ops::softmax_cross_entropy_forward(p, l + n * V, &targets[static_cast<size_t>(n)], 1, V);
      int64_t best = 0;
      for (int64_t v = 1; v < V; ++v)
        if (p[v] > p[best]) best = v;
      r.row_stats.data()[2 * n] = static_cast<float>(loss);
      r.row_stats.data()[2 * n + 1] = best == targets[static_cast<size_t>(n)] ? 1.0f : 0.0f;
    }
    if (grad_scale != 0.0f) {
      r.dlogits = empty(logits.shape());
      ops::softmax_cross_entropy_backward(f32_out(r.dlogits), probs.data(), targets.data(), N, V, grad_scale);
    }
    return r;
  }

 private:
  // Counts the call, and checks that every pointer it was given is in the device's memory: a
  // layer that made a CPU tensor and handed it over would be caught here.
  void count(const std::string& op, std::initializer_list<const void*> on_device = {}) const {
    for (const void* p : on_device)
      EXPECT_TRUE(!p || fake_memory()->owns(p)) << op << " got a pointer outside the device's memory";
    std::lock_guard<std::mutex> lock(mu_);
    ++calls_[op];
  }
  mutable std::mutex mu_;
  mutable std::map<std::string, int> calls_;
  mutable std::atomic<bool> flash_{false};
};

// One fake device for the whole binary: the tables are process-wide.
inline const counting_ops& fake_ops() {
  static const std::shared_ptr<counting_ops> ops = [] {
    install_allocator(fake_memory());
    auto o = std::make_shared<counting_ops>();
    install_ops(o);
    return o;
  }();
  return *ops;
}

}  // namespace troupe::test
