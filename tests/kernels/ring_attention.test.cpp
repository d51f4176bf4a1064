// Ring attention's arithmetic against one device's attention (ops.hpp, which keeps the whole
// probability matrix): a sequence split over n ranks with causal load balancing, each rank's
// queries meeting every rank's keys and values block by block in ring order, gives the same
// output and, backward, the same dQ, dK and dV (dK and dV summed over the ranks that used each
// block); and the backward agrees with finite differences of the forward.
#include "kernels/ring_attention.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <stdexcept>
#include <vector>

#include "kernels/ops.hpp"

namespace troupe {
namespace {

namespace ra = ring_attention;

struct problem {
  int64_t T, C, NH;
  std::vector<float> qkv, dout;  // (T, 3C), (T, C)
};

problem random_problem(int64_t T, int64_t C, int64_t NH, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  problem p{T, C, NH, std::vector<float>(static_cast<size_t>(T * 3 * C)), std::vector<float>(static_cast<size_t>(T * C))};
  for (float& x : p.qkv) x = n(g);
  for (float& x : p.dout) x = n(g);
  return p;
}

// One rank's rows of a (T, width) array at the given positions, or back.
std::vector<float> gather(const std::vector<float>& a, int64_t width, int64_t offset, int64_t stride,
                          const std::vector<int64_t>& pos) {
  std::vector<float> out;
  for (int64_t t : pos)
    for (int64_t c = 0; c < width; ++c) out.push_back(a[static_cast<size_t>(t * stride + offset + c)]);
  return out;
}

struct split_result {
  std::vector<float> out, dqkv;  // (T, C), (T, 3C) in sequence order
};

// Context parallelism over n ranks, simulated in order: rank r's forward folds the blocks of
// ranks r, r - 1, ... (the ring's arrival order); backward each block's dK and dV go to its owner.
split_result run_split(const problem& p, int n) {
  const int64_t T = p.T, C = p.C, NH = p.NH, C3 = 3 * C;
  std::vector<std::vector<int64_t>> pos(static_cast<size_t>(n));
  std::vector<std::vector<float>> q(n), k(n), v(n), dy(n), out(n), lse(n), D(n), dq(n), dk(n), dv(n);
  for (int r = 0; r < n; ++r) {
    pos[r] = ra::balanced_positions(T, n, r);
    q[r] = gather(p.qkv, C, 0, C3, pos[r]);
    k[r] = gather(p.qkv, C, C, C3, pos[r]);
    v[r] = gather(p.qkv, C, 2 * C, C3, pos[r]);
    dy[r] = gather(p.dout, C, 0, C, pos[r]);
  }
  const int64_t Tq = static_cast<int64_t>(pos[0].size());
  for (int r = 0; r < n; ++r) {
    ra::partial part = ra::start(Tq, C, NH);
    for (int s = 0; s < n; ++s) {
      const int src = (r - s + n) % n;
      ra::accumulate(part, {q[r].data(), C}, pos[r].data(), {k[src].data(), C}, {v[src].data(), C}, pos[src].data(), Tq);
    }
    out[r].assign(static_cast<size_t>(Tq * C), 0.0f);
    lse[r].assign(static_cast<size_t>(NH * Tq), 0.0f);
    ra::finish(part, {out[r].data(), C}, lse[r].data());
    D[r].assign(static_cast<size_t>(NH * Tq), 0.0f);
    ra::row_dots({dy[r].data(), C}, {out[r].data(), C}, Tq, C, NH, D[r].data());
  }
  for (int r = 0; r < n; ++r) {
    dq[r].assign(static_cast<size_t>(Tq * C), 0.0f);
    dk[r].assign(static_cast<size_t>(Tq * C), 0.0f);
    dv[r].assign(static_cast<size_t>(Tq * C), 0.0f);
  }
  for (int r = 0; r < n; ++r)
    for (int s = 0; s < n; ++s) {
      const int src = (r - s + n) % n;
      ra::backward_block({q[r].data(), C}, pos[r].data(), Tq, {dy[r].data(), C}, lse[r].data(), D[r].data(),
                         {k[src].data(), C}, {v[src].data(), C}, pos[src].data(), Tq, C, NH, {dq[r].data(), C},
                         {dk[src].data(), C}, {dv[src].data(), C});
    }
  split_result res{std::vector<float>(static_cast<size_t>(T * C)), std::vector<float>(static_cast<size_t>(T * C3))};
  for (int r = 0; r < n; ++r)
    for (int64_t i = 0; i < Tq; ++i)
      for (int64_t c = 0; c < C; ++c) {
        const int64_t t = pos[r][static_cast<size_t>(i)];
        const size_t at = static_cast<size_t>(i * C + c);
        res.out[static_cast<size_t>(t * C + c)] = out[r][at];
        res.dqkv[static_cast<size_t>(t * C3 + c)] = dq[r][at];
        res.dqkv[static_cast<size_t>(t * C3 + C + c)] = dk[r][at];
        res.dqkv[static_cast<size_t>(t * C3 + 2 * C + c)] = dv[r][at];
      }
  return res;
}

split_result run_whole(const problem& p) {
  split_result res{std::vector<float>(static_cast<size_t>(p.T * p.C)), std::vector<float>(static_cast<size_t>(p.T * 3 * p.C))};
  std::vector<float> att(static_cast<size_t>(p.NH * p.T * p.T));
  ops::attention_forward(res.out.data(), att.data(), p.qkv.data(), 1, p.T, p.C, p.NH);
  ops::attention_backward(res.dqkv.data(), p.dout.data(), p.qkv.data(), att.data(), 1, p.T, p.C, p.NH);
  return res;
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, double tol, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(double(got[i]) - want[i]) / (1 + std::abs(want[i])));
  EXPECT_LE(worst, tol) << what;
}

TEST(RingAttention, BalancedChunksGiveEveryRankTheSameCausalWorkAndCoverTheSequenceOnce) {
  for (int n : {1, 2, 4, 8}) {
    const int64_t T = 64;
    std::vector<int> seen(T, 0);
    int64_t work0 = -1;
    for (int r = 0; r < n; ++r) {
      int64_t work = 0;  // (query, key) pairs the mask keeps: a query at t meets t + 1 keys
      for (int64_t t : ra::balanced_positions(T, n, r)) {
        ++seen[static_cast<size_t>(t)];
        work += t + 1;
      }
      if (work0 < 0) work0 = work;
      EXPECT_EQ(work, work0) << "n " << n << " rank " << r;
    }
    for (int s : seen) EXPECT_EQ(s, 1);
  }
  EXPECT_THROW(ra::balanced_positions(30, 4, 0), std::invalid_argument);  // 8 chunks do not divide 30
  EXPECT_THROW(ra::balanced_positions(32, 4, 4), std::invalid_argument);
}

TEST(RingAttention, OutputAndGradientsOverTwoFourAndEightRanksEqualOneDevicesAttention) {
  const problem p = random_problem(64, 32, 4, 7);
  const split_result whole = run_whole(p);
  for (int n : {1, 2, 4, 8}) {
    SCOPED_TRACE(n);
    const split_result split = run_split(p, n);
    expect_close(split.out, whole.out, 2e-6, "output");
    expect_close(split.dqkv, whole.dqkv, 2e-5, "dq, dk, dv");
  }
}

TEST(RingAttention, TheBackwardAgreesWithFiniteDifferencesOfTheForward) {
  problem p = random_problem(16, 8, 2, 11);
  const split_result analytic = run_split(p, 2);
  // L = sum(out * dout): its gradient with respect to qkv is what the backward computes.
  const auto loss = [&](const problem& x) {
    const split_result r = run_split(x, 2);
    double l = 0;
    for (size_t i = 0; i < r.out.size(); ++i) l += double(r.out[i]) * x.dout[i];
    return l;
  };
  const float h = 1e-2f;
  for (size_t i = 0; i < p.qkv.size(); i += 7) {
    const float keep = p.qkv[i];
    p.qkv[i] = keep + h;
    const double up = loss(p);
    p.qkv[i] = keep - h;
    const double down = loss(p);
    p.qkv[i] = keep;
    const double numeric = (up - down) / (2 * h);
    EXPECT_NEAR(analytic.dqkv[i], numeric, 2e-3 * (1 + std::abs(numeric))) << "element " << i;
  }
}

TEST(RingAttention, ABlockTheMaskHidesLeavesTheStateAsItWasAndAQueryWithNoKeyIsRefused) {
  const problem p = random_problem(8, 4, 1, 3);
  const std::vector<int64_t> early{0, 1}, late{6, 7};
  ra::partial state = ra::start(2, 4, 1);
  ra::accumulate(state, {p.qkv.data(), 12}, early.data(), {p.qkv.data() + 4 + 6 * 12, 12}, {p.qkv.data() + 8 + 6 * 12, 12},
                 late.data(), 2);  // keys at 6 and 7, queries at 0 and 1: all masked
  for (float s : state.sum) EXPECT_EQ(s, 0.0f);
  std::vector<float> out(8), lse(2);
  EXPECT_THROW(ra::finish(state, {out.data(), 4}, lse.data()), std::invalid_argument);
}

}  // namespace
}  // namespace troupe
