// per_gpu: one shared object per GPU index, installed once and looked up from any thread: the
// table behind allocator_for (allocator.hpp) and ops_for (device_ops.hpp).
#pragma once

#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

namespace troupe {

template <class T>
class per_gpu {
 public:
  // The object of GPU `index`, or null when none is installed.
  std::shared_ptr<T> find(int index) const {
    std::lock_guard<std::mutex> lock(mu_);
    return index >= 0 && static_cast<size_t>(index) < by_index_.size() ? by_index_[static_cast<size_t>(index)] : nullptr;
  }
  void install(int index, std::shared_ptr<T> value) {
    if (index < 0) throw std::invalid_argument("per_gpu: GPU index " + std::to_string(index));
    std::lock_guard<std::mutex> lock(mu_);
    if (by_index_.size() <= static_cast<size_t>(index)) by_index_.resize(static_cast<size_t>(index) + 1);
    by_index_[static_cast<size_t>(index)] = std::move(value);
  }

 private:
  mutable std::mutex mu_;
  std::vector<std::shared_ptr<T>> by_index_;
};

}  // namespace troupe
