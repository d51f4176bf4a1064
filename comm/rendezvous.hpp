// Rendezvous: rank 0 listens at MASTER_ADDR:MASTER_PORT, every other rank connects, proves it
// knows the job's secret (tcp_auth) and says its rank and data-plane address; once all ranks
// are in, each gets the full address table. A peer with a wrong secret, a bad rank or a
// duplicate rank is refused and logged, and the rendezvous goes on waiting for the real one.
// It deliberately is not a general key-value store and keeps no connection afterwards
// (dead-peer detection belongs to the control plane, phase 2).
//
// Hello (connector -> rank 0, after auth): rank u32 | world u32 | data port u16 | host len u16 | host
// Reply (rank 0 -> each, when complete): status u8 (0 ok, 1 refused) | world × (port u16 | len u16 | host)
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "comm/auth_acceptor.hpp"
#include "comm/tcp_socket.hpp"

namespace troupe::net {

struct peer_addr {
  std::string host;
  uint16_t port = 0;
};

struct rendezvous_options {
  int timeout_ms = 120000;     // all ranks must have joined by then
  int auth_timeout_ms = 5000;  // a silent or slow peer is dropped after this, not waited for
  // Polled every 100 ms while waiting for peers: true ends the wait with a net_error (the job
  // failed meanwhile; the thread waiting here must not hold the process for the join timeout).
  std::function<bool()> cancelled;
};
// The slice a wait for peers is cut into, so that `cancelled` is seen promptly.
inline constexpr int rendezvous_poll_ms = 100;

class rendezvous_server {
 public:
  // Binds host:port (port 0: any; see port()). Throws net_error if it cannot.
  rendezvous_server(const std::string& host, uint16_t port, int world, std::string secret,
                    rendezvous_options opts = {});
  uint16_t port() const { return port_; }
  // Blocks until ranks 1..world-1 joined; returns the table indexed by rank (entry 0 = self).
  // Throws net_error naming the missing ranks when the timeout passes first.
  std::vector<peer_addr> run(const peer_addr& self);
  int refused() const { return acceptor_.refused() + refused_; }  // peers refused (wrong secret, bad hello)

 private:
  auth_acceptor acceptor_;  // admits connections from construction on, handshakes concurrently
  uint16_t port_ = 0;
  int world_;
  std::string secret_;
  rendezvous_options opts_;
  int refused_ = 0;
};

// A rank other than 0. connect() reaches rank 0 and authenticates; local_host() then tells the
// address of the interface that reaches it (where this rank's data listener should bind).
class rendezvous_client {
 public:
  rendezvous_client(const std::string& master_host, uint16_t master_port, int rank, int world,
                    std::string secret, rendezvous_options opts = {});
  const std::string& local_host() const { return local_host_; }
  // Sends our data address and blocks until the table arrives.
  std::vector<peer_addr> join(uint16_t data_port);

 private:
  socket_fd s_;
  int rank_, world_;
  std::string local_host_;
  rendezvous_options opts_;
};

}  // namespace troupe::net
