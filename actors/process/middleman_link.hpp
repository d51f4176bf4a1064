// Hands an authenticated connection to CAF's middleman instead of letting the middleman listen
// or connect by itself (see net_gate.hpp): rank 0 serves its job hub on each socket the gate
// admitted, a worker obtains the job hub over the socket it authenticated. Both use the BASP
// broker's own entry points for sockets made elsewhere (CAF 0.17's publish and connect with a
// scribe), so the middleman never owns a listening port. Under TLS the socket is the plain end of
// the connection's tls_channel (comm/tls_channel.hpp).
#pragma once

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include <chrono>
#include <memory>

#include "comm/tcp_socket.hpp"

namespace troupe {

// Rank 0: `whom` becomes reachable by the one peer at the other end of `admitted`.
void serve_over(caf::actor_system& sys, net::socket_fd admitted, const caf::actor& whom);

// A worker: the actor rank 0 serves at the other end of `upstream`. Throws std::runtime_error
// when the BASP handshake fails or takes longer than `timeout`.
caf::actor remote_actor_over(caf::actor_system& sys, net::socket_fd upstream, std::chrono::milliseconds timeout);

// CAF 0.17's BASP broker monitors every local actor a remote node holds a handle to, and the
// down message it gets when that actor terminates holds a strong reference to the actor. The
// broker's mailbox is never drained once the middleman stops (abstract_broker::cleanup skips the
// scheduled actor's), so a down message still queued then keeps a detached actor referenced and
// ~actor_system waits for its thread forever (seen as a worker that finished its job and never
// exited, about one run in thirty). Before the actor system goes, a process therefore waits
// until the broker has handled the down messages of the actors it stopped.
class middleman_drain {
 public:
  middleman_drain();
  // Call right after spawning `a`, before its handle leaves the process: a functor attached
  // first runs last at termination, after the broker's monitor has queued its down message.
  void watch(const caf::actor& a);
  // After the watched actors were stopped: waits until each has run its last attachable, then
  // until the broker has handled everything queued before (one request it answers in order).
  void drain(caf::actor_system& sys);

 private:
  struct state;
  std::shared_ptr<state> state_;
};

}  // namespace troupe
