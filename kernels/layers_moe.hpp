// moe_mlp: a mixture-of-experts MLP (moe_routing.hpp's router and token movement, E expert MLPs
// of linear -> GELU -> linear), the layer an MoE transformer block puts where its MLP was. Each
// token goes to its top_k experts and comes back weighted by their gates; the load-balancing
// loss's gradient enters the router's in backward (its value is routing().aux_loss). On the CPU
// only (the GPT's moe_block, layers_moe_block.hpp, holds one); a GPU path is not built yet.
//
// With an expert group of P ranks (expert parallelism), rank p holds the router and experts
// [p E/P, (p+1) E/P) only: each rank routes its own tokens, an all-to-all sends every expert's
// rows to its owner (kernels/tp_group.hpp's all_to_all), the owner runs them through its experts
// in origin order, and a second all-to-all brings the outputs home to be combined; backward sends
// the outputs' gradients out and the inputs' gradients back the same way. An expert's weight
// gradient on its owner then sums every rank of the group's tokens for it, so the ranks holding
// the same experts (one per expert group) reduce them among themselves, while the router's reduce
// over every rank. Without a group (or with one of 1) nothing moves.
#pragma once

#include "kernels/layer.hpp"
#include "kernels/moe_routing.hpp"
#include "kernels/tp_group.hpp"

namespace troupe {

struct moe_options {
  int64_t experts = 8, top_k = 2;
  double capacity_factor = 0;  // 0: dropless
  bool normalize_top_k = true;
  float aux_coefficient = 0.01f;
};

class moe_mlp final : public layer {
 public:
  moe_mlp(int64_t channels, int64_t hidden, moe_options o, tp_group* experts_group = nullptr);
  std::string kind() const override { return "moe_mlp"; }
  // router.weight (E, C), then per expert e this rank holds: experts.e.fc.weight (F, C),
  // .fc.bias (F), .proj.weight (C, F), .proj.bias (C).
  std::vector<param_spec> param_specs() const override;
  int64_t full_params() const override { return o_.experts * (C_ + expert_params()); }
  std::vector<param_run> full_runs() const override;
  // Elements of this rank's buffer that are its experts' (after the router's): what reduces over
  // the ranks holding the same experts rather than over every rank.
  param_run expert_run() const { return {o_.experts * C_, local_ * expert_params()}; }
  int64_t expert_tail() const override { return expert_run().count; }
  void init(float* params, std::mt19937_64& rng) const override;
  tensor forward(const tensor& x, saved_activations& saved) const override;
  tensor backward_input(const tensor& dy, saved_activations& saved) const override;
  void backward_weight(const tensor& dy, saved_activations& saved) override;
  // The routing of the last forward (drops, loads, the load-balancing loss), for metrics.
  const moe::routing& last_routing() const { return last_; }

 private:
  int64_t expert_params() const { return 2 * C_ * F_ + F_ + C_; }
  moe::routing route(const float* logits, int64_t N) const;
  // Rows for every expert (E buffers, this rank's tokens) to the experts' owners: per local
  // expert, the rows of every rank of the group in rank order. from (P, local): how many each
  // rank sent for each local expert; filled here when empty, else taken as the counts.
  std::vector<std::vector<float>> to_owners(std::vector<std::vector<float>> per_expert, int64_t H,
                                            std::vector<int64_t>& from) const;
  // The inverse: per local expert, rows of every rank in rank order, back to their ranks as E
  // buffers with load[e] rows each.
  std::vector<std::vector<float>> to_origins(std::vector<std::vector<float>> per_local, int64_t H,
                                             const std::vector<int64_t>& from, const std::vector<int64_t>& load) const;
  int64_t C_, F_;
  moe_options o_;
  tp_group* group_;
  int ranks_ = 1, rank_ = 0;
  int64_t local_ = 0, first_ = 0;  // this rank's experts: [first_, first_ + local_)
  mutable moe::routing last_;
};

}  // namespace troupe
