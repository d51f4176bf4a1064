// fake_streams: the streams of the fake GPU (fake_gpu.hpp), strict where a GPU forgives by luck.
// Work launched while a stream is current (stream_guard) is deferred: it runs later on the
// stream's own thread, in the stream's order, so a host read of a result before its completion
// sees the fresh block's poison (NaN), not the value. A stream starts its work only once nothing
// was pushed to it for its quiet time (or when the host waits for it), so streams with different
// quiet times run out of step: a copy stream that is eager next to a lazy compute stream reads
// what compute has not written yet unless it waits for an event, and a lazy upload stream lands
// its copy after compute read the block unless compute waits. Memory freed while any stream still
// has work pushed before the free is given back only once that work ran (as a GPU's caching
// allocator keeps a block for its stream). A device op launched from a completion callback (the
// queue's contract: a callback only signals) is a test failure naming the op.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace troupe::test::fake_streams {

// One lock for every stream and event of the process: simple, and the fake's work is small.
inline std::mutex& lock_of_all() {
  static std::mutex m;
  return m;
}
inline std::condition_variable& changed() {
  static std::condition_variable cv;
  return cv;
}

// Reached once the stream that recorded it has run everything pushed before the record.
struct event {
  bool reached = false;
};

// How far a stream has got: what was pushed and what ran, for the frees that wait on it.
struct progress {
  uint64_t pushed = 0, ran = 0;
};

// Every stream's progress, for the deferred frees (fake_gpu.hpp's allocator).
inline std::vector<std::weak_ptr<progress>>& all_progress() {
  static std::vector<std::weak_ptr<progress>> v;
  return v;
}

class stream {
 public:
  stream(std::string name, std::chrono::microseconds quiet)
      : name_(std::move(name)), quiet_(quiet), progress_(std::make_shared<progress>()) {
    {
      std::lock_guard<std::mutex> lock(lock_of_all());
      all_progress().push_back(progress_);
    }
    thread_ = std::thread([this] { run(); });
  }
  ~stream() {
    {
      std::lock_guard<std::mutex> lock(lock_of_all());
      stopping_ = true;
    }
    changed().notify_all();
    thread_.join();
  }
  stream(const stream&) = delete;
  stream& operator=(const stream&) = delete;

  const std::string& name() const { return name_; }
  // fn runs on this stream's thread after everything pushed before.
  void push(std::function<void()> fn) { add(item{std::move(fn), nullptr, nullptr}); }
  // An event reached once everything pushed so far has run.
  std::shared_ptr<event> record() {
    auto e = std::make_shared<event>();
    add(item{nullptr, e, nullptr});
    return e;
  }
  // What is pushed from now on waits for e.
  void wait(std::shared_ptr<event> e) { add(item{nullptr, nullptr, std::move(e)}); }
  // Blocks the caller until everything pushed so far has run (at once: no quiet time).
  void synchronize() {
    std::unique_lock<std::mutex> lock(lock_of_all());
    const uint64_t target = progress_->pushed;
    ++urgent_;
    changed().notify_all();
    changed().wait(lock, [&] { return progress_->ran >= target; });
    --urgent_;
  }

 private:
  struct item {
    std::function<void()> fn;
    std::shared_ptr<event> records, waits_for;
  };
  void add(item it) {
    {
      std::lock_guard<std::mutex> lock(lock_of_all());
      todo_.push_back(std::move(it));
      ++progress_->pushed;
      last_push_ = std::chrono::steady_clock::now();
    }
    changed().notify_all();
  }
  void run() {
    std::unique_lock<std::mutex> lock(lock_of_all());
    for (;;) {
      if (todo_.empty()) {
        if (stopping_) return;
        changed().wait(lock);
        continue;
      }
      item& head = todo_.front();
      if (head.waits_for && !head.waits_for->reached) {
        changed().wait(lock);
        continue;
      }
      const auto start_at = last_push_ + quiet_;
      if (!head.waits_for && !head.records && urgent_ == 0 && !stopping_ &&
          std::chrono::steady_clock::now() < start_at) {
        changed().wait_until(lock, start_at);
        continue;
      }
      item it = std::move(head);
      todo_.pop_front();
      if (it.fn) {
        lock.unlock();
        it.fn();
        it.fn = nullptr;  // what it captured goes here, on this thread
        lock.lock();
      }
      if (it.records) it.records->reached = true;
      ++progress_->ran;
      changed().notify_all();
    }
  }

  const std::string name_;
  const std::chrono::microseconds quiet_;
  std::shared_ptr<progress> progress_;
  std::deque<item> todo_;
  std::chrono::steady_clock::time_point last_push_{};
  int urgent_ = 0;
  bool stopping_ = false;
  std::thread thread_;  // last: it starts once the rest is built
};

// The stream this thread's device ops go to; null: they run at once, in the caller.
inline stream*& current() {
  thread_local stream* s = nullptr;
  return s;
}

class stream_guard {
 public:
  explicit stream_guard(stream* s) : previous_(current()) { current() = s; }
  ~stream_guard() { current() = previous_; }
  stream_guard(const stream_guard&) = delete;
  stream_guard& operator=(const stream_guard&) = delete;

 private:
  stream* previous_;
};

// True on a thread while it runs a completion callback.
inline bool& in_completion() {
  thread_local bool b = false;
  return b;
}

// What every live stream has been given so far: a free made now waits for all of it.
inline std::vector<std::pair<std::shared_ptr<progress>, uint64_t>> pushed_so_far() {
  std::vector<std::pair<std::shared_ptr<progress>, uint64_t>> out;
  std::lock_guard<std::mutex> lock(lock_of_all());
  auto& all = all_progress();
  for (size_t i = 0; i < all.size();) {
    if (auto p = all[i].lock()) {
      if (p->ran < p->pushed) out.emplace_back(p, p->pushed);
      ++i;
    } else {
      all.erase(all.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }
  return out;
}
inline bool all_ran(const std::vector<std::pair<std::shared_ptr<progress>, uint64_t>>& marks) {
  std::lock_guard<std::mutex> lock(lock_of_all());
  for (const auto& [p, n] : marks)
    if (p->ran < n) return false;
  return true;
}

}  // namespace troupe::test::fake_streams
