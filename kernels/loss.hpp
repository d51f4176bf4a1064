// Cross-entropy loss over logits (N, V) with integer targets: the one loss troupe trains with.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/tensor.hpp"

namespace troupe {

struct loss_result {
  double loss_sum = 0.0;  // summed over rows; divide by count for the mean
  int64_t count = 0;      // rows (samples for the MLP, tokens for the GPT)
  int64_t correct = 0;    // rows whose arg-max equals the target
  tensor dlogits;         // (probs - onehot) * grad_scale; empty when grad_scale == 0
};

// grad_scale is 1 / (rows in the whole global batch), so micro-batch gradients add up to the
// gradient of the global mean loss. With grad_scale == 0 no gradient is produced (evaluation).
loss_result cross_entropy(const tensor& logits, const std::vector<int32_t>& targets, float grad_scale);

}  // namespace troupe
