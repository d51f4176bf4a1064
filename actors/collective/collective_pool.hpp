// collective_pool: the buffers one in-process collective group shares. Every rank of collective
// `seq` gets the same accumulator tensor, and each writes only the elements a ring message handed
// it, so a reduction happens in place and the all-gather phase copies nothing. Released buffers
// are reused (no fresh pages to fault in). It is for ranks in one process only: across processes
// each rank owns its buffers (tcp_ring.cpp). It does not decide who writes what: the ring does.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <mutex>

#include "kernels/tensor.hpp"

namespace troupe {

class collective_pool {
 public:
  // Keeps at most pool_bytes of buffers (in use or free) for reuse; larger ones are not pooled.
  explicit collective_pool(int64_t pool_bytes) : pool_bytes_(pool_bytes) {}

  // The accumulator of collective `seq`: n elements, writable, uninitialized or left over from an
  // earlier collective. The first of the `ranks` callers takes it from the free buffers or
  // allocates it; the `ranks`-th call forgets the seq. Throws std::invalid_argument when a rank
  // asks for another size than the first did (peers disagree).
  tensor acquire(int64_t seq, int64_t n, int ranks);

  int64_t pooled_bytes() const;
  int64_t allocations() const;  // buffers allocated (not reused) so far

 private:
  tensor take_free(int64_t n);  // holds m_

  struct live_entry {
    tensor acc;
    int acquired = 0;
  };
  mutable std::mutex m_;
  std::map<int64_t, live_entry> live_;
  std::deque<tensor> pool_;  // oldest first; holders outside the pool keep a buffer busy
  int64_t pool_bytes_ = 0, held_bytes_ = 0, allocations_ = 0;
};

}  // namespace troupe
