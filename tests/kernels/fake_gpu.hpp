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
#include <cmath>
#include <functional>
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
#include "kernels/optimizer.hpp"
#include "tests/kernels/fake_streams.hpp"
#include "tests/kernels/flash_host.hpp"

namespace troupe::test {

inline constexpr device fake_gpu{device_type::cuda, 7};

// Host memory that says it is cuda:7, and knows its blocks.
class host_backed_allocator final : public allocator {
 public:
  void* allocate(size_t bytes) override {
    {
      std::vector<pending> ready;
      {
        std::lock_guard<std::mutex> lock(mu_);
        ready = take_ready_locked();
      }
      give_back(ready);
    }
    void* p = cpu_allocator()->allocate(bytes);
    std::memset(p, 0xFF, bytes);  // poisoned as a GPU's fresh block is garbage: NaN floats until written
    std::lock_guard<std::mutex> lock(mu_);
    live_[static_cast<const char*>(p)] = bytes;
    return p;
  }
  // A block freed while a stream still has work pushed before the free (which may use it) is
  // given back only once that work ran, as a GPU's caching allocator keeps a block for its stream.
  void deallocate(void* p, size_t bytes) noexcept override {
    auto marks = fake_streams::pushed_so_far();
    std::vector<pending> ready;
    {
      std::lock_guard<std::mutex> lock(mu_);
      pending_.push_back(pending{p, bytes, std::move(marks)});
      ready = take_ready_locked();
    }
    give_back(ready);
  }
  void zero(void* p, size_t bytes) override {
    if (fake_streams::stream* s = fake_streams::current())
      s->push([p, bytes] { std::memset(p, 0, bytes); });
    else
      std::memset(p, 0, bytes);
  }
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
  struct pending {
    void* p;
    size_t bytes;
    std::vector<std::pair<std::shared_ptr<fake_streams::progress>, uint64_t>> after;
  };
  std::vector<pending> take_ready_locked() {
    std::vector<pending> ready;
    for (size_t i = 0; i < pending_.size();) {
      if (fake_streams::all_ran(pending_[i].after)) {
        live_.erase(static_cast<const char*>(pending_[i].p));
        ready.push_back(std::move(pending_[i]));
        pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
      } else {
        ++i;
      }
    }
    return ready;
  }
  static void give_back(const std::vector<pending>& ready) {
    for (const pending& f : ready) cpu_allocator()->deallocate(f.p, f.bytes);
  }
  mutable std::mutex mu_;
  std::map<const char*, size_t> live_;
  std::vector<pending> pending_;
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
    const bool from_host = !fake_memory()->owns(src), to_host = !fake_memory()->owns(dst);
    EXPECT_FALSE(from_host && to_host) << "a copy between two host buffers";
    fake_streams::stream* s = fake_streams::current();
    if (!s) return std::memcpy(dst, src, static_cast<size_t>(bytes)), void();
    EXPECT_FALSE(fake_streams::in_completion()) << "a copy launched from a completion callback";
    // On a stream: host bytes are taken now (a GPU's copy from pageable memory stages them in the
    // call), and a host destination reads as poison until the copy has run.
    if (to_host) std::memset(dst, 0xFF, static_cast<size_t>(bytes));
    if (from_host) {
      auto staged = std::make_shared<std::vector<char>>(static_cast<const char*>(src), static_cast<const char*>(src) + bytes);
      s->push([dst, staged] { std::memcpy(dst, staged->data(), staged->size()); });
    } else {
      s->push([dst, src, bytes] { std::memcpy(dst, src, static_cast<size_t>(bytes)); });
    }
  }
  void fill_zero(void* p, int64_t bytes) const override {
    run("fill_zero", {p}, [=] { std::memset(p, 0, static_cast<size_t>(bytes)); });
  }
  void synchronize() const override {
    count("synchronize");
    if (fake_streams::stream* s = fake_streams::current()) s->synchronize();
  }
  void matmul_forward(float* out, const float* inp, const float* w, const float* b, int64_t N, int64_t C,
                      int64_t OC) const override {
    run("matmul_forward", {out, inp, w, b}, [=] { ops::matmul_forward(out, inp, w, b, N, C, OC); });
  }
  void matmul_backward_input(float* dinp, const float* dout, const float* w, int64_t N, int64_t C,
                             int64_t OC) const override {
    run("matmul_backward_input", {dinp, dout, w}, [=] { ops::matmul_backward_input(dinp, dout, w, N, C, OC); });
  }
  void round_to_bf16(bf16* out, const float* inp, int64_t n) const override {
    run("round_to_bf16", {out, inp}, [=] { ops::round_to_bf16(out, inp, n); });
  }
  void matmul_forward_bf16(float* out, const bf16* inp, const bf16* w, const float* b, int64_t N, int64_t C,
                           int64_t OC) const override {
    run("matmul_forward_bf16", {out, inp, w, b}, [=] { ops::matmul_forward_bf16(out, inp, w, b, N, C, OC); });
  }
  void matmul_backward_input_bf16(float* dinp, const bf16* dout, const bf16* w, int64_t N, int64_t C,
                                  int64_t OC) const override {
    run("matmul_backward_input_bf16", {dinp, dout, w}, [=] { ops::matmul_backward_input_bf16(dinp, dout, w, N, C, OC); });
  }
  void matmul_backward_weight_bf16(float* dw, float* db, const bf16* dout, const bf16* inp, int64_t N, int64_t C,
                                   int64_t OC) const override {
    run("matmul_backward_weight_bf16", {dw, db, dout, inp}, [=] { ops::matmul_backward_weight_bf16(dw, db, dout, inp, N, C, OC); });
  }
  void matmul_backward_weight(float* dw, float* db, const float* dout, const float* inp, int64_t N, int64_t C,
                              int64_t OC) const override {
    run("matmul_backward_weight", {dw, db, dout, inp}, [=] { ops::matmul_backward_weight(dw, db, dout, inp, N, C, OC); });
  }
  void add_into(float* a, const float* b, int64_t n) const override {
    run("add_into", {a, b}, [=] { ops::add_into(a, b, n); });
  }
  void relu_forward(float* out, const float* inp, int64_t n) const override {
    run("relu_forward", {out, inp}, [=] { ops::relu_forward(out, inp, n); });
  }
  void relu_backward(float* dinp, const float* dout, const float* out, int64_t n) const override {
    run("relu_backward", {dinp, dout, out}, [=] { ops::relu_backward(dinp, dout, out, n); });
  }
  void gelu_forward(float* out, const float* inp, int64_t n) const override {
    run("gelu_forward", {out, inp}, [=] { ops::gelu_forward(out, inp, n); });
  }
  void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) const override {
    run("gelu_backward", {dinp, inp, dout}, [=] { ops::gelu_backward(dinp, inp, dout, n); });
  }
  void bias_gelu_forward(float* out, float* pre, const float* bias, int64_t N, int64_t OC) const override {
    run("bias_gelu_forward", {out, pre, bias}, [=] { ops::bias_gelu_forward(out, pre, bias, N, OC); });
  }
  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w, const float* b,
                         int64_t N, int64_t C) const override {
    run("layernorm_forward", {out, mean, rstd, inp, w, b}, [=] { ops::layernorm_forward(out, mean, rstd, inp, w, b, N, C); });
  }
  void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp, const float* w,
                          const float* mean, const float* rstd, int64_t N, int64_t C) const override {
    run("layernorm_backward", {dinp, dw, db, dout, inp, w, mean, rstd}, [=] { ops::layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C); });
  }
  void embedding_forward(float* out, const float* tokens, const float* wte, const float* wpe, int64_t B, int64_t T,
                         int64_t C, int64_t V) const override {
    run("embedding_forward", {out, tokens, wte, wpe}, [=] { ops::embedding_forward(out, tokens, wte, wpe, B, T, C, V); });
  }
  void embedding_backward(float* dwte, float* dwpe, const float* dout, const float* tokens, int64_t B, int64_t T,
                          int64_t C, int64_t /*V*/) const override {
    run("embedding_backward", {dwte, dwpe, dout, tokens}, [=] { ops::embedding_backward(dwte, dwpe, dout, tokens, B, T, C); });
  }
  void embedding_shard_forward(float* out, const float* tokens, const float* wte, int64_t B, int64_t T, int64_t C,
                               int64_t V, int64_t begin, int64_t n) const override {
    run("embedding_shard_forward", {out, tokens, wte}, [=] { ops::embedding_shard_forward(out, tokens, wte, B, T, C, V, begin, n); });
  }
  void embedding_shard_backward(float* dwte, const float* dout, const float* tokens, int64_t B, int64_t T, int64_t C,
                                int64_t begin, int64_t n) const override {
    run("embedding_shard_backward", {dwte, dout, tokens}, [=] { ops::embedding_shard_backward(dwte, dout, tokens, B, T, C, begin, n); });
  }
  void position_forward(float* out, const float* wpe, int64_t B, int64_t T, int64_t C) const override {
    run("position_forward", {out, wpe}, [=] { ops::position_forward(out, wpe, B, T, C); });
  }
  void position_backward(float* dwpe, const float* dout, int64_t B, int64_t T, int64_t C) const override {
    run("position_backward", {dwpe, dout}, [=] { ops::position_backward(dwpe, dout, B, T, C); });
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
    run("attention_forward", {out, att, qkv}, [=, flash = flash_.load()] {
      if (flash) return flash_forward_on_host(out, att, qkv, B, T, C, NH);
      ops::attention_forward(out, att, qkv, B, T, C, NH);
    });
  }
  void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att, int64_t B, int64_t T,
                          int64_t C, int64_t NH) const override {
    run("attention_backward", {dqkv, dout, qkv, att}, [=, flash = flash_.load()] {
      if (flash) return flash_backward_on_host(dqkv, dout, qkv, att, B, T, C, NH);
      ops::attention_backward(dqkv, dout, qkv, att, B, T, C, NH);
    });
  }
  void optimizer_step(float* out, const float* params, const float* grads, float* const* state, int64_t n,
                      const optimizer_config& cfg, int64_t step) const override {
    // The state arrays' pointers are the caller's, and gone by the time the stream runs this.
    const auto arrays = make_optimizer(cfg, 1, state_storage::external)->state_floats();
    std::vector<float*> states(state, state + arrays);
    run("optimizer_step", {out, params, grads}, [=] { cpu_optimizer_step(out, params, grads, states.data(), n, cfg, step); });
  }
  void vocab_peaks(float* peaks, const float* logits, int64_t N, int64_t V, int64_t begin) const override {
    run("vocab_peaks", {peaks, logits}, [=] { ops::vocab_peaks(peaks, logits, N, V, begin); });
  }
  void vocab_exp_sums(float* probs, float* sums, const float* all_peaks, int tp, const int32_t* targets,
                      const float* logits, int64_t N, int64_t V, int64_t begin) const override {
    run("vocab_exp_sums", {probs, sums, all_peaks, targets, logits}, [=] { ops::vocab_exp_sums(probs, sums, all_peaks, tp, targets, logits, N, V, begin); });
  }
  void vocab_finish(float* row_stats, float* dlogits, float* probs, const float* sums, const float* all_peaks, int tp,
                    const int32_t* targets, int64_t N, int64_t V, int64_t begin, float scale) const override {
    run("vocab_finish", {row_stats, dlogits, probs, sums, all_peaks, targets}, [=] { ops::vocab_finish(row_stats, dlogits, probs, sums, all_peaks, tp, targets, N, V, begin, scale); });
  }
  loss_result cross_entropy(const tensor& logits, const std::vector<int32_t>& targets,
                            float grad_scale) const override {
    const int64_t V = logits.size(-1), N = logits.numel() / V;
    loss_result r;
    r.count = N;
    r.row_stats = tensor({N, 2});
    // Host memory the device writes: poison until the stream has run the loss (settle() reads it
    // only after the queue's completion).
    if (fake_streams::current()) std::fill(r.row_stats.data(), r.row_stats.data() + 2 * N, std::nanf(""));
    if (grad_scale != 0.0f) r.dlogits = empty(logits.shape());
    float* stats = r.row_stats.data();
    float* dlogits = grad_scale != 0.0f ? f32_out(r.dlogits) : nullptr;
    const float* l = f32(logits);
    run("cross_entropy", {l, dlogits}, [=, keep = logits, stats_kept = r.row_stats, t = targets] {
      std::vector<float> probs(static_cast<size_t>(N * V));
      for (int64_t n = 0; n < N; ++n) {
        float* p = probs.data() + n * V;
        const double loss = ops::softmax_cross_entropy_forward(p, l + n * V, &t[static_cast<size_t>(n)], 1, V);
        int64_t best = 0;
        for (int64_t v = 1; v < V; ++v)
          if (p[v] > p[best]) best = v;
        stats[2 * n] = static_cast<float>(loss);
        stats[2 * n + 1] = best == t[static_cast<size_t>(n)] ? 1.0f : 0.0f;
      }
      if (dlogits) ops::softmax_cross_entropy_backward(dlogits, probs.data(), t.data(), N, V, grad_scale);
    });
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
  // Counts the op, then runs fn at once, or on the current stream (fake_streams.hpp) when there
  // is one, as a GPU would launch it there.
  template <class F>
  void run(const std::string& op, std::initializer_list<const void*> on_device, F&& fn) const {
    count(op, on_device);
    EXPECT_FALSE(fake_streams::in_completion()) << op << " launched from a completion callback";
    if (fake_streams::stream* s = fake_streams::current())
      s->push(std::function<void()>(std::forward<F>(fn)));
    else
      fn();
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
