// Activation recomputation changes no number and holds exactly the bytes the model's shape
// predicts. A GPT block keeps (per microbatch of B sequences of T tokens, N = B*T rows, f32):
// its input and 15 N*C more (ln1 out, qkv 3C, attention out, x2, ln2 out, fc 4C, gelu out 4C),
// 4 N for the two layernorms' mean and rstd, and the B*heads*T*T softmaxed scores. The embedding
// keeps its tokens (N), the final layernorm its input, mean and rstd (N*C + 2N), the head its
// input (N*C). Selective recomputation drops the scores of every block; full keeps only each
// layer's input and, going down, rebuilds one layer at a time, so its peak is while the last
// block is rebuilt: the tokens, every block's input, and that block's own activations.
// At bf16 matmul precision a block's linears keep their inputs as their products took them, in
// bf16: ln1 out, attention out, ln2 out and gelu out (7 N*C) take 2 bytes an element instead of
// 4. The head, a plain linear at tp 1, keeps its fp32 input (layers_dense.cpp says why).
#include <gtest/gtest.h>

#include "kernels/loss.hpp"
#include "kernels/model.hpp"
#include "kernels/pipeline_chunk.hpp"
#include "tests/kernels/grad_check.hpp"
#include "tests/kernels/gpt_spec.hpp"

namespace troupe {
namespace {

constexpr int64_t B = 3, T = 5, C = 8, H = 2, L = 3, V = 7;

model_spec gpt() { return test::gpt_spec(V, T, C, H, L); }

tensor tokens(uint64_t seed) {
  tensor t({B, T});
  std::mt19937_64 rng(seed);
  for (int64_t i = 0; i < t.numel(); ++i) t.data()[i] = static_cast<float>(rng() % V);
  return t;
}

std::vector<int32_t> targets() {
  std::vector<int32_t> t;
  for (int64_t i = 0; i < B * T; ++i) t.push_back(static_cast<int32_t>((i * 3 + 1) % V));
  return t;
}

constexpr int64_t N = B * T, f32 = 4;
constexpr int64_t block_extra = 15 * N * C + 4 * N + B * H * T * T;  // beyond its input
constexpr int64_t none_bytes = f32 * (N + L * (N * C + block_extra) + (N * C + 2 * N) + N * C);
constexpr int64_t scores_bytes = f32 * L * B * H * T * T;
constexpr int64_t full_bytes = f32 * (N + L * N * C + block_extra);

struct run {
  std::vector<float> grads;
  double loss = 0;
  int64_t peak = 0;
};

// Forward of each microbatch, then backward of each: returns gradients, loss and peak bytes.
run gpipe(recompute_mode m, int microbatches, matmul_precision p = matmul_precision::f32) {
  pipeline_chunk chunk(build_layers(gpt()), 0, 42, m);
  chunk.stack().set_matmul_precision(p);
  run r;
  std::vector<tensor> dlogits;
  for (int mb = 0; mb < microbatches; ++mb) {
    loss_result l = cross_entropy(chunk.forward(mb, tokens(static_cast<uint64_t>(mb))), targets(), 0.1f);
    r.loss += l.loss_sum;
    dlogits.push_back(l.dlogits);
  }
  for (int mb = 0; mb < microbatches; ++mb) chunk.backward(mb, dlogits[static_cast<size_t>(mb)], false);
  EXPECT_EQ(chunk.live_bytes(), 0);
  r.peak = chunk.peak_bytes();
  r.grads = chunk.stack().grads().to_vector();
  return r;
}

TEST(Recompute, NoneHoldsEveryLayersActivationsAsTheShapePredicts) {
  EXPECT_EQ(gpipe(recompute_mode::none, 1).peak, none_bytes);
  EXPECT_EQ(gpipe(recompute_mode::none, 2).peak, 2 * none_bytes);
}

TEST(Recompute, SelectiveDropsExactlyTheAttentionScoresAndChangesNoBit) {
  const run none = gpipe(recompute_mode::none, 2), sel = gpipe(recompute_mode::selective, 2);
  EXPECT_EQ(none.peak - sel.peak, 2 * scores_bytes);
  EXPECT_EQ(sel.grads, none.grads);
  EXPECT_EQ(sel.loss, none.loss);
}

TEST(Recompute, FullKeepsLayerInputsAndRebuildsOneLayerAtATimeAndChangesNoBit) {
  const run none = gpipe(recompute_mode::none, 1), full = gpipe(recompute_mode::full, 1);
  EXPECT_EQ(full.peak, full_bytes);
  EXPECT_LT(full.peak, none.peak);
  EXPECT_EQ(full.grads, none.grads);
  EXPECT_EQ(full.loss, none.loss);
}

// The split backward (zero-bubble's I then W) recomputes too, and gives the same gradients.
TEST(Recompute, FullUnderASplitBackwardChangesNoBit) {
  std::vector<std::vector<float>> grads;
  for (recompute_mode m : {recompute_mode::none, recompute_mode::full}) {
    pipeline_chunk chunk(build_layers(gpt()), 0, 42, m);
    const loss_result l = cross_entropy(chunk.forward(0, tokens(1)), targets(), 0.1f);
    chunk.backward_input(0, l.dlogits, false);
    chunk.backward_weight(0);
    grads.push_back(chunk.stack().grads().to_vector());
  }
  EXPECT_EQ(grads[0], grads[1]);
}

TEST(Recompute, Bf16MatmulsKeepEachLinearsInputInHalfTheBytesAndRecomputingChangesNoBit) {
  constexpr auto bf16 = matmul_precision::bf16;
  const run none = gpipe(recompute_mode::none, 1, bf16), sel = gpipe(recompute_mode::selective, 1, bf16),
            full = gpipe(recompute_mode::full, 1, bf16);
  EXPECT_EQ(none.peak, none_bytes - 2 * 7 * L * N * C);
  EXPECT_EQ(full.peak, full_bytes - 2 * 7 * N * C);
  EXPECT_EQ(sel.grads, none.grads);
  EXPECT_EQ(full.grads, none.grads);
  EXPECT_EQ(full.loss, none.loss);
  EXPECT_NE(none.grads, gpipe(recompute_mode::none, 1).grads) << "bf16 operands changed no gradient";
}

TEST(Recompute, ParsesItsThreeNamesAndRefusesOthers) {
  for (recompute_mode m : {recompute_mode::none, recompute_mode::selective, recompute_mode::full})
    EXPECT_EQ(parse_recompute_mode(to_string(m)), m);
  EXPECT_THROW(parse_recompute_mode("some"), std::invalid_argument);
}

}  // namespace
}  // namespace troupe
