// Gloo as a collective back end (--backend gloo): one Gloo context per mesh group that spans
// processes, over Gloo's TCP transport, its pairs' addresses exchanged through the group's
// kv_store (served by the group's first member, admitted with the job's secret). Gloo's pair
// listeners (this Gloo makes one per pair) accept the first connection that reaches them, with no
// check, so a stranger there could take a member's place. Every pair therefore proves the job's
// secret both ways (the HMAC challenge of tcp_auth.hpp, over the pair itself) before the group is
// used; an attempt in which any pair fails is abandoned by every member (told through the store,
// which also releases a member still waiting inside Gloo's connect) and the group connects again
// on fresh listeners, up to `attempts` times. Built where CMake finds Gloo (Debian's
// libgloo-dev); elsewhere (gloo_group_missing.cpp) connecting throws net_error saying so.
#pragma once

#include <memory>
#include <string>

#include "comm/collective_backend.hpp"
#include "comm/kv_store.hpp"

namespace troupe::net {

struct gloo_options {
  std::string host = "127.0.0.1";  // the interface Gloo's pairs listen on
  int timeout_ms = 60000;          // the rendezvous, and every collective: a peer silent this long is dead
  std::string secret;              // the job's: each pair proves it (required)
  int attempts = 4;                // connections of the whole group before a stranger is said to win
};

// Member `rank` of a group of `world`. Blocks until every member is connected and every pair
// proved the secret; throws net_error naming the last attempt's failure otherwise. `store` lives
// as long as the member (the first member's serves the others).
std::unique_ptr<group_backend> connect_gloo_member(int rank, int world, std::shared_ptr<kv_store> store,
                                                   const gloo_options& opts);

}  // namespace troupe::net
