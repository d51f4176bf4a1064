// collective_pool: shared accumulators by seq, and a bounded set of buffers reused once every
// holder outside the pool has let go (tensor::reclaim).
#include "actors/collective/collective_pool.hpp"

#include <stdexcept>
#include <string>

namespace troupe {

tensor collective_pool::take_free(int64_t n) {
  for (tensor& t : pool_)
    if (t.numel() == n && t.reclaim()) return t;
  ++allocations_;
  tensor fresh = tensor::uninitialized({n});
  const int64_t b = fresh.nbytes();
  // Make room by dropping free buffers, oldest first; a buffer that does not fit is not pooled.
  for (auto it = pool_.begin(); held_bytes_ + b > pool_bytes_ && it != pool_.end();) {
    if (it->reclaim()) {
      held_bytes_ -= it->nbytes();
      it = pool_.erase(it);
    } else {
      ++it;
    }
  }
  if (held_bytes_ + b <= pool_bytes_) {
    pool_.push_back(fresh);
    held_bytes_ += b;
  }
  return fresh;
}

tensor collective_pool::acquire(int64_t seq, int64_t n, int ranks) {
  std::lock_guard<std::mutex> lock(m_);
  auto [it, fresh] = live_.try_emplace(seq);
  if (fresh) it->second.acc = take_free(n);
  if (it->second.acc.numel() != n)
    throw std::invalid_argument("peers disagree on the size of collective " + std::to_string(seq) + ": " +
                                std::to_string(it->second.acc.numel()) + " and " + std::to_string(n) + " elements");
  tensor acc = it->second.acc;
  if (++it->second.acquired >= ranks) live_.erase(it);
  return acc;
}

int64_t collective_pool::pooled_bytes() const {
  std::lock_guard<std::mutex> lock(m_);
  return held_bytes_;
}

int64_t collective_pool::allocations() const {
  std::lock_guard<std::mutex> lock(m_);
  return allocations_;
}

}  // namespace troupe
