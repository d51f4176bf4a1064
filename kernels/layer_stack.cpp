// layer_stack: flat buffers, per-layer seeded init, and the forward/backward walk.
#include "kernels/layer_stack.hpp"

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "kernels/device_ops.hpp"

namespace troupe {

layer_stack::layer_stack(layer_list layers, int64_t first_layer, uint64_t seed, device where)
    : first_layer_(first_layer), layers_(std::move(layers)), where_(where), ops_(&ops_for(where)) {
  int64_t total = 0;
  for (const auto& l : layers_) {
    offsets_.push_back(total);
    total += l->num_params();
  }
  total_params_ = total;
  tensor host({total});  // init draws on the CPU, so a GPU stack starts where a CPU one does
  for (size_t i = 0; i < layers_.size(); ++i) {
    // One generator per global layer index: the same layer gets the same values however the
    // model is cut.
    std::seed_seq seq{seed, static_cast<uint64_t>(first_layer) + i};
    std::mt19937_64 rng(seq);
    layers_[i]->init(host.data() + offsets_[i], rng);
  }
  if (where_.is_cpu()) {
    params_ = std::move(host);
  } else {
    params_ = ops_->empty({total});
    ops_->copy(params_, host);
  }
  grads_ = ops_->zeros({total});
  rebind();
}

tensor& layer_stack::grads() {
  if (grads_split()) throw std::logic_error("layer_stack: the gradients are split into units (ZeRO-2): no flat buffer");
  return grads_;
}

const tensor& layer_stack::grads() const {
  if (grads_split()) throw std::logic_error("layer_stack: the gradients are split into units (ZeRO-2): no flat buffer");
  return grads_;
}

void layer_stack::zero_grads() {
  if (!grads_split()) {
    ops_->fill_zero(grads_.raw(), grads_.nbytes());
    return;
  }
  for (size_t u = 0; u < units_.size(); ++u) {
    units_[u].grads = tensor();
    bind_unit(u);
  }
}

void layer_stack::account_to(std::shared_ptr<device_memory> memory) {
  memory_ = std::move(memory);
  if (!memory_) return;
  memory_->charge(params_, memory_kind::parameters);
  memory_->charge(grads_, memory_kind::gradients);
  for (const auto& u : units_) memory_->charge(u.grads, memory_kind::gradients);
}

void layer_stack::rebind() {
  const float* p = f32(params_);
  if (grads_split()) {
    for (size_t i = 0; i < layers_.size(); ++i)
      if (unit_of_layer_[i] < 0) layers_[i]->bind(p ? p + offsets_[i] : nullptr, nullptr);  // no parameters, no gradients
    for (size_t u = 0; u < units_.size(); ++u) bind_unit(u);
    return;
  }
  for (size_t i = 0; i < layers_.size(); ++i) layers_[i]->bind(p + offsets_[i], f32_out(grads_) + offsets_[i]);
}

void layer_stack::bind_unit(size_t u) {
  grad_unit& unit = units_[u];
  for (size_t i = unit.first; i <= unit.last; ++i) {
    const int64_t at = offsets_[i] - offsets_[unit.first];
    const float* p = !params_split_        ? f32(params_) + offsets_[i]
                     : unit.params.empty() ? nullptr
                                           : f32(unit.params) + at;
    layers_[i]->bind(p, unit.grads.empty() ? nullptr : f32_out(unit.grads) + at);
  }
}

int64_t layer_stack::unit_size(size_t u) const {
  const grad_unit& unit = units_.at(u);
  return offsets_[unit.last] + layers_[unit.last]->num_params() - offsets_[unit.first];
}

void layer_stack::split_params() {
  if (!grads_split()) throw std::logic_error("layer_stack: split_params needs the gradient units (split_grads) first");
  params_split_ = true;
  params_ = tensor();
  rebind();
}

void layer_stack::set_unit_params(size_t u, tensor values) {
  if (!params_split_) throw std::logic_error("layer_stack: set_unit_params without split_params");
  if (values.numel() != unit_size(u))
    throw std::invalid_argument("layer_stack: unit " + std::to_string(u) + " holds " + std::to_string(unit_size(u)) +
                                " parameters, got " + std::to_string(values.numel()));
  check_device(values, "set_unit_params");
  if (memory_) memory_->charge(values, memory_kind::parameters);
  units_.at(u).params = std::move(values);
  bind_unit(u);
}

tensor layer_stack::take_unit_params(size_t u) {
  tensor out = std::move(units_.at(u).params);
  units_.at(u).params = tensor();
  bind_unit(u);
  return out;
}

void layer_stack::check_params(size_t layer) const {
  if (!params_split_ || unit_of_layer_.at(layer) < 0) return;
  if (units_[static_cast<size_t>(unit_of_layer_[layer])].params.empty())
    throw std::logic_error("layer_stack: layer " + std::to_string(layer) + " (" + layers_[layer]->kind() +
                           ") runs while its unit " + std::to_string(unit_of_layer_[layer]) +
                           " holds no parameters (not fetched, or released)");
}

void layer_stack::split_grads(const std::vector<std::pair<size_t, size_t>>& units) {
  std::vector<int> of(layers_.size(), -1);
  std::vector<grad_unit> list;
  for (const auto& [first, last] : units) {
    if (first > last || last >= layers_.size())
      throw std::invalid_argument("layer_stack: gradient unit of layers [" + std::to_string(first) + ", " +
                                  std::to_string(last) + "] outside the stack's " + std::to_string(layers_.size()));
    for (size_t i = first; i <= last; ++i) {
      if (of[i] >= 0) throw std::invalid_argument("layer_stack: layer " + std::to_string(i) + " is in two gradient units");
      of[i] = static_cast<int>(list.size());
    }
    list.push_back({first, last, tensor(), tensor()});
  }
  for (size_t i = 0; i < layers_.size(); ++i)
    if (of[i] < 0 && layers_[i]->num_params() > 0)
      throw std::invalid_argument("layer_stack: layer " + std::to_string(i) + " (" + layers_[i]->kind() +
                                  ") has parameters but is in no gradient unit");
  units_ = std::move(list);
  unit_of_layer_ = std::move(of);
  grads_ = tensor();
  rebind();
}

tensor layer_stack::take_unit_grads(size_t u) {
  grad_unit& unit = units_.at(u);
  tensor out = std::move(unit.grads);
  unit.grads = tensor();
  if (out.empty()) {
    out = ops_->zeros({unit_size(u)});
    if (memory_) memory_->charge(out, memory_kind::gradients);
  }
  bind_unit(u);
  return out;
}

void layer_stack::prepare_grads(size_t layer) {
  if (!grads_split() || unit_of_layer_.at(layer) < 0) return;
  const auto u = static_cast<size_t>(unit_of_layer_[layer]);
  grad_unit& unit = units_[u];
  if (!unit.grads.empty()) return;
  unit.grads = ops_->zeros({unit_size(u)});
  if (memory_) memory_->charge(unit.grads, memory_kind::gradients);
  bind_unit(u);
}

void layer_stack::load_params(const tensor& values) {
  if (values.numel() != params_.numel())
    throw std::invalid_argument("layer_stack: got " + std::to_string(values.numel()) + " parameters, holds " +
                                std::to_string(params_.numel()));
  if (params_.frozen()) {  // adopted earlier: never write into a tensor someone else may hold
    params_ = ops_->empty({params_.numel()});
    if (memory_) memory_->charge(params_, memory_kind::parameters);
    rebind();
  }
  tensor from = values.reshaped({values.numel()});
  (where_.is_cpu() ? ops_for(values.where()) : *ops_).copy(params_, from);
}

void layer_stack::adopt_params(tensor values) {
  if (values.numel() != params_.numel())
    throw std::invalid_argument("layer_stack: got " + std::to_string(values.numel()) + " parameters, holds " +
                                std::to_string(params_.numel()));
  check_device(values, "adopt_params");
  params_ = values.reshaped({values.numel()});
  if (memory_) memory_->charge(params_, memory_kind::parameters);  // counted once if its sender charged it
  rebind();
}

tensor layer_stack::take_grads() {
  tensor out = grads();
  grads_ = ops_->zeros({out.numel()});
  if (memory_) memory_->charge(grads_, memory_kind::gradients);
  rebind();
  return out;
}

void layer_stack::check_device(const tensor& values, const char* who) const {
  if (values.where() != where_)
    throw std::invalid_argument("layer_stack: " + std::string(who) + " got parameters on " + values.where().to_string() +
                                " for a stack on " + where_.to_string());
}

tensor layer_stack::forward(const tensor& x, stack_context& ctx) const {
  return forward(x, ctx, layer_done_fn(), layer_done_fn());
}

tensor layer_stack::forward(const tensor& x, stack_context& ctx, const layer_done_fn& before,
                            const layer_done_fn& after) const {
  ctx.saved.assign(layers_.size(), {});
  tensor h = ops_->to_here(x);  // a batch from the host goes to the stack's device first
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (before) before(i);
    check_params(i);
    h = layers_[i]->forward(h, ctx.saved[i]);
    if (after) after(i);
  }
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
  tensor g = ops_->to_here(dy);
  for (size_t i = layers_.size(); i-- > 0;) {
    if (before) before(i);
    check_params(i);
    prepare_grads(i);
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
