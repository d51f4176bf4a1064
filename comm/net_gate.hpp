// The control plane's door. CAF 0.17's middleman would accept any BASP connection on a port it
// listens on, and reads a message header's length before anything else, so it never listens on
// a port of its own: rank 0's gate_server on MASTER_ADDR:MASTER_PORT admits a connection only
// after the job's HMAC challenge (auth_acceptor, all pending handshakes at once), then hands the
// socket itself to the middleman (actors/process/middleman_link.hpp). A worker proves the secret
// (connect_through_gate) and hands its socket to its own middleman the same way, so no rank
// opens a port that a stranger could reach without the secret.
// With TLS (caf_openssl) the middleman must make its own connections: there the admitted socket
// is spliced to the TLS middleman's loopback port, whose mutual TLS handshake is the check a
// local process without the job's certificate fails (loopback_splices, loopback_bridge).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/auth_acceptor.hpp"
#include "comm/tcp_socket.hpp"

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
  // Called on the gate's thread with each connection that proved the secret (claim: its rank).
  using admit_fn = std::function<void(socket_fd, uint32_t claim, const std::string& who)>;
  // Listens on host:port (0: any free port; see port()). Throws net_error if it cannot bind.
  gate_server(const std::string& host, uint16_t port, std::string secret, admit_fn admit, int auth_timeout_ms = 5000);
  ~gate_server();  // stops admitting; connections already handed over are the receiver's
  uint16_t port() const { return acceptor_.port(); }
  int refused() const { return acceptor_.refused(); }  // connections refused so far (logged each)
  int admitted() const { return admitted_; }

 private:
  auth_acceptor acceptor_;
  admit_fn admit_;
  std::atomic<bool> stop_{false};
  std::atomic<int> admitted_{0};
  std::thread thread_;
};

// Connects to the gate at host:port (retrying until timeout_ms: rank 0 may start later) and
// authenticates as `rank`. Throws net_error when the gate refuses us or proves no secret.
socket_fd connect_through_gate(const std::string& host, uint16_t port, const std::string& secret, uint32_t rank,
                               int timeout_ms);

// Rank 0's hold on the connections it handed on (to the middleman or a splice): a duplicate of
// each socket, so that at the job's end rank 0 closes them itself, in order (see net_actors.hpp).
class connection_set {
 public:
  void add(int fd);     // keeps dup(fd)
  void shutdown_all();  // both directions of every connection; the receivers see the close
 private:
  std::mutex mu_;
  std::vector<socket_fd> fds_;
};

// TLS, rank 0: each admitted connection forwarded to the TLS middleman's loopback port.
class loopback_splices {
 public:
  explicit loopback_splices(uint16_t backend_port) : backend_port_(backend_port) {}
  void add(socket_fd admitted, int timeout_ms);  // throws net_error if the backend is unreachable
  ~loopback_splices();                           // closes every forwarded connection

 private:
  uint16_t backend_port_;
  std::mutex mu_;
  std::vector<std::unique_ptr<splice>> links_;
};

// TLS, a worker: a loopback port for the local TLS middleman's remote_actor, accepting one
// connection and splicing it to the authenticated upstream socket.
class loopback_bridge {
 public:
  loopback_bridge(socket_fd upstream, int timeout_ms);
  ~loopback_bridge();
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
