// tensor storage, devices and shape bookkeeping.
#include "kernels/tensor.hpp"

#include "kernels/allocator.hpp"
#include "kernels/device_memory.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace troupe {

std::string device::to_string() const {
  return (type == device_type::cpu ? "cpu:" : "cuda:") + std::to_string(index);
}

device parse_device(const std::string& text) {
  auto bad = [&] {
    return std::invalid_argument("a device is cpu, cpu:K, cuda or cuda:N (N a device number), got \"" + text + "\"");
  };
  device d;
  std::string rest;
  if (text.rfind("cpu", 0) == 0) {
    d.type = device_type::cpu;
    rest = text.substr(3);
  } else if (text.rfind("cuda", 0) == 0) {
    d.type = device_type::cuda;
    rest = text.substr(4);
  } else {
    throw bad();
  }
  if (rest.empty()) return d;
  if (rest[0] != ':' || rest.size() < 2 || rest.size() > 6) throw bad();
  for (size_t i = 1; i < rest.size(); ++i)
    if (rest[i] < '0' || rest[i] > '9') throw bad();
  d.index = std::stoi(rest.substr(1));
  return d;
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

tensor::storage::storage(std::shared_ptr<allocator> from, size_t n)
    : alloc(std::move(from)), bytes(alloc->allocate(n)), nbytes(n) {}

tensor::storage::~storage() { alloc->deallocate(bytes, nbytes); }

tensor tensor::uninitialized(shape_t shape, dtype type, std::shared_ptr<allocator> from) {
  if (!from) throw std::invalid_argument("tensor: no allocator");
  tensor t;
  t.shape_ = std::move(shape);
  t.numel_ = numel_of(t.shape_);
  t.dtype_ = type;
  t.device_ = from->where();
  t.cpu_f32_ = type == dtype::f32 && t.device_.is_cpu();
  t.storage_ = std::make_shared<storage>(std::move(from), static_cast<size_t>(t.nbytes()));
  return t;
}

tensor tensor::uninitialized(shape_t shape, dtype type, device where) {
  return uninitialized(std::move(shape), type, allocator_for(where));
}

tensor tensor::uninitialized(shape_t shape) { return uninitialized(std::move(shape), dtype::f32, cpu_allocator()); }

tensor::tensor(shape_t shape) : tensor(uninitialized(std::move(shape))) {
  std::fill_n(static_cast<float*>(storage_->bytes), numel_, 0.0f);
}

tensor::tensor(shape_t shape, dtype type, device where) : tensor(uninitialized(std::move(shape), type, where)) {
  storage_->alloc->zero(storage_->bytes, storage_->nbytes);
}

tensor::tensor(shape_t shape, const std::vector<float>& values) : tensor(uninitialized(std::move(shape))) {
  if (static_cast<int64_t>(values.size()) != numel_)
    throw std::invalid_argument("tensor: " + std::to_string(values.size()) + " values for shape " +
                                to_string(shape_));
  std::copy(values.begin(), values.end(), static_cast<float*>(storage_->bytes));
}

int64_t tensor::size(int dim) const {
  if (dim < 0) dim += rank();
  if (dim < 0 || dim >= rank())
    throw std::out_of_range("tensor: dimension " + std::to_string(dim) + " of shape " + to_string(shape_));
  return shape_[static_cast<size_t>(dim)];
}

void tensor::throw_not_cpu_f32() const {
  throw std::logic_error(std::string("tensor: data() gives the f32 values of a CPU tensor; this one is ") +
                         troupe::to_string(dtype_) + " on " + device_.to_string() + " " + to_string(shape_) +
                         " (data_as<T>() or raw() reach it)");
}

void tensor::throw_frozen() { throw std::logic_error("tensor: write access to a frozen (sent) tensor"); }

void tensor::check_type(dtype want) const {
  if (want != dtype_)
    throw std::logic_error(std::string("tensor: data_as<") + troupe::to_string(want) + ">() of a " +
                           troupe::to_string(dtype_) + " tensor on " + device_.to_string() + " " + to_string(shape_));
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
  if (!device_.is_cpu())
    throw std::logic_error("tensor: clone() of a tensor on " + device_.to_string() +
                           " (device copies are enqueued on a stream: kernels/cuda/device_alloc.hpp)");
  tensor t = uninitialized(shape_, dtype_, storage_->alloc);
  std::memcpy(t.storage_->bytes, storage_->bytes, static_cast<size_t>(nbytes()));
  return t;
}

namespace {
// Element i of src (of dtype from) as float, and float to dst's dtype: the loops of to(dtype).
// Floating types only: to() refuses the others before it loads.
float load(const void* src, dtype from, int64_t i) {
  switch (from) {
    case dtype::f32: return static_cast<const float*>(src)[i];
    case dtype::bf16: return to_float(static_cast<const bf16*>(src)[i]);
    case dtype::f16: return to_float(static_cast<const f16*>(src)[i]);
    case dtype::i32:
    case dtype::i64:
    case dtype::u8: break;
  }
  return 0;
}
}  // namespace

tensor tensor::to(dtype type) const {
  if (type == dtype_) return clone();
  if (!storage_) return {};
  if (!device_.is_cpu())
    throw std::logic_error(std::string("tensor: to(") + troupe::to_string(type) +
                           ") converts on the CPU; this tensor is on " + device_.to_string());
  // Through float, an i32 or i64 above 2^24 would lose its low bits: no conversion is better.
  if (!is_floating(type) || !is_floating(dtype_))
    throw std::logic_error(std::string("tensor: to() converts between f32, bf16 and f16, not ") +
                           troupe::to_string(dtype_) + " to " + troupe::to_string(type));
  tensor t = uninitialized(shape_, type, storage_->alloc);
  const void* src = storage_->bytes;
  switch (type) {
    case dtype::f32: {
      auto* out = static_cast<float*>(t.storage_->bytes);
      for (int64_t i = 0; i < numel_; ++i) out[i] = load(src, dtype_, i);
      break;
    }
    case dtype::bf16: {
      auto* out = static_cast<bf16*>(t.storage_->bytes);
      for (int64_t i = 0; i < numel_; ++i) out[i] = to_bf16(load(src, dtype_, i));
      break;
    }
    case dtype::f16: {
      auto* out = static_cast<f16*>(t.storage_->bytes);
      for (int64_t i = 0; i < numel_; ++i) out[i] = to_f16(load(src, dtype_, i));
      break;
    }
    case dtype::i32:
    case dtype::i64:
    case dtype::u8: break;
  }
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
