// linear and relu over the device's ops (device_ops.hpp).
#include "kernels/layers_dense.hpp"

#include <cmath>
#include <stdexcept>

#include "kernels/device_ops.hpp"

namespace troupe {

int64_t layer::num_params() const {
  int64_t n = 0;
  for (const auto& p : param_specs()) n += numel_of(p.shape);
  return n;
}

void fill_uniform(float* out, int64_t n, float bound, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> dist(-bound, bound);
  for (int64_t i = 0; i < n; ++i) out[i] = dist(rng);
}

namespace {
int64_t rows_of(const tensor& x, int64_t features, const char* what) {
  if (x.rank() < 1 || x.size(-1) != features)
    throw std::invalid_argument(std::string("linear: ") + what + " has shape " + to_string(x.shape()) +
                                ", expected last dimension " + std::to_string(features));
  return x.numel() / features;
}
}  // namespace

std::vector<param_spec> linear::param_specs() const {
  std::vector<param_spec> specs{{"weight", {out_, in_}}};
  if (bias_) specs.push_back({"bias", {out_}});
  return specs;
}

void linear::init(float* params, std::mt19937_64& rng) const {
  const float bound = 1.0f / std::sqrt(static_cast<float>(in_));
  fill_uniform(params, out_ * in_, bound, rng);
  if (bias_) fill_uniform(params + out_ * in_, out_, bound, rng);
}

tensor linear::forward(const tensor& x, saved_activations& saved) const {
  const int64_t n = rows_of(x, in_, "input");
  shape_t shape = x.shape();
  shape.back() = out_;
  const device_ops& k = ops_on(x);
  tensor y = k.empty(shape);
  gemm::forward(matmul_, k, f32_out(y), x, params_, bias_ ? params_ + out_ * in_ : nullptr, n, in_, out_);
  // x, not its bf16 rounding: in the MLP the ReLU below keeps the same tensor, so x costs nothing.
  saved.tensors = {x};
  return y;
}

tensor linear::backward_input(const tensor& dy, saved_activations& saved) const {
  const int64_t n = rows_of(dy, out_, "output gradient");
  const device_ops& k = ops_on(dy);
  tensor dx = k.empty(saved.tensors.at(0).shape());
  gemm::backward_input(matmul_, k, f32_out(dx), dy, params_, n, in_, out_);
  return dx;
}

void linear::backward_weight(const tensor& dy, saved_activations& saved) {
  const int64_t n = rows_of(dy, out_, "output gradient");
  gemm::backward_weight(matmul_, ops_on(dy), grads_, bias_ ? grads_ + out_ * in_ : nullptr, dy, saved.tensors.at(0),
                        n, in_, out_);
}

tensor relu::forward(const tensor& x, saved_activations& saved) const {
  const device_ops& k = ops_on(x);
  tensor y = k.empty(x.shape());
  k.relu_forward(f32_out(y), f32(x), x.numel());
  saved.tensors = {y};
  return y;
}

tensor relu::backward_input(const tensor& dy, saved_activations& saved) const {
  const tensor& y = saved.tensors.at(0);
  const device_ops& k = ops_on(dy);
  tensor dx = k.empty(y.shape());
  k.relu_backward(f32_out(dx), f32(dy), f32(y), y.numel());
  return dx;
}

}  // namespace troupe
