// The plain ring arithmetic (comm/ring_schedule.hpp): segments cover any size exactly, chunks cover
// segments, the reduce schedule sums in a fixed order, and the serial ring replay agrees with a
// plain serial reduction (exactly on integer-valued data, to rounding on random data).
// No actors here: collective.test.cpp checks the actor group against serial_ring.
#include <gtest/gtest.h>

#include <random>

#include "comm/ring_schedule.hpp"

using namespace troupe;
using ring::op_kind;

namespace {

std::vector<std::vector<float>> make_inputs(int ranks, int64_t n, bool integers, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> real(-1.0f, 1.0f);
  std::uniform_int_distribution<int> whole(-1000, 1000);
  std::vector<std::vector<float>> in(static_cast<size_t>(ranks), std::vector<float>(static_cast<size_t>(n)));
  for (auto& v : in)
    for (auto& x : v) x = integers ? static_cast<float>(whole(rng)) : real(rng);
  return in;
}

std::vector<double> serial_sum(const std::vector<std::vector<float>>& in) {
  std::vector<double> sum(in[0].size(), 0.0);
  for (const auto& v : in)
    for (size_t i = 0; i < v.size(); ++i) sum[i] += v[i];
  return sum;
}

}  // namespace

TEST(RingSegments, CoverEverySizeExactlyAndDifferByAtMostOne) {
  for (int ranks = 1; ranks <= 8; ++ranks) {
    for (int64_t n : {0, 1, 5, 7, 8, 1000, 1000003}) {
      int64_t next = 0, lo = n, hi = 0;
      for (int j = 0; j < ranks; ++j) {
        const ring::range seg = ring::segment(n, ranks, j);
        EXPECT_EQ(seg.offset, next) << n << " over " << ranks;
        next += seg.count;
        lo = std::min(lo, seg.count);
        hi = std::max(hi, seg.count);
      }
      EXPECT_EQ(next, n);
      EXPECT_LE(hi - lo, 1);
    }
  }
}

TEST(RingSegments, ChunksTileASegmentInOrder) {
  const ring::range seg{100, 1003};
  const int64_t chunks = ring::chunk_count(seg.count, 256);
  ASSERT_EQ(chunks, 4);
  int64_t next = seg.offset;
  for (int64_t c = 0; c < chunks; ++c) {
    const ring::range ch = ring::chunk(seg, 256, c);
    EXPECT_EQ(ch.offset, next);
    EXPECT_GT(ch.count, 0);
    next += ch.count;
  }
  EXPECT_EQ(next, seg.offset + seg.count);
  EXPECT_EQ(ring::chunk_count(0, 256), 0);
}

TEST(RingSchedule, EverySegmentVisitsEveryRankOnceAndEndsAtItsOwner) {
  for (int ranks = 1; ranks <= 8; ++ranks) {
    for (int j = 0; j < ranks; ++j) {
      int holder = -1;  // who sends segment j first
      for (int r = 0; r < ranks; ++r)
        if (ring::first_reduce_segment(r, ranks) == j) holder = r;
      ASSERT_EQ(holder, ring::right_of(j, ranks));
      // after ranks-1 hops it reaches j, having passed through every other rank
      int at = holder;
      for (int hop = 0; hop + 1 < ranks; ++hop) at = ring::right_of(at, ranks);
      EXPECT_EQ(at, j);
    }
  }
}

TEST(SerialRing, AllReduceSumOfIntegersEqualsSerialSumExactlyForEveryRankCount) {
  for (int ranks = 1; ranks <= 8; ++ranks) {
    for (int64_t n : {1, 7, 1000, 1000003}) {
      auto in = make_inputs(ranks, n, /*integers=*/true, 11 + ranks);
      auto out = ring::serial_ring(op_kind::all_reduce_sum, in, n);
      auto ref = serial_sum(in);
      for (int r = 0; r < ranks; ++r)
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out[r][i], static_cast<float>(ref[i])) << ranks << " " << n;
    }
  }
}

TEST(SerialRing, AverageAndScatterOfRandomDataMatchSerialWithinRounding) {
  for (int ranks : {2, 3, 5, 8}) {
    const int64_t n = 1003;
    auto in = make_inputs(ranks, n, false, 3);
    auto ref = serial_sum(in);
    auto avg = ring::serial_ring(op_kind::all_reduce_average, in, n);
    for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(avg[0][i], ref[i] / ranks, 1e-6) << i;
    auto rs = ring::serial_ring(op_kind::reduce_scatter_sum, in, n);
    for (int r = 0; r < ranks; ++r) {
      const ring::range seg = ring::segment(n, ranks, r);
      ASSERT_EQ(static_cast<int64_t>(rs[r].size()), seg.count);
      for (int64_t i = 0; i < seg.count; ++i) EXPECT_NEAR(rs[r][i], ref[seg.offset + i], 1e-5);
    }
  }
}

TEST(RingKernels, AddScaleCopy) {
  std::vector<float> a{1, 2, 3}, b{10, 20, 30}, out(3);
  ring::add(out.data(), a.data(), b.data(), 3);
  EXPECT_EQ(out, (std::vector<float>{11, 22, 33}));
  ring::scale(out.data(), 3, 0.5f);
  EXPECT_EQ(out, (std::vector<float>{5.5f, 11, 16.5f}));
  ring::copy(a.data(), out.data(), 3);
  EXPECT_EQ(a, out);
}
