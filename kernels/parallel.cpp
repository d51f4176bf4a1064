// parallel_for's workers (parallel.hpp): one small pool per calling thread, made on its first
// parallel loop and joined when that thread ends. Workers spin briefly between loops, since a
// training step runs hundreds of short ones back to back, then sleep on a condition variable so
// an idle pool leaves the cores to OpenBLAS's threads and to other ranks.
#include "kernels/parallel.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace troupe {

namespace {

std::atomic<int> threads_setting{1};
thread_local bool inside_chunk = false;  // a nested parallel_for runs inline

// How long a worker waits for the next loop before it sleeps. A GPT step's loops come every
// 10-200 us; a futex wake-up costs about as much again on this VM, a longer spin takes a core
// from a concurrent OpenBLAS GEMM.
constexpr auto spin_for = std::chrono::microseconds(30);

// How long an idle worker waits for the next loop before it sleeps, yielding the core each time
// it looks: with a core free the yield returns at once and the next loop starts within a
// microsecond or so (an MLP on 2 threads runs loops 30-200 us apart: 7% faster than sleeping
// after 30 us); on a machine with more runnable threads than cores (two ranks of 2 threads on 2
// cores) the yield hands the core to them, where a spin of pauses that long cost 15-20%.
constexpr auto idle_for = std::chrono::microseconds(200);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

class pool {
 public:
  explicit pool(int workers) {
    for (int i = 0; i < workers; ++i) threads_.emplace_back([this] { work(); });
  }
  ~pool() {
    {
      std::lock_guard<std::mutex> l(m_);
      stop_ = true;
      generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    for (auto& t : threads_) t.join();
  }
  int workers() const { return static_cast<int>(threads_.size()); }

  void run(int64_t n, int64_t grain, detail::chunk_fn fn, void* ctx) {
    {
      std::lock_guard<std::mutex> l(m_);
      fn_ = fn;
      ctx_ = ctx;
      n_ = n;
      grain_ = grain;
      chunks_ = (n + grain - 1) / grain;
      next_.store(0, std::memory_order_relaxed);
      open_ = true;
      error_ = nullptr;
      generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    claim_chunks();
    std::unique_lock<std::mutex> l(m_);
    open_ = false;  // a worker that wakes from now on finds nothing to join
    if (joined_ > 0) {
      l.unlock();
      const auto until = std::chrono::steady_clock::now() + spin_for;
      while (joined_now_.load(std::memory_order_acquire) > 0 && std::chrono::steady_clock::now() < until) cpu_relax();
      l.lock();
      done_.wait(l, [&] { return joined_ == 0; });
    }
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  }

 private:
  void claim_chunks() {
    inside_chunk = true;
    for (;;) {
      const int64_t k = next_.fetch_add(1, std::memory_order_relaxed);
      if (k >= chunks_) break;
      const int64_t b = k * grain_, e = b + grain_ < n_ ? b + grain_ : n_;
      try {
        fn_(ctx_, b, e);
      } catch (...) {
        std::lock_guard<std::mutex> l(m_);
        if (!error_) error_ = std::current_exception();
      }
    }
    inside_chunk = false;
  }

  void work() {
    uint64_t seen = 0;
    for (;;) {
      const auto until = std::chrono::steady_clock::now() + idle_for;
      while (generation_.load(std::memory_order_acquire) == seen && std::chrono::steady_clock::now() < until)
        std::this_thread::yield();
      std::unique_lock<std::mutex> l(m_);
      wake_.wait(l, [&] { return generation_.load(std::memory_order_relaxed) != seen; });
      seen = generation_.load(std::memory_order_relaxed);
      if (stop_) return;
      if (!open_) continue;
      ++joined_;
      joined_now_.fetch_add(1, std::memory_order_relaxed);
      l.unlock();
      claim_chunks();  // fn_, n_, grain_ stay fixed while a worker has joined: run() waits for it
      l.lock();
      joined_now_.fetch_sub(1, std::memory_order_release);
      if (--joined_ == 0) done_.notify_one();
    }
  }

  std::vector<std::thread> threads_;
  std::mutex m_;
  std::condition_variable wake_, done_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int64_t> next_{0};
  std::atomic<int> joined_now_{0};  // joined_, readable without the lock, for the caller's spin
  detail::chunk_fn fn_ = nullptr;
  void* ctx_ = nullptr;
  int64_t n_ = 0, grain_ = 1, chunks_ = 0;
  bool open_ = false, stop_ = false;
  int joined_ = 0;
  std::exception_ptr error_;
};

pool& pool_of_this_thread(int workers) {
  thread_local std::unique_ptr<pool> p;
  if (!p || p->workers() != workers) {
    p.reset();
    p = std::make_unique<pool>(workers);
  }
  return *p;
}

}  // namespace

void set_kernel_threads(int threads) { threads_setting.store(threads > 0 ? threads : 1, std::memory_order_relaxed); }

int kernel_threads() { return threads_setting.load(std::memory_order_relaxed); }

namespace detail {

void run_chunks(int64_t n, int64_t grain, chunk_fn fn, void* ctx) {
  const int threads = kernel_threads();
  if (threads > 1 && n > grain && !inside_chunk) return pool_of_this_thread(threads - 1).run(n, grain, fn, ctx);
  // The same chunks on the caller alone: a chunk may reduce over its range, and its bits must
  // not depend on whether workers took part.
  for (int64_t b = 0; b < n; b += grain) fn(ctx, b, b + grain < n ? b + grain : n);
}

}  // namespace detail

}  // namespace troupe
