// Dense layers for the MLP and the GPT's projections: linear and ReLU.
// Linear keeps PyTorch's layout and default init, so a PyTorch peer trains from the same
// distribution. Its tensor-parallel splits are in layers_parallel.hpp.
#pragma once

#include "kernels/layer.hpp"

namespace troupe {

// y = x @ W^T + b over the last dimension; x is (..., in), y is (..., out).
class linear final : public layer {
 public:
  linear(int64_t in, int64_t out, bool bias = true) : in_(in), out_(out), bias_(bias) {}
  std::string kind() const override { return "linear"; }
  std::vector<param_spec> param_specs() const override;
  void init(float* params, std::mt19937_64& rng) const override;
  tensor forward(const tensor& x, saved_activations& saved) const override;
  tensor backward_input(const tensor& dy, saved_activations& saved) const override;
  void backward_weight(const tensor& dy, saved_activations& saved) override;
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }

 private:
  int64_t in_, out_;
  bool bias_;
};

class relu final : public layer {
 public:
  std::string kind() const override { return "relu"; }
  tensor forward(const tensor& x, saved_activations& saved) const override;
  tensor backward_input(const tensor& dy, saved_activations& saved) const override;
};

}  // namespace troupe
