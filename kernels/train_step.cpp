// The plain training step.
#include "kernels/train_step.hpp"

#include <utility>

#include "kernels/device_ops.hpp"

namespace troupe {

int64_t loss_rows(const batch& b) { return static_cast<int64_t>(b.targets.size()); }

namespace {
// The reference step is synchronous: on a GPU it waits for the loss to reach the host.
step_stats settled(const layer_stack& stack, loss_result r) {
  ops_for(stack.where()).synchronize();
  r.settle();
  return {r.loss_sum, r.count, r.correct};
}
}  // namespace

step_stats compute_gradients(layer_stack& stack, const batch& b, float grad_scale) {
  stack_context ctx;
  tensor logits = stack.forward(b.inputs, ctx);
  loss_result r = cross_entropy(logits, b.targets, grad_scale);
  stack.backward(r.dlogits, ctx, /*need_input_grad=*/false);
  return settled(stack, std::move(r));
}

step_stats evaluate(const layer_stack& stack, const batch& b) {
  stack_context ctx;
  tensor logits = stack.forward(b.inputs, ctx);
  return settled(stack, cross_entropy(logits, b.targets, 0.0f));
}

step_stats train_step(layer_stack& stack, optimizer& opt, const batch& b) {
  stack.zero_grads();
  step_stats s = compute_gradients(stack, b, 1.0f / static_cast<float>(loss_rows(b)));
  opt.step(stack.params().data(), stack.grads().data(), stack.num_params());
  return s;
}

}  // namespace troupe
