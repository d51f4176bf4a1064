// The in-process tensor-parallel group: its all-reduce gives exactly the bits of the ring order
// (ring::serial_ring, which the TCP ring is tested against too), its all-gather the ring layout,
// shard_of is ring::segment, and a member whose peers never come, or who calls with another
// size, ends with an error naming the call instead of hanging.
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "comm/ring_schedule.hpp"
#include "comm/tp_groups.hpp"

namespace troupe {
namespace {

std::vector<std::vector<float>> random_inputs(int P, int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<std::vector<float>> in(static_cast<size_t>(P), std::vector<float>(static_cast<size_t>(n)));
  for (auto& v : in)
    for (auto& x : v) x = d(rng);
  return in;
}

void on_members(const std::vector<std::shared_ptr<tp_group>>& g, const std::function<void(int)>& fn) {
  std::vector<std::thread> t;
  for (int r = 0; r < static_cast<int>(g.size()); ++r) t.emplace_back(fn, r);
  for (auto& x : t) x.join();
}

TEST(ShardOf, IsTheRingSegment) {
  for (int64_t n : {0, 1, 5, 64, 97})
    for (int P : {1, 2, 3, 4, 8})
      for (int j = 0; j < P; ++j) {
        const shard_range s = shard_of(n, P, j);
        const ring::range r = ring::segment(n, P, j);
        EXPECT_EQ(s.begin, r.offset);
        EXPECT_EQ(s.count, r.count);
      }
}

TEST(LocalTpGroup, AllReduceIsBitwiseTheRingOrder) {
  for (int P : {2, 3, 4})
    for (int64_t n : {1, 7, 1000}) {
      auto in = random_inputs(P, n, static_cast<uint64_t>(P * 1000 + n));
      const auto want = ring::serial_ring(ring::op_kind::all_reduce_sum, in, n);
      auto g = net::make_local_tp_group(P);
      on_members(g, [&](int r) {
        for (int rep = 0; rep < 3; ++rep) {  // back-to-back calls reuse the scratch safely
          std::vector<float> x = in[static_cast<size_t>(r)];
          g[static_cast<size_t>(r)]->all_reduce_sum(x.data(), n);
          EXPECT_EQ(x, want[static_cast<size_t>(r)]) << "P " << P << " n " << n << " rank " << r;
        }
      });
    }
}

TEST(LocalTpGroup, ReduceScatterLeavesEachRankItsSegmentOfTheRingOrderSum) {
  for (int P : {2, 3}) {
    const int64_t n = 11;
    auto in = random_inputs(P, n, 77);
    const auto want = ring::serial_ring(ring::op_kind::all_reduce_sum, in, n);
    auto g = net::make_local_tp_group(P);
    on_members(g, [&](int r) {
      std::vector<float> x = in[static_cast<size_t>(r)];
      g[static_cast<size_t>(r)]->reduce_scatter_sum(x.data(), n);
      const shard_range s = shard_of(n, P, r);
      for (int64_t i = s.begin; i < s.end(); ++i)
        EXPECT_EQ(x[static_cast<size_t>(i)], want[static_cast<size_t>(r)][static_cast<size_t>(i)]) << "P " << P;
    });
  }
}

TEST(LocalTpGroup, AllGatherFillsEveryRanksShard) {
  const int P = 3;
  const int64_t n = 10;
  auto g = net::make_local_tp_group(P);
  on_members(g, [&](int r) {
    std::vector<float> x(static_cast<size_t>(n), -1.0f);
    const shard_range s = shard_of(n, P, r);
    for (int64_t i = s.begin; i < s.end(); ++i) x[static_cast<size_t>(i)] = static_cast<float>(i);
    g[static_cast<size_t>(r)]->all_gather(x.data(), n);
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(x[static_cast<size_t>(i)], static_cast<float>(i));
  });
}

TEST(LocalTpGroup, AMemberWhosePeersNeverComeFailsNamingTheCall) {
  auto g = net::make_local_tp_group(2, {200});
  std::vector<float> x(4);
  try {
    g[0]->all_reduce_sum(x.data(), 4);
    FAIL() << "returned without its peer";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("all_reduce_sum #1"), std::string::npos) << e.what();
  }
  EXPECT_THROW(g[1]->all_reduce_sum(x.data(), 4), std::runtime_error);  // the group stays failed
}

TEST(LocalTpGroup, DifferentSizesOnTwoRanksAreRefused) {
  auto g = net::make_local_tp_group(2, {5000});
  std::vector<std::string> errors(2);
  on_members(g, [&](int r) {
    std::vector<float> x(8);
    try {
      g[static_cast<size_t>(r)]->all_reduce_sum(x.data(), r == 0 ? 8 : 6);
    } catch (const std::exception& e) {
      errors[static_cast<size_t>(r)] = e.what();
    }
  });
  for (const auto& e : errors) EXPECT_NE(e.find("different schedules"), std::string::npos) << e;
}

TEST(LocalTpGroup, AbortEndsAWaitAtOnce) {
  auto g = net::make_local_tp_group(2, {60000});
  std::thread t([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    net::abort_local_tp_group(g[1], "job stopping");
  });
  std::vector<float> x(2);
  EXPECT_THROW(g[0]->all_gather(x.data(), 2), std::runtime_error);
  t.join();
}

}  // namespace
}  // namespace troupe
