// The CUDA attention's algorithm (kernels/flash_attention.hpp), run on the host block by block
// exactly as the kernels run it (tests/kernels/flash_host.hpp), against the CPU reference
// (ops::attention_forward / attention_backward, which keep the (T, T) probabilities) and a
// double-precision log-sum-exp. Tiles smaller than the launch's (4 rows) make every head walk
// several tiles, so the running softmax's rescaling and the causal tile bounds are exercised at
// small T; the launch's own tile sizes are run too.
//
// Tolerances. out is a convex combination of the v rows, computed in another order (tile by tile,
// rescaled): its error is a few u = 2^-24 of max |v| per tile, so 2e-6 * max |v| leaves a margin of
// ~30 u while a missing key, a key past the diagonal or a wrong rescale moves an output by O(|v|).
// The log-sum-exp adds T exponentials: 1e-6 (1 + |lse|). A probability rebuilt from it as
// exp(s - lse) carries lse's absolute error as a relative one. The gradients are sums of up to T
// products of O(1) terms: 1e-5 of the largest gradient, against O(1) from any wrong term.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/device_ops.hpp"
#include "kernels/flash_attention.hpp"
#include "kernels/loss.hpp"
#include "kernels/model.hpp"
#include "kernels/ops.hpp"
#include "kernels/pipeline_chunk.hpp"
#include "tests/kernels/fake_gpu.hpp"
#include "tests/kernels/flash_host.hpp"
#include "tests/kernels/grad_check.hpp"
#include "tests/kernels/gpt_spec.hpp"

namespace troupe {
namespace {

using vec = std::vector<float>;

struct shape {
  int64_t B, T, C, NH;
  std::string name() const {
    return "B " + std::to_string(B) + " T " + std::to_string(T) + " C " + std::to_string(C) + " NH " +
           std::to_string(NH);
  }
};

float max_abs(const vec& v) {
  float m = 0;
  for (float x : v) m = std::max(m, std::fabs(x));
  return m;
}

// The largest |a - b| over the elements, and the first element where it exceeds tol.
::testing::AssertionResult close(const char* what, const vec& got, const vec& want, double tol) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << what << ": sizes differ";
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double e = std::fabs(double(got[i]) - want[i]);
    if (!(e <= tol)) return ::testing::AssertionFailure() << what << "[" << i << "]: " << got[i] << " vs " << want[i];
    worst = std::max(worst, e);
  }
  return ::testing::AssertionSuccess() << what << ": worst " << worst << " within " << tol;
}

// log sum_{j <= t} exp(scale q_t . k_j) in double, per (b, h, t).
std::vector<double> log_sum_exp(const vec& qkv, const shape& s) {
  const int64_t hs = s.C / s.NH, C3 = 3 * s.C;
  const double scale = 1.0 / std::sqrt(double(hs));
  std::vector<double> out(static_cast<size_t>(s.B * s.NH * s.T));
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.NH; ++h)
      for (int64_t t = 0; t < s.T; ++t) {
        std::vector<double> sc;
        for (int64_t j = 0; j <= t; ++j) {
          double d = 0;
          for (int64_t i = 0; i < hs; ++i)
            d += double(qkv[(b * s.T + t) * C3 + h * hs + i]) * qkv[(b * s.T + j) * C3 + s.C + h * hs + i];
          sc.push_back(d * scale);
        }
        const double m = *std::max_element(sc.begin(), sc.end());
        double sum = 0;
        for (double x : sc) sum += std::exp(x - m);
        out[static_cast<size_t>((b * s.NH + h) * s.T + t)] = m + std::log(sum);
      }
  return out;
}

void check_forward(const shape& s, int rows, unsigned seed) {
  SCOPED_TRACE(s.name() + " rows " + std::to_string(rows));
  const int64_t hs = s.C / s.NH, C3 = 3 * s.C;
  const vec qkv = test::random_values(s.B * s.T * C3, seed, -2, 2);
  vec out(static_cast<size_t>(s.B * s.T * s.C)), att(static_cast<size_t>(s.B * s.NH * s.T * s.T));
  ops::attention_forward(out.data(), att.data(), qkv.data(), s.B, s.T, s.C, s.NH);
  vec fout(out.size(), NAN), lse(static_cast<size_t>(s.B * s.NH * s.T), NAN);
  test::flash_forward_on_host(fout.data(), lse.data(), qkv.data(), s.B, s.T, s.C, s.NH, rows);
  EXPECT_TRUE(close("out", fout, out, 2e-6 * max_abs(qkv)));
  const std::vector<double> want = log_sum_exp(qkv, s);
  const double scale = 1.0 / std::sqrt(double(hs));
  for (int64_t bh = 0; bh < s.B * s.NH; ++bh)
    for (int64_t t = 0; t < s.T; ++t) {
      const size_t r = static_cast<size_t>(bh * s.T + t);
      ASSERT_NEAR(lse[r], want[r], 1e-6 * (1 + std::fabs(want[r]))) << "head " << bh << " row " << t;
      // The probabilities the backward rebuilds are the CPU's.
      const int64_t b = bh / s.NH, h = bh % s.NH;
      for (int64_t j = 0; j <= t; ++j) {
        double d = 0;
        for (int64_t i = 0; i < hs; ++i)
          d += double(qkv[(b * s.T + t) * C3 + h * hs + i]) * qkv[(b * s.T + j) * C3 + s.C + h * hs + i];
        const double p = std::exp(d * scale - lse[r]), cpu = att[(bh * s.T + t) * s.T + j];
        ASSERT_NEAR(p, cpu, 1e-5 * cpu + 1e-7) << "head " << bh << " P[" << t << "][" << j << "]";
      }
    }
}

void check_backward(const shape& s, int rows, unsigned seed) {
  SCOPED_TRACE(s.name() + " rows " + std::to_string(rows));
  const int64_t C3 = 3 * s.C;
  const vec qkv = test::random_values(s.B * s.T * C3, seed, -2, 2);
  const vec dout = test::random_values(s.B * s.T * s.C, seed + 1);
  vec out(static_cast<size_t>(s.B * s.T * s.C)), att(static_cast<size_t>(s.B * s.NH * s.T * s.T)), dqkv(qkv.size());
  ops::attention_forward(out.data(), att.data(), qkv.data(), s.B, s.T, s.C, s.NH);
  ops::attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), s.B, s.T, s.C, s.NH);
  vec fout(out.size()), lse(static_cast<size_t>(s.B * s.NH * s.T)), fdqkv(qkv.size(), NAN);
  test::flash_forward_on_host(fout.data(), lse.data(), qkv.data(), s.B, s.T, s.C, s.NH, rows);
  test::flash_backward_on_host(fdqkv.data(), dout.data(), qkv.data(), lse.data(), s.B, s.T, s.C, s.NH, rows);
  EXPECT_TRUE(close("dqkv", fdqkv, dqkv, 1e-5 * max_abs(dqkv)));
}

// Head sizes 4 and 5 (not a power of two), T from 1 (one key) to past two of the launch's tiles.
const shape shapes[] = {{2, 11, 12, 3}, {1, 1, 8, 2}, {2, 9, 10, 2}, {1, 70, 128, 2}, {1, 23, 128, 1}};

TEST(FlashAttention, ForwardGivesTheCpuOutputAndALogSumExpThatRebuildsTheCpuProbabilities) {
  unsigned seed = 10;
  for (const shape& s : shapes)
    for (int rows : {4, 0}) check_forward(s, rows, seed++);
}

TEST(FlashAttention, BackwardFromTheLogSumExpGivesTheCpuGradients) {
  unsigned seed = 40;
  for (const shape& s : shapes)
    for (int rows : {4, 0}) check_backward(s, rows, seed++);
}

TEST(FlashAttention, TilesTakeTheMostRowsThatFitABlocksSharedMemory) {
  using namespace flash;
  // Head size 64: 4 arrays of 65 floats and 2 scalars a row is 1048 bytes, 32 rows 33 KiB; the
  // key side's 6 arrays take 1568 bytes a row, so 16 rows.
  EXPECT_EQ(rows_per_block(64, forward_arrays, forward_scalars), 32);
  EXPECT_EQ(rows_per_block(64, query_grad_arrays, query_grad_scalars), 32);
  EXPECT_EQ(rows_per_block(64, key_grad_arrays, key_grad_scalars), 16);
  EXPECT_EQ(rows_per_block(128, forward_arrays, forward_scalars), 16);
  EXPECT_EQ(rows_per_block(128, key_grad_arrays, key_grad_scalars), 8);
  for (int64_t hs : {8, 64, 128, 254})
    for (int arrays : {forward_arrays, query_grad_arrays, key_grad_arrays})
      EXPECT_LE(shared_floats(rows_per_block(hs, arrays, 2), hs, arrays, 2) * 4, 48 * 1024) << hs;
  try {
    rows_per_block(255, key_grad_arrays, key_grad_scalars);  // 8 rows of 6 x 256 + 2 floats: 49216 bytes
    FAIL() << "a head of 255 channels fit";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("head size 255"), std::string::npos) << e.what();
  }
}

// A GPT on a device that runs the flash attention (the fake GPU with the CUDA blocks on the host):
// its gradients are the CPU's to rounding, and what each block keeps of its attention for
// backward is one float per row and head, not T, so the chunk's peak falls by exactly the
// probabilities less the log-sum-exps; selective recomputation then rebuilds the log-sum-exps.
constexpr int64_t B = 3, T = 9, C = 16, H = 2, L = 2, V = 13;

model_spec gpt() { return test::gpt_spec(V, T, C, H, L); }

struct run {
  vec grads;
  double loss = 0;
  int64_t peak = 0;
};

run train_once(device where, recompute_mode m) {
  pipeline_chunk chunk(build_layers(gpt()), 0, 42, m, where);
  tensor tokens({B, T});
  std::vector<int32_t> targets;
  for (int64_t i = 0; i < B * T; ++i) {
    tokens.data()[i] = static_cast<float>((i * 7 + 3) % V);
    targets.push_back(static_cast<int32_t>((i * 5 + 1) % V));
  }
  const device_ops& k = ops_for(where);
  const tensor input = k.to_here(tokens);
  loss_result l = cross_entropy(chunk.forward(0, input), targets, 1.0f / (B * T));
  l.settle();
  chunk.backward(0, l.dlogits, false);
  run r;
  r.loss = l.loss_sum;
  r.peak = chunk.peak_bytes();
  const tensor grads = k.host_copy(chunk.stack().grads());
  k.synchronize();
  r.grads = grads.to_vector();
  return r;
}

TEST(FlashAttention, AGptOnADeviceWithFlashAttentionTrainsAsOnTheCpuAndKeepsOneFloatPerRowAndHead) {
  const test::counting_ops& fake = test::fake_ops();
  const run cpu = train_once(device{}, recompute_mode::none);
  fake.use_flash_attention(true);
  const run flash = train_once(test::fake_gpu, recompute_mode::none);
  const run flash_selective = train_once(test::fake_gpu, recompute_mode::selective);
  fake.use_flash_attention(false);
  EXPECT_NEAR(flash.loss, cpu.loss, 1e-5 * cpu.loss);
  EXPECT_TRUE(close("grads", flash.grads, cpu.grads, 1e-5 * max_abs(cpu.grads)));
  EXPECT_EQ(cpu.peak - flash.peak, 4 * L * B * H * (T * T - T));
  EXPECT_EQ(flash.peak - flash_selective.peak, 4 * L * B * H * T);
  EXPECT_EQ(flash_selective.grads, flash.grads) << "rebuilding the log-sum-exps changed a gradient";
}

}  // namespace
}  // namespace troupe
