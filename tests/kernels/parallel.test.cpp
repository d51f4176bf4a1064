// parallel_for and the ops that run on it: chunks are fixed by the size and grain alone, every
// index runs once, errors come back to the caller; and every op split over the device's threads
// gives the same bits on 1, 2 and 3 threads at shapes that cut it into many chunks. The ops'
// gradients are checked against finite differences in ops_grad and layers_grad.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <utility>
#include <vector>

#include "kernels/ops.hpp"
#include "kernels/optimizer.hpp"
#include "kernels/parallel.hpp"
#include "tests/kernels/grad_check.hpp"

namespace troupe {
namespace {

// Restores the process's kernel threads when a test ends, so tests do not leak their setting.
struct kernel_threads_for_test {
  explicit kernel_threads_for_test(int n) : before(kernel_threads()) { set_kernel_threads(n); }
  ~kernel_threads_for_test() { set_kernel_threads(before); }
  int before;
};

std::vector<std::pair<int64_t, int64_t>> chunks_seen(int threads, int64_t n, int64_t grain) {
  kernel_threads_for_test k(threads);
  std::mutex m;
  std::vector<std::pair<int64_t, int64_t>> seen;
  parallel_for(n, grain, [&](int64_t b, int64_t e) {
    std::lock_guard<std::mutex> l(m);
    seen.emplace_back(b, e);
  });
  std::sort(seen.begin(), seen.end());
  return seen;
}

TEST(ParallelFor, ChunksDependOnSizeAndGrainOnlyAndCoverEveryIndexOnce) {
  const auto one = chunks_seen(1, 1000, 64);
  ASSERT_EQ(one.size(), 16u);
  for (size_t k = 0; k < one.size(); ++k) {
    EXPECT_EQ(one[k].first, static_cast<int64_t>(k) * 64);
    EXPECT_EQ(one[k].second, std::min<int64_t>(1000, static_cast<int64_t>(k + 1) * 64));
  }
  EXPECT_EQ(chunks_seen(2, 1000, 64), one);
  EXPECT_EQ(chunks_seen(3, 1000, 64), one);
  EXPECT_EQ(chunks_seen(2, 10, 64), (std::vector<std::pair<int64_t, int64_t>>{{0, 10}}));
  EXPECT_TRUE(chunks_seen(2, 0, 64).empty());
}

TEST(ParallelFor, RunsOnMoreThanTheCallerAndManyLoopsInARowAllFinish) {
  kernel_threads_for_test k(2);
  std::atomic<int64_t> total{0};
  for (int loop = 0; loop < 2000; ++loop)  // back-to-back loops, as a training step issues them
    parallel_for(64, 1, [&](int64_t b, int64_t e) { total += e - b; });
  EXPECT_EQ(total.load(), 2000 * 64);
}

TEST(ParallelFor, RethrowsAChunksErrorOnTheCallerAfterEveryOtherChunkRan) {
  kernel_threads_for_test k(2);
  std::atomic<int> ran{0};
  EXPECT_THROW(parallel_for(32, 1,
                            [&](int64_t b, int64_t) {
                              ++ran;
                              if (b == 5) throw std::runtime_error("chunk 5");
                            }),
               std::runtime_error);
  EXPECT_EQ(ran.load(), 32);
  parallel_for(4, 1, [&](int64_t, int64_t) { ++ran; });  // the pool is usable afterwards
  EXPECT_EQ(ran.load(), 36);
}

TEST(ParallelFor, ALoopInsideAChunkRunsInlineOverTheSameChunks) {
  kernel_threads_for_test k(2);
  std::vector<int> inner(8 * 100, 0);
  parallel_for(8, 1, [&](int64_t b, int64_t) {
    parallel_for(100, 7, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) inner[static_cast<size_t>(b * 100 + i)] += 1;
    });
  });
  EXPECT_TRUE(std::all_of(inner.begin(), inner.end(), [](int v) { return v == 1; }));
}

// Every op that parallel_for splits, run once at `threads` on inputs fixed by seed, all outputs
// concatenated. Shapes: N = 1024 rows of C = 128 (layernorm 8 channel chunks, 1 row chunk per
// 128 rows), B x NH = 64 attention chunks, AdamW over 40k floats (3 chunks).
std::vector<float> every_op(int threads) {
  kernel_threads_for_test k(threads);
  const int64_t B = 16, T = 64, C = 128, NH = 4, N = B * T, V = 96;
  std::vector<float> out;
  auto keep = [&](const float* p, int64_t n) { out.insert(out.end(), p, p + n); };
  const tensor x = test::random_tensor({N, C}, 1, -2.0f, 2.0f);
  const tensor dy = test::random_tensor({N, C}, 2);
  const tensor w = test::random_tensor({C}, 3), bias = test::random_tensor({C}, 4);
  tensor y({N, C}), mean({N}), rstd({N}), dx({N, C}), dw({C}), db({C});
  ops::layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), bias.data(), N, C);
  ops::layernorm_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), mean.data(), rstd.data(), N,
                          C);
  for (const tensor* t : {&y, &mean, &rstd, &dx, &dw, &db}) keep(t->data(), t->numel());

  tensor pre = x.clone(), g({N, C}), dg({N, C});
  ops::bias_gelu_forward(g.data(), pre.data(), bias.data(), N, C);
  ops::gelu_backward(dg.data(), pre.data(), dy.data(), N * C);
  ops::add_into(dg.data(), dy.data(), N * C);
  for (const tensor* t : {&pre, &g, &dg}) keep(t->data(), t->numel());

  const tensor qkv = test::random_tensor({B, T, 3 * C}, 5);
  tensor att({B, NH, T, T}), a_out({B, T, C}), dqkv({B, T, 3 * C});
  ops::attention_forward(a_out.data(), att.data(), qkv.data(), B, T, C, NH);
  ops::attention_backward(dqkv.data(), dy.data(), qkv.data(), att.data(), B, T, C, NH);
  for (const tensor* t : {&att, &a_out, &dqkv}) keep(t->data(), t->numel());

  const tensor logits = test::random_tensor({N, V}, 6, -3.0f, 3.0f);
  std::vector<int32_t> targets(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i) targets[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7) % V);
  tensor probs({N, V}), dlogits({N, V});
  const double loss = ops::softmax_cross_entropy_forward(probs.data(), logits.data(), targets.data(), N, V);
  ops::softmax_cross_entropy_backward(dlogits.data(), probs.data(), targets.data(), N, V, 1.0f / N);
  keep(probs.data(), probs.numel());
  keep(dlogits.data(), dlogits.numel());
  float loss_bits[2];
  std::memcpy(loss_bits, &loss, sizeof loss);
  keep(loss_bits, 2);

  tensor tokens({B, T});
  for (int64_t i = 0; i < N; ++i) tokens.data()[i] = static_cast<float>((i * 13) % V);
  const tensor wte = test::random_tensor({V, C}, 7), wpe = test::random_tensor({T, C}, 8);
  tensor emb({B, T, C}), dwte({V, C}), dwpe({T, C});
  ops::embedding_forward(emb.data(), tokens.data(), wte.data(), wpe.data(), B, T, C, V);
  ops::embedding_backward(dwte.data(), dwpe.data(), dy.data(), tokens.data(), B, T, C);
  ops::position_backward(dwpe.data(), dy.data(), B, T, C);
  for (const tensor* t : {&emb, &dwte, &dwpe}) keep(t->data(), t->numel());

  const tensor fc_w = test::random_tensor({4 * C, C}, 9), fc_b = test::random_tensor({4 * C}, 10);
  const tensor dfc = test::random_tensor({N, 4 * C}, 11);
  tensor fc({N, 4 * C}), dfc_w({4 * C, C}), dfc_b({4 * C});
  ops::matmul_forward(fc.data(), x.data(), fc_w.data(), fc_b.data(), N, C, 4 * C);
  ops::matmul_backward_weight(dfc_w.data(), dfc_b.data(), dfc.data(), x.data(), N, C, 4 * C);
  for (const tensor* t : {&fc, &dfc_b}) keep(t->data(), t->numel());

  const int64_t P = 40000;
  auto adamw = make_optimizer(optimizer_config{}, P);
  std::vector<float> params = test::random_values(P, 12), grads = test::random_values(P, 13);
  for (int s = 0; s < 3; ++s) adamw->step(params.data(), grads.data(), P);
  keep(params.data(), P);
  keep(adamw->state().data(), static_cast<int64_t>(adamw->state().size()));
  return out;
}

TEST(ParallelOps, EveryOpGivesTheSameBitsOnOneTwoAndThreeThreads) {
  const std::vector<float> one = every_op(1);
  const std::vector<float> two = every_op(2), three = every_op(3);
  ASSERT_EQ(two.size(), one.size());
  ASSERT_EQ(three.size(), one.size());
  EXPECT_EQ(std::memcmp(two.data(), one.data(), one.size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(three.data(), one.data(), one.size() * sizeof(float)), 0);
}

TEST(BiasGeluForward, EqualsTheBiasAddedThenGeluBitForBit) {
  const int64_t N = 300, OC = 64;
  const tensor x = test::random_tensor({N, OC}, 21, -4.0f, 4.0f), b = test::random_tensor({OC}, 22);
  tensor pre = x.clone(), fused({N, OC}), biased = x.clone(), plain({N, OC});
  ops::bias_gelu_forward(fused.data(), pre.data(), b.data(), N, OC);
  for (int64_t r = 0; r < N; ++r)
    for (int64_t c = 0; c < OC; ++c) biased.data()[r * OC + c] += b[c];
  ops::gelu_forward(plain.data(), biased.data(), N * OC);
  EXPECT_EQ(pre.to_vector(), biased.to_vector());
  EXPECT_EQ(fused.to_vector(), plain.to_vector());
}

}  // namespace
}  // namespace troupe
