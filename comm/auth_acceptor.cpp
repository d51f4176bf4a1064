// auth_acceptor: one poll loop over the listener and every connection still proving itself.
#include "comm/auth_acceptor.hpp"

#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <vector>

#include "comm/log_limiter.hpp"
#include "comm/tcp_auth.hpp"

namespace troupe::net {

namespace {

using clock_type = std::chrono::steady_clock;
constexpr int idle_poll_ms = 100;  // how often an idle loop looks at its stop flag

struct pending_conn {
  socket_fd fd;
  std::string who;
  nonce challenge{};
  auth_answer answer{};
  size_t got = 0;
  clock_type::time_point deadline;
};

}  // namespace

auth_acceptor::auth_acceptor(socket_fd listener, std::string secret, std::string name, int auth_timeout_ms,
                             std::function<void()> on_ready)
    : listener_(std::move(listener)), secret_(std::move(secret)), name_(std::move(name)),
      auth_timeout_ms_(auth_timeout_ms), on_ready_(std::move(on_ready)) {
  port_ = local_port(listener_.get());
  set_nonblocking(listener_.get(), true);
  thread_ = std::thread([this] { loop(); });
}

auth_acceptor::~auth_acceptor() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

std::optional<auth_acceptor::admitted> auth_acceptor::next(int timeout_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [this] { return !ready_.empty(); }))
    return std::nullopt;
  admitted a = std::move(ready_.front());
  ready_.pop_front();
  return a;
}

void auth_acceptor::loop() {
  std::vector<pending_conn> pending;
  std::vector<pollfd> fds;
  log_limiter limit;  // a flood of strangers is counted, not logged line by line
  auto report_suppressed = [&] {
    if (const int64_t n = limit.take_suppressed())
      spdlog::error("{}: refused {} more connections in the last {} s (not each logged)", name_, n,
                    std::chrono::duration_cast<std::chrono::seconds>(limit.window()).count());
  };
  auto refuse = [&](const pending_conn& c, const std::string& why) {
    ++refused_;
    report_suppressed();
    if (limit.allow()) spdlog::error("{}: refused {}: {}", name_, c.who, why);
  };
  while (!stop_) {
    report_suppressed();
    fds.assign(1, pollfd{listener_.get(), POLLIN, 0});
    int wait_ms = idle_poll_ms;
    const auto now = clock_type::now();
    for (const auto& c : pending) {
      fds.push_back(pollfd{c.fd.get(), POLLIN, 0});
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(c.deadline - now).count();
      wait_ms = static_cast<int>(std::max<int64_t>(0, std::min<int64_t>(wait_ms, left)));
    }
    if (::poll(fds.data(), fds.size(), wait_ms) < 0 && errno != EINTR) {
      spdlog::error("{}: poll failed: {}", name_, std::strerror(errno));
      break;
    }
    // Answers first: a connection that has sent its 68 bytes is checked before any deadline.
    std::vector<pending_conn> still;
    for (size_t i = 0; i < pending.size(); ++i) {
      pending_conn& c = pending[i];
      if (fds[i + 1].revents & (POLLIN | POLLHUP | POLLERR)) {
        const ssize_t n = ::recv(c.fd.get(), c.answer.data() + c.got, c.answer.size() - c.got, 0);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
          refuse(c, n == 0 ? "closed before proving the job's secret" : std::strerror(errno));
          continue;
        }
        if (n > 0) c.got += static_cast<size_t>(n);
      }
      if (c.got == c.answer.size()) {
        try {
          set_nonblocking(c.fd.get(), false);
          const auto claim = auth_check_answer(c.fd.get(), secret_, c.challenge, c.answer, auth_timeout_ms_);
          if (!claim) {
            refuse(c, "it does not know the job's secret");
            continue;
          }
          {
            std::lock_guard<std::mutex> lock(mu_);
            ready_.push_back(admitted{std::move(c.fd), *claim, c.who});
            cv_.notify_all();
          }
          if (on_ready_) on_ready_();
        } catch (const net_error& e) {
          refuse(c, e.what());
        }
        continue;
      }
      if (clock_type::now() >= c.deadline) {
        refuse(c, "did not prove the job's secret within " + std::to_string(auth_timeout_ms_) + " ms");
        continue;
      }
      still.push_back(std::move(c));
    }
    pending = std::move(still);
    if (!(fds[0].revents & POLLIN)) continue;
    for (;;) {  // every connection waiting in the backlog
      const int fd = ::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) break;
      pending_conn c;
      c.fd = socket_fd(fd);
      c.who = peer_name(fd);
      c.deadline = clock_type::now() + std::chrono::milliseconds(auth_timeout_ms_);
      try {
        c.challenge = auth_challenge(fd, auth_timeout_ms_);  // 32 bytes into an empty send buffer
      } catch (const net_error& e) {
        refuse(c, e.what());
        continue;
      }
      if (pending.size() >= max_pending) {
        refuse(pending.front(), "dropped: " + std::to_string(max_pending) + " connections were awaiting authentication");
        pending.erase(pending.begin());
      }
      pending.push_back(std::move(c));
    }
  }
  if (const int64_t n = limit.take_all())
    spdlog::error("{}: refused {} more connections before it closed (not each logged)", name_, n);
}

}  // namespace troupe::net
