// How soon tcp_ring and its rendezvous get past trouble, on the wall clock (perf label: run alone,
// so a parallel neighbour does not eat the margin). What they report is tcp_ring.test.cpp's check.
#include <gtest/gtest.h>

#include <chrono>
#include <vector>

#include "comm/tcp_ring.hpp"
#include "tests/comm/tcp_ring_fixtures.hpp"

using namespace troupe::net;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

// Fifty silent handshakes at 5 s each would hold a serial acceptor for 250 s; concurrent ones
// let the real rank in at once.
TEST(TcpRingTiming, FiftySilentConnectionsDoNotDelayTheRendezvous) {
  troupe::test::crowded_rendezvous rv(50);
  const auto t0 = std::chrono::steady_clock::now();
  rv.join(4242);
  const double s = seconds_since(t0);
  rv.table();
  EXPECT_LT(s, 2.0) << "the real rank waited behind the silent connections";
}

// Under the ring's 5 s io timeout: the hang-up itself ended the call.
TEST(TcpRingTiming, PeerThatGoesAwayIsNoticedBeforeTheIoTimeout) {
  auto [a, b] = troupe::test::ring_pair();
  std::vector<float> x(1 << 20, 1.0f);
  b.reset();  // closes both of rank 1's sockets
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW(a->all_reduce(x.data(), static_cast<int64_t>(x.size()), reduce_op::sum), net_error);
  EXPECT_LT(seconds_since(t0), 4.0);
}
