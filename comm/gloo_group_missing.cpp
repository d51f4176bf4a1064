// connect_gloo_member where CMake found no Gloo: callers compile alike, and it says why.
#include "comm/gloo_group.hpp"

#include "comm/tcp_socket.hpp"

namespace troupe::net {

bool gloo_built() { return false; }

std::unique_ptr<group_backend> connect_gloo_member(int, int, std::shared_ptr<kv_store>, const gloo_options&) {
  throw net_error("this troupe was built without Gloo (CMake found none: install libgloo-dev and rebuild)");
}

}  // namespace troupe::net
