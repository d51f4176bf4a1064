// layer_stack: a contiguous run of a model's layers with one flat parameter buffer and one flat
// gradient buffer. The whole model on one device is one stack; a pipeline stage is another.
// It runs forward and backward for one micro-batch at a time; what a micro-batch keeps for its
// backward lives in a stack_context the caller owns, so several can be in flight.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "kernels/device_memory.hpp"
#include "kernels/layer.hpp"

namespace troupe {

class device_ops;

struct stack_context {
  std::vector<saved_activations> saved;  // one per layer
};

class layer_stack {
 public:
  using layer_done_fn = std::function<void(size_t layer)>;
  // first_layer is the global index of layers[0] in the model; with seed it fixes the init, on
  // every device alike. The flat buffers live on `where`, and so must the activations it runs on.
  layer_stack(layer_list layers, int64_t first_layer, uint64_t seed, device where = {});
  layer_stack(const layer_stack&) = delete;
  layer_stack& operator=(const layer_stack&) = delete;

  int64_t num_params() const { return total_params_; }
  const device& where() const { return where_; }
  size_t num_layers() const { return layers_.size(); }
  int64_t first_layer() const { return first_layer_; }  // the model's index of at(0)
  layer& at(size_t i) { return *layers_.at(i); }
  const layer& at(size_t i) const { return *layers_.at(i); }
  // Every layer's matrix products at p from now on (matmul_precision.hpp).
  void set_matmul_precision(matmul_precision p) {
    for (auto& l : layers_) l->set_matmul_precision(p);
  }
  // Offset of layer i's parameters inside the flat buffers.
  int64_t param_offset(size_t i) const { return offsets_.at(i); }

  tensor& params() { return params_; }
  const tensor& params() const { return params_; }
  // The flat gradient buffer; a std::logic_error once the gradients are split into units.
  tensor& grads();
  const tensor& grads() const;
  void zero_grads();

  // Charges the stack's parameter and gradient buffers, and every one it allocates from now on,
  // to the device's ledger.
  void account_to(std::shared_ptr<device_memory> memory);

  // ZeRO-2: no flat gradient buffer. The gradients are held per unit (units[u] = the layers
  // [first, last] of one gradient bucket), each allocated, zeroed, when backward first reaches
  // one of its layers and handed out whole by take_unit_grads, so a rank holds only the units
  // backward is still adding to. Every layer with parameters must be in exactly one unit.
  // Throws std::invalid_argument naming a layer that is in none or in two.
  void split_grads(const std::vector<std::pair<size_t, size_t>>& units);
  bool grads_split() const { return !unit_of_layer_.empty(); }
  // The unit holding layer i, -1 for a parameter-free layer outside every unit.
  int unit_of(size_t layer) const { return unit_of_layer_.at(layer); }
  // Unit u's gradients so far (zeros if backward never reached it); the unit starts afresh.
  tensor take_unit_grads(size_t u);
  // Gives layer i's unit its storage if it has none. Every backward walk calls it before layer
  // i's backward (pipeline_chunk's split halves as well).
  void prepare_grads(size_t layer);
  // Replaces the parameter values (e.g. with what an optimizer shard sent back) by copying; from
  // any device.
  void load_params(const tensor& values);
  // Runs on `values` from now on, without a copy: the layers read it in place. It may be frozen
  // (a received message's tensor); the stack never writes its parameters. On where() only.
  void adopt_params(tensor values);
  // Hands out the gradient buffer (to send it) and continues on a fresh zeroed one, so what was
  // sent is never written again.
  tensor take_grads();

  // ZeRO-3: no flat parameter buffer either. Each gradient unit's parameters arrive whole (a
  // gathered, read-only tensor) by set_unit_params and go again by release_unit_params; a layer
  // of a unit that holds none cannot run (std::logic_error naming the layer). Needs split_grads
  // first (the same units); the flat buffer is dropped, so the caller takes its shard before.
  void split_params();
  bool params_split() const { return params_split_; }
  size_t num_units() const { return units_.size(); }
  std::pair<size_t, size_t> unit_layers(size_t u) const { return {units_.at(u).first, units_.at(u).last}; }
  int64_t unit_size(size_t u) const;  // parameters (and gradients) of unit u
  int64_t unit_offset(size_t u) const { return offsets_.at(units_.at(u).first); }  // in the unsplit layout
  void set_unit_params(size_t u, tensor values);
  void release_unit_params(size_t u) { take_unit_params(u); }
  // release_unit_params, handing the values over (to keep until the device is done reading them).
  tensor take_unit_params(size_t u);
  bool has_unit_params(size_t u) const { return !units_.at(u).params.empty(); }

  // x (and dy below) may be on another device (a batch from the host): copied to where() first.
  tensor forward(const tensor& x, stack_context& ctx) const;
  // The same, calling before(i) just before layer i's forward and after(i) right after it (ZeRO-3
  // streams each unit's parameters in and out there).
  tensor forward(const tensor& x, stack_context& ctx, const layer_done_fn& before, const layer_done_fn& after) const;
  // Backward through every layer, adding into grads(). Returns dL/dx, or an empty tensor when
  // need_input_grad is false (the first stage skips its most expensive GEMM that way).
  tensor backward(const tensor& dy, stack_context& ctx, bool need_input_grad);
  // The same walk, calling layer_done(i) as soon as layer i's parameter gradients are final
  // (layers run last to first). Data parallelism hooks its gradient buckets here, so a bucket
  // can travel while backward continues; the hook runs on the caller's thread.
  tensor backward(const tensor& dy, stack_context& ctx, bool need_input_grad, const layer_done_fn& layer_done);
  // And with before(i) called just before layer i's backward (full recomputation rebuilds the
  // layer's activations there, so only one layer's are ever held again).
  tensor backward(const tensor& dy, stack_context& ctx, bool need_input_grad, const layer_done_fn& layer_done,
                  const layer_done_fn& before);

 private:
  int64_t first_layer_ = 0;
  void rebind();
  void bind_unit(size_t u);
  void check_device(const tensor& values, const char* who) const;
  layer_list layers_;
  device where_;
  const device_ops* ops_;
  std::vector<int64_t> offsets_;
  int64_t total_params_ = 0;
  tensor params_;
  tensor grads_;
  std::shared_ptr<device_memory> memory_;
  struct grad_unit {
    size_t first = 0, last = 0;  // layers, inclusive
    tensor grads;                // empty until backward reaches the unit
    tensor params;               // ZeRO-3: the gathered parameters while the unit holds them
  };
  bool params_split_ = false;
  void check_params(size_t layer) const;
  std::vector<grad_unit> units_;
  std::vector<int> unit_of_layer_;  // -1: a layer without parameters outside every unit
};

}  // namespace troupe
