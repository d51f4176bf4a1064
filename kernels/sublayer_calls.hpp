// What a composite layer (transformer_block, moe_block) calls its sub-layers with: a residual add
// on the tensors' device, and a sub-layer's backward halves over the composite's saved tensors,
// repacked in that sub-layer's own layout.
#pragma once

#include <utility>
#include <vector>

#include "kernels/device_ops.hpp"
#include "kernels/layer.hpp"

namespace troupe::sublayer {

inline void add_into(tensor& a, const tensor& b) { ops_on(a).add_into(f32_out(a), f32(b), a.numel()); }

inline tensor input_grad(const layer& l, const tensor& dy, std::vector<tensor> saved) {
  saved_activations a{std::move(saved)};
  return l.backward_input(dy, a);
}

inline void weight_grad(layer& l, const tensor& dy, std::vector<tensor> saved) {
  saved_activations a{std::move(saved)};
  l.backward_weight(dy, a);
}

}  // namespace troupe::sublayer
