// What connect_through_gate says when it cannot get in (issue 57, item 12): a wrong secret is
// named as the likely cause only when the gate judged our answer; a listener that closes before
// its challenge (process 0 ending during a regroup) is not blamed on the secret.
#include <gtest/gtest.h>

#include <string>
#include <thread>

#include "comm/net_gate.hpp"
#include "comm/tcp_socket.hpp"

namespace {

using namespace troupe::net;

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
