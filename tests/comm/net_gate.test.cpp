// gate_server, the control gate (issue 57): it listens for the whole of a job, holding the
// connections that prove the secret while no receiver is set (an elastic job between two
// memberships), and it hands each one over on a thread of its own, so peers that pass the secret
// and then stay silent (a TLS handshake they never finish blocks their handoff) delay no real one.
// What connect_through_gate says when it cannot get in: a wrong secret is named as the likely
// cause only when the gate judged our answer; a listener that closes before its challenge
// (process 0 ending during a regroup) is not blamed on the secret.
#include <gtest/gtest.h>
#include <poll.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "comm/net_gate.hpp"
#include "comm/tcp_socket.hpp"

using namespace troupe::net;
using clock_type = std::chrono::steady_clock;

namespace {

// The ranks handed over so far, and a wait for one of them.
struct handed {
  std::mutex mu;
  std::condition_variable cv;
  std::set<uint32_t> claims;
  void add(uint32_t claim) {
    std::lock_guard<std::mutex> lock(mu);
    claims.insert(claim);
    cv.notify_all();
  }
  bool wait_for(uint32_t claim, std::chrono::seconds limit) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, limit, [&] { return claims.count(claim) > 0; });
  }
};

}  // namespace

TEST(GateServer, PeersSilentPastTheSecretDoNotDelayARealOnesHandoff) {
  constexpr int silent = 20, handshake_ms = 2000;
  handed got;
  // As a TLS accept does: the handoff waits for the peer's first bytes, up to its deadline.
  gate_server gate("127.0.0.1", 0, "the job's secret", [&](socket_fd fd, uint32_t claim, const std::string&) {
    pollfd p{fd.get(), POLLIN, 0};
    ::poll(&p, 1, handshake_ms);
    got.add(claim);
  });
  std::vector<socket_fd> idle;
  for (int i = 0; i < silent; ++i) idle.push_back(connect_through_gate("127.0.0.1", gate.port(), "the job's secret", 1, 5000));
  const auto t0 = clock_type::now();
  socket_fd real = connect_through_gate("127.0.0.1", gate.port(), "the job's secret", 99, 5000);
  write_all(real.get(), "x", 1, 2000, "the real peer's first bytes");
  ASSERT_TRUE(got.wait_for(99, std::chrono::seconds(120))) << "the real peer was never handed over";
  const double s = std::chrono::duration<double>(clock_type::now() - t0).count();
  // One after another, the silent ones would hold it back 20 x 2 s = 40 s.
  EXPECT_LT(s, 15.0) << "the real peer waited behind the " << silent << " silent ones' handoffs";
}

TEST(GateServer, HoldsWhatProvesTheSecretWhileNoReceiverIsSetAndHandsItToTheNext) {
  handed first, second;
  gate_server gate("127.0.0.1", 0, "the job's secret", [&](socket_fd, uint32_t claim, const std::string&) { first.add(claim); });
  socket_fd a = connect_through_gate("127.0.0.1", gate.port(), "the job's secret", 1, 5000);
  ASSERT_TRUE(first.wait_for(1, std::chrono::seconds(30)));
  gate.set_admit({});  // between two memberships: the port stays the gate's
  EXPECT_THROW(listen_tcp("127.0.0.1", gate.port()), net_error) << "the port was free for another program";
  socket_fd b = connect_through_gate("127.0.0.1", gate.port(), "the job's secret", 2, 5000);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  gate.set_admit([&](socket_fd, uint32_t claim, const std::string&) { second.add(claim); });
  EXPECT_TRUE(second.wait_for(2, std::chrono::seconds(30))) << "the held connection was not handed to the next receiver";
  std::lock_guard<std::mutex> lock(first.mu);
  EXPECT_EQ(first.claims.count(2), 0u) << "the previous receiver got a connection after it was replaced";
}

namespace {

std::string error_of(uint16_t port, const std::string& secret) {
  try {
    connect_through_gate("127.0.0.1", port, secret, 1, 5000);
  } catch (const net_error& e) {
    return e.what();
  }
  return "no error";
}

TEST(GateErrors, AWrongSecretIsNamedAsTheLikelyCause) {
  gate_server gate("127.0.0.1", 0, "the-jobs-secret-0123456789", [](socket_fd, uint32_t, const std::string&) {});
  const std::string e = error_of(gate.port(), "another-secret-0123456789");
  EXPECT_NE(e.find("did not accept our answer (is the secret the job's?)"), std::string::npos) << e;
}

TEST(GateErrors, AListenerThatClosesBeforeItsChallengeIsNotBlamedOnTheSecret) {
  socket_fd listener = listen_tcp("127.0.0.1", 0);
  const uint16_t port = local_port(listener.get());
  std::thread dying([&] { socket_fd c = accept_tcp(listener.get(), 5000); });  // accepts, then closes
  const std::string e = error_of(port, "the-jobs-secret-0123456789");
  dying.join();
  EXPECT_NE(e.find("closed the connection before its challenge (has process 0 ended?)"), std::string::npos) << e;
  EXPECT_EQ(e.find("secret"), std::string::npos) << e;
}

}  // namespace
