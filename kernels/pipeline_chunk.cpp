// pipeline_chunk: the stash bookkeeping, the split backward walk over the stack's layers, and
// recomputation.
#include "kernels/pipeline_chunk.hpp"

#include <algorithm>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>

namespace troupe {

pipeline_chunk::pipeline_chunk(layer_list layers, int64_t first_layer, uint64_t seed, recompute_mode recompute,
                               device where)
    : stack_(std::move(layers), first_layer, seed, where), recompute_(recompute) {
  if (recompute_ == recompute_mode::selective)
    for (size_t i = 0; i < stack_.num_layers(); ++i) stack_.at(i).set_selective_recompute(true);
  for (size_t i = 0; i < stack_.num_layers(); ++i) routes_ = routes_ || dynamic_cast<moe_block*>(&stack_.at(i));
}

int64_t pipeline_chunk::bytes_of(const stash& s) {
  std::set<const void*> seen;  // a layer's saved input is often the layer below's saved output
  int64_t n = 0;
  auto count = [&](const tensor& t) {
    if (!t.empty() && seen.insert(t.raw()).second) n += t.nbytes();
  };
  for (const auto& t : s.inputs) count(t);
  for (const auto& a : s.ctx.saved)
    for (const auto& t : a.tensors) count(t);
  return n;
}

void pipeline_chunk::erase(int microbatch) {
  auto it = live_.find(microbatch);
  live_bytes_ -= it->second.bytes;
  if (memory_) memory_->adjust(memory_kind::activations, -it->second.bytes);
  live_.erase(it);
}

pipeline_chunk::stash& pipeline_chunk::find(int microbatch, const char* what) {
  auto it = live_.find(microbatch);
  if (it == live_.end())
    throw std::logic_error(std::string("pipeline_chunk: ") + what + " of microbatch " + std::to_string(microbatch) +
                           " without a live forward stash");
  return it->second;
}

tensor pipeline_chunk::forward(int microbatch, const tensor& x) {
  auto [it, fresh] = live_.try_emplace(microbatch);
  if (!fresh)
    throw std::logic_error("pipeline_chunk: forward of microbatch " + std::to_string(microbatch) +
                           " while its previous stash is still live");
  peak_ = std::max(peak_, live());
  stash& s = it->second;
  if (recompute_ != recompute_mode::full) {
    tensor y = need_ ? stack_.forward(x, s.ctx, [&](size_t i) { need_(i, true); }, [&](size_t i) { done_(i, true); })
                     : stack_.forward(x, s.ctx);
    note_bytes(s);
    if (routes_) tally_routing(stack_, routing_);
    return y;
  }
  // Each layer's input is kept; what the layer saved is dropped as soon as it is done.
  const size_t n = stack_.num_layers();
  s.ctx.saved.assign(n, {});
  s.inputs.assign(n, tensor());
  tensor h = x;
  for (size_t i = 0; i < n; ++i) {
    s.inputs[i] = h;
    saved_activations scratch;
    if (need_) need_(i, true);
    h = std::as_const(stack_).at(i).forward(h, scratch);
    if (done_) done_(i, true);
  }
  note_bytes(s);
  if (routes_) tally_routing(stack_, routing_);  // full recomputation's reruns route the same; not counted
  return h;
}

void pipeline_chunk::recompute_layer(stash& s, size_t i) {
  if (recompute_ != recompute_mode::full) return;
  std::as_const(stack_).at(i).forward(s.inputs[i], s.ctx.saved[i]);  // the same bits as the first time
  note_bytes(s);
}

tensor pipeline_chunk::backward(int microbatch, const tensor& dy, bool need_input_grad) {
  return backward(microbatch, dy, need_input_grad, nullptr);
}

tensor pipeline_chunk::backward(int microbatch, const tensor& dy, bool need_input_grad,
                                const layer_stack::layer_done_fn& layer_done) {
  stash& s = find(microbatch, "backward");
  if (s.input_done)
    throw std::logic_error("pipeline_chunk: full backward of microbatch " + std::to_string(microbatch) +
                           " after its backward_input");
  tensor dx;
  if (recompute_ == recompute_mode::full) {
    dx = stack_.backward(
        dy, s.ctx, need_input_grad,
        [&](size_t i) {
          s.inputs[i] = tensor();  // layer i is done: its input goes with its activations
          if (layer_done) layer_done(i);
          if (done_) done_(i, false);
        },
        [&](size_t i) {
          if (need_) need_(i, false);  // ZeRO-3: the unit's parameters are back before its layer is rebuilt
          recompute_layer(s, i);
        });
  } else if (need_) {
    dx = stack_.backward(
        dy, s.ctx, need_input_grad,
        [&](size_t i) {
          if (layer_done) layer_done(i);
          done_(i, false);
        },
        [&](size_t i) { need_(i, false); });
  } else {
    dx = layer_done ? stack_.backward(dy, s.ctx, need_input_grad, layer_done) : stack_.backward(dy, s.ctx, need_input_grad);
  }
  erase(microbatch);
  return dx;
}

tensor pipeline_chunk::backward_input(int microbatch, const tensor& dy, bool need_input_grad) {
  stash& s = find(microbatch, "backward_input");
  if (s.input_done)
    throw std::logic_error("pipeline_chunk: second backward_input of microbatch " + std::to_string(microbatch));
  const size_t n = stack_.num_layers();
  s.dys.assign(n, tensor());
  tensor g = dy;
  for (size_t i = n; i-- > 0;) {
    s.dys[i] = g;
    if (need_) need_(i, false);  // ZeRO-3: the input gradient needs the weights; the weight half does not
    recompute_layer(s, i);  // kept until backward_weight: a split backward saves less
    stack_.prepare_grads(i);
    // The model's first layer needs no input gradient; its weight half runs alone (layer.hpp).
    g = (i > 0 || need_input_grad) ? stack_.at(i).backward_input(g, s.ctx.saved[i]) : tensor();
    if (done_) done_(i, false);
  }
  s.input_done = true;
  return g;
}

void pipeline_chunk::backward_weight(int microbatch) { backward_weight(microbatch, nullptr); }

void pipeline_chunk::backward_weight(int microbatch, const layer_stack::layer_done_fn& layer_done) {
  stash& s = find(microbatch, "backward_weight");
  if (!s.input_done)
    throw std::logic_error("pipeline_chunk: backward_weight of microbatch " + std::to_string(microbatch) +
                           " before its backward_input");
  for (size_t i = stack_.num_layers(); i-- > 0;) {
    stack_.prepare_grads(i);
    stack_.at(i).backward_weight(s.dys[i], s.ctx.saved[i]);
    if (layer_done) layer_done(i);
  }
  erase(microbatch);
}

}  // namespace troupe
