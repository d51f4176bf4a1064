// gate_server, the worker's gate connection, and for TLS the byte splices between them and the
// middleman's loopback port. One thread per spliced connection (a job has a handful), plain
// blocking copies: both far ends are CAF's non-blocking event loops, so neither direction can
// wait on the other.
#include "comm/net_gate.hpp"

#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "comm/tcp_auth.hpp"

namespace troupe::net {
namespace {

constexpr int poll_ms = 200;  // how often an idle thread looks at its stop flag

// Waits for `fd` to be readable; false on timeout.
bool readable(int fd, int ms) {
  pollfd p{fd, POLLIN, 0};
  const int r = ::poll(&p, 1, ms);
  return r > 0;
}

}  // namespace

splice::splice(socket_fd a, socket_fd b) : a_(std::move(a)), b_(std::move(b)) {
  thread_ = std::thread([this] {
    std::vector<char> buf(size_t{256} << 10);
    pollfd p[2] = {{a_.get(), POLLIN, 0}, {b_.get(), POLLIN, 0}};
    while (!done_) {
      if (::poll(p, 2, poll_ms) < 0 && errno != EINTR) break;
      bool closed = false;
      for (int i = 0; i < 2 && !closed; ++i) {
        if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        const ssize_t n = ::read(p[i].fd, buf.data(), buf.size());
        if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (n <= 0) {
          closed = true;
          continue;
        }
        try {
          write_all(p[1 - i].fd, buf.data(), static_cast<size_t>(n), 60000, "gate forward");
        } catch (const net_error&) {
          closed = true;
        }
      }
      if (closed) break;
    }
    ::shutdown(a_.get(), SHUT_RDWR);
    ::shutdown(b_.get(), SHUT_RDWR);
    done_ = true;
  });
}

splice::~splice() {
  done_ = true;
  ::shutdown(a_.get(), SHUT_RDWR);
  ::shutdown(b_.get(), SHUT_RDWR);
  if (thread_.joinable()) thread_.join();
}

gate_server::gate_server(const std::string& host, uint16_t port, std::string secret, admit_fn admit,
                         int auth_timeout_ms)
    : acceptor_(listen_tcp(host, port), std::move(secret), "control gate", auth_timeout_ms), admit_(std::move(admit)) {
  thread_ = std::thread([this] {
    while (!stop_) {
      auto a = acceptor_.next(poll_ms);
      if (!a) continue;
      spdlog::debug("control gate: admitted {} (rank {})", a->who, a->claim);
      ++admitted_;
      try {
        admit_(std::move(a->fd), a->claim, a->who);
      } catch (const std::exception& e) {
        spdlog::error("control gate: could not hand over {}: {}", a->who, e.what());
      }
    }
  });
}

gate_server::~gate_server() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

socket_fd connect_through_gate(const std::string& host, uint16_t port, const std::string& secret, uint32_t rank,
                               int timeout_ms) {
  socket_fd s = connect_tcp(host, port, timeout_ms);
  try {
    const auth_pending p = auth_respond(s.get(), secret, rank, timeout_ms);
    auth_finish(s.get(), secret, p, timeout_ms);
  } catch (const net_error& e) {
    throw net_error("the control gate at " + host + ":" + std::to_string(port) +
                    " did not accept us (is the secret the job's?): " + e.what());
  }
  return s;
}

void connection_set::add(int fd) {
  const int copy = ::dup(fd);
  if (copy < 0) return;  // out of descriptors: the connection still works, it closes at exit
  std::lock_guard<std::mutex> lock(mu_);
  fds_.emplace_back(copy);
}

void connection_set::shutdown_all() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& f : fds_) ::shutdown(f.get(), SHUT_RDWR);
}

void loopback_splices::add(socket_fd admitted, int timeout_ms) {
  socket_fd backend = connect_tcp("127.0.0.1", backend_port_, timeout_ms);
  std::lock_guard<std::mutex> lock(mu_);
  links_.push_back(std::make_unique<splice>(std::move(admitted), std::move(backend)));
}

loopback_splices::~loopback_splices() {
  std::lock_guard<std::mutex> lock(mu_);
  links_.clear();
}

loopback_bridge::loopback_bridge(socket_fd upstream, int timeout_ms)
    : upstream_(std::move(upstream)), timeout_ms_(timeout_ms) {
  listener_ = listen_tcp("127.0.0.1", 0, 1);
  local_port_ = net::local_port(listener_.get());
  thread_ = std::thread([this] {
    for (int waited = 0; !stop_ && waited < timeout_ms_; waited += poll_ms) {
      if (!readable(listener_.get(), poll_ms)) continue;
      try {
        link_ = std::make_unique<splice>(accept_tcp(listener_.get(), poll_ms), std::move(upstream_));
      } catch (const net_error&) {
        continue;
      }
      break;
    }
    listener_.close();
  });
}

loopback_bridge::~loopback_bridge() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  link_.reset();
}

}  // namespace troupe::net
