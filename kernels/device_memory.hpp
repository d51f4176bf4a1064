// device_memory: the allocator ledger of one device. Every tensor a rank keeps on its device is
// charged to it under a kind (parameters, gradients, optimizer state, activations, buffers); the
// charge lives as long as the tensor's storage, so the ledger's live bytes are what is really
// held and its peaks what a run really needed. ZeRO's savings, offload and recomputation are read
// from it, and the planner predicts the same figures by the same names (memory_kind.hpp). A cap
// turns an allocation past it into an error naming the kind, the request and what is live.
// Thread-safe: a stage, its optimizer shard and its collectives charge one device's ledger.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>

#include "kernels/memory_kind.hpp"
#include "kernels/tensor.hpp"

namespace troupe {

struct memory_figures {
  std::array<int64_t, kMemoryKinds> bytes{};  // by memory_kind
  int64_t of(memory_kind k) const { return bytes[static_cast<size_t>(k)]; }
  int64_t total() const;
  std::string to_string() const;  // "parameters 1.20 MiB, gradients ..., buffers 0 B"
};

// Thrown when a charge would take the device past its cap. A std::bad_alloc would lose the
// numbers; this names them.
class device_memory_exhausted : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class device_memory : public std::enable_shared_from_this<device_memory> {
 public:
  // cap_bytes 0: unlimited (the ledger still counts).
  static std::shared_ptr<device_memory> make(std::string name, int64_t cap_bytes = 0);

  const std::string& name() const { return name_; }
  int64_t cap() const { return cap_; }

  // Charges t's storage under `kind` until the storage is freed. A storage already charged (to
  // this ledger or another) is left as it is: the first owner's kind counts, bytes count once.
  void charge(const tensor& t, memory_kind kind);
  // Counts t's storage under another kind from now on (a gradient unit handed to a collective
  // becomes a communication buffer); charges it when it is not charged yet.
  void recharge(const tensor& t, memory_kind kind);
  // Bytes that are not a tensor (an optimizer's moments, a stash's activations): adjusts the
  // kind's live count by delta, which may be negative. Throws device_memory_exhausted on a
  // positive delta past the cap, leaving the count as it was.
  void adjust(memory_kind kind, int64_t delta);

  memory_figures live() const;
  // Per kind: the most that kind held at once. peak_total: the most all kinds held together.
  memory_figures peak() const;
  int64_t peak_total() const;
  // Restarts the peaks at what is live now (a test measuring one phase).
  void reset_peaks();

 private:
  device_memory(std::string name, int64_t cap) : name_(std::move(name)), cap_(cap) {}
  std::string name_;
  int64_t cap_;
  mutable std::mutex mu_;
  memory_figures live_, peak_;
  int64_t live_total_ = 0, peak_total_ = 0;
};

// RAII for bytes charged by adjust(): released when it goes out of scope or is reset.
class memory_charge {
 public:
  memory_charge() = default;
  memory_charge(std::shared_ptr<device_memory> to, memory_kind kind, int64_t bytes);
  memory_charge(memory_charge&& o) noexcept { *this = std::move(o); }
  memory_charge& operator=(memory_charge&& o) noexcept;
  memory_charge(const memory_charge&) = delete;
  memory_charge& operator=(const memory_charge&) = delete;
  ~memory_charge() { reset(); }
  void reset();
  int64_t bytes() const { return bytes_; }
  memory_kind kind() const { return kind_; }
  void move_to(memory_kind kind);  // the same bytes, counted as another kind

 private:
  std::shared_ptr<device_memory> to_;
  memory_kind kind_ = memory_kind::buffers;
  int64_t bytes_ = 0;
};

// Parses a size for --device-memory: a number of bytes with an optional unit (B, KiB, MiB, GiB,
// TiB, or KB/MB/GB/TB as powers of 1000), e.g. "512MiB", "1.5GiB", "2e9". Throws
// std::invalid_argument naming the text.
int64_t parse_bytes(const std::string& text);
std::string format_bytes(int64_t bytes);  // "1.50 GiB", "12.0 MiB", "512 B"

}  // namespace troupe
