// The control plane's door. CAF 0.17's middleman accepts any BASP connection on a published
// port, so it never listens on the network itself: rank 0 publishes its actors on 127.0.0.1 only
// and a gate_server on MASTER_ADDR:MASTER_PORT runs the job's HMAC challenge (tcp_auth) on every
// connection before forwarding a single byte to the middleman; a gate_client on each other rank
// authenticates first and then hands its local middleman a loopback port that leads through.
// It deliberately parses nothing after the handshake (BASP, or TLS when configured, just flows).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "actors/tcp_socket.hpp"

namespace troupe::net {

// Copies bytes both ways between two connected sockets until either side closes, then shuts
// both down (so the far ends see the close: a dead worker becomes a closed middleman connection).
class splice {
 public:
  splice(socket_fd a, socket_fd b);
  ~splice();  // shuts both sockets down and joins the copying thread
  bool done() const { return done_; }

 private:
  socket_fd a_, b_;
  std::atomic<bool> done_{false};
  std::thread thread_;
};

class gate_server {
 public:
  // Listens on host:port (0: any free port; see port()) and forwards every connection that
  // proves it knows `secret` to 127.0.0.1:backend_port. Throws net_error if it cannot bind.
  gate_server(const std::string& host, uint16_t port, std::string secret, uint16_t backend_port,
              int auth_timeout_ms = 5000);
  ~gate_server();  // stops accepting and closes every forwarded connection
  uint16_t port() const { return port_; }
  int refused() const { return refused_; }   // connections refused so far (logged each)
  int admitted() const { return admitted_; }

 private:
  void accept_loop();

  socket_fd listener_;
  uint16_t port_ = 0, backend_port_;
  std::string secret_;
  int auth_timeout_ms_;
  std::atomic<bool> stop_{false};
  std::atomic<int> refused_{0}, admitted_{0};
  std::mutex mu_;
  std::vector<std::unique_ptr<splice>> links_;
  std::thread thread_;
};

class gate_client {
 public:
  // Connects to the gate at host:port (retrying until timeout_ms: rank 0 may start later) and
  // authenticates as `rank`. Throws net_error when the gate refuses us or proves no secret.
  gate_client(const std::string& host, uint16_t port, const std::string& secret, uint32_t rank, int timeout_ms);
  ~gate_client();
  // The loopback port to give the local middleman's remote_actor; it accepts one connection.
  uint16_t local_port() const { return local_port_; }

 private:
  socket_fd upstream_, listener_;
  uint16_t local_port_ = 0;
  int timeout_ms_;
  std::atomic<bool> stop_{false};
  std::unique_ptr<splice> link_;
  std::thread thread_;
};

}  // namespace troupe::net
