// p2p_transport's promptness, on the clock (perf label: run alone, as a parallel neighbour on 2
// cores would measure the neighbour): abort() completes a send blocked on a peer that never
// reads within a second, and the destructor returns within a second more.
#include <gtest/gtest.h>

#include <chrono>
#include <future>

#include "comm/p2p_transport.hpp"
#include "tests/comm/p2p_test_peers.hpp"

using namespace troupe;

TEST(P2pTransportTiming, AbortCompletesABlockedSendWithinASecond) {
  const std::string secret = "s3cret";
  test::silent_peer peer(secret);
  auto a = std::make_unique<net::p2p_transport>(0, "127.0.0.1", 0, secret, nullptr, nullptr);
  std::vector<uint8_t> x(size_t{64} << 20, 1);
  std::promise<std::optional<std::string>> done;
  a->send(1, "127.0.0.1", peer.port(), {1, "x", dtype::u8, {static_cast<int64_t>(x.size())}}, x.data(),
          x.size(), [&](std::optional<std::string> e) { done.set_value(std::move(e)); });
  auto f = done.get_future();
  ASSERT_EQ(f.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout);
  const auto t0 = std::chrono::steady_clock::now();
  a->abort();
  ASSERT_EQ(f.wait_for(std::chrono::seconds(1)), std::future_status::ready) << "abort left the send blocked";
  const auto err = f.get();
  ASSERT_TRUE(err.has_value());
  EXPECT_NE(err->find("stopped"), std::string::npos) << *err;
  a.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2)) << "the destructor waited";
}
