// The Gloo peer in a build without Gloo (see gloo_peer.hpp): nothing to measure.
#include <stdexcept>

#include "bench/gloo_peer.hpp"

namespace troupe::bench {

bool gloo_built() { return false; }

std::unique_ptr<gloo_ring> connect_gloo_ring(int, int, const std::string&) {
  throw std::runtime_error("this build has no Gloo peer: install libgloo-dev (scripts/setup.sh bench) and reconfigure");
}

}  // namespace troupe::bench
