// log_limiter: a log line per event until a flood, then a count. A port anyone can reach logs each
// refused connection, and a flood of them (100,000 in 6 s) would fill the disk and bury the one
// line that matters; so after `burst` lines in a window the rest are only counted, and the count
// is reported once that window is over. Not thread-safe: one per logging thread.
#pragma once

#include <chrono>
#include <cstdint>

namespace troupe::net {

class log_limiter {
 public:
  using clock_type = std::chrono::steady_clock;
  explicit log_limiter(int burst = 20, clock_type::duration window = std::chrono::seconds(10))
      : burst_(burst), window_(window) {}

  // True when the event at `now` may be logged; else it is counted.
  bool allow(clock_type::time_point now = clock_type::now()) {
    roll(now);
    if (logged_ < burst_) {
      ++logged_;
      return true;
    }
    ++suppressed_;
    return false;
  }
  // The events counted and not logged in a window that has ended (0 when none or none ended):
  // the caller logs one line with it. Call it on every event and now and then between them.
  int64_t take_suppressed(clock_type::time_point now = clock_type::now()) {
    roll(now);
    const int64_t n = ended_suppressed_;
    ended_suppressed_ = 0;
    return n;
  }
  // Everything counted and not logged, the current window's too (at the end of the listener).
  int64_t take_all() {
    const int64_t n = ended_suppressed_ + suppressed_;
    ended_suppressed_ = suppressed_ = 0;
    return n;
  }
  clock_type::duration window() const { return window_; }

 private:
  void roll(clock_type::time_point now) {
    if (now - start_ < window_) return;
    ended_suppressed_ += suppressed_;
    suppressed_ = 0;
    logged_ = 0;
    start_ = now;
  }
  int burst_;
  clock_type::duration window_;
  clock_type::time_point start_ = clock_type::now();
  int logged_ = 0;
  int64_t suppressed_ = 0, ended_suppressed_ = 0;
};

}  // namespace troupe::net
