// Gradient checks of every layer's backward (linear, relu, gelu, layernorm, embedding,
// transformer_block) against central finite differences, plus the split-backward contract and
// the block's init and sub-layer binding. Bounds: float32_grad_bound in grad_check.hpp.
// Whole models through layer_stack and the loss are in model_grad.test.cpp.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/layers_dense.hpp"
#include "kernels/layers_transformer.hpp"
#include "kernels/ops.hpp"
#include "kernels/parallel.hpp"
#include "tests/kernels/grad_check.hpp"

namespace troupe {
namespace {

using test::grads_close;
using test::numeric_grad;
using test::project;
using test::random_tensor;

layer_list one(std::unique_ptr<layer> l) {
  layer_list v;
  v.push_back(std::move(l));
  return v;
}

// Runs forward, then backward_input and backward_weight separately with dy = r, and checks the
// input gradient and every parameter tensor against finite differences of sum(y * r).
void check_layer(std::unique_ptr<layer> l, tensor x, float h, bool input_has_grad = true) {
  layer_stack stack(one(std::move(l)), 0, 7);
  test::randomize_params(stack, 11);
  layer& lay = stack.at(0);
  saved_activations saved;
  tensor y = lay.forward(x, saved);
  const tensor r = random_tensor(y.shape(), 13);
  stack.zero_grads();
  tensor dx = lay.backward_input(r, saved);
  lay.backward_weight(r, saved);
  auto loss = [&] {
    saved_activations s;
    return project(lay.forward(x, s), r);
  };
  test::expect_param_grads_close(stack, loss, h);
  if (input_has_grad) {
    ASSERT_EQ(dx.shape(), x.shape());
    EXPECT_TRUE(grads_close("input", dx.data(), numeric_grad(x.data(), x.numel(), loss, h)));
  }
}

TEST(LinearBackward, MatchesFiniteDifferencesForInputWeightAndBias) {
  check_layer(std::make_unique<linear>(5, 7), random_tensor({2, 3, 5}, 1), 1e-2f);
}

TEST(ReluBackward, MatchesFiniteDifferencesAwayFromKink) {
  // |x| >= 0.1 and h = 1e-2: no perturbation crosses 0, where ReLU has no derivative.
  tensor x = random_tensor({4, 6}, 2, 0.1f, 1.0f);
  const auto sign = test::random_values(x.numel(), 3);
  for (int64_t i = 0; i < x.numel(); ++i) x.data()[i] *= sign[static_cast<size_t>(i)] < 0 ? -1.0f : 1.0f;
  check_layer(std::make_unique<relu>(), x, 1e-2f);
}

TEST(GeluBackward, MatchesFiniteDifferences) {
  check_layer(std::make_unique<gelu>(), random_tensor({3, 10}, 4, -4.0f, 4.0f), 1e-2f);
}

TEST(LayernormBackward, MatchesFiniteDifferences) {
  check_layer(std::make_unique<layernorm>(8), random_tensor({2, 3, 8}, 5, -2.0f, 2.0f), 1e-2f);
}

TEST(EmbeddingBackward, MatchesFiniteDifferencesAndHasNoInputGradient) {
  // Repeated tokens check that their gradients add into one row of wte.
  tensor tokens({2, 4}, {0, 3, 3, 5, 5, 1, 3, 0});
  check_layer(std::make_unique<embedding>(6, 5, 4), tokens, 1e-2f, /*input_has_grad=*/false);
  embedding e(6, 5, 4);
  saved_activations s;
  EXPECT_TRUE(e.backward_input(tensor({2, 4, 4}), s).empty());
}

TEST(TransformerBlockBackward, MatchesFiniteDifferencesForInputAndEveryParameter) {
  check_layer(std::make_unique<transformer_block>(8, 2), random_tensor({2, 5, 8}, 6), 1e-2f);
}

// The same on two kernel threads: the attention then runs its (batch, head) pairs on both, and
// the MLP's bias + GELU fused pass with them.
TEST(TransformerBlockBackward, MatchesFiniteDifferencesOnTwoKernelThreads) {
  const int before = kernel_threads();
  set_kernel_threads(2);
  check_layer(std::make_unique<transformer_block>(16, 4), random_tensor({3, 6, 16}, 6), 1e-2f);
  set_kernel_threads(before);
}

// Zero-bubble order: two micro-batches forward, both input halves, then both weight halves
// later and in another order. Gradients must equal, bit for bit, running each backward whole
// at once and the weight-only path layer_stack takes for a first layer without input gradient.
TEST(TransformerBlockSplitBackward, DeferredWeightHalvesEqualImmediateBackward) {
  auto make = [] {
    auto s = std::make_unique<layer_stack>(one(std::make_unique<transformer_block>(8, 2)), 0, 7);
    test::randomize_params(*s, 11);
    s->zero_grads();
    return s;
  };
  const tensor x[2] = {random_tensor({2, 5, 8}, 20), random_tensor({2, 5, 8}, 21)};
  const tensor r[2] = {random_tensor({2, 5, 8}, 22), random_tensor({2, 5, 8}, 23)};

  auto now = make();
  tensor dx_now[2];
  for (int m = 0; m < 2; ++m) {
    saved_activations s;
    now->at(0).forward(x[m], s);
    dx_now[m] = now->at(0).backward_input(r[m], s);
    now->at(0).backward_weight(r[m], s);
  }

  auto later = make();
  saved_activations s[2];
  for (int m = 0; m < 2; ++m) later->at(0).forward(x[m], s[m]);
  const tensor dx1 = later->at(0).backward_input(r[1], s[1]);
  const tensor dx0 = later->at(0).backward_input(r[0], s[0]);
  later->at(0).backward_weight(r[0], s[0]);
  later->at(0).backward_weight(r[1], s[1]);
  EXPECT_EQ(dx0.to_vector(), dx_now[0].to_vector());
  EXPECT_EQ(dx1.to_vector(), dx_now[1].to_vector());
  EXPECT_EQ(later->grads().to_vector(), now->grads().to_vector());

  auto stacked = make();
  for (int m = 0; m < 2; ++m) {
    stack_context ctx;
    stacked->forward(x[m], ctx);
    EXPECT_TRUE(stacked->backward(r[m], ctx, /*need_input_grad=*/false).empty());
  }
  EXPECT_EQ(stacked->grads().to_vector(), now->grads().to_vector());
}

TEST(TransformerBlockInit, FollowsGpt2) {
  const int64_t C = 64;
  const float proj_std = 0.005f;
  layer_stack stack(one(std::make_unique<transformer_block>(C, 4, proj_std)), 0, 3);
  auto& block = dynamic_cast<transformer_block&>(stack.at(0));
  const float* p = stack.params().data();
  auto stddev = [&](const parallel_linear& l) {
    const float* w = p + block.offset_of(l);
    const int64_t n = l.in_features() * l.out_features();
    double s = 0.0;
    for (int64_t i = 0; i < n; ++i) s += static_cast<double>(w[i]) * w[i];
    return std::sqrt(s / static_cast<double>(n));
  };
  auto all_equal = [&](int64_t off, int64_t n, float v) {
    for (int64_t i = 0; i < n; ++i)
      if (p[off + i] != v) return false;
    return true;
  };
  // 4096+ samples per matrix: the sample std is within a few percent of the true one.
  EXPECT_NEAR(stddev(block.attn_qkv()), 0.02, 0.001);
  EXPECT_NEAR(stddev(block.mlp_fc()), 0.02, 0.001);
  EXPECT_NEAR(stddev(block.attn_proj()), proj_std, 0.0003);
  EXPECT_NEAR(stddev(block.mlp_proj()), proj_std, 0.0003);
  for (parallel_linear* l : {&block.attn_qkv(), &block.attn_proj(), &block.mlp_fc(), &block.mlp_proj()})
    EXPECT_TRUE(all_equal(block.offset_of(*l) + l->in_features() * l->out_features(), l->out_features(), 0.0f));
  for (layernorm* ln : {&block.ln1(), &block.ln2()}) {
    EXPECT_TRUE(all_equal(block.offset_of(*ln), C, 1.0f));
    EXPECT_TRUE(all_equal(block.offset_of(*ln) + C, C, 0.0f));
  }
}

// Tensor parallelism will split the block's linears: they must be usable on their own and read
// exactly the block's parameter sub-slice that offset_of names.
TEST(TransformerBlockParts, LinearsAreBoundToTheBlocksParameterSlices) {
  const int64_t C = 8;
  layer_stack stack(one(std::make_unique<transformer_block>(C, 2)), 0, 3);
  test::randomize_params(stack, 4);
  auto& block = dynamic_cast<transformer_block&>(stack.at(0));
  int64_t total = 0;
  for (const auto& spec : block.param_specs()) total += numel_of(spec.shape);
  EXPECT_EQ(total, 12 * C * C + 13 * C);
  EXPECT_EQ(block.param_specs().at(2).name, "attn.qkv.weight");
  for (parallel_linear* l : {&block.attn_qkv(), &block.attn_proj(), &block.mlp_fc(), &block.mlp_proj()}) {
    const tensor in = random_tensor({3, l->in_features()}, 6);
    saved_activations s;
    const tensor got = l->forward(in, s);
    tensor want({3, l->out_features()});
    const float* w = stack.params().data() + block.offset_of(*l);
    ops::matmul_forward(want.data(), in.data(), w, w + l->in_features() * l->out_features(), 3,
                        l->in_features(), l->out_features());
    EXPECT_EQ(got.to_vector(), want.to_vector());
  }
}

}  // namespace
}  // namespace troupe
