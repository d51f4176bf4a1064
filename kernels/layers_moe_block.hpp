// moe_block: a GPT block whose MLP is a mixture of experts (layers_moe.hpp): ln1 -> qkv ->
// causal attention -> proj, added to the residual, then ln2 -> moe_mlp, added again. The block
// an MoE GPT (--experts) puts at every --moe-every-th place instead of transformer_block; its
// parameters are the dense block's attention half under the same names, then mlp.router and
// mlp.experts.E.*. One rank holds every expert and the whole attention, of its own tokens: with
// a context-parallel group the block's tokens are the rank's share of each sequence and its
// attention meets the group's keys and values (context_attention.hpp), while the router and the
// experts see only the rank's tokens; with an expert group they go to their experts' owners
// (layers_moe.hpp). Tensor parallelism and GPUs are refused by the job before it builds one.
#pragma once

#include <map>
#include <vector>

#include "kernels/device_ops.hpp"
#include "kernels/layer_stack.hpp"
#include "kernels/layers_dense.hpp"
#include "kernels/layers_moe.hpp"
#include "kernels/layers_transformer.hpp"

namespace troupe {

class moe_block final : public layer {
 public:
  // proj_std: the attention projection's init std (GPT-2's 0.02 / sqrt(2 * blocks)).
  // experts_group: the expert group the MoE layer shares its experts over (null: it holds them all).
  moe_block(int64_t channels, int64_t heads, moe_options o, float proj_std = 0.02f, context::context_split context = {},
            tp_group* experts_group = nullptr);
  std::string kind() const override { return "moe_block"; }
  std::vector<param_spec> param_specs() const override;
  // Under expert parallelism the block holds its experts' share: its runs are the attention half
  // and the MoE layer's own, placed after it.
  int64_t full_params() const override { return offset_[moe_at] + moe_.full_params(); }
  std::vector<param_run> full_runs() const override;
  int64_t expert_tail() const override { return moe_.expert_tail(); }
  void init(float* params, std::mt19937_64& rng) const override;
  void bind(const float* params, float* grads) override;
  tensor forward(const tensor& x, saved_activations& saved) const override;
  tensor backward_input(const tensor& dy, saved_activations& saved) const override;
  void backward_weight(const tensor& dy, saved_activations& saved) override;
  void set_matmul_precision(matmul_precision p) override;  // the attention's linears; the experts stay fp32
  // As transformer_block's: drops the attention's (B, heads, T, T) scores after forward and
  // rebuilds them from qkv in backward; under context parallelism nothing that size is kept.
  void set_selective_recompute(bool on) override { selective_ = on; }

  // The routing of the last forward (tokens per expert, drops, the load-balancing loss).
  const moe::routing& last_routing() const { return moe_.last_routing(); }
  const moe_mlp& experts() const { return moe_; }

 private:
  enum { ln1_at, qkv_at, proj_at, ln2_at, moe_at, num_parts };
  layer* part(int i);
  const layer* part(int i) const { return const_cast<moe_block*>(this)->part(i); }
  int64_t channels_, heads_;
  float proj_std_;
  context::context_split context_;
  bool selective_ = false;
  layernorm ln1_;
  linear qkv_, proj_;
  layernorm ln2_;
  moe_mlp moe_;
  int64_t offset_[num_parts + 1];
};

// What the routers of a stack's MoE blocks did over some forwards, for the metrics: per block (by
// the model's layer index), the assignments each expert was routed before drops and the
// assignments dropped for capacity; and the load-balancing losses' sum over the forwards.
struct expert_tally {
  std::map<int64_t, std::vector<int64_t>> routed;  // layer -> per expert
  std::map<int64_t, int64_t> dropped;               // layer -> assignments
  double aux_loss_sum = 0;
  int64_t forwards = 0;                             // block forwards counted in aux_loss_sum
  bool empty() const { return routed.empty(); }
  void add(const expert_tally& o);
};
// Adds the last forward of every moe_block in `stack` (none: nothing).
void tally_routing(const layer_stack& stack, expert_tally& t);

}  // namespace troupe
