// partition: where a model (a flat list of layers) is cut into pipeline chunks. Either balanced
// by parameter count, or at cut points the user gives. Pure arithmetic over per-layer parameter
// counts: it builds no layers and knows nothing of devices or schedules.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/layer.hpp"

namespace troupe {

// Layers [begin, end) of the model; every chunk holds at least one layer.
struct layer_range {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
};

std::vector<int64_t> params_per_layer(const layer_list& layers);
// Per layer, its expert_tail(): the elements its expert group's replicas reduce apart.
std::vector<int64_t> expert_tails(const layer_list& layers);

// Cuts `layer_params.size()` layers into `chunks` consecutive non-empty ranges that minimize the
// largest chunk's parameter count (ties: the latest cuts, so a
// zero-parameter layer such as ReLU stays with the layer before it). Throws std::invalid_argument when
// chunks < 1 or there are fewer layers than chunks (naming both numbers).
std::vector<layer_range> balanced_partition(const std::vector<int64_t>& layer_params, int chunks);

// Ranges from user cut points: `cuts` are the first layer indices of chunks 1..chunks-1, strictly
// increasing inside (0, num_layers). Throws std::invalid_argument naming the bad cut.
std::vector<layer_range> partition_at(int64_t num_layers, const std::vector<int64_t>& cuts, int chunks);

// Moves layers [r.begin, r.end) out of `layers` (leaving empty slots behind).
layer_list take_layers(layer_list& layers, const layer_range& r);

}  // namespace troupe
