// Optimizer formulas against values worked out by hand for three steps: SGD with momentum and
// L2 weight decay (torch.optim.SGD), AdamW with bias correction and decoupled weight decay
// (torch.optim.AdamW). Not tested here: sharding, which only changes which slice a shard owns.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <vector>

#include "kernels/optimizer.hpp"

namespace troupe {
namespace {

// float32 updates on values ~1..2: a few ulps per step, so 2e-6 absolute.
constexpr double tol = 2e-6;

void run_steps(optimizer_config cfg, float p0[2], const float grads[3][2], double want[3][2]) {
  auto opt = make_optimizer(cfg, 2);
  float p[2] = {p0[0], p0[1]};
  for (int s = 0; s < 3; ++s) {
    opt->step(p, grads[s], 2);
    EXPECT_NEAR(p[0], want[s][0], tol) << "element 0 after step " << s + 1;
    EXPECT_NEAR(p[1], want[s][1], tol) << "element 1 after step " << s + 1;
  }
  EXPECT_EQ(opt->steps(), 3);
}

TEST(SgdMomentum, ThreeStepsMatchHandComputedValues) {
  optimizer_config cfg;
  cfg.kind = optimizer_kind::sgd;
  cfg.lr = 0.1f;
  cfg.momentum = 0.9f;
  cfg.weight_decay = 0.01f;
  float p0[2] = {1.0f, -2.0f};
  const float g[3][2] = {{0.5f, 1.0f}, {-0.2f, 1.0f}, {0.3f, 1.0f}};
  // d = g + wd p; buf = d on step 1, then 0.9 buf + d; p -= lr buf.
  // element 0: d = 0.51,       buf = 0.51,                       p = 1 - 0.051         = 0.949
  //            d = -0.19051,   buf = 0.459 - 0.19051 = 0.26849,   p = 0.949 - 0.026849  = 0.922151
  //            d = 0.30922151, buf = 0.241641 + 0.30922151 = 0.55086251, p = 0.867064749
  // element 1: d = 0.98,       buf = 0.98,                       p = -2.098
  //            d = 0.97902,    buf = 0.882 + 0.97902 = 1.86102,   p = -2.284102
  //            d = 0.97715898, buf = 1.674918 + 0.97715898 = 2.65207698, p = -2.549309698
  double want[3][2] = {{0.949, -2.098}, {0.922151, -2.284102}, {0.867064749, -2.549309698}};
  run_steps(cfg, p0, g, want);
}

TEST(AdamW, ThreeStepsMatchHandComputedValues) {
  optimizer_config cfg;
  cfg.kind = optimizer_kind::adamw;
  cfg.lr = 0.1f;
  cfg.weight_decay = 0.1f;
  cfg.beta1 = 0.9f;
  cfg.beta2 = 0.999f;
  cfg.eps = 1e-8f;
  float p0[2] = {1.0f, -2.0f};
  const float g[3][2] = {{0.5f, 1.0f}, {-0.2f, 1.0f}, {0.3f, 1.0f}};
  // p *= 1 - lr wd (= 0.99, decoupled: never enters m or v); m, v moments; p -= lr m^ / (sqrt(v^) + eps)
  // with m^ = m / (1 - 0.9^t), v^ = v / (1 - 0.999^t).
  // element 0: t=1  p = 0.99;    m = 0.05,  v = 0.00025;   m^ = 0.5, v^ = 0.25 -> p = 0.99 - 0.1 = 0.89
  //            t=2  p = 0.8811;  m = 0.025, v = 0.00028975; m^ = 0.025/0.19 = 0.1315789,
  //                 v^ = 0.00028975/0.001999 = 0.1449475 -> p = 0.8811 - 0.1 * 0.1315789/0.3807197 = 0.8465394
  //            t=3  p = 0.8380740; m = 0.0525, v = 0.0003794603; m^ = 0.0525/0.271 = 0.1937269,
  //                 v^ = 0.0003794603/0.002997001 = 0.1266133 -> p = 0.8380740 - 0.0544440 = 0.7836300
  // element 1: constant g = 1 gives m^ = 1 and v^ = 1 every step, so p = 0.99 p - 0.1:
  //            -2.08, -2.1592, -2.237608 (eps moves each by 1e-9).
  double want[3][2] = {{0.89, -2.08}, {0.846539418, -2.1592}, {0.783629989, -2.237608}};
  run_steps(cfg, p0, g, want);
}

TEST(Optimizer, RefusesAShardOfTheWrongSizeAndBadConfig) {
  optimizer_config cfg;
  auto opt = make_optimizer(cfg, 2);
  float p[3] = {}, g[3] = {};
  EXPECT_THROW(opt->step(p, g, 3), std::invalid_argument);
  cfg.lr = -1.0f;
  EXPECT_THROW(make_optimizer(cfg, 2), std::invalid_argument);
}

// The device ops' update (cpu_optimizer_step, with the state passed in) is the optimizer's own
// step to the bit, at every step count: a shard on a device updates as the host's would.
TEST(Optimizer, StepWithStatePassedInGivesTheOwnStepsBits) {
  for (optimizer_kind kind : {optimizer_kind::adamw, optimizer_kind::sgd}) {
    optimizer_config cfg;
    cfg.kind = kind;
    cfg.lr = 0.1f;
    const int64_t n = 7;
    auto own = make_optimizer(cfg, n);
    std::vector<float> a(n), b(n), g(n), state(2 * n, 0.0f);
    for (int64_t i = 0; i < n; ++i) a[i] = b[i] = 0.3f * static_cast<float>(i) - 1.0f;
    float* arrays[2] = {state.data(), state.data() + n};
    for (int64_t step = 1; step <= 4; ++step) {
      for (int64_t i = 0; i < n; ++i) g[i] = std::sin(static_cast<float>(step * 13 + i));
      own->step(a.data(), g.data(), n);
      cpu_optimizer_step(b.data(), b.data(), g.data(), arrays, n, cfg, step);
      for (int64_t i = 0; i < n; ++i) EXPECT_EQ(a[i], b[i]) << to_string(kind) << " step " << step << " value " << i;
    }
  }
}

}  // namespace
}  // namespace troupe
