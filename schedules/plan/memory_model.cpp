// Memory arithmetic (see memory_model.hpp).
#include "schedules/plan/memory_model.hpp"

#include <stdexcept>

namespace troupe::sched::plan {

double memory_by_kind::of(memory_kind k) const {
  switch (k) {
    case memory_kind::parameters:
      return parameters;
    case memory_kind::gradients:
      return gradients;
    case memory_kind::optimizer_state:
      return optimizer_state;
    case memory_kind::activations:
      return activations;
    case memory_kind::buffers:
      return buffers;
  }
  return 0;
}

const char* to_string(optimizer o) {
  switch (o) {
    case optimizer::adam:
      return "adam";
    case optimizer::sgd:
      return "sgd";
  }
  return "?";
}

state_bytes mixed_precision(optimizer o) {
  switch (o) {
    case optimizer::adam:
      return {2, 2, 12};
    case optimizer::sgd:
      return {2, 2, 8};
  }
  return {};
}

state_bytes deepspeed_estimator(int zero_stage) {
  return {2, 4, 12, zero_stage >= 3 ? 0.0 : 2.0};
}

memory_by_kind model_states(double params, int dp, int zero_stage, const state_bytes& b, offload where,
                            double gathered_layer_params) {
  if (zero_stage < 0 || zero_stage > 3)
    throw std::invalid_argument("ZeRO stage must be 0, 1, 2 or 3, got " + std::to_string(zero_stage));
  if (dp < 1) throw std::invalid_argument("dp must be >= 1, got " + std::to_string(dp));
  if (where.parameters && zero_stage < 3)
    throw std::invalid_argument("offloading parameters needs ZeRO stage 3, got stage " + std::to_string(zero_stage));
  const double shard = params / dp;
  memory_by_kind m;
  m.parameters = zero_stage >= 3 ? shard * b.parameters : params * b.parameters;
  m.gradients = (zero_stage >= 2 ? shard * b.gradients : params * b.gradients) + params * b.gradient_buffer;
  m.optimizer_state = zero_stage >= 1 ? shard * b.optimizer_state : params * b.optimizer_state;
  if (where.optimizer) {
    m.optimizer_state = 0;
    // The host steps the optimizer, so the gradient shards stream there as they are reduced.
    if (zero_stage >= 2) m.gradients = 0;
  }
  if (where.parameters) m.parameters = 0;
  // Stage 3 materializes one layer at a time: its parameters and their gradients at 16 bits.
  if (zero_stage >= 3) m.buffers = 4 * gathered_layer_params;
  return m;
}

double activation_bytes_per_layer(const layer_shape& s, int tp, bool sp, recompute_mode r) {
  const double t = tp, sbh = s.sequence * s.micro_batch * s.hidden;
  const double attention = 5 * s.heads * s.sequence / (s.hidden * t);
  // Layer norms and dropouts are replicated over tp unless sequence parallelism splits them.
  const double linear = sp ? 34 / t : 10 + 24 / t;
  switch (r) {
    case recompute_mode::none:
      return sbh * (linear + attention);
    case recompute_mode::selective:
      return sbh * linear;
    case recompute_mode::full:
      return sp ? 2 * sbh / t : 2 * sbh;
  }
  return 0;
}

}  // namespace troupe::sched::plan
