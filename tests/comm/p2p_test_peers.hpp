// Test support for p2p_transport: a peer that proves the job's secret and then never reads, so a
// sender to it fills both socket buffers and blocks. It deliberately is no endpoint: a real one
// always reads, and these tests need one that does not.
#pragma once

#include <future>
#include <string>

#include "comm/tcp_auth.hpp"
#include "comm/tcp_socket.hpp"

namespace troupe::test {

class silent_peer {
 public:
  explicit silent_peer(const std::string& secret)
      : listener_(net::listen_tcp("127.0.0.1", 0)), port_(net::local_port(listener_.get())) {
    held_ = std::async(std::launch::async, [this, secret] {
      net::socket_fd c = net::accept_tcp(listener_.get(), 10000);
      const net::nonce n = net::auth_challenge(c.get(), 5000);
      net::auth_verify(c.get(), secret, n, 5000);
      release_.get_future().wait();  // holds the connection open, reading nothing
    });
  }
  ~silent_peer() {
    release_.set_value();
    try {
      held_.get();
    } catch (const std::exception&) {  // nobody connected: the test has failed already
    }
  }
  uint16_t port() const { return port_; }

 private:
  net::socket_fd listener_;
  uint16_t port_;
  std::promise<void> release_;
  std::future<void> held_;
};

}  // namespace troupe::test
