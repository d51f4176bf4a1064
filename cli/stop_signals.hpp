// What a `troupe` process does when it is told to stop (SIGTERM from Slurm's preemption, a
// scheduler or `kill`; SIGINT from Ctrl-C): it says so in its log, naming the signal, passes the
// signal on to the worker processes it started (which do the same), and exits 128 + the signal's
// number, as a shell reports a process a signal ended. It does not checkpoint first: what was
// trained since the last checkpoint is lost, and the line says so. Scratch files (NVMe offload)
// need nothing here: they leave their folder when opened (storage/uring_store.hpp).
#pragma once

#include <functional>
#include <memory>

namespace troupe::cli {

// Installs the handler of SIGTERM and SIGINT (not of one the process was started ignoring) and
// starts the thread that acts on them. Call first in main.
void handle_stop_signals();

// While it lives, `pass_on(signal)` runs when a stop signal arrives, before the process exits
// (on the signal thread; it may wait a little, for children say).
class stop_hook {
 public:
  explicit stop_hook(std::function<void(int signal)> pass_on);
  ~stop_hook();
  stop_hook(const stop_hook&) = delete;
  stop_hook& operator=(const stop_hook&) = delete;

 private:
  std::shared_ptr<std::function<void(int)>> fn_;
};

}  // namespace troupe::cli
