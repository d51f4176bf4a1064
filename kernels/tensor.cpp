// tensor storage and shape bookkeeping.
#include "kernels/tensor.hpp"

#include "kernels/device_memory.hpp"

#include <algorithm>
#include <stdexcept>

namespace troupe {

std::string device::to_string() const {
  return (type == device_type::cpu ? "cpu:" : "cuda:") + std::to_string(index);
}

int64_t numel_of(const shape_t& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) throw std::invalid_argument("tensor: negative dimension in shape " + to_string(shape));
    n *= d;
  }
  return n;
}

std::string to_string(const shape_t& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + ")";
}

tensor tensor::uninitialized(shape_t shape) {
  tensor t;
  t.shape_ = std::move(shape);
  t.numel_ = numel_of(t.shape_);
  t.storage_ = std::make_shared<storage>();
  t.storage_->values.reset(new float[static_cast<size_t>(t.numel_)]);  // default-init: no zeroing
  return t;
}

tensor::tensor(shape_t shape) : tensor(uninitialized(std::move(shape))) {
  std::fill_n(storage_->values.get(), numel_, 0.0f);
}

tensor::tensor(shape_t shape, const std::vector<float>& values) : tensor(uninitialized(std::move(shape))) {
  if (static_cast<int64_t>(values.size()) != numel_)
    throw std::invalid_argument("tensor: " + std::to_string(values.size()) + " values for shape " +
                                to_string(shape_));
  std::copy(values.begin(), values.end(), storage_->values.get());
}

int64_t tensor::size(int dim) const {
  if (dim < 0) dim += rank();
  if (dim < 0 || dim >= rank())
    throw std::out_of_range("tensor: dimension " + std::to_string(dim) + " of shape " + to_string(shape_));
  return shape_[static_cast<size_t>(dim)];
}

float* tensor::data() {
  if (!storage_) return nullptr;
  if (storage_->frozen.load(std::memory_order_relaxed))
    throw std::logic_error("tensor: write access to a frozen (sent) tensor");
  return storage_->values.get();
}

void tensor::freeze() const {
  if (storage_) storage_->frozen.store(true, std::memory_order_relaxed);
}

bool tensor::reclaim() {
  if (!storage_ || storage_.use_count() != 1) return false;
  // use_count() is a relaxed load: order the last other holder's reads before our next writes.
  std::atomic_thread_fence(std::memory_order_acquire);
  storage_->frozen.store(false, std::memory_order_relaxed);
  return true;
}

bool tensor::attach(std::shared_ptr<memory_charge> charge) const {
  if (!storage_ || storage_->attached.exchange(true, std::memory_order_acq_rel)) return false;
  storage_->charge = std::move(charge);
  return true;
}

memory_charge* tensor::charge() const { return storage_ ? storage_->charge.get() : nullptr; }

tensor tensor::clone() const {
  if (!storage_) return {};
  tensor t = uninitialized(shape_);
  std::copy_n(storage_->values.get(), numel_, t.storage_->values.get());
  return t;
}

tensor tensor::reshaped(shape_t shape) const {
  if (numel_of(shape) != numel_)
    throw std::invalid_argument("tensor: cannot reshape " + to_string(shape_) + " to " + to_string(shape));
  tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

}  // namespace troupe
