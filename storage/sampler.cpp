// Epoch permutations from a generator seeded with (seed, epoch), so any epoch can be produced
// directly (resume, other ranks) without replaying earlier ones.
#include "storage/sampler.hpp"

#include <algorithm>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>

namespace troupe::storage {

sampler::sampler(int64_t samples, int64_t global_batch, uint64_t seed, bool shuffle)
    : samples_(samples), global_batch_(global_batch), seed_(seed), shuffle_(shuffle) {
  if (global_batch <= 0) throw std::invalid_argument("batch size must be positive");
  if (samples < global_batch)
    throw std::invalid_argument("dataset has " + std::to_string(samples) + " samples, fewer than one batch of " +
                                std::to_string(global_batch));
}

const std::vector<int64_t>& sampler::order(int64_t epoch) const {
  if (epoch != cached_epoch_) {
    order_.resize(static_cast<size_t>(samples_));
    std::iota(order_.begin(), order_.end(), int64_t{0});
    if (shuffle_) {
      std::seed_seq seq{seed_, static_cast<uint64_t>(epoch), uint64_t{0x5a3d}};
      std::mt19937_64 rng(seq);
      // Fisher-Yates by hand: std::shuffle's draw sequence is not specified across libraries.
      for (int64_t i = samples_ - 1; i > 0; --i) {
        const int64_t j = static_cast<int64_t>(rng() % static_cast<uint64_t>(i + 1));
        std::swap(order_[static_cast<size_t>(i)], order_[static_cast<size_t>(j)]);
      }
    }
    cached_epoch_ = epoch;
  }
  return order_;
}

std::vector<int64_t> sampler::indices(int64_t epoch, int64_t b, int rank, int ranks) const {
  if (b < 0 || b >= batches_per_epoch())
    throw std::out_of_range("batch " + std::to_string(b) + " of an epoch of " +
                            std::to_string(batches_per_epoch()));
  if (ranks <= 0 || rank < 0 || rank >= ranks) throw std::invalid_argument("bad rank " + std::to_string(rank));
  const auto& o = order(epoch);
  const int64_t begin = b * global_batch_ + global_batch_ * rank / ranks;
  const int64_t end = b * global_batch_ + global_batch_ * (rank + 1) / ranks;
  return {o.begin() + begin, o.begin() + end};
}

}  // namespace troupe::storage
