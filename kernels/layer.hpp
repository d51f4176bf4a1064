// layer: one step of a model with an explicit forward and a backward split in two halves
// (input gradient, weight gradient) so zero-bubble schedules can defer the weight half.
// A layer owns no parameter memory: bind() points it into the flat buffers of the layer_stack
// that holds it, which is what lets optimizers and ZeRO shards work on flat ranges.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/matmul_precision.hpp"
#include "kernels/tensor.hpp"

namespace troupe {

struct param_spec {
  std::string name;  // e.g. "weight", "bias"
  shape_t shape;
};

// Elements [offset, offset + count) of a layer's unsplit parameter vector.
struct param_run {
  int64_t offset = 0;
  int64_t count = 0;
};

// What a layer keeps from forward for its backward: one per micro-batch in flight.
// backward_input may add tensors (e.g. output gradients) for backward_weight to use.
struct saved_activations {
  std::vector<tensor> tensors;
};

class layer {
 public:
  virtual ~layer() = default;
  // Short kind name used in logs and model summaries ("linear", "relu", "block", ...).
  virtual std::string kind() const = 0;
  virtual std::vector<param_spec> param_specs() const { return {}; }
  int64_t num_params() const;
  // Tensor parallelism splits some layers over ranks. A split layer holds part of the unsplit
  // layer's parameters: full_runs() says which, in the order they sit in its own buffer, so the
  // shards of every tp rank merge back into the single-device parameters. A layer that is not
  // split holds them all (every tp rank has the same values).
  virtual int64_t full_params() const { return num_params(); }
  virtual std::vector<param_run> full_runs() const { return {{0, num_params()}}; }
  // Expert parallelism: how many elements at the end of its buffer are its experts' (a mixture of
  // experts over an expert group), whose gradients reduce over the replicas holding the same
  // experts rather than over every replica. 0 for every other layer.
  virtual int64_t expert_tail() const { return 0; }

  // Points the layer at its slice of the stage's flat parameter and gradient buffers.
  // Virtual so a composite layer (transformer_block) can bind its sub-layers to sub-slices.
  // Parameters are read-only to a layer (only init writes them, through its own pointer), so a
  // stage can run on a frozen parameter tensor an optimizer shard sent without copying it.
  virtual void bind(const float* params, float* grads) {
    params_ = params;
    grads_ = grads;
  }
  // Writes initial values into params (its own slice, param_specs() order). The generator is
  // seeded per layer index, so cutting a model into stages does not change its initial values.
  virtual void init(float* params, std::mt19937_64& rng) const { (void)params, (void)rng; }

  virtual tensor forward(const tensor& x, saved_activations& saved) const = 0;
  // Returns dL/dx. Leaves parameter gradients alone.
  virtual tensor backward_input(const tensor& dy, saved_activations& saved) const = 0;
  // Adds dL/dparams into the bound gradient buffer. Usually follows backward_input, but the
  // first layer of a model (whose input needs no gradient) gets backward_weight alone.
  virtual void backward_weight(const tensor& dy, saved_activations& saved) { (void)dy, (void)saved; }

  // Selective recomputation (Korthikanti et al. 2022): a layer with a large, cheap-to-rebuild
  // intermediate (the attention scores) stops keeping it after forward and rebuilds it in
  // backward. The numbers do not change, only what a stash holds.
  virtual void set_selective_recompute(bool on) { (void)on; }

  // The operands of the layer's matrix products (matmul_precision.hpp); a layer without any
  // keeps it unread, a composite one passes it to its parts.
  virtual void set_matmul_precision(matmul_precision p) { matmul_ = p; }

 protected:
  const float* params_ = nullptr;
  float* grads_ = nullptr;
  matmul_precision matmul_ = matmul_precision::f32;
};

using layer_list = std::vector<std::unique_ptr<layer>>;

// Uniform(-bound, bound) fill, the initializer behind PyTorch's default Linear init.
void fill_uniform(float* out, int64_t n, float bound, std::mt19937_64& rng);

}  // namespace troupe
