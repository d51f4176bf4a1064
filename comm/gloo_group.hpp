// Gloo as a collective back end (--backend gloo): one Gloo context per mesh group that spans
// processes, over Gloo's TCP transport, its pairs' addresses exchanged through the group's
// kv_store (served by the group's first member, admitted with the job's secret). Gloo's own
// listeners take any connection that reaches them, as in PyTorch; troupe binds them to the
// interface the job's other ports use. Built where CMake finds Gloo (Debian's libgloo-dev);
// elsewhere (gloo_group_missing.cpp) connecting throws net_error saying so.
#pragma once

#include <memory>
#include <string>

#include "comm/collective_backend.hpp"
#include "comm/kv_store.hpp"

namespace troupe::net {

struct gloo_options {
  std::string host = "127.0.0.1";  // the interface Gloo's pairs listen on
  int timeout_ms = 60000;          // the rendezvous, and every collective: a peer silent this long is dead
};

// Member `rank` of a group of `world`. Blocks until every member is connected. `store` lives as
// long as the member (the first member's serves the others).
std::unique_ptr<group_backend> connect_gloo_member(int rank, int world, std::shared_ptr<kv_store> store,
                                                   const gloo_options& opts);

}  // namespace troupe::net
