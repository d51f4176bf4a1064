// Whole models: a small GPT and an MLP checked end to end (layer_stack + cross_entropy) against
// finite differences, the GPT's shapes and parameter count, and the pipeline contract that a
// model cut into stacks has the same initial parameters and the same forward as one stack.
// Per-layer checks are in layers_grad.test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "kernels/layers_dense.hpp"
#include "kernels/model.hpp"
#include "kernels/train_step.hpp"
#include "tests/kernels/grad_check.hpp"
#include "tests/kernels/gpt_spec.hpp"

namespace troupe {
namespace {

model_spec small_gpt() { return test::gpt_spec(7, 6, 8, 2, 2); }

model_spec small_mlp() {
  model_spec s;
  s.inputs = 6;
  s.hidden = {8, 8};
  s.classes = 4;
  return s;
}

batch gpt_batch(int64_t B, int64_t T, int64_t V, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(V) - 1);
  batch b;
  b.inputs = tensor({B, T});
  for (int64_t i = 0; i < B * T; ++i) b.inputs.data()[i] = static_cast<float>(tok(rng));
  for (int64_t i = 0; i < B * T; ++i) b.targets.push_back(tok(rng));
  return b;
}

// d(summed loss)/d(every parameter) from compute_gradients against finite differences of
// evaluate(). Each parameter tensor is compared against its own scale.
void check_model(layer_stack& stack, const batch& b, float h) {
  stack.zero_grads();
  compute_gradients(stack, b, /*grad_scale=*/1.0f);
  test::expect_param_grads_close(stack, [&] { return evaluate(stack, b).loss_sum; }, h);
}

TEST(GptBackward, MatchesFiniteDifferencesThroughLayerStackAndCrossEntropy) {
  const model_spec spec = small_gpt();
  layer_stack stack(build_layers(spec), 0, 1);
  test::randomize_params(stack, 2);
  check_model(stack, gpt_batch(2, 5, spec.vocab, 3), 1e-2f);  // T = 5 < context = 6
}

// Finite differences are only valid if no nudge moves a ReLU's input across zero, where it has no
// derivative. Random values put some of the 80 pre-activations within 1e-2 of zero, so this
// shifts the bias of any hidden unit that comes closer than `margin` until none does.
void move_preactivations_off_kink(layer_stack& stack, const tensor& x, float margin) {
  tensor in = x;
  for (size_t i = 0; i < stack.num_layers(); ++i) {
    auto* lin = dynamic_cast<linear*>(&stack.at(i));
    saved_activations s;
    tensor out = stack.at(i).forward(in, s);
    if (lin && i + 1 < stack.num_layers() && stack.at(i + 1).kind() == "relu") {
      float* bias = stack.params().data() + stack.param_offset(i) + lin->in_features() * lin->out_features();
      for (int tries = 0; tries < 1000; ++tries) {
        int64_t near = -1;
        for (int64_t j = 0; j < out.numel() && near < 0; ++j)
          if (std::abs(out[j]) < margin) near = j;
        if (near < 0) break;
        bias[near % lin->out_features()] += 2.0f * margin;
        out = stack.at(i).forward(in, s);
      }
    }
    in = out;
  }
}

TEST(MlpBackward, MatchesFiniteDifferencesThroughLayerStackAndCrossEntropy) {
  batch b;
  b.inputs = test::random_tensor({5, 6}, 4);
  b.targets = {0, 3, 1, 2, 3};
  layer_stack stack(build_layers(small_mlp()), 0, 1);
  test::randomize_params(stack, 2);
  // h = 1e-2 moves a first-layer pre-activation by at most h * |x| <= 1e-2 and later ones by
  // less (weights are <= 0.3), so a 0.05 margin keeps every nudge on one side of the kink.
  move_preactivations_off_kink(stack, b.inputs, 0.05f);
  check_model(stack, b, 1e-2f);
}

TEST(BuildGpt, LogitsAreBTVAndParameterCountIsGpt2s) {
  const model_spec spec = small_gpt();
  layer_stack stack(build_layers(spec), 0, 1);
  const int64_t C = spec.channels, V = spec.vocab;
  EXPECT_EQ(stack.num_layers(), static_cast<size_t>(spec.blocks + 3));
  EXPECT_EQ(stack.num_params(),
            V * C + spec.context * C + spec.blocks * (12 * C * C + 13 * C) + 2 * C + C * V + V);
  stack_context ctx;
  const batch b = gpt_batch(3, 4, V, 5);
  EXPECT_EQ(stack.forward(b.inputs, ctx).shape(), (shape_t{3, 4, V}));
  model_spec bad = spec;
  bad.heads = 3;
  EXPECT_THROW(build_layers(bad), std::invalid_argument);
}

// Moves layers [begin, end) of a freshly built model into their own list.
layer_list part_of(const model_spec& spec, size_t begin, size_t end) {
  layer_list all = build_layers(spec), out;
  for (size_t i = begin; i < end; ++i) out.push_back(std::move(all.at(i)));
  return out;
}

// Pipeline stages hold consecutive runs of layers. Cut anywhere, the stages together hold the
// same initial values as the single stack and compute the same logits, bit for bit.
void check_cut(const model_spec& spec, const tensor& x, size_t cut) {
  const size_t n = build_layers(spec).size();
  const layer_stack whole(build_layers(spec), 0, 42);
  const layer_stack first(part_of(spec, 0, cut), 0, 42);
  const layer_stack second(part_of(spec, cut, n), static_cast<int64_t>(cut), 42);
  std::vector<float> joined = first.params().to_vector();
  const auto rest = second.params().to_vector();
  joined.insert(joined.end(), rest.begin(), rest.end());
  EXPECT_EQ(joined, whole.params().to_vector()) << "cut at layer " << cut;
  stack_context a, b, c;
  EXPECT_EQ(second.forward(first.forward(x, a), b).to_vector(), whole.forward(x, c).to_vector())
      << "cut at layer " << cut;
}

TEST(LayerStackCut, TwoStacksHoldTheSameParamsAndComputeTheSameOutputAsOne) {
  const model_spec gpt = small_gpt();
  const batch b = gpt_batch(2, 6, gpt.vocab, 6);
  for (size_t cut : {1u, 2u, 3u, 4u}) check_cut(gpt, b.inputs, cut);
  const model_spec mlp = small_mlp();
  for (size_t cut : {1u, 2u, 4u}) check_cut(mlp, test::random_tensor({3, 6}, 7), cut);
}

}  // namespace
}  // namespace troupe
