// device_ops: the ops of ops.hpp behind one interface per device, so a layer is written once and
// runs wherever its tensors live: ops_on(x) is the CPU's (ops.hpp, inline) for a CPU tensor and
// CUDA's (kernels/cuda/cuda_device_ops.hpp, enqueued on the thread's current stream) for a GPU
// one. Same names, argument order (out, inputs..., sizes...) and accumulation rules as ops.hpp;
// every pointer is in the memory of where(). No CUDA header, no CAF.
//
// What the CPU and CUDA ops cannot share: a kernel cannot throw, so a bad token or target gives
// NaN on a GPU where the CPU throws std::out_of_range; and the loss of a GPU comes back to the
// host only once its queue has completed (loss_result::settle).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/loss.hpp"
#include "kernels/optimizer.hpp"
#include "kernels/tensor.hpp"

namespace troupe {

class device_ops {
 public:
  virtual ~device_ops() = default;
  virtual device where() const = 0;

  // ---- memory ----
  // dst = src, same dtype and numel; either may be on the CPU. Stream-ordered on a GPU: a host
  // destination is complete only once the queue that ran this has completed.
  // Throws std::invalid_argument for another dtype or size, std::logic_error for a tensor on a
  // third device.
  void copy(tensor& dst, const tensor& src) const;
  // n floats from src to dst, where() either is or the host: for slices of flat buffers.
  void copy_floats(float* dst, const float* src, int64_t n) const {
    copy_bytes(dst, src, n * static_cast<int64_t>(sizeof(float)));
  }
  // The one copy every device implements: bytes between its memory and the host's, either way.
  virtual void copy_bytes(void* dst, const void* src, int64_t bytes) const = 0;
  // Uninitialized host memory this device copies to and from without waiting (pinned for a
  // GPU): where a device's values go on their way to the host.
  virtual tensor host_empty(shape_t shape, dtype type = dtype::f32) const {
    return tensor::uninitialized(std::move(shape), type, device{});
  }
  // Uninitialized, on where(), for outputs an op overwrites whole.
  tensor empty(shape_t shape, dtype type = dtype::f32) const;
  // Zero-filled, on where(), stream-ordered.
  tensor zeros(shape_t shape, dtype type = dtype::f32) const;
  virtual void fill_zero(void* p, int64_t bytes) const = 0;
  // A copy of x on where() (x itself when it is there already).
  tensor to_here(const tensor& x) const;
  // A copy of x (here) in host memory, stream-ordered: complete once the queue that ran this has
  // completed. It goes to host_empty's memory (pinned for a GPU), so the copy needs no wait.
  tensor host_copy(const tensor& x) const;
  // Loss targets on where(), stream-ordered, as int32 in 4-byte storage (tensors have no integer
  // dtype): read through targets_of.
  tensor targets_here(const std::vector<int32_t>& targets) const;
  // Waits until what this thread enqueued here has run (CPU: nothing to wait for). Only for
  // plain callers (train_step.hpp's reference step); an actor waits for its queue's completion.
  virtual void synchronize() const = 0;
  // Makes where() the calling thread's current device, for a thread of its own that launches
  // there outside any queue (a collective's: kernels/cuda launches on the current device). CPU:
  // nothing to do.
  virtual void make_current() const {}

  // ---- dense ----
  virtual void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int64_t N,
                              int64_t C, int64_t OC) const = 0;
  virtual void matmul_backward_input(float* dinp, const float* dout, const float* weight, int64_t N, int64_t C,
                                     int64_t OC) const = 0;
  virtual void matmul_backward_weight(float* dweight, float* dbias, const float* dout, const float* inp, int64_t N,
                                      int64_t C, int64_t OC) const = 0;
  virtual void add_into(float* a, const float* b, int64_t n) const = 0;
  virtual void relu_forward(float* out, const float* inp, int64_t n) const = 0;
  virtual void relu_backward(float* dinp, const float* dout, const float* out, int64_t n) const = 0;

  // ---- dense over bf16 operands (matmul_precision.hpp) ----
  // The three products above with bf16 operands, summed in fp32 into fp32 results (ops.hpp).
  virtual void round_to_bf16(bf16* out, const float* inp, int64_t n) const = 0;
  virtual void matmul_forward_bf16(float* out, const bf16* inp, const bf16* weight, const float* bias, int64_t N,
                                   int64_t C, int64_t OC) const = 0;
  virtual void matmul_backward_input_bf16(float* dinp, const bf16* dout, const bf16* weight, int64_t N, int64_t C,
                                          int64_t OC) const = 0;
  virtual void matmul_backward_weight_bf16(float* dweight, float* dbias, const bf16* dout, const bf16* inp,
                                           int64_t N, int64_t C, int64_t OC) const = 0;

  // ---- transformer ----
  virtual void gelu_forward(float* out, const float* inp, int64_t n) const = 0;
  virtual void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) const = 0;
  virtual void bias_gelu_forward(float* out, float* pre, const float* bias, int64_t N, int64_t OC) const = 0;
  virtual void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                                 const float* bias, int64_t N, int64_t C) const = 0;
  virtual void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                                  const float* weight, const float* mean, const float* rstd, int64_t N,
                                  int64_t C) const = 0;
  virtual void embedding_forward(float* out, const float* tokens, const float* wte, const float* wpe, int64_t B,
                                 int64_t T, int64_t C, int64_t V) const = 0;
  // V bounds the rows a token may add to (the forward checked the tokens; a GPU's cannot throw).
  virtual void embedding_backward(float* dwte, float* dwpe, const float* dout, const float* tokens, int64_t B,
                                  int64_t T, int64_t C, int64_t V) const = 0;
  virtual void embedding_shard_forward(float* out, const float* tokens, const float* wte_shard, int64_t B, int64_t T,
                                       int64_t C, int64_t V, int64_t begin, int64_t count) const = 0;
  virtual void embedding_shard_backward(float* dwte_shard, const float* dout, const float* tokens, int64_t B,
                                        int64_t T, int64_t C, int64_t begin, int64_t count) const = 0;
  virtual void position_forward(float* out, const float* wpe, int64_t B, int64_t T, int64_t C) const = 0;
  virtual void position_backward(float* dwpe, const float* dout, int64_t B, int64_t T, int64_t C) const = 0;
  // A bias added to every row of out (N, C), and its gradient summed over the rows into dbias:
  // a bias is the position embedding of a sequence one token long.
  void add_bias(float* out, const float* bias, int64_t N, int64_t C) const { position_forward(out, bias, N, 1, C); }
  void bias_backward(float* dbias, const float* dout, int64_t N, int64_t C) const {
    position_backward(dbias, dout, N, 1, C);
  }
  // What the attention's forward leaves for its backward (att below): the probabilities
  // (B, NH, T, T) on the CPU; a GPU's flash-style kernel keeps a log-sum-exp per row, (B, NH, T).
  virtual std::vector<int64_t> attention_state_shape(int64_t B, int64_t NH, int64_t T) const {
    return {B, NH, T, T};
  }
  virtual void attention_forward(float* out, float* att, const float* qkv, int64_t B, int64_t T, int64_t C,
                                 int64_t NH) const = 0;
  virtual void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att, int64_t B,
                                  int64_t T, int64_t C, int64_t NH) const = 0;

  // ---- optimizer ----
  // One step of cfg's update (kernels/optimizer.hpp's formulas) over n values: out may be params
  // (in place); state is make_optimizer's state_floats() arrays of n floats on this device (zeros
  // before the first step); step counts from 1.
  virtual void optimizer_step(float* out, const float* params, const float* grads, float* const* state, int64_t n,
                              const optimizer_config& cfg, int64_t step) const = 0;

  // ---- loss ----
  // cross_entropy (loss.hpp) on this device. A GPU leaves the loss and the hits in the result's
  // row_stats, on their way to the host: loss_result::settle() reads them once the queue that
  // ran this has completed. Its targets are host values (the batch's); a GPU copies them itself.
  virtual loss_result cross_entropy(const tensor& logits, const std::vector<int32_t>& targets,
                                    float grad_scale) const = 0;
  // vocab_parallel_cross_entropy's three passes (ops.hpp), between which the group meets; the
  // targets are int32 in this device's memory.
  virtual void vocab_peaks(float* peaks, const float* logits, int64_t N, int64_t V, int64_t begin) const = 0;
  virtual void vocab_exp_sums(float* probs, float* sums, const float* all_peaks, int tp, const int32_t* targets,
                              const float* logits, int64_t N, int64_t V, int64_t begin) const = 0;
  virtual void vocab_finish(float* row_stats, float* dlogits, float* probs, const float* sums, const float* all_peaks,
                            int tp, const int32_t* targets, int64_t N, int64_t V, int64_t begin,
                            float scale) const = 0;
};

// The f32 values of a tensor on any device, for the ops above: read-only, and writable (a
// std::logic_error once frozen, or for another dtype).
inline const float* f32(const tensor& t) { return t.data_as<float>(); }
inline float* f32_out(tensor& t) { return t.data_as<float>(); }

// x's values on the host: x itself when it is there, else a copy, complete when this returns
// (it waits for the device: for callers off the device's critical path, such as an optimizer
// shard on its own thread or an export between steps).
tensor on_host(const tensor& x);

// The int32 targets of device_ops::targets_here.
inline const int32_t* targets_of(const tensor& t) { return static_cast<const int32_t*>(t.raw()); }

// The ops of the device x lives on.
const device_ops& ops_on(const tensor& x);
// The ops of `d`: the CPU's for any CPU, the one installed for a GPU. Throws std::runtime_error
// naming the device when none is (a CPU-only build, or kernels/cuda's install_cuda_ops not run).
const device_ops& ops_for(const device& d);
// Makes `ops` the ops of ops->where() from now on. Not for the CPU, whose ops are fixed.
void install_ops(std::shared_ptr<const device_ops> ops);

}  // namespace troupe
