// The plain ring arithmetic (comm/ring_schedule.hpp): segments cover any size exactly, chunks
// cover segments, the hop schedule is the formula and moves every segment once around the ring,
// replaying it gives serial_ring's bits, and serial_ring sums in the ring order and agrees with a
// plain serial reduction (exactly on integer-valued data, to rounding on random data).
// No actors or sockets here: collective.test.cpp checks the actor group against serial_ring,
// tcp_ring.test.cpp the TCP ring.
#include <gtest/gtest.h>

#include <random>
#include <stdexcept>

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

// Worked out by hand for three ranks from "segment j starts at j+1 and ends at j".
TEST(RingHops, ThreeRanksSendAndReceiveTheSegmentsWorkedOutByHand) {
  using ring::phase;
  struct row {
    phase p;
    int rank, hop, send, recv;
  };
  for (const row& w : {row{phase::reduce, 0, 0, 2, 1}, row{phase::reduce, 0, 1, 1, 0}, row{phase::reduce, 1, 0, 0, 2},
                       row{phase::reduce, 1, 1, 2, 1}, row{phase::reduce, 2, 0, 1, 0}, row{phase::reduce, 2, 1, 0, 2},
                       row{phase::gather, 0, 0, 0, 2}, row{phase::gather, 0, 1, 2, 1}, row{phase::gather, 1, 0, 1, 0},
                       row{phase::gather, 1, 1, 0, 2}, row{phase::gather, 2, 0, 2, 1}, row{phase::gather, 2, 1, 1, 0}}) {
    const ring::hop_segments got = ring::segments_at_hop(w.p, w.rank, 3, w.hop);
    EXPECT_EQ(got.send, w.send) << "rank " << w.rank << " hop " << w.hop;
    EXPECT_EQ(got.recv, w.recv) << "rank " << w.rank << " hop " << w.hop;
  }
}

TEST(RingHops, EveryRankCountFollowsTheFormula) {
  for (int ranks = 2; ranks <= 9; ++ranks)
    for (int r = 0; r < ranks; ++r)
      for (int h = 0; h + 1 < ranks; ++h) {
        const auto red = ring::segments_at_hop(ring::phase::reduce, r, ranks, h);
        const auto gat = ring::segments_at_hop(ring::phase::gather, r, ranks, h);
        EXPECT_EQ(red.send, ((r - 1 - h) % ranks + ranks) % ranks);
        EXPECT_EQ(red.recv, ((r - 2 - h) % ranks + ranks) % ranks);
        EXPECT_EQ(gat.send, ((r - h) % ranks + ranks) % ranks);
        EXPECT_EQ(gat.recv, ((r - 1 - h) % ranks + ranks) % ranks);
      }
  EXPECT_THROW(ring::segments_at_hop(ring::phase::reduce, 0, 4, 3), std::invalid_argument);  // 3 hops: 0..2
  EXPECT_THROW(ring::segments_at_hop(ring::phase::gather, 4, 4, 0), std::invalid_argument);
}

// The properties both rings lean on: what a rank receives is what its left neighbour sends at
// the same hop, and what it sends next (so a send waits on one receive); the reduce phase ends
// with the rank's own segment, which is the gather phase's first send; hop_receiving inverts it.
TEST(RingHops, ARankSendsNextWhatItJustReceivedAndTheReduceEndsAtTheOwner) {
  using ring::phase;
  for (int ranks = 2; ranks <= 9; ++ranks)
    for (int r = 0; r < ranks; ++r) {
      for (phase p : {phase::reduce, phase::gather})
        for (int h = 0; h + 1 < ranks; ++h) {
          const auto here = ring::segments_at_hop(p, r, ranks, h);
          EXPECT_EQ(here.recv, ring::segments_at_hop(p, ring::left_of(r, ranks), ranks, h).send);
          if (!ring::is_last_hop(h, ranks)) {
            EXPECT_EQ(here.recv, ring::segments_at_hop(p, r, ranks, h + 1).send);
          }
          EXPECT_EQ(ring::hop_receiving(p, r, ranks, here.recv), h);
        }
      EXPECT_EQ(ring::segments_at_hop(phase::reduce, r, ranks, ranks - 2).recv, r);
      EXPECT_EQ(ring::segments_at_hop(phase::gather, r, ranks, 0).send, r);
      // Never received: the segment a rank starts the phase with.
      EXPECT_THROW(ring::hop_receiving(phase::reduce, r, ranks, ring::left_of(r, ranks)), std::invalid_argument);
      EXPECT_THROW(ring::hop_receiving(phase::gather, r, ranks, r), std::invalid_argument);
    }
}

TEST(RingHops, EverySegmentVisitsEveryRankOnceAndEndsAtItsOwner) {
  for (int ranks = 2; ranks <= 9; ++ranks)
    for (int j = 0; j < ranks; ++j) {
      std::vector<int> visits(static_cast<size_t>(ranks), 0);
      int holder = -1;  // who sends segment j at hop 0
      for (int r = 0; r < ranks; ++r)
        if (ring::segments_at_hop(ring::phase::reduce, r, ranks, 0).send == j) holder = r;
      ASSERT_EQ(holder, ring::right_of(j, ranks));
      ++visits[static_cast<size_t>(holder)];
      for (int h = 0; h + 1 < ranks; ++h) {
        ASSERT_EQ(ring::segments_at_hop(ring::phase::reduce, holder, ranks, h).send, j) << "hop " << h;
        holder = ring::right_of(holder, ranks);
        ++visits[static_cast<size_t>(holder)];
      }
      EXPECT_EQ(holder, j);
      EXPECT_EQ(visits, std::vector<int>(static_cast<size_t>(ranks), 1));
    }
}

// Four ranks, root 1: the chunks go 1 -> 2 -> 3 -> 0 and stop there.
TEST(RingHops, BroadcastStopsAtTheRankLeftOfTheRoot) {
  EXPECT_TRUE(ring::forwards(2, 4, 1));
  EXPECT_TRUE(ring::forwards(3, 4, 1));
  EXPECT_FALSE(ring::forwards(0, 4, 1));
}

// Both rings' loop in one thread: every rank keeps its own buffer, adds each received partial
// into it (ring::add with out == own, as tcp_ring does) and copies each gathered segment. The
// result must be serial_ring's, bit for bit, or the rings would not give serial_ring's bits.
TEST(RingHops, ReplayingTheHopsGivesSerialRingsBits) {
  for (int ranks = 2; ranks <= 7; ++ranks)
    for (op_kind kind : {op_kind::all_reduce_sum, op_kind::all_reduce_average, op_kind::reduce_scatter_average}) {
      const int64_t n = 1001;
      const auto in = make_inputs(ranks, n, /*integers=*/false, 40 + ranks);
      auto buf = in;
      auto run_phase = [&](ring::phase p) {
        for (int h = 0; h + 1 < ranks; ++h) {
          std::vector<std::vector<float>> sent(static_cast<size_t>(ranks));
          for (int r = 0; r < ranks; ++r) sent[r] = buf[r];  // what each rank holds when it sends
          for (int r = 0; r < ranks; ++r) {
            const ring::range seg = ring::segment(n, ranks, ring::segments_at_hop(p, r, ranks, h).recv);
            const float* from = sent[ring::left_of(r, ranks)].data() + seg.offset;
            float* own = buf[r].data() + seg.offset;
            if (p == ring::phase::gather) {
              ring::copy(own, from, seg.count);
              continue;
            }
            ring::add(own, from, own, seg.count);
            if (ring::is_average(kind) && ring::is_last_hop(h, ranks))
              ring::scale(own, seg.count, 1.0f / static_cast<float>(ranks));
          }
        }
      };
      run_phase(ring::phase::reduce);
      if (ring::gathers(kind)) run_phase(ring::phase::gather);
      const auto want = ring::serial_ring(kind, in, n);
      for (int r = 0; r < ranks; ++r) {
        const ring::range mine = ring::gathers(kind) ? ring::range{0, n} : ring::segment(n, ranks, r);
        const std::vector<float> got(buf[r].begin() + mine.offset, buf[r].begin() + mine.offset + mine.count);
        ASSERT_EQ(got, want[r]) << ring::to_string(kind) << ", " << ranks << " ranks, rank " << r;
      }
    }
}

// Segment j is x[j+1] + x[j+2] + x[j]: with 1e8, -1e8 and 1 in that order every element is 1,
// while the plain order x[0] + x[1] + x[2] loses the 1 wherever 1 is added to 1e8 first.
TEST(SerialRing, SumsEachSegmentInTheRingOrder) {
  std::vector<std::vector<float>> in(3, std::vector<float>(3));
  for (int j = 0; j < 3; ++j) {
    in[(j + 1) % 3][j] = 1e8f;
    in[(j + 2) % 3][j] = -1e8f;
    in[j][j] = 1.0f;
  }
  const auto out = ring::serial_ring(op_kind::all_reduce_sum, in, 3);
  for (int r = 0; r < 3; ++r) EXPECT_EQ(out[r], (std::vector<float>{1, 1, 1})) << "rank " << r;
  EXPECT_EQ((in[0][1] + in[1][1]) + in[2][1], 0.0f);  // the order matters for these inputs
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
  // in place on either operand: out == partial (the in-process ring), out == own (tcp_ring)
  std::vector<float> p{1, 2, 3}, o{10, 20, 30};
  ring::add(p.data(), p.data(), o.data(), 3);
  EXPECT_EQ(p, (std::vector<float>{11, 22, 33}));
  std::vector<float> q{1, 2, 3};
  ring::add(o.data(), q.data(), o.data(), 3);
  EXPECT_EQ(o, (std::vector<float>{11, 22, 33}));
}
