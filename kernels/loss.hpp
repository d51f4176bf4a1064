// Cross-entropy loss over logits (N, V) with integer targets: the one loss troupe trains with.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/tensor.hpp"
#include "kernels/tp_group.hpp"

namespace troupe {

struct loss_result {
  double loss_sum = 0.0;  // summed over rows; divide by count for the mean
  int64_t count = 0;      // rows (samples for the MLP, tokens for the GPT)
  int64_t correct = 0;    // rows whose arg-max equals the target
  tensor dlogits;         // (probs - onehot) * grad_scale; empty when grad_scale == 0
  // On a GPU the loss and the hits are still on their way: each row's (loss, 1 if its arg-max is
  // the target) in host memory the GPU's queue writes, and loss_sum and correct hold nothing of
  // them yet. settle() adds them in, once that queue has completed. Empty on the CPU.
  tensor row_stats;
  void settle();
};

// grad_scale is 1 / (rows in the whole global batch), so micro-batch gradients add up to the
// gradient of the global mean loss. With grad_scale == 0 no gradient is produced (evaluation).
loss_result cross_entropy(const tensor& logits, const std::vector<int32_t>& targets, float grad_scale);

// The same loss when the logits are split over the vocabulary (Megatron's vocab-parallel
// cross-entropy): `logits` (N, V_local) are columns shard_of(vocab, tp, rank) of logits no rank
// ever holds whole. Two collectives of a few floats per row make it exact: an all-gather of each
// rank's row maxima (and their arg-max, for `correct`), and an all-reduce of the sums of
// exponentials and the target logit. Every rank returns the same loss; dlogits is its own columns.
loss_result vocab_parallel_cross_entropy(const tensor& logits, const std::vector<int32_t>& targets, float grad_scale,
                                         int64_t vocab, tp_group& g);

}  // namespace troupe
