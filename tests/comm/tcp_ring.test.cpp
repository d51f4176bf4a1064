// tcp_ring across real processes on loopback (2, 3 and 4 ranks, each checking its results bitwise
// against ring::serial_ring), a refused wrong secret with the job going on, and in-process
// rings (threads) for the failure paths: mismatched calls and a peer that goes away. No clock:
// how soon a failure shows is tcp_ring_timing.test.cpp's (perf) business.
// Every process a test starts is in one process group that is killed on any exit path.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <future>
#include <thread>

#include "comm/tcp_ring.hpp"
#include "tests/comm/tcp_process_group.hpp"
#include "tests/comm/tcp_ring_fixtures.hpp"

using namespace troupe::net;
using troupe::test::env_of;
using troupe::test::process_group;
using troupe::test::ring_pair;

namespace {

const std::string helper = TROUPE_TCP_RING_HELPER;

// Starts rank 0 on port 0, reads the port it bound, then starts ranks 1..world-1.
int run_ring(int world, const std::string& chunk_bytes) {
  process_group g;
  const int fd = g.spawn({helper, "0", std::to_string(world), "127.0.0.1", "0", "s3cret", chunk_bytes}, true);
  const int port = g.read_port(fd, 10000);
  if (port <= 0) return -1;
  for (int r = 1; r < world; ++r)
    g.spawn({helper, std::to_string(r), std::to_string(world), "127.0.0.1", std::to_string(port), "s3cret",
             chunk_bytes});
  return g.wait_all(60000);
}

}  // namespace

TEST(TcpRing, TwoProcessesMatchTheSerialRingBitwise) { EXPECT_EQ(run_ring(2, "4096"), 0); }

// Three ranks: 1001, 4099 and 70001 floats leave remainders, so segments differ in length.
TEST(TcpRing, ThreeProcessesMatchTheSerialRingBitwise) { EXPECT_EQ(run_ring(3, "4096"), 0); }

TEST(TcpRing, FourProcessesMatchTheSerialRingBitwise) { EXPECT_EQ(run_ring(4, "4096"), 0); }

TEST(TcpRing, FourProcessesWithLargeChunks) { EXPECT_EQ(run_ring(4, "1048576"), 0); }

TEST(TcpRing, WrongSecretIsRefusedAndTheJobGoesOn) {
  process_group g;
  const int fd = g.spawn({helper, "0", "2", "127.0.0.1", "0", "s3cret", "4096"}, true);
  const int port = g.read_port(fd, 10000);
  ASSERT_GT(port, 0);
  // An intruder claiming rank 1 with a wrong secret: refused, exits with an error.
  process_group bad;
  bad.spawn({helper, "1", "2", "127.0.0.1", std::to_string(port), "guess", "4096"});
  EXPECT_EQ(bad.wait_all(10000), 2);
  // The real rank 1 still joins and the job runs.
  g.spawn({helper, "1", "2", "127.0.0.1", std::to_string(port), "s3cret", "4096"});
  EXPECT_EQ(g.wait_all(30000), 0);
}

TEST(TcpRing, RendezvousCountsTheRefusedPeer) {
  rendezvous_options o;
  o.timeout_ms = 5000;
  rendezvous_server server("127.0.0.1", 0, 2, "right", o);
  auto table = std::async(std::launch::async, [&] { return server.run({"127.0.0.1", 1}); });
  EXPECT_THROW(rendezvous_client("127.0.0.1", server.port(), 1, 2, "wrong", o), net_error);
  rendezvous_client good("127.0.0.1", server.port(), 1, 2, "right", o);
  auto t1 = good.join(4242);
  auto t0 = table.get();
  EXPECT_EQ(server.refused(), 1);
  ASSERT_EQ(t0.size(), 2u);
  EXPECT_EQ(t0[1].port, 4242);
  EXPECT_EQ(t1[0].port, 1);
}

// Handshakes run concurrently: fifty connections that never answer the challenge (each would
// hold a serial acceptor for its whole 5 s deadline, 250 s in all) do not keep the real rank from
// joining within its 20 s deadline. How soon it joins is tcp_ring_timing.test.cpp's check.
TEST(TcpRing, RealRankJoinsPastFiftySilentConnections) {
  troupe::test::crowded_rendezvous rv(50);
  const auto joined = rv.join(4242);
  ASSERT_EQ(joined.size(), 2u);
  EXPECT_EQ(joined[0].port, 1);
  EXPECT_EQ(rv.table()[1].port, 4242);
}

TEST(TcpRing, MismatchedCallsFailOnBothRanks) {
  auto [a, b] = ring_pair();
  std::vector<float> x(10, 1.0f), y(11, 1.0f);
  auto fa = std::async(std::launch::async, [&] { a->all_reduce(x.data(), 10, reduce_op::sum); });
  try {
    b->all_reduce(y.data(), 11, reduce_op::sum);
    ADD_FAILURE() << "rank 1 did not notice";
  } catch (const net_error& e) {
    EXPECT_NE(std::string(e.what()).find("mismatch"), std::string::npos) << e.what();
  }
  EXPECT_THROW(fa.get(), net_error);
  EXPECT_THROW(a->all_reduce(x.data(), 10, reduce_op::sum), net_error);  // broken stays broken
}

// The error names the hang-up, not the 5 s io timeout: the ring noticed the peer leave instead of
// waiting it out. How soon is tcp_ring_timing.test.cpp's check.
TEST(TcpRing, PeerThatGoesAwayIsAnErrorNotAHang) {
  auto [a, b] = ring_pair();
  std::vector<float> x(1 << 20, 1.0f);
  b.reset();  // closes both of rank 1's sockets
  try {
    a->all_reduce(x.data(), static_cast<int64_t>(x.size()), reduce_op::sum);
    ADD_FAILURE() << "rank 0 did not notice";
  } catch (const net_error& e) {
    EXPECT_EQ(std::string(e.what()).find("no progress"), std::string::npos) << e.what();
  }
}

TEST(TcpRing, MultiProcessJobNeedsASecret) {
  EXPECT_THROW(tcp_ring::connect(env_of(0, 2, 0), ""), net_error);
  auto one = tcp_ring::connect(env_of(0, 1, 0), "");  // one process: nothing to protect
  std::vector<float> x = {1.5f, 2.5f};
  one->all_reduce(x.data(), 2, reduce_op::average);
  EXPECT_EQ(x[0], 1.5f);
}

// Two network namespaces made by this test, joined by a veth pair with addresses from
// 192.0.2.0/24 (RFC 5737 TEST-NET-1, reserved for documentation and tests) that exist only
// inside them; nothing outside the namespaces is touched. Skipped without root or `ip netns`.
TEST(TcpRing, TwoNetworkNamespacesOverVeth) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root for ip netns";
  const std::string id = std::to_string(::getpid() % 100000);
  const std::string a = "troupe" + id + "a", b = "troupe" + id + "b", va = "vtr" + id + "a", vb = "vtr" + id + "b";
  struct cleanup {
    std::string a, b;
    ~cleanup() {
      (void)std::system(("ip netns del " + a + " 2>/dev/null; ip netns del " + b + " 2>/dev/null").c_str());
    }
  } guard{a, b};
  auto sh = [](const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1").c_str()) == 0; };
  if (!sh("ip netns add " + a) || !sh("ip netns add " + b)) GTEST_SKIP() << "ip netns is not available";
  ASSERT_TRUE(sh("ip link add " + va + " type veth peer name " + vb));
  ASSERT_TRUE(sh("ip link set " + va + " netns " + a) && sh("ip link set " + vb + " netns " + b));
  ASSERT_TRUE(sh("ip -n " + a + " addr add 192.0.2.1/24 dev " + va) &&
              sh("ip -n " + b + " addr add 192.0.2.2/24 dev " + vb));
  for (const auto& [ns, dev] : {std::pair{a, va}, std::pair{b, vb}})
    ASSERT_TRUE(sh("ip -n " + ns + " link set " + dev + " up") && sh("ip -n " + ns + " link set lo up"));
  process_group g;
  const int fd = g.spawn({"/usr/sbin/ip", "netns", "exec", a, helper, "0", "2", "192.0.2.1", "0", "s3cret", "65536"}, true);
  const int port = g.read_port(fd, 10000);
  ASSERT_GT(port, 0);
  g.spawn({"/usr/sbin/ip", "netns", "exec", b, helper, "1", "2", "192.0.2.1", std::to_string(port), "s3cret", "65536"});
  EXPECT_EQ(g.wait_all(60000), 0);
}
