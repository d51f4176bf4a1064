// The mixture-of-experts MLP layer: its backward (input, router, every expert) against finite
// differences of the output plus the load-balancing loss, with tokens dropped for capacity; and,
// with every token sent to every expert, the layer equals the gate-weighted sum of its experts
// computed one by one.
#include "kernels/layers_moe.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <stdexcept>

#include "kernels/layer_stack.hpp"
#include "kernels/ops.hpp"
#include "tests/kernels/grad_check.hpp"

namespace troupe {
namespace {

constexpr int64_t C = 6, F = 5, E = 4;

layer_list one(std::unique_ptr<layer> l) {
  layer_list v;
  v.push_back(std::move(l));
  return v;
}

// Router rows 3 x the unit vectors and tokens leaning on feature n mod 4, then (n + 1) mod 4: every
// token ranks its experts with gaps far wider than a finite difference's step, so no choice flips.
// skewed: every token's first expert is 0 instead, so the load is uneven.
tensor leaning_tokens(int64_t N, bool skewed = false) {
  tensor x = test::random_tensor({2, N / 2, C}, 21, -0.1f, 0.1f);
  for (int64_t n = 0; n < N; ++n) {
    x.data()[n * C + (skewed ? 0 : n % E)] += 1.0f;
    x.data()[n * C + (skewed ? 1 + n % (E - 1) : (n + 1) % E)] += 0.5f;
  }
  return x;
}

void set_router(layer_stack& stack) {
  float* w = stack.params().data();
  for (int64_t e = 0; e < E; ++e)
    for (int64_t c = 0; c < C; ++c) w[e * C + c] = e == c ? 3.0f : 0.0f;
}

TEST(MoeMlpBackward, MatchesFiniteDifferencesForInputRouterAndEveryExpertWithTokensDropped) {
  moe_options o;
  o.experts = E;
  o.top_k = 2;
  o.capacity_factor = 0.75;  // 3 of each expert's 4 assignments kept
  o.aux_coefficient = 0.05f;
  layer_stack stack(one(std::make_unique<moe_mlp>(C, F, o)), 0, 7);
  test::randomize_params(stack, 11);
  set_router(stack);
  auto& moe = dynamic_cast<moe_mlp&>(stack.at(0));
  const tensor x = leaning_tokens(8);
  saved_activations saved;
  const tensor y = moe.forward(x, saved);
  EXPECT_EQ(moe.last_routing().dropped, 4);
  const tensor r = test::random_tensor(y.shape(), 13);
  stack.zero_grads();
  const tensor dx = moe.backward_input(r, saved);
  moe.backward_weight(r, saved);
  auto loss = [&] {
    saved_activations s;
    const double projected = test::project(moe.forward(x, s), r);
    return projected + moe.last_routing().aux_loss;
  };
  const float h = 1e-2f;
  test::expect_param_grads_close(stack, loss, h);
  tensor probe = x;
  EXPECT_TRUE(test::grads_close("input", dx.data(), test::numeric_grad(probe.data(), probe.numel(), [&] {
    saved_activations s;
    return test::project(moe.forward(probe, s), r) + moe.last_routing().aux_loss;
  }, h)));
}

// With no gradient from above, the router's gradient is the load-balancing loss's alone (zero
// when the load is even: the loss is then the coefficient whatever the probabilities, so the
// tokens here are skewed).
TEST(MoeMlpBackward, TheLoadBalancingLossAloneGivesTheRoutersGradient) {
  moe_options o;
  o.experts = E;
  o.top_k = 2;
  o.aux_coefficient = 0.05f;
  layer_stack stack(one(std::make_unique<moe_mlp>(C, F, o)), 0, 7);
  test::randomize_params(stack, 12);
  set_router(stack);
  auto& moe = dynamic_cast<moe_mlp&>(stack.at(0));
  const tensor x = leaning_tokens(8, true);
  saved_activations saved;
  const tensor y = moe.forward(x, saved);
  const tensor zero(y.shape());
  stack.zero_grads();
  moe.backward_input(zero, saved);
  moe.backward_weight(zero, saved);
  auto aux = [&] {
    saved_activations s;
    moe.forward(x, s);
    return double(moe.last_routing().aux_loss);
  };
  const auto numeric = test::numeric_grad(stack.params().data(), E * C, aux, 1e-2f);
  double largest = 0;
  for (double g : numeric) largest = std::max(largest, std::abs(g));
  ASSERT_GT(largest, 1e-4);  // the loss does move with the router
  EXPECT_TRUE(test::grads_close("router (load balancing only)", stack.grads().data(), numeric));
}

TEST(MoeMlp, WithEveryExpertChosenItIsTheGateWeightedSumOfItsExperts) {
  moe_options o;
  o.experts = E;
  o.top_k = E;
  o.normalize_top_k = false;  // the gates are the router's probabilities
  layer_stack stack(one(std::make_unique<moe_mlp>(C, F, o)), 0, 7);
  test::randomize_params(stack, 5);
  const tensor x = test::random_tensor({3, C}, 6);
  saved_activations saved;
  const tensor y = stack.at(0).forward(x, saved);
  const float* p = stack.params().data();
  std::vector<float> logits(3 * E), want(3 * C, 0.0f);
  ops::matmul_forward(logits.data(), x.data(), p, nullptr, 3, C, E);
  for (int64_t n = 0; n < 3; ++n) {
    double total = 0;
    for (int64_t e = 0; e < E; ++e) total += std::exp(double(logits[n * E + e]));
    for (int64_t e = 0; e < E; ++e) {
      const float* w = p + E * C + e * (2 * C * F + F + C);
      std::vector<float> h(F), a(F), out(C);
      ops::matmul_forward(h.data(), x.data() + n * C, w, w + F * C, 1, C, F);
      ops::gelu_forward(a.data(), h.data(), F);
      ops::matmul_forward(out.data(), a.data(), w + F * C + F, w + F * C + F + C * F, 1, F, C);
      const double gate = std::exp(double(logits[n * E + e])) / total;
      for (int64_t c = 0; c < C; ++c) want[n * C + c] += float(gate * out[c]);
    }
  }
  for (int64_t i = 0; i < 3 * C; ++i) EXPECT_NEAR(y.data()[i], want[i], 1e-5) << i;
  EXPECT_EQ(stack.at(0).num_params(), E * C + E * (2 * C * F + F + C));
  EXPECT_THROW(moe_mlp(C, F, moe_options{4, 5, 0, true, 0}), std::invalid_argument);
}

}  // namespace
}  // namespace troupe
