// pipeline_chunk: the stash bookkeeping and the split backward walk over the stack's layers.
#include "kernels/pipeline_chunk.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace troupe {

pipeline_chunk::pipeline_chunk(layer_list layers, int64_t first_layer, uint64_t seed)
    : stack_(std::move(layers), first_layer, seed) {}

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
  return stack_.forward(x, it->second.ctx);
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
  tensor dx = layer_done ? stack_.backward(dy, s.ctx, need_input_grad, layer_done)
                         : stack_.backward(dy, s.ctx, need_input_grad);
  live_.erase(microbatch);
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
    // The model's first layer needs no input gradient; its weight half runs alone (layer.hpp).
    g = (i > 0 || need_input_grad) ? stack_.at(i).backward_input(g, s.ctx.saved[i]) : tensor();
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
    stack_.at(i).backward_weight(s.dys[i], s.ctx.saved[i]);
    if (layer_done) layer_done(i);
  }
  live_.erase(microbatch);
}

}  // namespace troupe
