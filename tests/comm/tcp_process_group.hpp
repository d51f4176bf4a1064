// Test support: start helper processes in one process group and never leave one behind. Each
// child asks the kernel for SIGKILL when the test process dies (PR_SET_PDEATHSIG), and the
// group is SIGKILLed when the process_group goes out of scope with members still alive, so a
// failed assertion, an exception or a timeout cleans up as well as success does.
// It deliberately is not a general process library: argv in, exit codes out.
#pragma once

#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

namespace troupe::test {

class process_group {
 public:
  process_group() = default;
  process_group(const process_group&) = delete;
  process_group& operator=(const process_group&) = delete;
  ~process_group() {
    if (!alive_.empty()) ::kill(-pgid_, SIGKILL);
    for (pid_t p : alive_) ::waitpid(p, nullptr, 0);
    for (int fd : fds_) ::close(fd);
  }

  // Starts argv[0] with argv; with capture_stdout returns the read end of its stdout, else -1.
  int spawn(const std::vector<std::string>& argv, bool capture_stdout = false) {
    int pipe_fds[2] = {-1, -1};
    if (capture_stdout && ::pipe(pipe_fds) != 0) return -1;
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::setpgid(0, pgid_);
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);  // the test died before prctl took effect
      if (capture_stdout) {
        ::dup2(pipe_fds[1], STDOUT_FILENO);
        ::close(pipe_fds[0]);
        ::close(pipe_fds[1]);
      }
      std::vector<char*> args;
      for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      ::execv(args[0], args.data());
      ::_exit(127);
    }
    if (pid < 0) return -1;
    ::setpgid(pid, pgid_);  // also here: whichever of parent and child runs first
    if (pgid_ == 0) pgid_ = pid;
    alive_.push_back(pid);
    if (!capture_stdout) return -1;
    ::close(pipe_fds[1]);
    fds_.push_back(pipe_fds[0]);
    return pipe_fds[0];
  }

  // Children not yet reaped by wait_all, in start order (a test may signal one of them).
  const std::vector<pid_t>& pids() const { return alive_; }

  // Reads "PORT <n>" from a child's stdout; -1 on timeout or anything else.
  int read_port(int fd, int timeout_ms) {
    std::string line;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (line.find('\n') == std::string::npos) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      pollfd p{fd, POLLIN, 0};
      if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) return -1;
      char c;
      if (::read(fd, &c, 1) != 1) return -1;
      line.push_back(c);
    }
    unsigned port = 0;
    return std::sscanf(line.c_str(), "PORT %u", &port) == 1 ? static_cast<int>(port) : -1;
  }

  // Waits for every child. 0 if all exited 0; else the first non-zero exit code (128 + signal
  // for a killed child), after killing the rest; -2 if the timeout passed (all are killed).
  int wait_all(int timeout_ms) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (!alive_.empty()) {
      for (size_t i = 0; i < alive_.size(); ++i) {
        int status = 0;
        if (::waitpid(alive_[i], &status, WNOHANG) != alive_[i]) continue;
        alive_.erase(alive_.begin() + static_cast<long>(i--));
        const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        if (code != 0) return code;  // the destructor kills and reaps the others
      }
      if (std::chrono::steady_clock::now() > deadline) return -2;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return 0;
  }

 private:
  pid_t pgid_ = 0;
  std::vector<pid_t> alive_;
  std::vector<int> fds_;
};

}  // namespace troupe::test
