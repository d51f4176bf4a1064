// tensor: the one array type of troupe. Shape, dtype (dtype.hpp), device (cpu or cuda:N),
// and ref-counted storage: bytes from the device's allocator (allocator.hpp), freed by it.
// Copying a tensor shares its storage; clone() copies the values. Once frozen (as every message
// constructor does), the storage refuses mutable access, so a tensor sent to another actor is never
// changed under the receiver. It does no math itself (ops live in ops.hpp), and it copies between
// devices only through kernels/cuda (device_alloc.hpp): no CUDA header here.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kernels/dtype.hpp"
#include "kernels/half.hpp"

namespace troupe {

using shape_t = std::vector<int64_t>;
class memory_charge;
class allocator;

template <class T>
struct dtype_of;  // the dtype of a storage type: dtype_of<float>::value == dtype::f32
template <>
struct dtype_of<float> {
  static constexpr dtype value = dtype::f32;
};
template <>
struct dtype_of<bf16> {
  static constexpr dtype value = dtype::bf16;
};
template <>
struct dtype_of<f16> {
  static constexpr dtype value = dtype::f16;
};
template <>
struct dtype_of<int32_t> {
  static constexpr dtype value = dtype::i32;
};
template <>
struct dtype_of<int64_t> {
  static constexpr dtype value = dtype::i64;
};
template <>
struct dtype_of<uint8_t> {
  static constexpr dtype value = dtype::u8;
};

enum class device_type : uint8_t { cpu = 0, cuda = 1 };

struct device {
  device_type type = device_type::cpu;
  int index = 0;
  std::string to_string() const;  // "cpu:0", "cuda:1"
  bool is_cpu() const { return type == device_type::cpu; }
  friend bool operator==(const device& a, const device& b) {
    return a.type == b.type && a.index == b.index;
  }
  friend bool operator!=(const device& a, const device& b) { return !(a == b); }
};

// "cpu", "cpu:K", "cuda" (cuda:0) or "cuda:N"; throws std::invalid_argument naming the text.
device parse_device(const std::string& text);

int64_t numel_of(const shape_t& shape);
std::string to_string(const shape_t& shape);

class tensor {
 public:
  tensor() = default;
  // Zero-filled f32 tensor of the given shape on the CPU.
  explicit tensor(shape_t shape);
  tensor(shape_t shape, const std::vector<float>& values);
  // Zero-filled, with its bytes from allocator_for(where) (throws when that device has none).
  tensor(shape_t shape, dtype type, device where);
  // Storage left uninitialized, for outputs an op overwrites entirely (skips a memset).
  static tensor uninitialized(shape_t shape);
  static tensor uninitialized(shape_t shape, dtype type, device where);
  // From a given allocator (a pinned host one, a caching one); the device is its where().
  static tensor uninitialized(shape_t shape, dtype type, std::shared_ptr<allocator> from);

  const shape_t& shape() const { return shape_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t size(int dim) const;
  int64_t numel() const { return numel_; }
  bool empty() const { return numel_ == 0; }
  dtype type() const { return dtype_; }
  const device& where() const { return device_; }
  // numel × size_of(type): the bytes of the values (the block behind them may be rounded up).
  int64_t nbytes() const { return numel_ * static_cast<int64_t>(size_of(dtype_)); }

  // The f32 values of a CPU tensor, the one access every CPU op uses. Throws std::logic_error
  // naming the dtype and device for any other tensor, and (mutable access) once frozen.
  float* data() {
    if (!storage_) return nullptr;
    if (!cpu_f32_) throw_not_cpu_f32();
    if (storage_->frozen.load(std::memory_order_relaxed)) throw_frozen();
    return static_cast<float*>(storage_->bytes);
  }
  const float* data() const {
    if (!storage_) return nullptr;
    if (!cpu_f32_) throw_not_cpu_f32();
    return static_cast<const float*>(storage_->bytes);
  }
  float operator[](int64_t i) const { return data()[i]; }

  // Typed access for any dtype, on any device (a pointer into that device's memory). Throws
  // std::logic_error when T is not the tensor's dtype, and (mutable access) once frozen.
  template <class T>
  T* data_as() {
    check_type(dtype_of<T>::value);
    return static_cast<T*>(raw());
  }
  template <class T>
  const T* data_as() const {
    check_type(dtype_of<T>::value);
    return static_cast<const T*>(raw());
  }
  // The bytes, unchecked but for freezing: for copies, transports and kernels that take a dtype.
  void* raw() {
    if (!storage_) return nullptr;
    if (storage_->frozen.load(std::memory_order_relaxed)) throw_frozen();
    return storage_->bytes;
  }
  const void* raw() const { return storage_ ? storage_->bytes : nullptr; }

  // Marks the storage immutable (shared by every tensor that refers to it).
  void freeze() const;
  bool frozen() const { return storage_ && storage_->frozen.load(std::memory_order_relaxed); }
  // For buffer pools: when this handle is the only one left on its storage, makes the storage
  // writable again and returns true (nobody else can observe the change); otherwise false.
  bool reclaim();

  // A copy of the values, from the same allocator. CPU tensors only (a GPU copy is enqueued on a
  // stream: kernels/cuda/device_alloc.hpp); throws std::logic_error otherwise.
  tensor clone() const;
  // A copy converted to `type` (to(type()) is a clone), rounding to nearest even as CUDA's
  // __float2bfloat16 / __float2half do. CPU tensors of f32, bf16 and f16 only; throws
  // std::logic_error otherwise.
  tensor to(dtype type) const;
  // Same storage, new shape with the same number of elements.
  tensor reshaped(shape_t shape) const;
  // Ties a device ledger's charge (device_memory.hpp) to the storage: it is released with the
  // storage's last handle. False, and nothing kept, when one is attached already or there is no
  // storage: a storage is charged once, by its first owner.
  bool attach(std::shared_ptr<memory_charge> charge) const;
  memory_charge* charge() const;  // the attached one, or null
  bool shares_storage_with(const tensor& other) const {
    return storage_ && storage_ == other.storage_;
  }
  std::vector<float> to_vector() const { return {data(), data() + numel_}; }

 private:
  struct storage {
    storage(std::shared_ptr<allocator> from, size_t n);
    ~storage();
    storage(const storage&) = delete;
    storage& operator=(const storage&) = delete;
    std::shared_ptr<allocator> alloc;  // frees bytes, and outlives them
    void* bytes = nullptr;
    size_t nbytes = 0;
    std::atomic<bool> frozen{false};  // atomic: ranks sharing one result may all freeze it
    std::atomic<bool> attached{false};
    std::shared_ptr<memory_charge> charge;  // set once (attached guards it), freed with the values
  };
  [[noreturn]] void throw_not_cpu_f32() const;
  [[noreturn]] static void throw_frozen();
  void check_type(dtype want) const;
  shape_t shape_;
  int64_t numel_ = 0;
  dtype dtype_ = dtype::f32;
  device device_;
  bool cpu_f32_ = true;  // dtype_ f32 and device_ a CPU: data()'s one test
  std::shared_ptr<storage> storage_;
};

}  // namespace troupe
