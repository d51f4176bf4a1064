// Finite-difference gradient checking for the float32 kernels, shared by the kernels tests.
// A scalar loss L = sum(y * r) (r fixed and random) is summed in double; each float value is
// nudged by +-h one at a time and (L+ - L-) / (x+ - x-) is compared with the analytic gradient.
// It does not make the kernels double: the forward stays float32, which is why the bound below is
// relative to the largest gradient of the tensor and not per element.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernels/layer_stack.hpp"
#include "kernels/tensor.hpp"

namespace troupe::test {

// Error bound for a float32 kernel against central differences: max |a - n| / max(max|a|,
// max|n|, 1e-3) <= 1e-2. float32 rounding leaves ~1e-7 relative noise in every output, which
// after dividing by 2h (h ~ 1e-2) and summing over the outputs is ~1e-5..1e-4 absolute; the
// central difference's own truncation error is O(h^2) ~ 1e-4 relative. A wrong formula (a
// missing term, a transposed index) shows up at 1e-1 or more, far above 1e-2.
constexpr double float32_grad_bound = 1e-2;

inline std::vector<float> random_values(int64_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = dist(rng);
  return v;
}

inline tensor random_tensor(shape_t shape, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  const int64_t n = numel_of(shape);
  return tensor(std::move(shape), random_values(n, seed, lo, hi));
}

// sum(y * r) in double: the projection that turns any output into a scalar loss whose gradient
// with respect to y is exactly r.
inline double project(const tensor& y, const tensor& r) {
  double s = 0.0;
  for (int64_t i = 0; i < y.numel(); ++i) s += static_cast<double>(y[i]) * r[i];
  return s;
}

// Central differences of loss() with respect to values[0..n). The step actually taken is read
// back from the float (x + h is rounded), so the quotient uses the true denominator.
inline std::vector<double> numeric_grad(float* values, int64_t n, const std::function<double()>& loss, float h) {
  std::vector<double> g(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const float orig = values[i];
    values[i] = orig + h;
    const double up = values[i];
    const double lp = loss();
    values[i] = orig - h;
    const double down = values[i];
    const double lm = loss();
    values[i] = orig;
    g[static_cast<size_t>(i)] = (lp - lm) / (up - down);
  }
  return g;
}

// The bound of float32_grad_bound, with the worst element named on failure.
inline ::testing::AssertionResult grads_close(const std::string& what, const float* analytic,
                                              const std::vector<double>& numeric,
                                              double bound = float32_grad_bound) {
  double scale = 1e-3, worst = 0.0;
  size_t at = 0;
  for (size_t i = 0; i < numeric.size(); ++i) {
    scale = std::max({scale, std::abs(static_cast<double>(analytic[i])), std::abs(numeric[i])});
    const double d = std::abs(analytic[i] - numeric[i]);
    if (d > worst) worst = d, at = i;
  }
  const double rel = worst / scale;
  if (rel <= bound) return ::testing::AssertionSuccess() << what << " rel " << rel;
  return ::testing::AssertionFailure() << what << ": max |analytic - numeric| / scale = " << rel << " > " << bound
                                       << " at element " << at << " (analytic " << analytic[at] << ", numeric "
                                       << numeric[at] << ", scale " << scale << ")";
}

// Replaces a stack's init with values that keep every gradient well above float noise: weights
// and embeddings U(-0.3, 0.3), 1-D "weight" params (layernorm gains) 1 + U(-0.3, 0.3). GPT-2's
// N(0, 0.02) would make most gradients too small for finite differences to resolve.
inline void randomize_params(layer_stack& stack, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-0.3f, 0.3f);
  float* p = stack.params().data();
  for (size_t l = 0; l < stack.num_layers(); ++l) {
    float* q = p + stack.param_offset(l);
    for (const auto& spec : stack.at(l).param_specs()) {
      const int64_t n = numel_of(spec.shape);
      const bool gain = spec.shape.size() == 1 && spec.name.size() >= 6 &&
                        spec.name.compare(spec.name.size() - 6, 6, "weight") == 0;
      for (int64_t i = 0; i < n; ++i) q[i] = (gain ? 1.0f : 0.0f) + dist(rng);
      q += n;
    }
  }
}

// Checks every parameter tensor of every layer of a stack, each against its own scale, so a
// small but wrong gradient deep in the model is not hidden by a large one near the loss.
inline void expect_param_grads_close(layer_stack& stack, const std::function<double()>& loss, float h,
                                     double bound = float32_grad_bound) {
  float* p = stack.params().data();
  const float* g = stack.grads().data();
  for (size_t l = 0; l < stack.num_layers(); ++l) {
    int64_t off = stack.param_offset(l);
    for (const auto& spec : stack.at(l).param_specs()) {
      const int64_t n = numel_of(spec.shape);
      const auto numeric = numeric_grad(p + off, n, loss, h);
      EXPECT_TRUE(grads_close("layer " + std::to_string(l) + " (" + stack.at(l).kind() + ") " + spec.name,
                              g + off, numeric, bound));
      off += n;
    }
  }
}

}  // namespace troupe::test
