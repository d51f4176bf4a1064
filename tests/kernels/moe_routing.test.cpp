// A mixture of experts' routing: drops counted exactly under a capacity, GShard's capacity, the
// load-balancing loss at its even and skewed extremes, tokens moved to their experts and back,
// and the router's and combine's backward against finite differences.
#include "kernels/moe_routing.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <stdexcept>
#include <vector>

namespace troupe::moe {
namespace {

std::vector<float> normal(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

TEST(MoeRouting, DroppedTokensAreCountedExactlyAndLoseOnlyTheirExpertsShare) {
  // Five tokens, every one preferring expert 0, then expert 1; capacity 3.
  const int64_t N = 5, E = 4, H = 2;
  std::vector<float> logits(N * E, 0.0f);
  for (int64_t n = 0; n < N; ++n) logits[n * E + 0] = 3, logits[n * E + 1] = 2;
  const routing top1 = route(logits.data(), N, E, 1, 3, false, 0);
  EXPECT_EQ(top1.dropped, 2);
  EXPECT_EQ(top1.load, (std::vector<int64_t>{3, 0, 0, 0}));
  EXPECT_EQ(top1.routed, (std::vector<int64_t>{5, 0, 0, 0}));
  EXPECT_EQ(top1.slot, (std::vector<int64_t>{0, 1, 2, -1, -1}));  // in token order
  const routing top2 = route(logits.data(), N, E, 2, 3, true, 0);
  EXPECT_EQ(top2.dropped, 4);  // tokens 3 and 4 lose both their experts
  EXPECT_EQ(top2.load, (std::vector<int64_t>{3, 3, 0, 0}));
  // With experts that return their input, a kept token gets its gates' sum back, a dropped one 0.
  const std::vector<float> x = normal(N * H, 1);
  std::vector<float> y(N * H);
  combine(top2, dispatch(top2, x.data(), H), H, y.data());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < H; ++c)
      EXPECT_NEAR(y[n * H + c], n < 3 ? x[n * H + c] : 0.0f, 1e-6) << n;  // normalized gates sum to 1
  EXPECT_THROW(route(logits.data(), N, E, 5, 0, false, 0), std::invalid_argument);
}

TEST(MoeRouting, CapacityIsGShardsCeilingOfFactorTimesAssignmentsPerExpert) {
  EXPECT_EQ(capacity_for(1.25, 64, 8, 2), 20);  // ceil(1.25 * 128 / 8)
  EXPECT_EQ(capacity_for(1.0, 10, 4, 1), 3);
  EXPECT_EQ(capacity_for(0.0, 64, 8, 2), 0);  // dropless
  EXPECT_THROW(capacity_for(-1, 1, 1, 1), std::invalid_argument);
}

TEST(MoeRouting, LoadBalancingLossIsTheCoefficientWhenEvenAndGrowsWithSkew) {
  const int64_t E = 4;
  std::vector<float> even(E * E, 0.0f), skewed(E * E, 0.0f);
  for (int64_t n = 0; n < E; ++n) even[n * E + n] = 2, skewed[n * E + 0] = 2;
  EXPECT_NEAR(route(even.data(), E, E, 1, 0, false, 0.01f).aux_loss, 0.01f, 1e-8);
  EXPECT_GT(route(skewed.data(), E, E, 1, 0, false, 0.01f).aux_loss, 0.02f);
}

TEST(MoeRouting, DispatchBackwardReturnsEachExpertRowsGradientToItsToken) {
  const int64_t N = 7, E = 3, H = 4;
  const std::vector<float> logits = normal(N * E, 2, 3), x = normal(N * H, 3);
  const routing r = route(logits.data(), N, E, 2, 4, false, 0);
  std::vector<float> dx(N * H, 0.0f);
  dispatch_backward(r, dispatch(r, x.data(), H), H, dx.data());  // each copy's gradient is the row itself
  for (int64_t n = 0; n < N; ++n) {
    int kept = 0;
    for (int64_t j = 0; j < 2; ++j) kept += r.slot[n * 2 + j] >= 0;
    for (int64_t c = 0; c < H; ++c) EXPECT_FLOAT_EQ(dx[n * H + c], kept * x[n * H + c]);
  }
}

TEST(MoeRouting, RouterAndCombineBackwardAgreeWithFiniteDifferences) {
  const int64_t N = 6, E = 4, k = 2, H = 3, capacity = 3;
  const float aux = 0.1f;
  for (bool normalized : {false, true}) {
    SCOPED_TRACE(normalized);
    std::vector<float> logits = normal(N * E, 4, 2);
    const std::vector<float> w = normal(N * H, 5);  // L = sum(y * w) + the load-balancing loss
    const routing r = route(logits.data(), N, E, k, capacity, normalized, aux);
    ASSERT_GT(r.dropped, 0);  // the drops' gradient (none) is part of what is checked
    std::vector<std::vector<float>> out;
    for (int64_t e = 0; e < E; ++e) out.push_back(normal(static_cast<size_t>(r.load[e] * H), 10 + e));
    const combine_grads g = combine_backward(r, out, w.data(), H, normalized, aux);
    const auto loss = [&](const std::vector<float>& z, const std::vector<std::vector<float>>& o, routing* seen) {
      const routing q = route(z.data(), N, E, k, capacity, normalized, aux);
      if (seen) *seen = q;
      std::vector<float> y(N * H);
      combine(q, o, H, y.data());
      double l = q.aux_loss;
      for (int64_t i = 0; i < N * H; ++i) l += double(y[i]) * w[i];
      return l;
    };
    const float h = 1e-3f;
    int checked = 0;
    for (int64_t i = 0; i < N * E; ++i) {
      const float keep = logits[i];
      routing up_r, down_r;
      logits[i] = keep + h;
      const double up = loss(logits, out, &up_r);
      logits[i] = keep - h;
      const double down = loss(logits, out, &down_r);
      logits[i] = keep;
      if (up_r.expert != r.expert || down_r.expert != r.expert || up_r.slot != r.slot || down_r.slot != r.slot)
        continue;  // a choice flips within h: the loss is not differentiable there
      EXPECT_NEAR(g.logits[i], (up - down) / (2 * h), 2e-3) << "logit " << i;
      ++checked;
    }
    EXPECT_GE(checked, N * E - 2);
    for (int64_t e = 0; e < E; ++e)  // the experts' outputs: linear, so exact up to rounding
      for (size_t i = 0; i < out[e].size(); ++i) {
        auto o = out;
        o[e][i] += h;
        const double up = loss(logits, o, nullptr);
        o[e][i] -= 2 * h;
        const double down = loss(logits, o, nullptr);
        EXPECT_NEAR(g.expert_out[e][i], (up - down) / (2 * h), 2e-3) << "expert " << e << " element " << i;
      }
  }
}

}  // namespace
}  // namespace troupe::moe
