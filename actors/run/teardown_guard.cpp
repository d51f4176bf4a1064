// teardown_guard (see teardown_guard.hpp).
#include "actors/run/teardown_guard.hpp"

#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstdlib>

namespace troupe {

teardown_guard::~teardown_guard() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
  }
  cv_.notify_all();
  if (watcher_.joinable()) watcher_.join();
}

void teardown_guard::arm(std::string why, std::chrono::milliseconds grace) {
  if (watcher_.joinable()) return;
  watcher_ = std::thread([this, why = std::move(why), grace] {
    std::unique_lock<std::mutex> lock(mu_);
    if (cv_.wait_for(lock, grace, [this] { return done_; })) return;
    spdlog::error("the job failed ({}) and an actor is still inside a computation {:.1f} s later; ending the "
                  "process, as PyTorch's NCCL watchdog does", why, std::chrono::duration<double>(grace).count());
    spdlog::default_logger()->flush();
    std::fflush(nullptr);
    std::_Exit(1);
  });
}

}  // namespace troupe
