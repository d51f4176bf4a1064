// The control plane's door. CAF 0.17's middleman would accept any BASP connection on a port it
// listens on, and reads a message header's length before anything else, so it never listens on
// a port of its own: rank 0's gate_server on MASTER_ADDR:MASTER_PORT admits a connection only
// after the job's HMAC challenge (auth_acceptor, all pending handshakes at once), then hands the
// socket itself to the middleman (actors/process/middleman_link.hpp). A worker proves the secret
// (connect_through_gate) and hands its socket to its own middleman the same way, so no rank
// opens a port that a stranger could reach without the secret. Under TLS both ends run a
// tls_channel over that socket first (tls_channel.hpp) and the middleman gets its plain end.
// The gate listens for the whole job: an elastic job's memberships each point it at their own
// actor system (set_admit), and between two of them it holds the connections that come in, so
// its port is never free for another program to take.
#pragma once

#include <atomic>
#include <condition_variable>
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

class gate_server {
 public:
  // Called with each connection that proved the secret (claim: its rank), on a thread of its own
  // per connection (up to 64 at once): several calls may run at the same time.
  using admit_fn = std::function<void(socket_fd, uint32_t claim, const std::string& who)>;
  // Listens on host:port (0: any free port; see port()). Throws net_error if it cannot bind.
  // An empty `admit` holds the connections that prove the secret until set_admit gives one.
  gate_server(const std::string& host, uint16_t port, std::string secret, admit_fn admit, int auth_timeout_ms = 5000);
  ~gate_server();  // stops admitting; connections already handed over are the receiver's
  // Who receives the admitted connections from now on; empty: nobody for now, they wait (each
  // still proves the secret within the auth timeout). Returns once no connection is being handed
  // to the previous receiver, which may then go away.
  void set_admit(admit_fn admit);
  uint16_t port() const { return acceptor_.port(); }
  int refused() const { return acceptor_.refused(); }  // connections refused so far (logged each)
  int admitted() const { return admitted_; }

 private:
  auth_acceptor acceptor_;
  std::mutex mu_;
  std::condition_variable cv_;
  admit_fn next_admit_;  // set_admit's, until the thread takes it between two connections
  bool changing_ = false;
  std::atomic<bool> stop_{false};
  std::atomic<int> admitted_{0};
  std::thread thread_;
};

// Connects to the gate at host:port (retrying until timeout_ms: rank 0 may start later) and
// authenticates as `rank`. Throws net_error when the gate refuses us or proves no secret.
socket_fd connect_through_gate(const std::string& host, uint16_t port, const std::string& secret, uint32_t rank,
                               int timeout_ms);

// Rank 0's hold on the connections it handed on (to the middleman or a TLS channel): a duplicate of
// each socket, so that at the job's end rank 0 closes them itself, in order (see net_actors.hpp).
class connection_set {
 public:
  void add(int fd);     // keeps dup(fd)
  void shutdown_all();  // both directions of every connection; the receivers see the close
 private:
  std::mutex mu_;
  std::vector<socket_fd> fds_;
};

}  // namespace troupe::net
