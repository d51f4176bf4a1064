// Hands an authenticated connection to CAF's middleman instead of letting the middleman listen
// or connect by itself (see net_gate.hpp): rank 0 serves its job hub on each socket the gate
// admitted, a worker obtains the job hub over the socket it authenticated. Both use the BASP
// broker's own entry points for sockets made elsewhere (CAF 0.17's publish and connect with a
// scribe), so the middleman never owns a listening port. Plain TCP only: caf_openssl makes its
// TLS sessions inside its own connect/publish, so a TLS job keeps the loopback splice.
#pragma once

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include <chrono>

#include "actors/tcp_socket.hpp"

namespace troupe {

// Rank 0: `whom` becomes reachable by the one peer at the other end of `admitted`.
void serve_over(caf::actor_system& sys, net::socket_fd admitted, const caf::actor& whom);

// A worker: the actor rank 0 serves at the other end of `upstream`. Throws std::runtime_error
// when the BASP handshake fails or takes longer than `timeout`.
caf::actor remote_actor_over(caf::actor_system& sys, net::socket_fd upstream, std::chrono::milliseconds timeout);

}  // namespace troupe
