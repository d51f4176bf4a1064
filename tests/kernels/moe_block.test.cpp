// The MoE GPT block: its forward is the dense block's attention half followed by the experts
// (checked against a dense block whose MLP is zeroed, plus a moe_mlp on the same values), and its
// backward matches finite differences for the input and every parameter, routing included (every
// token goes to every expert, so no choice flips under a finite difference's step).
#include "kernels/layers_moe_block.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>

#include "kernels/layer_stack.hpp"
#include "kernels/model.hpp"
#include "kernels/param_names.hpp"
#include "tests/kernels/grad_check.hpp"

namespace troupe {
namespace {

constexpr int64_t C = 8, NH = 2, E = 3;

layer_list one(std::unique_ptr<layer> l) {
  layer_list v;
  v.push_back(std::move(l));
  return v;
}

TEST(MoeBlock, IsTheDenseBlocksAttentionThenTheExpertsOnTheSecondLayernormsOutput) {
  moe_options o;
  o.experts = E;
  o.top_k = 2;
  layer_stack moe(one(std::make_unique<moe_block>(C, NH, o)), 0, 5);
  test::randomize_params(moe, 3);
  // A dense block with the same attention half and a zero MLP: its output is x2 = x + attn(x).
  layer_stack dense(one(std::make_unique<transformer_block>(C, NH)), 0, 5);
  std::fill(dense.params().data(), dense.params().data() + dense.num_params(), 0.0f);
  const int64_t attention_half = 2 * C + (3 * C * C + 3 * C) + (C * C + C) + 2 * C;  // ln1, qkv, proj, ln2
  std::copy(moe.params().data(), moe.params().data() + attention_half, dense.params().data());
  layer_stack experts(one(std::make_unique<moe_mlp>(C, 4 * C, o)), 0, 5);
  ASSERT_EQ(attention_half + experts.num_params(), moe.num_params());
  std::copy(moe.params().data() + attention_half, moe.params().data() + moe.num_params(), experts.params().data());

  const tensor x = test::random_tensor({2, 5, C}, 9);
  saved_activations s1, s2, s3, s4;
  const tensor y = moe.at(0).forward(x, s1);
  const tensor x2 = dense.at(0).forward(x, s2);
  // ln2 of the dense block on x2, through a layernorm holding its parameters.
  layer_stack ln2(one(std::make_unique<layernorm>(C)), 0, 5);
  std::copy(moe.params().data() + attention_half - 2 * C, moe.params().data() + attention_half, ln2.params().data());
  const tensor h = ln2.at(0).forward(x2, s3);
  const tensor m = experts.at(0).forward(h, s4);
  ASSERT_EQ(y.shape(), x.shape());
  for (int64_t i = 0; i < y.numel(); ++i) EXPECT_NEAR(y[i], x2[i] + m[i], 1e-5f) << i;
  EXPECT_EQ(dynamic_cast<moe_block&>(moe.at(0)).last_routing().N, 10);
}

TEST(MoeBlockBackward, MatchesFiniteDifferencesForTheInputAndEveryParameter) {
  moe_options o;
  o.experts = E;
  o.top_k = E;  // every expert: the gates are the whole softmax, smooth in every parameter
  o.aux_coefficient = 0.05f;
  layer_stack stack(one(std::make_unique<moe_block>(C, NH, o)), 0, 7);
  test::randomize_params(stack, 11);
  auto& block = dynamic_cast<moe_block&>(stack.at(0));
  const tensor x = test::random_tensor({2, 4, C}, 13);
  saved_activations saved;
  const tensor y = block.forward(x, saved);
  const tensor r = test::random_tensor(y.shape(), 17);
  stack.zero_grads();
  const tensor dx = block.backward_input(r, saved);
  block.backward_weight(r, saved);
  auto loss = [&](const tensor& in) {
    saved_activations s;
    const double projected = test::project(block.forward(in, s), r);
    return projected + block.last_routing().aux_loss;
  };
  const float h = 1e-2f;
  test::expect_param_grads_close(stack, [&] { return loss(x); }, h);
  tensor probe = x;
  EXPECT_TRUE(test::grads_close("input", dx.data(), test::numeric_grad(probe.data(), probe.numel(), [&] { return loss(probe); }, h)));
}

// Selective recomputation drops exactly the attention's scores after forward and changes no bit
// of the input's or the parameters' gradients.
TEST(MoeBlock, SelectiveRecomputationDropsTheScoresAndChangesNoBit) {
  moe_options o;
  o.experts = E;
  o.top_k = 2;
  o.aux_coefficient = 0.05f;
  const tensor x = test::random_tensor({2, 5, C}, 9);
  const tensor r = test::random_tensor({2, 5, C}, 10);
  auto run = [&](bool selective, int64_t& kept) {
    layer_stack stack(one(std::make_unique<moe_block>(C, NH, o)), 0, 5);
    test::randomize_params(stack, 3);
    stack.at(0).set_selective_recompute(selective);
    saved_activations saved;
    stack.at(0).forward(x, saved);
    kept = 0;
    for (const tensor& t : saved.tensors) kept += t.numel();
    stack.zero_grads();
    std::vector<float> out = stack.at(0).backward_input(r, saved).to_vector();
    stack.at(0).backward_weight(r, saved);
    const std::vector<float> g = stack.grads().to_vector();
    out.insert(out.end(), g.begin(), g.end());
    return out;
  };
  int64_t all = 0, fewer = 0;
  const std::vector<float> plain = run(false, all), selective = run(true, fewer);
  EXPECT_EQ(plain, selective);
  EXPECT_EQ(all - fewer, 2 * NH * 5 * 5);  // B x heads x T x T
}

TEST(MoeGpt, EveryNthBlockIsAnMoeBlockAndItsParametersAreNamedAndCounted) {
  model_spec spec;
  spec.kind = model_kind::gpt;
  spec.vocab = 11;
  spec.context = 6;
  spec.channels = C;
  spec.heads = NH;
  spec.blocks = 4;
  spec.experts = E;
  spec.moe_every = 2;
  const layer_list layers = build_layers(spec);
  ASSERT_EQ(layers.size(), 7u);
  EXPECT_EQ(layers[1]->kind(), "block");
  EXPECT_EQ(layers[2]->kind(), "moe_block");
  EXPECT_EQ(layers[3]->kind(), "block");
  EXPECT_EQ(layers[4]->kind(), "moe_block");
  int64_t n = 0;
  for (const auto& l : layers) n += l->num_params();
  EXPECT_EQ(param_count(spec), n);
  bool router = false, expert = false;
  for (const named_param& p : named_params(spec)) {
    router = router || p.name == "blocks.1.mlp.router.weight";
    expert = expert || p.name == "blocks.3.mlp.experts.2.proj.bias";
  }
  EXPECT_TRUE(router);
  EXPECT_TRUE(expert);
  spec.top_k = 4;
  EXPECT_THROW(validate(spec), std::invalid_argument);
  spec.top_k = 2;
  EXPECT_THROW(validate(spec, 2), std::invalid_argument);  // tensor parallelism
  spec.kind = model_kind::mlp;
  EXPECT_THROW(validate(spec), std::invalid_argument);
}

}  // namespace
}  // namespace troupe
