// Gloo as a benchmark peer: a ring all-reduce over Gloo's TCP transport for one rank of a forked
// group. The build compiles gloo_peer.cpp where CMake finds Gloo and gloo_peer_missing.cpp where it
// does not, so the benchmarks themselves have no #ifdef and compile the same way on every machine.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace troupe::bench {

// False in a build without Gloo: the benchmarks then report the peer as not measured.
bool gloo_built();

class gloo_ring {
 public:
  virtual ~gloo_ring() = default;
  // Sums `n` floats in place across the group (Gloo's ring algorithm).
  virtual void all_reduce_sum(float* data, size_t n) = 0;
};

// Joins a group of `world` ranks through a file store in `store_dir`. Throws in a build without
// Gloo (check gloo_built() first).
std::unique_ptr<gloo_ring> connect_gloo_ring(int rank, int world, const std::string& store_dir);

}  // namespace troupe::bench
