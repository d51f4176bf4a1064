// What ends a process whose job has failed but whose actors cannot stop. CAF's ~actor_system
// waits for every detached actor's thread, and a stage inside a long computation (the case the
// watchdog reports) returns to its mailbox only when that computation ends, which may be never.
// As PyTorch's NCCL watchdog aborts a process whose collective hangs, a failed job gives its
// actors `grace` to stop and otherwise ends the process with exit code 1, saying why. It is
// armed only after a failure: a job that succeeded shuts down because every actor stopped.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace troupe {

class teardown_guard {
 public:
  teardown_guard() = default;
  teardown_guard(const teardown_guard&) = delete;
  teardown_guard& operator=(const teardown_guard&) = delete;
  ~teardown_guard();  // disarms: the actors stopped in time

  // Declare the guard before the actor system, so that it outlives the system's destructor, and
  // arm it once the job has failed with `why`.
  void arm(std::string why, std::chrono::milliseconds grace);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread watcher_;
};

// How long a failed job's actors get to stop before teardown_guard ends the process. Actors
// that are not computing stop within milliseconds.
inline constexpr std::chrono::milliseconds failed_job_grace{5000};

}  // namespace troupe
