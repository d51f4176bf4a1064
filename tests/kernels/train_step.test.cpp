// train_step end to end: a tiny MLP on a linearly separable toy problem and a tiny GPT on a
// periodic token stream both drive their loss down. Fixed seeds, so the asserted values are
// deterministic; the thresholds leave room for BLAS summation-order differences.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kernels/model.hpp"
#include "kernels/train_step.hpp"

namespace troupe {
namespace {

TEST(TrainStep, TinyMlpDrivesLossDownOnSeparableToyProblem) {
  // Two classes on either side of the line x0 + 2 x1 = 0, no point within 0.2 of it.
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  batch b;
  std::vector<float> xs;
  while (b.targets.size() < 64) {
    const float x0 = u(rng), x1 = u(rng), side = x0 + 2.0f * x1;
    if (std::abs(side) < 0.2f) continue;
    xs.insert(xs.end(), {x0, x1});
    b.targets.push_back(side > 0.0f ? 1 : 0);
  }
  b.inputs = tensor({64, 2}, xs);

  model_spec spec;
  spec.inputs = 2;
  spec.hidden = {16};
  spec.classes = 2;
  layer_stack stack(build_layers(spec), 0, 7);
  optimizer_config cfg;
  cfg.lr = 1e-2f;
  auto opt = make_optimizer(cfg, stack.num_params());
  const double first = train_step(stack, *opt, b).mean_loss();
  for (int i = 0; i < 300; ++i) train_step(stack, *opt, b);
  const step_stats last = evaluate(stack, b);
  EXPECT_GT(first, 0.5);  // about ln 2 from an untrained net
  EXPECT_LT(last.mean_loss(), 0.05);
  EXPECT_EQ(last.correct, 64);
}

TEST(TrainStep, TinyGptLearnsAPeriodicTokenStream) {
  // Next token = (token + 1) mod 5: a pattern a one-block model learns in a few dozen steps.
  model_spec spec;
  spec.kind = model_kind::gpt;
  spec.vocab = 5;
  spec.context = 8;
  spec.channels = 16;
  spec.heads = 2;
  spec.blocks = 1;
  batch b;
  b.inputs = tensor({4, 8});
  for (int64_t s = 0; s < 4; ++s)
    for (int64_t t = 0; t < 8; ++t) {
      b.inputs.data()[s * 8 + t] = static_cast<float>((s + t) % 5);
      b.targets.push_back(static_cast<int32_t>((s + t + 1) % 5));
    }
  layer_stack stack(build_layers(spec), 0, 3);
  optimizer_config cfg;
  cfg.lr = 1e-2f;
  auto opt = make_optimizer(cfg, stack.num_params());
  const double first = train_step(stack, *opt, b).mean_loss();
  for (int i = 0; i < 60; ++i) train_step(stack, *opt, b);
  EXPECT_GT(first, 1.2);  // ln 5 = 1.61 from an untrained model
  EXPECT_LT(evaluate(stack, b).mean_loss(), 0.1);
}

}  // namespace
}  // namespace troupe
