// allocator: the CPU allocator, the caching allocator and the per-device table (allocator.hpp).
#include "kernels/allocator.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "kernels/device_memory.hpp"
#include "kernels/per_gpu.hpp"

namespace troupe {

namespace {

// malloc'ed with room to align, the block's own address kept just before the aligned one.
// Not aligned_alloc: glibc's memalign splits heap chunks and frees the pieces, and that
// fragmentation raised a ZeRO-3 run's peak RSS by 50 MB (tests/cli/offload_memory.test.sh);
// plain malloc keeps the heap as new[] left it, for 64 bytes more a tensor.
class cpu_allocator_impl final : public allocator {
 public:
  static constexpr size_t alignment = 64;
  void* allocate(size_t bytes) override {
    if (bytes > SIZE_MAX - alignment)
      throw out_of_memory("cpu: cannot allocate " + std::to_string(bytes) + " bytes");
    void* block = std::malloc(bytes + alignment);
    if (!block) throw out_of_memory("cpu: out of memory allocating " + format_bytes(static_cast<int64_t>(bytes)));
    // malloc aligns to 16, so there are at least 16 bytes before the aligned address.
    const uintptr_t aligned = (reinterpret_cast<uintptr_t>(block) + alignment) & ~uintptr_t{alignment - 1};
    void** p = reinterpret_cast<void**>(aligned);
    p[-1] = block;
    return p;
  }
  void deallocate(void* p, size_t) noexcept override {
    if (p) std::free(static_cast<void**>(p)[-1]);
  }
  void zero(void* p, size_t bytes) override { std::memset(p, 0, bytes); }
  device where() const override { return {}; }
};

per_gpu<allocator>& table() {
  static per_gpu<allocator> t;
  return t;
}

}  // namespace

std::shared_ptr<allocator> cpu_allocator() {
  static const std::shared_ptr<allocator> a = std::make_shared<cpu_allocator_impl>();
  return a;
}

size_t caching_allocator::round_size(size_t bytes) {
  const size_t granule = bytes < large_threshold ? small_granule : large_granule;
  return bytes == 0 ? small_granule : (bytes + granule - 1) / granule * granule;
}

caching_allocator::caching_allocator(std::unique_ptr<raw_backend> backend) : backend_(std::move(backend)) {
  if (!backend_) throw std::invalid_argument("caching_allocator: no backend");
}

caching_allocator::~caching_allocator() {
  try {
    settle_freed(true);
  } catch (...) {  // a device already gone: what waited on it goes with it
  }
  release_cached();
  // Blocks still handed out are not freed: their owners would be left with dangling pointers.
  // Tensors keep their allocator alive, so this happens only with a caller's own allocate().
}

void* caching_allocator::allocate(size_t bytes) {
  const size_t size = round_size(bytes);
  const void* stream = backend_->stream();
  settle_freed(false);
  void* p = nullptr;
  size_t got = size;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cached_.lower_bound({stream, size});
    // A small request never takes a large block, nor the reverse: the two-times rule alone would
    // let a 1 MiB request take a 2 MiB block.
    if (it != cached_.end() && it->first.first == stream && it->first.second <= 2 * size &&
        (it->first.second > large_threshold) == (size > large_threshold)) {
      p = it->second;
      got = it->first.second;
      cached_.erase(it);
      ++stats_.cache_hits;
      hand_out_locked(p, got, bytes, stream);
      return p;
    }
    ++stats_.cache_misses;
    ++stats_.raw_allocs;
  }
  // The backend is called without the lock: a cudaMalloc may synchronize the device, and what it
  // waits for may need this allocator (a free on another thread).
  p = backend_->raw_alloc(size);
  if (!p) {  // out of memory: what the cache holds, and what other streams still use, may make room
    settle_freed(true);
    release_cached();
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.raw_allocs;
    }
    p = backend_->raw_alloc(size);
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!p)
    throw out_of_memory(where().to_string() + ": out of memory allocating " + format_bytes(static_cast<int64_t>(bytes)) +
                        " (a block of " + format_bytes(static_cast<int64_t>(size)) + "); in use " +
                        format_bytes(stats_.allocated) + ", reserved " + format_bytes(stats_.reserved));
  stats_.reserved += static_cast<int64_t>(size);
  stats_.peak_reserved = std::max(stats_.peak_reserved, stats_.reserved);
  hand_out_locked(p, got, bytes, stream);
  return p;
}

void caching_allocator::hand_out_locked(void* p, size_t size, size_t requested, const void* stream) {
  live_.emplace(p, live_block{size, requested, stream, {}});
  stats_.allocated += static_cast<int64_t>(size);
  stats_.requested += static_cast<int64_t>(requested);
  stats_.peak_allocated = std::max(stats_.peak_allocated, stats_.allocated);
}

bool caching_allocator::record_stream(const void* p, const void* stream) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(const_cast<void*>(p));
    if (it == live_.end()) return false;
    // A block's own stream orders its reuse after this use. Not the legacy stream (null): the
    // blocks of a backend without streams (pinned host memory) report it, and the host writes
    // them as soon as they are handed out, ahead of any stream.
    if (stream && stream == it->second.stream) return true;
  }
  void* event = backend_->record_event(stream);  // without the lock: a driver call
  void* replaced = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(const_cast<void*>(p));
    if (it == live_.end()) {
      replaced = event;  // freed meanwhile by another thread: its use was the caller's to keep
    } else {
      auto& uses = it->second.used_on;
      auto u = std::find_if(uses.begin(), uses.end(), [&](const stream_use& x) { return x.stream == stream; });
      if (u == uses.end()) {
        uses.push_back(stream_use{stream, event});
      } else {
        replaced = u->event;
        u->event = event;
      }
    }
  }
  if (replaced) backend_->destroy_event(replaced);
  return true;
}

void caching_allocator::deallocate(void* p, size_t) noexcept {
  if (!p) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(p);
  if (it == live_.end()) {
    // Freeing what this allocator did not hand out is memory corruption in the making.
    std::fprintf(stderr, "troupe: caching_allocator of %s: deallocate(%p) of a block it does not hold\n",
                 backend_->where().to_string().c_str(), p);
    std::abort();
  }
  live_block& b = it->second;
  stats_.allocated -= static_cast<int64_t>(b.size);
  stats_.requested -= static_cast<int64_t>(b.requested);
  // No backend call here: a block other streams used waits aside until the next allocate finds
  // their events reached.
  if (b.used_on.empty()) cached_.emplace(std::make_pair(b.stream, b.size), p);
  else freed_.push_back(freed_block{p, b.size, b.stream, std::move(b.used_on)});
  live_.erase(it);
}

void caching_allocator::settle_freed(bool wait) {
  std::vector<freed_block> work;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (freed_.empty()) return;
    work.swap(freed_);
  }
  std::vector<freed_block> still;
  std::vector<freed_block> reached;
  for (freed_block& f : work) {
    bool all = true;
    for (const stream_use& u : f.used_on) {
      if (wait) backend_->wait_event(u.event);
      else if (!backend_->event_reached(u.event)) {
        all = false;
        break;
      }
    }
    if (!all) {
      still.push_back(std::move(f));
      continue;
    }
    for (const stream_use& u : f.used_on) backend_->destroy_event(u.event);
    reached.push_back(std::move(f));
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (freed_block& f : still) freed_.push_back(std::move(f));
  for (const freed_block& f : reached) cached_.emplace(std::make_pair(f.stream, f.size), f.p);
}

void caching_allocator::empty_cache() {
  settle_freed(true);
  release_cached();
}

size_t caching_allocator::blocks_awaiting_streams() const {
  std::lock_guard<std::mutex> lock(mu_);
  return freed_.size();
}

void caching_allocator::release_cached() {
  std::multimap<std::pair<const void*, size_t>, void*> give_back;
  {
    std::lock_guard<std::mutex> lock(mu_);
    give_back.swap(cached_);
  }
  for (const auto& [key, p] : give_back) backend_->raw_free(p, key.second);
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [key, p] : give_back) {
    ++stats_.raw_frees;
    stats_.reserved -= static_cast<int64_t>(key.second);
  }
}

allocator_stats caching_allocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

std::shared_ptr<allocator> allocator_for(const device& d) {
  if (d.type == device_type::cpu) return cpu_allocator();
  if (auto a = table().find(d.index)) return a;
#ifdef TROUPE_HAVE_CUDA
  throw std::runtime_error("no CUDA device " + d.to_string() +
                           " set up: kernels/cuda/device_alloc.hpp's cuda_device_allocator(" + std::to_string(d.index) +
                           ") makes its allocator (it fails when there is no such device)");
#else
  throw std::runtime_error("cannot allocate on " + d.to_string() + ": troupe was built without CUDA");
#endif
}

void install_allocator(std::shared_ptr<allocator> a) {
  if (!a) throw std::invalid_argument("install_allocator: no allocator");
  const device d = a->where();
  if (d.type == device_type::cpu) throw std::invalid_argument("install_allocator: the CPU's allocator is fixed");
  if (d.index < 0) throw std::invalid_argument("install_allocator: device " + d.to_string());
  table().install(d.index, std::move(a));
}

}  // namespace troupe
