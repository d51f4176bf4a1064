// Test support: two tcp_ring ranks in threads of one process, and a rendezvous crowded with
// silent connections, for the failure paths that need no fork (tcp_ring.test.cpp checks what
// they report, tcp_ring_timing.test.cpp how soon). Loopback only; ranks across processes are
// tcp_ring_helper's job.
#pragma once

#include <cstdint>
#include <future>
#include <memory>
#include <utility>
#include <vector>

#include "comm/launch_env.hpp"
#include "comm/rendezvous.hpp"
#include "comm/tcp_ring.hpp"

namespace troupe::test {

inline troupe::launch_env env_of(int rank, int world, uint16_t port) {
  troupe::launch_env e;
  e.rank = rank;
  e.world_size = world;
  e.master_addr = "127.0.0.1";
  e.master_port = port;
  return e;
}

// io_timeout_ms 5 s on both: a failure reported sooner was noticed, not waited out.
inline std::pair<std::unique_ptr<net::tcp_ring>, std::unique_ptr<net::tcp_ring>> ring_pair() {
  std::promise<uint16_t> port;
  net::ring_options o;
  o.io_timeout_ms = 5000;
  o.on_master_listening = [&](uint16_t p) { port.set_value(p); };
  auto r0 = std::async(std::launch::async, [&] { return net::tcp_ring::connect(env_of(0, 2, 0), "k", o); });
  const uint16_t p = port.get_future().get();
  net::ring_options o1;
  o1.io_timeout_ms = 5000;
  auto r1 = net::tcp_ring::connect(env_of(1, 2, p), "k", o1);
  return {r0.get(), std::move(r1)};
}

// A rendezvous of two ranks (the server is rank 0, data port 1) with `silent` connections open
// at it that never answer the challenge, each of which would hold a serial acceptor for its
// whole 5 s handshake deadline. Deadlines are 20 s.
class crowded_rendezvous {
 public:
  explicit crowded_rendezvous(int silent) : server_("127.0.0.1", 0, 2, "right", options()) {
    table_ = std::async(std::launch::async, [this] { return server_.run({"127.0.0.1", 1}); });
    for (int i = 0; i < silent; ++i) silent_.push_back(net::connect_tcp("127.0.0.1", server_.port(), 2000));
  }
  // Rank 1 joins with data port `port`; returns the table it is given.
  std::vector<net::peer_addr> join(uint16_t port) {
    net::rendezvous_client client("127.0.0.1", server_.port(), 1, 2, "right", options());
    return client.join(port);
  }
  // The table the server gave out (waits for it).
  std::vector<net::peer_addr> table() { return table_.get(); }

 private:
  static net::rendezvous_options options() {
    net::rendezvous_options o;
    o.timeout_ms = 20000;
    return o;
  }
  net::rendezvous_server server_;
  std::future<std::vector<net::peer_addr>> table_;
  std::vector<net::socket_fd> silent_;
};

}  // namespace troupe::test
