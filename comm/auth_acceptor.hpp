// Every listening port of a multi-process job admits connections through this: it accepts, sends
// the job's challenge (tcp_auth) and gathers each connector's answer without blocking, on all
// pending connections at once, each with its own deadline. A silent or slow connection therefore
// delays nobody: a real peer's handshake completes while hundreds of others are still waiting.
// Nothing but the fixed-size answer is read before the secret is proved, so no length a stranger
// sends can make the job allocate. It deliberately knows no protocol after the handshake: the
// caller takes the admitted socket (gate, rendezvous, ring).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "comm/tcp_socket.hpp"

namespace troupe::net {

class auth_acceptor {
 public:
  struct admitted {
    socket_fd fd;      // blocking, authenticated both ways
    uint32_t claim = 0;  // what the peer says it is (its rank), proved with the secret
    std::string who;   // "host:port", for logs
  };
  // Pending handshakes beyond this close the oldest one: a flood of idle connections costs the
  // attacker a connection per slot and cannot starve a real peer whose handshake takes ~1 ms.
  static constexpr size_t max_pending = 512;

  // Takes over `listener` and starts admitting on a thread of its own. `name` prefixes the logs.
  // `on_ready`, if set, runs on that thread each time a connection is admitted, so that a poll
  // loop can be woken to call next(0) instead of keeping a thread blocked in next().
  auth_acceptor(socket_fd listener, std::string secret, std::string name, int auth_timeout_ms,
                std::function<void()> on_ready = {});
  ~auth_acceptor();  // stops, closes every pending and unclaimed connection, joins the thread

  uint16_t port() const { return port_; }
  // The next admitted connection, waiting up to timeout_ms; nullopt when none came in time.
  std::optional<admitted> next(int timeout_ms);
  // Connections refused so far: each logged, up to 20 lines in 10 s, beyond which they are counted
  // and one line says how many (log_limiter.hpp).
  int refused() const { return refused_; }

 private:
  void loop();

  socket_fd listener_;
  uint16_t port_ = 0;
  std::string secret_, name_;
  int auth_timeout_ms_;
  std::atomic<bool> stop_{false};
  std::atomic<int> refused_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<admitted> ready_;
  std::function<void()> on_ready_;
  std::thread thread_;
};

}  // namespace troupe::net
