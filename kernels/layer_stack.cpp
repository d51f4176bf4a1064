// layer_stack: flat buffers, per-layer seeded init, and the forward/backward walk.
#include "kernels/layer_stack.hpp"

#include <algorithm>
#include <stdexcept>
#include <utility>

namespace troupe {

layer_stack::layer_stack(layer_list layers, int64_t first_layer, uint64_t seed) : layers_(std::move(layers)) {
  int64_t total = 0;
  for (const auto& l : layers_) {
    offsets_.push_back(total);
    total += l->num_params();
  }
  params_ = tensor({total});
  grads_ = tensor({total});
  for (size_t i = 0; i < layers_.size(); ++i) {
    // One generator per global layer index: the same layer gets the same values however the
    // model is cut.
    std::seed_seq seq{seed, static_cast<uint64_t>(first_layer) + i};
    std::mt19937_64 rng(seq);
    layers_[i]->init(params_.data() + offsets_[i], rng);
    layers_[i]->bind(params_.data() + offsets_[i], grads_.data() + offsets_[i]);
  }
}

void layer_stack::zero_grads() { std::fill(grads_.data(), grads_.data() + grads_.numel(), 0.0f); }

void layer_stack::rebind() {
  const float* p = std::as_const(params_).data();
  for (size_t i = 0; i < layers_.size(); ++i) layers_[i]->bind(p + offsets_[i], grads_.data() + offsets_[i]);
}

void layer_stack::load_params(const tensor& values) {
  if (values.numel() != params_.numel())
    throw std::invalid_argument("layer_stack: got " + std::to_string(values.numel()) + " parameters, holds " +
                                std::to_string(params_.numel()));
  if (params_.frozen()) {  // adopted earlier: never write into a tensor someone else may hold
    params_ = tensor::uninitialized({params_.numel()});
    rebind();
  }
  std::copy(values.data(), values.data() + values.numel(), params_.data());
}

void layer_stack::adopt_params(tensor values) {
  if (values.numel() != params_.numel())
    throw std::invalid_argument("layer_stack: got " + std::to_string(values.numel()) + " parameters, holds " +
                                std::to_string(params_.numel()));
  params_ = values.reshaped({values.numel()});
  rebind();
}

tensor layer_stack::take_grads() {
  tensor out = std::move(grads_);
  grads_ = tensor({out.numel()});
  rebind();
  return out;
}

tensor layer_stack::forward(const tensor& x, stack_context& ctx) const {
  ctx.saved.assign(layers_.size(), {});
  tensor h = x;
  for (size_t i = 0; i < layers_.size(); ++i) h = layers_[i]->forward(h, ctx.saved[i]);
  return h;
}

tensor layer_stack::backward(const tensor& dy, stack_context& ctx, bool need_input_grad) {
  return backward(dy, ctx, need_input_grad, layer_done_fn());
}

tensor layer_stack::backward(const tensor& dy, stack_context& ctx, bool need_input_grad,
                             const layer_done_fn& layer_done) {
  return backward(dy, ctx, need_input_grad, layer_done, layer_done_fn());
}

tensor layer_stack::backward(const tensor& dy, stack_context& ctx, bool need_input_grad,
                             const layer_done_fn& layer_done, const layer_done_fn& before) {
  if (ctx.saved.size() != layers_.size())
    throw std::logic_error("layer_stack: backward without a matching forward");
  tensor g = dy;
  for (size_t i = layers_.size(); i-- > 0;) {
    if (before) before(i);
    const bool want_dx = i > 0 || need_input_grad;
    tensor dx = want_dx ? layers_[i]->backward_input(g, ctx.saved[i]) : tensor();
    layers_[i]->backward_weight(g, ctx.saved[i]);
    ctx.saved[i] = {};  // activations are dead once this layer's backward is done
    g = std::move(dx);
    if (layer_done) layer_done(i);
  }
  return g;
}

}  // namespace troupe
