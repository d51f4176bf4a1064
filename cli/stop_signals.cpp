// stop_signals (stop_signals.hpp): the handler only writes the signal's number into a pipe
// (async-signal-safe); a thread of its own reads it and does the work for a stop (logging,
// signalling children) as ordinary code. A handler rather than sigwait: threads that libraries
// start before main (OpenBLAS's pool) do not block the signals, and the kernel may pick any of them.
#include "cli/stop_signals.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

namespace troupe::cli {

namespace {

std::mutex hooks_mu;
std::vector<std::weak_ptr<std::function<void(int)>>> hooks;
int stop_pipe[2] = {-1, -1};

void on_signal(int sig) {
  const int saved = errno;
  const auto b = static_cast<unsigned char>(sig);
  [[maybe_unused]] const ssize_t n = ::write(stop_pipe[1], &b, 1);
  errno = saved;
}

[[noreturn]] void stop(int sig) {
  spdlog::error("stopped by {} ({}), pid {}: the job ends here; what it trained since its last checkpoint is lost",
                sig == SIGTERM ? "SIGTERM" : sig == SIGINT ? "SIGINT" : "a signal", ::strsignal(sig), ::getpid());
  {
    // Held while the hooks run, so an owner's ~stop_hook waits for its hook to finish.
    std::lock_guard<std::mutex> lock(hooks_mu);
    for (auto& h : hooks)
      if (auto p = h.lock()) (*p)(sig);
  }
  spdlog::default_logger()->flush();
  ::_exit(128 + sig);  // no destructors: the actors may be mid-computation, and nothing more is saved
}

}  // namespace

void handle_stop_signals() {
  if (::pipe2(stop_pipe, O_CLOEXEC) != 0) {
    spdlog::warn("cannot watch for SIGTERM and SIGINT ({}): a stop signal ends this process unannounced",
                 std::strerror(errno));
    return;
  }
  std::thread([] {
    unsigned char b = 0;
    while (true) {
      const ssize_t n = ::read(stop_pipe[0], &b, 1);
      if (n == 1) stop(b);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;
    }
  }).detach();
  for (int sig : {SIGTERM, SIGINT}) {
    struct sigaction now {};
    // A signal the process was started ignoring stays ignored (a shell's background job ignores
    // SIGINT).
    if (::sigaction(sig, nullptr, &now) == 0 && now.sa_handler == SIG_IGN) continue;
    struct sigaction act {};
    act.sa_handler = on_signal;
    sigemptyset(&act.sa_mask);
    act.sa_flags = SA_RESTART;
    ::sigaction(sig, &act, nullptr);
  }
}

stop_hook::stop_hook(std::function<void(int)> pass_on)
    : fn_(std::make_shared<std::function<void(int)>>(std::move(pass_on))) {
  std::lock_guard<std::mutex> lock(hooks_mu);
  hooks.push_back(fn_);
}

stop_hook::~stop_hook() {
  std::lock_guard<std::mutex> lock(hooks_mu);
  fn_.reset();
  hooks.erase(std::remove_if(hooks.begin(), hooks.end(), [](const auto& h) { return h.expired(); }), hooks.end());
}

}  // namespace troupe::cli
