// cuda_device_ops (cuda_device_ops.hpp): device_ops over kernels/cuda/ops.hpp.
#include "kernels/cuda/cuda_device_ops.hpp"

#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/check.hpp"
#include "kernels/cuda/device_alloc.hpp"
#include "kernels/cuda/ops.hpp"

namespace troupe::cuda {

namespace {

// troupe's bf16 (half.hpp, rounding as __float2bfloat16 does) and CUDA's are the same two bytes.
static_assert(sizeof(troupe::bf16) == sizeof(bf16), "one bf16 layout on both sides");
bf16* dev(troupe::bf16* p) { return reinterpret_cast<bf16*>(p); }
const bf16* dev(const troupe::bf16* p) { return reinterpret_cast<const bf16*>(p); }

class gpu_ops final : public device_ops {
 public:
  explicit gpu_ops(int index) : index_(index) {}
  device where() const override { return {device_type::cuda, index_}; }
  void make_current() const override { TROUPE_CUDA_CHECK(cudaSetDevice(index_)); }

  void copy_bytes(void* dst, const void* src, int64_t bytes) const override {
    if (bytes <= 0) return;
    // From pageable host memory the driver may wait for the stream before it stages the bytes,
    // which would hold the calling thread (a stage's) until the GPU gets there: staged into
    // pinned memory here instead, the call returns at once.
    if (pageable(src) && !pageable(dst)) return copy_from_pageable(dst, src, static_cast<size_t>(bytes), on());
    // Unified addressing: the runtime knows each pointer's device, so one call does every
    // direction.
    TROUPE_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDefault, on()));
  }
  tensor host_empty(shape_t shape, dtype type) const override {
    return tensor::uninitialized(std::move(shape), type, pinned_host_allocator());
  }
  void fill_zero(void* p, int64_t bytes) const override {
    if (bytes > 0) TROUPE_CUDA_CHECK(cudaMemsetAsync(p, 0, static_cast<size_t>(bytes), on()));
  }
  void synchronize() const override { TROUPE_CUDA_CHECK(cudaStreamSynchronize(on())); }

  void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int64_t N, int64_t C,
                      int64_t OC) const override {
    cudaStream_t s = on();
    cuda::matmul_forward(out, inp, weight, bias, N, C, OC, handle(), s);
  }
  void matmul_backward_input(float* dinp, const float* dout, const float* weight, int64_t N, int64_t C,
                             int64_t OC) const override {
    cudaStream_t s = on();
    cuda::matmul_backward_input(dinp, dout, weight, N, C, OC, handle(), s);
  }
  void matmul_backward_weight(float* dweight, float* dbias, const float* dout, const float* inp, int64_t N, int64_t C,
                              int64_t OC) const override {
    cudaStream_t s = on();
    cuda::matmul_backward_weight(dweight, dbias, dout, inp, N, C, OC, handle(), s);
  }
  void round_to_bf16(troupe::bf16* out, const float* inp, int64_t n) const override { cuda::to_bf16(dev(out), inp, n, on()); }
  void matmul_forward_bf16(float* out, const troupe::bf16* inp, const troupe::bf16* weight, const float* bias, int64_t N, int64_t C,
                           int64_t OC) const override {
    cudaStream_t s = on();
    cuda::matmul_forward(out, dev(inp), dev(weight), bias, N, C, OC, handle(), s);
  }
  void matmul_backward_input_bf16(float* dinp, const troupe::bf16* dout, const troupe::bf16* weight, int64_t N, int64_t C,
                                  int64_t OC) const override {
    cudaStream_t s = on();
    cuda::matmul_backward_input(dinp, dev(dout), dev(weight), N, C, OC, handle(), s);
  }
  void matmul_backward_weight_bf16(float* dweight, float* dbias, const troupe::bf16* dout, const troupe::bf16* inp, int64_t N,
                                   int64_t C, int64_t OC) const override {
    cudaStream_t s = on();
    cuda::matmul_backward_weight(dweight, dbias, dev(dout), dev(inp), N, C, OC, handle(), s);
  }
  void add_into(float* a, const float* b, int64_t n) const override { cuda::add_into(a, b, n, on()); }
  void relu_forward(float* out, const float* inp, int64_t n) const override { cuda::relu_forward(out, inp, n, on()); }
  void relu_backward(float* dinp, const float* dout, const float* out, int64_t n) const override {
    cuda::relu_backward(dinp, dout, out, n, on());
  }

  void gelu_forward(float* out, const float* inp, int64_t n) const override { cuda::gelu_forward(out, inp, n, on()); }
  void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) const override {
    cuda::gelu_backward(dinp, inp, dout, n, on());
  }
  void bias_gelu_forward(float* out, float* pre, const float* bias, int64_t N, int64_t OC) const override {
    cuda::bias_gelu_forward(out, pre, bias, N, OC, on());
  }
  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                         const float* bias, int64_t N, int64_t C) const override {
    cuda::layernorm_forward(out, mean, rstd, inp, weight, bias, N, C, on());
  }
  void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                          const float* weight, const float* mean, const float* rstd, int64_t N,
                          int64_t C) const override {
    cuda::layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, on());
  }
  void embedding_forward(float* out, const float* tokens, const float* wte, const float* wpe, int64_t B, int64_t T,
                         int64_t C, int64_t V) const override {
    cuda::embedding_forward(out, tokens, wte, wpe, B, T, C, V, on());
  }
  void embedding_backward(float* dwte, float* dwpe, const float* dout, const float* tokens, int64_t B, int64_t T,
                          int64_t C, int64_t V) const override {
    cuda::embedding_backward(dwte, dwpe, dout, tokens, B, T, C, V, on());
  }
  void embedding_shard_forward(float* out, const float* tokens, const float* wte_shard, int64_t B, int64_t T,
                               int64_t C, int64_t V, int64_t begin, int64_t count) const override {
    cuda::embedding_shard_forward(out, tokens, wte_shard, B, T, C, V, begin, count, on());
  }
  void embedding_shard_backward(float* dwte_shard, const float* dout, const float* tokens, int64_t B, int64_t T,
                                int64_t C, int64_t begin, int64_t count) const override {
    cuda::embedding_shard_backward(dwte_shard, dout, tokens, B, T, C, begin, count, on());
  }
  void position_forward(float* out, const float* wpe, int64_t B, int64_t T, int64_t C) const override {
    cuda::position_forward(out, wpe, B, T, C, on());
  }
  void position_backward(float* dwpe, const float* dout, int64_t B, int64_t T, int64_t C) const override {
    cuda::position_backward(dwpe, dout, B, T, C, on());
  }
  std::vector<int64_t> attention_state_shape(int64_t B, int64_t NH, int64_t T) const override { return {B, NH, T}; }
  void attention_forward(float* out, float* lse, const float* qkv, int64_t B, int64_t T, int64_t C,
                         int64_t NH) const override {
    cuda::attention_forward(out, lse, qkv, B, T, C, NH, on());
  }
  void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* lse, int64_t B, int64_t T,
                          int64_t C, int64_t NH) const override {
    cudaStream_t s = on();
    // Freed at once: the allocator hands it out again only to work ordered after this on the
    // same stream (a GPU's compute runs on its queue's one stream).
    tensor D = empty({B, NH, T});
    cuda::attention_backward(dqkv, f32_out(D), dout, qkv, lse, B, T, C, NH, s);
  }

  void optimizer_step(float* out, const float* params, const float* grads, float* const* state, int64_t n,
                      const optimizer_config& cfg, int64_t step) const override {
    cudaStream_t s = on();
    if (cfg.kind == optimizer_kind::adamw) return cuda::adamw_step(out, nullptr, state[0], state[1], params, grads, n, cfg, step, s);
    if (cfg.kind == optimizer_kind::sgd)
      return cuda::sgd_step(out, nullptr, cfg.momentum != 0.0f ? state[0] : nullptr, params, grads, n, cfg, step, s);
    throw std::invalid_argument("optimizer_step: no CUDA update for optimizer \"" + std::string(to_string(cfg.kind)) + "\"");
  }

  void vocab_peaks(float* peaks, const float* logits, int64_t N, int64_t V, int64_t begin) const override {
    cuda::vocab_peaks(peaks, logits, N, V, begin, on());
  }
  void vocab_exp_sums(float* probs, float* sums, const float* all_peaks, int tp, const int32_t* targets,
                      const float* logits, int64_t N, int64_t V, int64_t begin) const override {
    cuda::vocab_exp_sums(probs, sums, all_peaks, tp, targets, logits, N, V, begin, on());
  }
  void vocab_finish(float* row_stats, float* dlogits, float* probs, const float* sums, const float* all_peaks, int tp,
                    const int32_t* targets, int64_t N, int64_t V, int64_t begin, float scale) const override {
    cuda::vocab_finish(row_stats, dlogits, probs, sums, all_peaks, tp, targets, N, V, begin, scale, on());
  }
  loss_result cross_entropy(const tensor& logits, const std::vector<int32_t>& targets,
                            float grad_scale) const override {
    const int64_t V = logits.size(-1);
    const int64_t N = logits.numel() / V;
    cudaStream_t s = on();
    loss_result r;
    r.count = N;
    const tensor dev_targets = targets_here(targets);
    const int32_t* t = targets_of(dev_targets);
    tensor probs = empty({N, V}), losses = empty({N}), stats = empty({N, 2});
    cuda::softmax_cross_entropy_forward(f32_out(probs), f32_out(losses), f32(logits), t, N, V, s);
    cuda::cross_entropy_row_stats(f32_out(stats), f32(losses), f32(probs), t, N, V, s);
    if (grad_scale != 0.0f) {
      r.dlogits = empty(logits.shape());
      cuda::softmax_cross_entropy_backward(f32_out(r.dlogits), f32(probs), t, N, V, grad_scale, s);
    }
    r.row_stats = to_device(stats, device{}, s);  // pinned: settle() reads it once the stream is done
    return r;
  }

 private:
  // Makes the GPU current (work may run on any thread) and returns the stream to launch on.
  cudaStream_t on() const {
    TROUPE_CUDA_CHECK(cudaSetDevice(index_));
    return current_stream();
  }
  // cuBLAS handles are not thread-safe, and a handle's workspace serves one stream at a time (two
  // stages on two streams sharing one would write it concurrently): one per thread, GPU and
  // stream, as PyTorch keeps one per thread and stream.
  blas& handle() const {
    thread_local std::map<std::pair<int, cudaStream_t>, std::unique_ptr<blas>> per_stream;
    auto& h = per_stream[{index_, current_stream()}];
    if (!h) h = std::make_unique<blas>();
    return *h;
  }
  int index_;
};

}  // namespace

const device_ops& install_cuda_ops(int index) {
  static std::mutex mu;
  static std::vector<std::shared_ptr<const gpu_ops>> made;
  std::lock_guard<std::mutex> lock(mu);
  if (index >= 0 && static_cast<size_t>(index) < made.size() && made[static_cast<size_t>(index)])
    return *made[static_cast<size_t>(index)];
  cuda_device_allocator(index);  // checks the GPU is there, and installs its allocator
  auto ops = std::make_shared<const gpu_ops>(index);
  if (made.size() <= static_cast<size_t>(index)) made.resize(static_cast<size_t>(index) + 1);
  made[static_cast<size_t>(index)] = ops;
  install_ops(ops);
  return *ops;
}

}  // namespace troupe::cuda
