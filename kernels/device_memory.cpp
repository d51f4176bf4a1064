// device_memory: the per-device ledger (device_memory.hpp).
#include "kernels/device_memory.hpp"

#include <cmath>
#include <cstdio>
#include <utility>

namespace troupe {

int64_t memory_figures::total() const {
  int64_t n = 0;
  for (int64_t b : bytes) n += b;
  return n;
}

std::string memory_figures::to_string() const {
  std::string s;
  for (memory_kind k : all_memory_kinds)
    s += (s.empty() ? "" : ", ") + std::string(troupe::to_string(k)) + " " + format_bytes(of(k));
  return s;
}

std::shared_ptr<device_memory> device_memory::make(std::string name, int64_t cap_bytes) {
  if (cap_bytes < 0) throw std::invalid_argument("device_memory: a negative cap for " + name);
  return std::shared_ptr<device_memory>(new device_memory(std::move(name), cap_bytes));
}

void device_memory::adjust(memory_kind kind, int64_t delta) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto k = static_cast<size_t>(kind);
  if (delta > 0 && cap_ > 0 && live_total_ + delta > cap_)
    throw device_memory_exhausted("device memory of " + name_ + " exhausted: " + format_bytes(delta) + " more of " +
                                  troupe::to_string(kind) + " would make " + format_bytes(live_total_ + delta) +
                                  ", over the cap of " + format_bytes(cap_) + " (--device-memory); live now: " +
                                  live_.to_string() + " (total " + format_bytes(live_total_) + ")");
  live_.bytes[k] += delta;
  live_total_ += delta;
  peak_.bytes[k] = std::max(peak_.bytes[k], live_.bytes[k]);
  peak_total_ = std::max(peak_total_, live_total_);
}

void device_memory::charge(const tensor& t, memory_kind kind) {
  const int64_t bytes = t.nbytes();
  if (bytes == 0 || t.charge() != nullptr) return;
  // The charge is made before it is attached, so a refusal leaves nothing behind; a storage
  // that already carries a charge gives this one back at once.
  auto keep = std::make_shared<memory_charge>(shared_from_this(), kind, bytes);
  if (!t.attach(keep)) keep->reset();
}

void device_memory::recharge(const tensor& t, memory_kind kind) {
  if (memory_charge* c = t.charge()) c->move_to(kind);
  else charge(t, kind);
}

memory_figures device_memory::live() const {
  std::lock_guard<std::mutex> lock(mu_);
  return live_;
}

memory_figures device_memory::peak() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_;
}

int64_t device_memory::peak_total() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_total_;
}

void device_memory::reset_peaks() {
  std::lock_guard<std::mutex> lock(mu_);
  peak_ = live_;
  peak_total_ = live_total_;
}

memory_charge::memory_charge(std::shared_ptr<device_memory> to, memory_kind kind, int64_t bytes)
    : to_(std::move(to)), kind_(kind), bytes_(bytes) {
  if (to_ && bytes_ != 0) to_->adjust(kind_, bytes_);
}

memory_charge& memory_charge::operator=(memory_charge&& o) noexcept {
  if (this != &o) {
    reset();
    to_ = std::move(o.to_);
    kind_ = o.kind_;
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

void memory_charge::move_to(memory_kind kind) {
  if (!to_ || kind == kind_) return;
  to_->adjust(kind_, -bytes_);
  kind_ = kind;
  to_->adjust(kind_, bytes_);  // the total is unchanged, so the cap cannot refuse it
}

void memory_charge::reset() {
  if (to_ && bytes_ != 0) to_->adjust(kind_, -bytes_);
  to_.reset();
  bytes_ = 0;
}

int64_t parse_bytes(const std::string& text) {
  auto bad = [&] {
    return std::invalid_argument("a size must be a number of bytes with an optional unit (B, KiB, MiB, GiB, TiB, "
                                 "KB, MB, GB, TB), got \"" + text + "\"");
  };
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    throw bad();
  }
  std::string unit = text.substr(used);
  while (!unit.empty() && unit.front() == ' ') unit.erase(0, 1);
  static const std::pair<const char*, double> units[] = {
      {"", 1},          {"B", 1},        {"KiB", 0x1p10}, {"MiB", 0x1p20}, {"GiB", 0x1p30}, {"TiB", 0x1p40},
      {"KB", 1e3},      {"MB", 1e6},     {"GB", 1e9},     {"TB", 1e12},    {"K", 0x1p10},   {"M", 0x1p20},
      {"G", 0x1p30},    {"T", 0x1p40}};
  for (const auto& [name, scale] : units)
    if (unit == name) {
      const double bytes = value * scale;
      if (!std::isfinite(bytes) || bytes < 0 || bytes > 9.0e18) throw bad();
      return static_cast<int64_t>(std::llround(bytes));
    }
  throw bad();
}

std::string format_bytes(int64_t bytes) {
  const double b = static_cast<double>(bytes < 0 ? -bytes : bytes);
  const char* sign = bytes < 0 ? "-" : "";
  char out[48];
  if (b < 1024) std::snprintf(out, sizeof out, "%s%lld B", sign, static_cast<long long>(b));
  else if (b < 0x1p20) std::snprintf(out, sizeof out, "%s%.1f KiB", sign, b / 0x1p10);
  else if (b < 0x1p30) std::snprintf(out, sizeof out, "%s%.2f MiB", sign, b / 0x1p20);
  else std::snprintf(out, sizeof out, "%s%.2f GiB", sign, b / 0x1p30);
  return out;
}

}  // namespace troupe
