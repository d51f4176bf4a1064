// Tensor-parallel shards of a model's parameters and the unsplit parameters they come from. The
// evaluator (and later checkpoints) hold the single-device model; the tp ranks of a stage each
// hold their share, laid out as their own layers' buffers.
#pragma once

#include <vector>

#include "kernels/model.hpp"
#include "kernels/partition.hpp"
#include "kernels/tensor.hpp"

namespace troupe {

// The unsplit flat parameters of layers r of the model, from shards[e * tp + t]: the flat
// parameters of the same layers held by tp rank t at place e of an expert group of `ep`
// (tp = shards.size() / ep). What several hold (a router, a tp-replicated layernorm) is taken
// from each alike. Throws std::invalid_argument when a shard has another size than its rank's
// layers hold.
std::vector<float> merge_tp_shards(const model_spec& spec, const layer_range& r, const std::vector<tensor>& shards,
                                   int ep = 1);

}  // namespace troupe
