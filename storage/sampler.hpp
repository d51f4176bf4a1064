// Which samples go into which batch: a seeded shuffle per epoch, cut into global batches, each
// global batch split evenly across data-parallel ranks. Pure arithmetic, no data.
#pragma once

#include <cstdint>
#include <vector>

namespace troupe::storage {

class sampler {
 public:
  // Incomplete last batches are dropped so every step has the same global batch.
  sampler(int64_t samples, int64_t global_batch, uint64_t seed, bool shuffle = true);
  int64_t batches_per_epoch() const { return samples_ / global_batch_; }
  // Sample indices of global batch `b` of `epoch`, rows [rank*B/ranks, (rank+1)*B/ranks).
  std::vector<int64_t> indices(int64_t epoch, int64_t b, int rank = 0, int ranks = 1) const;

 private:
  const std::vector<int64_t>& order(int64_t epoch) const;
  int64_t samples_, global_batch_;
  uint64_t seed_;
  bool shuffle_;
  mutable int64_t cached_epoch_ = -1;
  mutable std::vector<int64_t> order_;
};

}  // namespace troupe::storage
