// Transformer layers for the GPT-style decoder: token + position embedding, layernorm, GELU and
// the pre-norm GPT-2 block (attention and MLP with residuals). Init follows GPT-2 / nanoGPT.
// The block is one layer to pipelines (its internals never cross a stage cut). Given a tensor-
// parallel group, the embedding splits over the vocabulary and the block over its heads and its
// MLP's hidden features (Megatron-LM); without one every layer is whole. No weight tying, no
// dropout, no KV cache.
#pragma once

#include "kernels/context_attention.hpp"
#include "kernels/layer.hpp"
#include "kernels/layers_dense.hpp"
#include "kernels/layers_parallel.hpp"

namespace troupe {

class device_ops;

// (B, T) token ids held as floats -> (B, T, C) = wte[token] + wpe[position]. T <= context.
// Tokens have no gradient: backward_input returns an empty tensor.
// Vocabulary-parallel with a group: this rank holds wte rows shard_of(vocab, tp, rank), looks up
// the tokens it holds (zeros for the others), and one all-reduce sums the lookups; wpe is whole
// everywhere and added after it. The output and its gradient are the same on every rank.
// With sequence parallelism the lookups are reduce-scattered instead: each rank's output is its
// share of the sequences (sp:: in layers_parallel.hpp).
// With a context-parallel group the tokens are this rank's share of each sequence (the data
// loader cut them, context_attention.hpp says which positions), and wpe is read at those positions.
class embedding final : public layer {
 public:
  embedding(int64_t vocab, int64_t context, int64_t channels, tp_group* g = nullptr, bool sequence_parallel = false,
            tp_group* context_group = nullptr);
  std::string kind() const override { return "embedding"; }
  std::vector<param_spec> param_specs() const override;
  int64_t full_params() const override { return (vocab_ + context_) * channels_; }
  std::vector<param_run> full_runs() const override;
  void init(float* params, std::mt19937_64& rng) const override;
  tensor forward(const tensor& x, saved_activations& saved) const override;
  tensor backward_input(const tensor& dy, saved_activations& saved) const override;
  void backward_weight(const tensor& dy, saved_activations& saved) override;

 private:
  // wpe's rows for tokens 0..T-1 here: the first T, or this rank's positions under cp.
  // Under cp: wpe's rows at this rank's positions of its T tokens (host memory), and dwpe += the
  // position gradient `partial` (T rows) at them.
  tensor position_rows(const device_ops& k, int64_t T) const;
  void add_position_grads(const tensor& partial, int64_t T);

  int64_t vocab_, context_, channels_;
  tp_group* group_;
  shard_range rows_;  // the wte rows held here
  bool sequence_parallel_;
  tp_group* context_group_;
};

// Normalizes the last dimension (..., C); eps 1e-5 as PyTorch. Weight 1, bias 0 at init.
// Given a group (sequence parallelism), it sees only this rank's tokens, so its weight gradients
// are summed over the group.
class layernorm final : public layer {
 public:
  explicit layernorm(int64_t channels, tp_group* sum_grads_over = nullptr);
  std::string kind() const override { return "layernorm"; }
  std::vector<param_spec> param_specs() const override;
  void init(float* params, std::mt19937_64& rng) const override;
  tensor forward(const tensor& x, saved_activations& saved) const override;
  tensor backward_input(const tensor& dy, saved_activations& saved) const override;
  void backward_weight(const tensor& dy, saved_activations& saved) override;
  int64_t channels() const { return channels_; }

 private:
  int64_t channels_;
  tp_group* sum_over_;
};

// Element-wise GELU, tanh approximation.
class gelu final : public layer {
 public:
  std::string kind() const override { return "gelu"; }
  tensor forward(const tensor& x, saved_activations& saved) const override;
  tensor backward_input(const tensor& dy, saved_activations& saved) const override;
};

// GPT-2 block on (B, T, C):
//   x2 = x + proj(attention(qkv(ln1(x))))
//   y  = x2 + fc_proj(gelu(fc(ln2(x2))))
// Its parameters are those of ln1, attn.qkv, attn.proj, ln2, mlp.fc, mlp.proj, in that order,
// each sub-layer bound to its sub-slice of the block's slice. backward_input leaves the output
// gradients of every internal linear and layernorm in `saved` for a later backward_weight.
class transformer_block final : public layer {
 public:
  // proj_std: init std of the two residual output projections; GPT-2 uses 0.02 / sqrt(2 * blocks)
  // so the residual stream's variance does not grow with depth.
  // With a group of size tp (heads % tp == 0): heads/tp heads here (qkv column-parallel by
  // heads, the output projection row-parallel over their channels) and 4C/tp MLP features
  // (fc column-parallel, its projection row-parallel): two all-reduces forward, two backward.
  // With sequence_parallel too: the layernorms and residuals run on this rank's share of the
  // sequences; qkv and fc gather the shares, proj and the MLP's projection scatter them.
  // With a context-parallel group: the block's tokens are this rank's share of each sequence and
  // its attention meets the group's keys and values (context_attention.hpp).
  transformer_block(int64_t channels, int64_t heads, float proj_std = 0.02f, tp_group* g = nullptr,
                    bool sequence_parallel = false, context::context_split context = {});
  std::string kind() const override { return "block"; }
  std::vector<param_spec> param_specs() const override;
  int64_t full_params() const override { return full_offset_[num_parts]; }
  std::vector<param_run> full_runs() const override;
  void init(float* params, std::mt19937_64& rng) const override;
  void bind(const float* params, float* grads) override;
  tensor forward(const tensor& x, saved_activations& saved) const override;
  tensor backward_input(const tensor& dy, saved_activations& saved) const override;
  void backward_weight(const tensor& dy, saved_activations& saved) override;
  // Drops the (B, heads, T, T) softmaxed scores after forward; backward recomputes them from qkv.
  // Under context parallelism nothing that size is kept, so it changes nothing.
  void set_selective_recompute(bool on) override { selective_ = on; }
  void set_matmul_precision(matmul_precision p) override;

  int64_t channels() const { return channels_; }
  int64_t heads() const { return heads_; }
  // The internal layers, for inspection (local shapes under tensor parallelism).
  layernorm& ln1() { return ln1_; }
  parallel_linear& attn_qkv() { return qkv_; }    // C -> 3C, packed q | k | v
  parallel_linear& attn_proj() { return proj_; }  // C -> C
  layernorm& ln2() { return ln2_; }
  parallel_linear& mlp_fc() { return fc_; }       // C -> 4C
  parallel_linear& mlp_proj() { return fc_proj_; }  // 4C -> C
  // Where a sub-layer's parameters start inside the block's slice; throws for a foreign layer.
  int64_t offset_of(const layer& sub) const;

 private:
  // Offsets of ln1, attn.qkv, attn.proj, ln2, mlp.fc, mlp.proj inside the block's parameters.
  // full_offset_: the same in the unsplit block (they differ under tensor parallelism).
  enum { ln1_at, qkv_at, proj_at, ln2_at, fc_at, fc_proj_at, num_parts };
  int64_t offset_[num_parts + 1];
  int64_t full_offset_[num_parts + 1];
  const layer* part(int i) const;
  // GPT-2's init of the unsplit block.
  void init_full(float* params, std::mt19937_64& rng) const;
  // The attention over the packed qkv (B, T, 3C local): this device's, or over the context group.
  void attend(const device_ops& k, tensor& out, tensor& state, const tensor& qkv) const;
  tensor attend_backward(const device_ops& k, const tensor& dout, const tensor& qkv, const tensor& state) const;

  int64_t channels_, heads_;
  float proj_std_;
  tp_group* group_;
  context::context_split context_;
  int64_t local_heads_, local_channels_;  // of the attention on this rank
  bool selective_ = false;
  layernorm ln1_;
  column_parallel_linear qkv_;
  row_parallel_linear proj_;
  layernorm ln2_;
  column_parallel_linear fc_;
  gelu gelu_;
  row_parallel_linear fc_proj_;
};

}  // namespace troupe
