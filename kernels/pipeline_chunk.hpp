// pipeline_chunk: one model chunk of a pipeline stage (a layer_stack) plus the activations it
// keeps per microbatch between forward and backward: the stash a schedule's F/B/I/W act on.
// A split backward (I then W) runs the layers' backward_input / backward_weight halves. It does
// no communication and no loss; the stage actor around it does (tensor-parallel layers call
// their group themselves). It counts the bytes its stashes hold, and can hold fewer by
// recomputing: `selective` drops the attention scores, `full` keeps only each layer's input
// and runs that layer's forward again right before its backward.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "kernels/layer_stack.hpp"
#include "kernels/layers_moe_block.hpp"
#include "kernels/recompute_mode.hpp"

namespace troupe {

class pipeline_chunk {
 public:
  // first_layer: the global index of layers[0] in the model (fixes the init, see layer_stack);
  // where: the device of its stack.
  pipeline_chunk(layer_list layers, int64_t first_layer, uint64_t seed, recompute_mode recompute = recompute_mode::none,
                 device where = {});

  layer_stack& stack() { return stack_; }
  const layer_stack& stack() const { return stack_; }

  // Runs the forward and stashes what its backward needs. Throws std::logic_error when the
  // microbatch already has a live stash.
  tensor forward(int microbatch, const tensor& x);
  // Full backward: adds weight gradients into stack().grads(), frees the stash, returns dL/dx
  // (empty when need_input_grad is false: the model's first chunk).
  tensor backward(int microbatch, const tensor& dy, bool need_input_grad);
  // The same, calling layer_done(i) once layer i's gradients are complete for this microbatch
  // (layers last to first): data parallelism starts a bucket's all-reduce there (layer_stack.hpp).
  tensor backward(int microbatch, const tensor& dy, bool need_input_grad, const layer_stack::layer_done_fn& layer_done);
  // Input-gradient half: returns dL/dx and keeps the stash (with each layer's output gradient)
  // for backward_weight.
  tensor backward_input(int microbatch, const tensor& dy, bool need_input_grad);
  // Weight-gradient half: adds into stack().grads() and frees the stash.
  void backward_weight(int microbatch);
  void backward_weight(int microbatch, const layer_stack::layer_done_fn& layer_done);

  int live() const { return static_cast<int>(live_.size()); }  // stashed microbatches now
  int peak_live() const { return peak_; }                       // most at once since reset
  // Bytes of forward activations held now, over every stash (a tensor two layers keep counts
  // once), and the most at once since reset, including a layer's recomputed activations. A
  // stash is counted as its forward (or a recomputation) left it, so no action rescans the others.
  int64_t live_bytes() const { return live_bytes_; }
  int64_t peak_bytes() const { return peak_bytes_; }
  // Its MoE blocks' routing over the forwards since the last call (empty for a dense chunk):
  // each forward adds its own, read before the next one routes again.
  expert_tally take_routing() { return std::exchange(routing_, {}); }
  // ZeRO-3: need(i, forward) right before layer i runs and done(i, forward) right after, in
  // forward and in a full backward, so each unit's parameters are streamed in and out around
  // its layers (the stack's split_params); under full recomputation the backward's need(i)
  // comes before layer i is rebuilt. A split backward streams them around backward_input only:
  // a weight gradient reads the saved activations and the output gradient, never the weights.
  using param_hook = std::function<void(size_t layer, bool forward)>;
  void set_param_hooks(param_hook need, param_hook done) {
    need_ = std::move(need);
    done_ = std::move(done);
  }
  // Counts the chunk's parameters, gradients and stashed activations on the device's ledger.
  void account_to(std::shared_ptr<device_memory> memory) {
    stack_.account_to(memory);
    memory_ = std::move(memory);
    if (memory_) memory_->adjust(memory_kind::activations, live_bytes_);
  }
  void reset_peak() {
    peak_ = live();
    peak_bytes_ = live_bytes();
  }

 private:
  struct stash {
    stack_context ctx;
    std::vector<tensor> inputs;  // full recomputation: each layer's input, all it keeps
    std::vector<tensor> dys;  // per layer: the output gradient backward_weight needs
    bool input_done = false;
    int64_t bytes = 0;  // as last counted
  };
  stash& find(int microbatch, const char* what);
  static int64_t bytes_of(const stash& s);
  // Recounts one stash (the one an action just grew) and the peak.
  void note_bytes(stash& s) {
    const int64_t now = bytes_of(s);
    if (memory_) memory_->adjust(memory_kind::activations, now - s.bytes);
    live_bytes_ += now - s.bytes;
    s.bytes = now;
    peak_bytes_ = std::max(peak_bytes_, live_bytes_);
  }
  void erase(int microbatch);
  // Full recomputation: layer i's activations again, from its kept input.
  void recompute_layer(stash& s, size_t i);

  layer_stack stack_;
  recompute_mode recompute_;
  bool routes_ = false;  // it holds an MoE block
  expert_tally routing_;
  std::map<int, stash> live_;
  int peak_ = 0;
  int64_t live_bytes_ = 0, peak_bytes_ = 0;
  std::shared_ptr<device_memory> memory_;
  param_hook need_, done_;
};

}  // namespace troupe
