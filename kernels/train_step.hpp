// The single-device training step as plain function calls: the numerical reference that every
// runtime path (actors, data parallel, pipelines) must reproduce. The equivalence tests train with
// it (tests/actors/training_equivalence, mesh_equivalence); the runtime's stages run the same
// layers' forward and backward one chunk at a time, and its optimizer shards the same
// optimizer::step.
#pragma once

#include "kernels/batch.hpp"
#include "kernels/layer_stack.hpp"
#include "kernels/loss.hpp"
#include "kernels/optimizer.hpp"

namespace troupe {

struct step_stats {
  double loss_sum = 0.0;
  int64_t count = 0;
  int64_t correct = 0;
  double mean_loss() const { return count ? loss_sum / static_cast<double>(count) : 0.0; }
  void add(const step_stats& o) {
    loss_sum += o.loss_sum;
    count += o.count;
    correct += o.correct;
  }
};

// Forward, loss and backward for one micro-batch of a stack that holds the whole model; adds into
// stack.grads(). grad_scale is 1 / rows of the global batch (see cross_entropy).
step_stats compute_gradients(layer_stack& stack, const batch& b, float grad_scale);

// Forward and loss only.
step_stats evaluate(const layer_stack& stack, const batch& b);

// zero_grads, compute_gradients over the whole batch, optimizer step.
step_stats train_step(layer_stack& stack, optimizer& opt, const batch& b);

// Rows of the loss for a batch: samples for the MLP, tokens for the GPT.
int64_t loss_rows(const batch& b);

}  // namespace troupe
