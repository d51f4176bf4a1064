// allocator: where a tensor's bytes come from, one per device. The CPU's (64-byte aligned, the
// default of every tensor) and caching_allocator, which keeps freed blocks of a raw backend
// (cudaMalloc, cudaHostAlloc: kernels/cuda/device_alloc.hpp) for reuse as PyTorch's
// CUDACachingAllocator does, because a raw device allocation costs a synchronization and
// milliseconds. It counts bytes, not meanings: the per-kind ledger is device_memory.hpp.
// No CAF, no CUDA header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernels/tensor.hpp"

namespace troupe {

// Thrown when a device cannot give the bytes asked for, even after returning its cache. A
// std::bad_alloc, as new[] threw before, so every handler of one (actor_failure.cpp's "out of
// memory in WHERE") still sees it; what() names the device and the numbers.
class out_of_memory : public std::bad_alloc {
 public:
  explicit out_of_memory(const std::string& what) : what_(what) {}
  const char* what() const noexcept override { return what_.what(); }

 private:
  std::runtime_error what_;  // its copy cannot throw, as an exception's must not
};

class allocator {
 public:
  virtual ~allocator() = default;
  // At least `bytes` bytes in the memory of where(), aligned for any element type; never null
  // (0 bytes still gives a block). Throws out_of_memory.
  virtual void* allocate(size_t bytes) = 0;
  // Gives back what allocate(bytes) returned, with the same bytes.
  virtual void deallocate(void* p, size_t bytes) noexcept = 0;
  // Sets `bytes` bytes at p to zero, on the device, finished when it returns.
  virtual void zero(void* p, size_t bytes) = 0;
  virtual device where() const = 0;
};

// The process's CPU allocator (64-byte aligned: a cache line, and AVX-512's vector).
std::shared_ptr<allocator> cpu_allocator();

// What a caching_allocator caches: the device's own allocation calls.
class raw_backend {
 public:
  virtual ~raw_backend() = default;
  // Null when the device is out of memory (the cache is then emptied and the call retried);
  // throws on any other failure.
  virtual void* raw_alloc(size_t bytes) = 0;
  virtual void raw_free(void* p, size_t bytes) noexcept = 0;
  virtual void zero(void* p, size_t bytes) = 0;
  virtual device where() const = 0;
  // The stream the calling thread's device work is ordered on now (a GPU's current stream,
  // kernels/cuda/cuda_device_ops.hpp), or null where there are none. caching_allocator pools
  // freed blocks by it.
  virtual const void* stream() const { return nullptr; }
  // Stream-ordered lifetime (caching_allocator::record_stream): an event marking what `stream`
  // has been given so far, whether it has been reached (never waiting), a wait for it, and its
  // end. Called only by caching_allocator, never while it holds its lock: record_event from
  // record_stream, the others from allocate and empty_cache, never from deallocate. A backend
  // without streams has nothing to wait for.
  virtual void* record_event(const void* /*stream*/) { return nullptr; }
  virtual bool event_reached(void* /*event*/) { return true; }
  virtual void wait_event(void* /*event*/) {}
  virtual void destroy_event(void* /*event*/) noexcept {}
};

struct allocator_stats {
  int64_t allocated = 0;       // bytes of the blocks handed out now (rounded sizes)
  int64_t requested = 0;       // bytes asked for by the blocks handed out now
  int64_t reserved = 0;        // bytes taken from the backend now: handed out + cached
  int64_t peak_allocated = 0;  // the most `allocated` has been
  int64_t peak_reserved = 0;
  int64_t cache_hits = 0;   // allocations served from the cache
  int64_t cache_misses = 0;  // allocations that called the backend
  int64_t raw_allocs = 0;    // backend allocations (misses plus retries after emptying the cache)
  int64_t raw_frees = 0;
};

// Blocks are rounded up (512 B below 1 MiB, 2 MiB from there), and a request takes the smallest
// cached block of its class (small, large) that fits, but never one more than twice its rounded size: blocks
// are not split, so a larger one would waste more than it saves. A block belongs to the stream
// that allocated it (raw_backend::stream()): freed, it is handed out again at once, but only to an
// allocation on that stream, whose work is ordered after every use the block had there, as
// PyTorch's CUDACachingAllocator does. So several ranks share a GPU, each on its own stream. Work
// on another stream that uses a block is declared with record_stream (PyTorch's recordStream),
// which records an event there at once: freed, such a block is handed out again only once every
// such event was reached. The events are the allocator's own, so a stream may be destroyed
// before the block is freed. deallocate never calls the backend (it may run anywhere); the next
// allocate polls the events, and the backend is never called while the lock is held.
// Thread-safe.
class caching_allocator final : public allocator {
 public:
  static constexpr size_t small_granule = 512;
  static constexpr size_t large_threshold = size_t{1} << 20;
  static constexpr size_t large_granule = size_t{2} << 20;
  static size_t round_size(size_t bytes);

  explicit caching_allocator(std::unique_ptr<raw_backend> backend);
  ~caching_allocator() override;
  caching_allocator(const caching_allocator&) = delete;
  caching_allocator& operator=(const caching_allocator&) = delete;

  void* allocate(size_t bytes) override;
  void deallocate(void* p, size_t bytes) noexcept override;
  void zero(void* p, size_t bytes) override { backend_->zero(p, bytes); }
  device where() const override { return backend_->where(); }

  // Declares that work enqueued on `stream` so far uses block p (handed out by this allocator
  // and live): an event recorded there now, so once freed, p is reused only after that work. Call
  // it after enqueuing the use (again after a later use: the newer event replaces the older).
  // Nothing to do for the stream that allocated p, unless that is the legacy stream (null: a
  // pinned block, written by the host at once when handed out again). False when p is not a live
  // block of this allocator.
  bool record_stream(const void* p, const void* stream);
  // Gives every cached block back to the backend (blocks in use stay), after waiting for the
  // streams of freed blocks still in use there.
  void empty_cache();
  allocator_stats stats() const;
  // Freed blocks still waiting for other streams (their events not yet reached).
  size_t blocks_awaiting_streams() const;

 private:
  struct stream_use {
    const void* stream;
    void* event;
  };
  struct live_block {
    size_t size, requested;
    const void* stream;
    std::vector<stream_use> used_on;  // other streams (record_stream), an event on each
  };
  struct freed_block {
    void* p;
    size_t size;
    const void* stream;
    std::vector<stream_use> used_on;
  };
  // Caches the freed blocks whose events were all reached; with `wait`, waits for every event
  // first. Takes and drops the lock itself.
  void settle_freed(bool wait);
  // Records p (a block of `size`, asked for as `requested`) as handed out; the lock is held.
  void hand_out_locked(void* p, size_t size, size_t requested, const void* stream);
  void release_cached();
  std::unique_ptr<raw_backend> backend_;
  mutable std::mutex mu_;
  std::multimap<std::pair<const void*, size_t>, void*> cached_;  // by stream, then size for best fit
  std::unordered_map<void*, live_block> live_;
  std::vector<freed_block> freed_;  // freed while other streams may use them
  allocator_stats stats_;
};

// The allocator of tensors on `d`: cpu_allocator() for the CPU; for a GPU the one installed by
// kernels/cuda (cuda_device_allocator(N) installs itself). Throws std::runtime_error when there
// is none, saying whether troupe was built without CUDA.
std::shared_ptr<allocator> allocator_for(const device& d);
// Makes `a` the allocator of a->where() from now on (tensors allocated before keep theirs).
void install_allocator(std::shared_ptr<allocator> a);

}  // namespace troupe
