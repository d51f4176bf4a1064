// kv_store: what a Gloo rendezvous needs of it (a value set by one member read by the others,
// whichever comes first), and what it refuses: a wrong secret, a key or value over the limits, a
// malformed request; a key never set times out naming it.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>

#include <future>
#include <thread>

#include "comm/kv_store.hpp"
#include "comm/tcp_auth.hpp"
#include "comm/tcp_socket.hpp"

using namespace troupe::net;

namespace {
std::vector<char> bytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string text(const std::vector<char>& v) { return {v.begin(), v.end()}; }
}  // namespace

TEST(KvStore, AValueSetByOneMemberReachesTheOthersWhicheverComesFirst) {
  kv_server server("127.0.0.1", 0, "job-secret");
  auto a = kv_connect("127.0.0.1", server.port(), "job-secret", 1, 5000);
  auto b = kv_connect("127.0.0.1", server.port(), "job-secret", 2, 5000);
  // b waits for a key nobody has set yet; a sets it afterwards.
  auto waiting = std::async(std::launch::async, [&] { return text(b->get("rank_1", 10000)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  a->set("rank_1", bytes("addresses of 1"));
  EXPECT_EQ(waiting.get(), "addresses of 1");
  // The server's own member reads and writes the same map.
  server.set("0", bytes("addresses of 0"));
  EXPECT_EQ(text(a->get("0", 1000)), "addresses of 0");
  EXPECT_EQ(text(server.get("rank_1", 1000)), "addresses of 1");
  std::vector<char> big(kv_max_value_bytes, 'x');
  a->set("big", big);
  EXPECT_EQ(b->get("big", 1000), big);
  EXPECT_EQ(server.refused(), 0);
}

TEST(KvStore, AKeyNeverSetTimesOutNamingIt) {
  kv_server server("127.0.0.1", 0, "job-secret");
  auto a = kv_connect("127.0.0.1", server.port(), "job-secret", 1, 5000);
  try {
    a->get("rank_3", 200);
    FAIL() << "no timeout";
  } catch (const net_error& e) {
    EXPECT_NE(std::string(e.what()).find("\"rank_3\" was not set within 200 ms"), std::string::npos) << e.what();
  }
  // The connection still serves after a timeout.
  a->set("k", bytes("v"));
  EXPECT_EQ(text(a->get("k", 1000)), "v");
}

TEST(KvStore, AWrongSecretIsRefusedAndTheRealMemberStillGetsIn) {
  kv_server server("127.0.0.1", 0, "job-secret");
  EXPECT_THROW(kv_connect("127.0.0.1", server.port(), "a guess", 1, 5000), net_error);
  auto a = kv_connect("127.0.0.1", server.port(), "job-secret", 1, 5000);
  a->set("k", bytes("v"));
  EXPECT_EQ(text(server.get("k", 1000)), "v");
  EXPECT_GE(server.refused(), 1);
}

TEST(KvStore, KeysAndValuesOverTheLimitsAreRefusedBeforeTheySend) {
  kv_server server("127.0.0.1", 0, "job-secret");
  auto a = kv_connect("127.0.0.1", server.port(), "job-secret", 1, 5000);
  EXPECT_THROW(a->set(std::string(kv_max_key_bytes + 1, 'k'), bytes("v")), net_error);
  EXPECT_THROW(a->set("", bytes("v")), net_error);
  EXPECT_THROW(a->set("k", std::vector<char>(kv_max_value_bytes + 1)), net_error);
  EXPECT_THROW(server.set("k", std::vector<char>(kv_max_value_bytes + 1)), net_error);
  a->set("k", bytes("still fine"));
  EXPECT_EQ(text(server.get("k", 1000)), "still fine");
}

// An authenticated peer that sends a value length over the limit is refused (status 2, the
// connection closed) without the server allocating it, and the store goes on serving others.
TEST(KvStore, AMalformedRequestIsRefusedAndClosesOnlyItsConnection) {
  kv_server server("127.0.0.1", 0, "job-secret");
  socket_fd s = connect_tcp("127.0.0.1", server.port(), 5000);
  auth_finish(s.get(), "job-secret", auth_respond(s.get(), "job-secret", 7, 5000), 5000);
  const uint8_t req[] = {'S', 1, 0, 'k', 0xff, 0xff, 0xff, 0x7f};  // key "k", a 2 GiB value
  write_all(s.get(), req, sizeof req, 5000, "test request");
  uint8_t status = 0;
  read_all(s.get(), &status, 1, 5000, "test reply");
  EXPECT_EQ(status, 2);
  pollfd p{s.get(), POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 5000), 1) << "the connection stays open";
  char more = 0;
  EXPECT_EQ(::recv(s.get(), &more, 1, 0), 0) << "the server sent more than its refusal";
  EXPECT_EQ(server.refused(), 1);
  auto a = kv_connect("127.0.0.1", server.port(), "job-secret", 1, 5000);
  a->set("k", bytes("v"));
  EXPECT_EQ(text(a->get("k", 1000)), "v");
}
