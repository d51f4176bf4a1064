// fake_device: an asynchronous device_queue for host-side tests. Enqueued work runs in order on
// a thread of its own, as a GPU stream runs its kernels (or at once in the caller's, as
// cuda_queue launches it: launches_in_caller); completions are delivered from that
// thread in stream order, except that the test can hold them (hold_completions) and let them go
// (release_completions). A held completion holds everything enqueued after it too, as a stream
// would: nothing here depends on wall-clock time.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "kernels/device_ops.hpp"
#include "kernels/device_queue.hpp"

namespace troupe::test {

class fake_device final : public device_queue {
 public:
  // launches_in_caller: enqueued work runs at once on the caller's thread, as cuda_queue's
  // launches do (only the GPU runs them later); the completions still come in order from the
  // fake's thread. Otherwise the work runs there too.
  explicit fake_device(device where = {}, bool launches_in_caller = false)
      : where_(where), in_caller_(launches_in_caller), worker_([this] { run(); }) {}
  ~fake_device() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
      holding_ = false;
    }
    cv_.notify_all();
    worker_.join();
  }
  fake_device(const fake_device&) = delete;
  fake_device& operator=(const fake_device&) = delete;

  void enqueue(std::function<void()> work) override {
    if (in_caller_)
      work();
    else
      push({std::move(work), false});
  }
  void when_done(std::function<void()> done) override { push({std::move(done), true}); }
  bool asynchronous() const override { return true; }
  device where() const override { return where_; }
  // In line: the fake's memory is the host's, written at once by whatever ops it is given (the
  // stage launches only between its actions, when nothing of its own is in flight).
  void launch(const std::function<void()>& launch) override { launch(); }
  // A device that is not the host's takes a copy through its ops, at once (its memory is written
  // in line, as launch's is), and counts it; on the host, x itself.
  tensor stage_in(const tensor& x) override {
    if (where_.is_cpu()) return x;
    tensor out = ops_for(where_).to_here(x);
    out.freeze();
    std::lock_guard<std::mutex> lock(mu_);
    ++staged_;
    return out;
  }
  int64_t staged() const {
    std::lock_guard<std::mutex> lock(mu_);
    return staged_;
  }
  // The queue's own order (device_queue's), counted: what left for the host through stage_out.
  void stage_out(const tensor& x, std::function<void(tensor)> done) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++staged_out_;
    }
    device_queue::stage_out(x, std::move(done));
  }
  int64_t staged_out() const {
    std::lock_guard<std::mutex> lock(mu_);
    return staged_out_;
  }

  // From now on the next completion waits (with everything after it) until released.
  void hold_completions() {
    std::lock_guard<std::mutex> lock(mu_);
    holding_ = true;
  }
  void release_completions() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      holding_ = false;
    }
    cv_.notify_all();
  }
  // True once a completion is being held (its work has run); false if none is by `limit`.
  bool wait_until_holding(std::chrono::seconds limit) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, limit, [this] { return held_; });
  }
  int64_t completions() const {
    std::lock_guard<std::mutex> lock(mu_);
    return completions_;
  }

 private:
  struct item {
    std::function<void()> fn;
    bool completion;
  };
  // In stream order: what the running work enqueues (a bucket's completion) comes right after
  // it, before what others enqueued meanwhile (the work's own completion), as on a CUDA stream
  // where the work's launches precede the completion asked for after it returned.
  void push(item it) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (std::this_thread::get_id() == worker_.get_id())
        todo_.insert(todo_.begin() + static_cast<std::ptrdiff_t>(from_work_++), std::move(it));
      else
        todo_.push_back(std::move(it));
    }
    cv_.notify_all();
  }
  void run() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [this] { return stopping_ || !todo_.empty(); });
      if (todo_.empty()) return;  // stopping, and all that was enqueued has run
      item it = std::move(todo_.front());
      todo_.pop_front();
      from_work_ = 0;
      if (it.completion && holding_) {
        held_ = true;
        cv_.notify_all();
        cv_.wait(lock, [this] { return !holding_; });
        held_ = false;
      }
      if (it.completion) ++completions_;
      lock.unlock();
      it.fn();
      lock.lock();
    }
  }

  const device where_;
  const bool in_caller_;
  size_t from_work_ = 0;  // items the running one has enqueued (push)
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<item> todo_;
  bool holding_ = false, held_ = false, stopping_ = false;
  int64_t completions_ = 0, staged_ = 0, staged_out_ = 0;
  std::thread worker_;  // last: it starts once the rest is built
};

}  // namespace troupe::test
