// Tensor-parallel shards of a model's parameters and the unsplit parameters they come from. The
// evaluator (and later checkpoints) hold the single-device model; the tp ranks of a stage each
// hold their share, laid out as their own layers' buffers.
#pragma once

#include <vector>

#include "kernels/model.hpp"
#include "kernels/partition.hpp"
#include "kernels/tensor.hpp"

namespace troupe {

// The unsplit flat parameters of layers r of the model, from shards[t]: tp rank t's flat
// parameters of the same layers (tp = shards.size()). Throws std::invalid_argument when a shard
// has another size than rank t's layers hold.
std::vector<float> merge_tp_shards(const model_spec& spec, const layer_range& r, const std::vector<tensor>& shards);

}  // namespace troupe
