// tensor: the one array type of troupe. Shape, dtype (f32), device, and ref-counted storage.
// Copying a tensor shares its storage; clone() copies the values. Once frozen (as every message
// constructor does), the storage refuses mutable access, so a tensor sent to another actor is never
// changed under the receiver. It does no math itself: ops live in ops.hpp.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace troupe {

using shape_t = std::vector<int64_t>;
class memory_charge;

enum class dtype : uint8_t { f32 = 0 };

enum class device_type : uint8_t { cpu = 0, cuda = 1 };

struct device {
  device_type type = device_type::cpu;
  int index = 0;
  std::string to_string() const;
  friend bool operator==(const device& a, const device& b) {
    return a.type == b.type && a.index == b.index;
  }
};

int64_t numel_of(const shape_t& shape);
std::string to_string(const shape_t& shape);

class tensor {
 public:
  tensor() = default;
  // Zero-filled tensor of the given shape on the CPU.
  explicit tensor(shape_t shape);
  tensor(shape_t shape, const std::vector<float>& values);
  // Storage left uninitialized, for outputs an op overwrites entirely (skips a memset).
  static tensor uninitialized(shape_t shape);

  const shape_t& shape() const { return shape_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t size(int dim) const;
  int64_t numel() const { return numel_; }
  bool empty() const { return numel_ == 0; }
  dtype type() const { return dtype::f32; }
  const device& where() const { return device_; }

  // Mutable access throws std::logic_error once the storage is frozen.
  float* data();
  const float* data() const { return storage_ ? storage_->values.get() : nullptr; }
  float operator[](int64_t i) const { return data()[i]; }

  // Marks the storage immutable (shared by every tensor that refers to it).
  void freeze() const;
  bool frozen() const { return storage_ && storage_->frozen.load(std::memory_order_relaxed); }
  // For buffer pools: when this handle is the only one left on its storage, makes the storage
  // writable again and returns true (nobody else can observe the change); otherwise false.
  bool reclaim();

  tensor clone() const;
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
    std::unique_ptr<float[]> values;
    std::atomic<bool> frozen{false};  // atomic: ranks sharing one result may all freeze it
    std::atomic<bool> attached{false};
    std::shared_ptr<memory_charge> charge;  // set once (attached guards it), freed with the values
  };
  shape_t shape_;
  int64_t numel_ = 0;
  device device_;
  std::shared_ptr<storage> storage_;
};

}  // namespace troupe
