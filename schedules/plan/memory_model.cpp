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

const char* to_string(accounting a) {
  switch (a) {
    case accounting::zero_paper: return "zero-paper";
    case accounting::deepspeed: return "deepspeed";
    case accounting::megatron: return "megatron";
    case accounting::fsdp: return "fsdp";
  }
  return "?";
}

accounting parse_accounting(const std::string& text) {
  for (accounting a : {accounting::zero_paper, accounting::deepspeed, accounting::megatron, accounting::fsdp})
    if (text == to_string(a)) return a;
  throw std::invalid_argument("accounting \"" + text + "\": expected zero-paper, deepspeed, megatron or fsdp");
}

bool has_stage(accounting a, int z) {
  switch (a) {
    case accounting::zero_paper: return z >= 0 && z <= 3;
    case accounting::deepspeed: return z >= 1 && z <= 3;
    case accounting::megatron: return z == 0 || z == 1;
    case accounting::fsdp: return z == 3;
  }
  return false;
}

state_bytes accounted_bytes(accounting a, optimizer o, int z) {
  if (!has_stage(a, z)) {
    const char* stages = a == accounting::deepspeed  ? "ZeRO 1, 2 and 3 (its estimator's)"
                         : a == accounting::megatron ? "0 and 1 (its distributed optimizer)"
                         : a == accounting::fsdp     ? "3 (FSDP's full sharding)"
                                                     : "0 to 3";
    throw std::invalid_argument(std::string("accounting ") + to_string(a) + " has no ZeRO stage " + std::to_string(z) +
                                ": it covers stage " + stages);
  }
  const double moments = o == optimizer::adam ? 8 : 4;  // Adam's two fp32 moments, or SGD's momentum
  switch (a) {
    case accounting::zero_paper: return mixed_precision(o);
    case accounting::deepspeed: {
      state_bytes b = deepspeed_estimator(z);
      b.optimizer_state = 4 + moments;
      b.gradients_sharded_from = 1;
      return b;
    }
    case accounting::megatron: return {2, 4, 4 + moments, 0};
    case accounting::fsdp: return {4, 4, moments, 0};
  }
  return {};
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
  m.gradients = (zero_stage >= b.gradients_sharded_from ? shard * b.gradients : params * b.gradients) +
                params * b.gradient_buffer;
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
  const double keys = s.keys > 0 ? s.keys : s.sequence;
  const double attention = s.fused_attention ? 0 : 5 * s.heads * keys / (s.hidden * t);
  const double f = s.ffn > 0 ? s.ffn : 4 * s.hidden;
  const double mlp = (s.swiglu ? 6 : 4) * f / s.hidden;
  // 24 for GPT-3's shape
  double split = 4 * s.q_share + 4 * s.kv_share + (s.top_k > 0 ? s.top_k * (2 + mlp) : mlp);
  // The two norms' inputs, the qkv and MLP inputs, the two dropout masks.
  double whole = s.dropout ? 10 : 8;
  if (s.fp8) {
    whole -= s.top_k > 0 ? 1 : 2;
    split -= s.q_share + (s.top_k > 0 ? s.top_k * (1 + f / s.hidden) : f / s.hidden);
  }
  // Layer norms and dropouts are replicated over tp unless sequence parallelism splits them.
  const double linear = sp ? (whole + split) / t : whole + split / t;
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
