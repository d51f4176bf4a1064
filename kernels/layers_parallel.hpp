// Megatron-LM's tensor-parallel linears. A column-parallel linear holds some rows of the unsplit
// weight (some output features) and sees the whole input; a row-parallel one holds some columns
// (some input features) and sees only those features of its input. Between them sit the paper's
// conjugate operators, which are the layers' communication and nothing else:
//   f (before a column-parallel linear): identity forward, all-reduce of the input gradient;
//   g (after a row-parallel linear):     all-reduce of the partial outputs, identity backward.
// So a column-parallel linear followed by a row-parallel one (the GPT's attention and its MLP)
// costs one all-reduce forward and one backward, and nothing runs twice. Without a group (tp 1)
// both are exactly the plain linear, bit for bit.
#pragma once

#include <vector>

#include "kernels/layer.hpp"
#include "kernels/tp_group.hpp"

namespace troupe {

namespace tp {
// f's backward: the input gradient of a column-parallel linear is a partial sum over the group.
void copy_to_backward(tp_group* g, tensor& dx);
// g's forward: the outputs of a row-parallel linear are partial sums over the group.
void reduce_from_forward(tp_group* g, tensor& y);
}  // namespace tp

// Sequence parallelism (Korthikanti et al. 2022): between the tensor-parallel regions each rank
// keeps only its share of the microbatch's tokens, so layernorms, residuals and the activations
// passed between pipeline stages are 1/tp the size. troupe's activations are batch-major
// (B, T, C), so a rank's share is whole sequences, shard_of(B, tp, rank) of them: the same volume
// as Megatron's split of the sequence dimension, and contiguous. A microbatch's B must divide
// by tp. The two operators replace f and g: an all-gather of the shares before a column-parallel
// linear (reduce-scatter of its input gradient), a reduce-scatter after a row-parallel one
// (all-gather of its output gradient).
namespace sp {
tensor gather_rows(tp_group* g, const tensor& share);  // (B/tp, ...) -> (B, ...)
tensor scatter_rows(tp_group* g, const tensor& full);  // (B, ...) partial sums -> (B/tp, ...) sums
// Parameters every rank holds whole but sees only its share of tokens for (layernorms, the
// row-parallel biases, positions): their gradients are partial sums, summed over the group here.
// `partial` lives where the gradients do, and is summed in place.
void add_summed(tp_group* g, float* grads, tensor& partial);
}  // namespace sp

// Both halves of the split: local geometry, and where the local parameters sit in the unsplit
// linear's (PyTorch layout: weight (out, in) row-major, then bias (out)).
class parallel_linear : public layer {
 public:
  std::string kind() const override = 0;
  std::vector<param_spec> param_specs() const override;
  int64_t full_params() const override { return full_out_ * full_in_ + (bias_ ? full_out_ : 0); }
  int64_t in_features() const { return in_; }    // local
  int64_t out_features() const { return out_; }  // local
  // Under sequence parallelism the input (column-parallel) or output (row-parallel) is this
  // rank's share of the tokens; the layer gathers or scatters it instead of f or g.
  void set_sequence_parallel(bool on) { sequence_parallel_ = on && tp_size(group_) > 1; }

 protected:
  parallel_linear(int64_t full_in, int64_t full_out, int64_t in, int64_t out, bool bias, tp_group* g)
      : full_in_(full_in), full_out_(full_out), in_(in), out_(out), bias_(bias), group_(g) {}
  // The unsplit linear's init (PyTorch's default) into a scratch copy, then this rank's runs:
  // every tp degree starts from the single-device values.
  void init_from_full(float* params, std::mt19937_64& rng) const;
  const float* bias() const { return bias_ ? params_ + out_ * in_ : nullptr; }
  float* bias_grad() const { return bias_ ? grads_ + out_ * in_ : nullptr; }

  int64_t full_in_, full_out_, in_, out_;
  bool bias_;
  tp_group* group_;
  bool sequence_parallel_ = false;
};

// Output features `rows` of the unsplit linear (runs of it, in order; the attention's packed
// q | k | v takes one run from each third), the input whole.
class column_parallel_linear final : public parallel_linear {
 public:
  column_parallel_linear(int64_t in, int64_t full_out, std::vector<shard_range> rows, tp_group* g, bool bias = true);
  std::string kind() const override { return "column_parallel_linear"; }
  std::vector<param_run> full_runs() const override;
  void init(float* params, std::mt19937_64& rng) const override { init_from_full(params, rng); }
  tensor forward(const tensor& x, saved_activations& saved) const override;
  tensor backward_input(const tensor& dy, saved_activations& saved) const override;
  void backward_weight(const tensor& dy, saved_activations& saved) override;
  // forward without the bias: the caller adds bias_values() inside the op that reads the output
  // next (the GPT block's bias + GELU), which saves a pass over it. The backward is forward's:
  // the bias's gradient is still summed here.
  tensor forward_unbiased(const tensor& x, saved_activations& saved) const;
  const float* bias_values() const { return bias(); }

 private:
  tensor forward_with(const tensor& x, saved_activations& saved, const float* bias) const;
  std::vector<shard_range> rows_;
};

// Input features `cols` of the unsplit linear; the bias is whole on every rank and added once,
// after the partial outputs are summed.
class row_parallel_linear final : public parallel_linear {
 public:
  row_parallel_linear(int64_t full_in, int64_t out, shard_range cols, tp_group* g, bool bias = true);
  std::string kind() const override { return "row_parallel_linear"; }
  std::vector<param_run> full_runs() const override;
  void init(float* params, std::mt19937_64& rng) const override { init_from_full(params, rng); }
  tensor forward(const tensor& x, saved_activations& saved) const override;
  tensor backward_input(const tensor& dy, saved_activations& saved) const override;
  void backward_weight(const tensor& dy, saved_activations& saved) override;

 private:
  shard_range cols_;
};

// Copies the runs of `full` (a layer's unsplit parameters) into `shard`, end to end.
void gather_runs(float* shard, const float* full, const std::vector<param_run>& runs);
// The inverse: writes a shard's values back where they sit in the unsplit layer.
void scatter_runs(float* full, const float* shard, const std::vector<param_run>& runs);

}  // namespace troupe
