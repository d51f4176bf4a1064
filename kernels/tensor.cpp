// tensor storage and shape bookkeeping.
#include "kernels/tensor.hpp"

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

tensor::tensor(shape_t shape)
    : shape_(std::move(shape)), numel_(numel_of(shape_)), storage_(std::make_shared<storage>()) {
  storage_->values.assign(static_cast<size_t>(numel_), 0.0f);
}

tensor::tensor(shape_t shape, std::vector<float> values)
    : shape_(std::move(shape)), numel_(numel_of(shape_)), storage_(std::make_shared<storage>()) {
  if (static_cast<int64_t>(values.size()) != numel_)
    throw std::invalid_argument("tensor: " + std::to_string(values.size()) + " values for shape " +
                                to_string(shape_));
  storage_->values = std::move(values);
}

int64_t tensor::size(int dim) const {
  if (dim < 0) dim += rank();
  if (dim < 0 || dim >= rank())
    throw std::out_of_range("tensor: dimension " + std::to_string(dim) + " of shape " + to_string(shape_));
  return shape_[static_cast<size_t>(dim)];
}

float* tensor::data() {
  if (!storage_) return nullptr;
  if (storage_->frozen) throw std::logic_error("tensor: write access to a frozen (sent) tensor");
  return storage_->values.data();
}

void tensor::freeze() const {
  if (storage_) storage_->frozen = true;
}

tensor tensor::clone() const {
  if (!storage_) return {};
  return tensor(shape_, storage_->values);
}

tensor tensor::reshaped(shape_t shape) const {
  if (numel_of(shape) != numel_)
    throw std::invalid_argument("tensor: cannot reshape " + to_string(shape_) + " to " + to_string(shape));
  tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

}  // namespace troupe
