// moe_mlp: a mixture-of-experts MLP (moe_routing.hpp's router and token movement, E expert MLPs
// of linear -> GELU -> linear), the layer an MoE transformer block puts where its MLP was. Each
// token goes to its top_k experts and comes back weighted by their gates; the load-balancing
// loss's gradient enters the router's in backward (its value is routing().aux_loss). On the CPU
// only, one rank holding every expert (the GPT's moe_block, layers_moe_block.hpp, holds one);
// expert parallelism and a GPU path are not built yet.
#pragma once

#include "kernels/layer.hpp"
#include "kernels/moe_routing.hpp"

namespace troupe {

struct moe_options {
  int64_t experts = 8, top_k = 2;
  double capacity_factor = 0;  // 0: dropless
  bool normalize_top_k = true;
  float aux_coefficient = 0.01f;
};

class moe_mlp final : public layer {
 public:
  moe_mlp(int64_t channels, int64_t hidden, moe_options o);
  std::string kind() const override { return "moe_mlp"; }
  // router.weight (E, C), then per expert e: experts.e.fc.weight (F, C), .fc.bias (F),
  // .proj.weight (C, F), .proj.bias (C).
  std::vector<param_spec> param_specs() const override;
  void init(float* params, std::mt19937_64& rng) const override;
  tensor forward(const tensor& x, saved_activations& saved) const override;
  tensor backward_input(const tensor& dy, saved_activations& saved) const override;
  void backward_weight(const tensor& dy, saved_activations& saved) override;
  // The routing of the last forward (drops, loads, the load-balancing loss), for metrics.
  const moe::routing& last_routing() const { return last_; }

 private:
  int64_t expert_params() const { return 2 * C_ * F_ + F_ + C_; }
  moe::routing route(const float* logits, int64_t N) const;
  int64_t C_, F_;
  moe_options o_;
  mutable moe::routing last_;
};

}  // namespace troupe
