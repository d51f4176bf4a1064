// gate_server, gate_client and the byte splice between them and the middleman. One thread per
// forwarded connection (a job has a handful), plain blocking copies: both far ends are CAF's
// non-blocking event loops, so neither direction can wait on the other.
#include "actors/net_gate.hpp"

#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "actors/tcp_auth.hpp"

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

gate_server::gate_server(const std::string& host, uint16_t port, std::string secret, uint16_t backend_port,
                         int auth_timeout_ms)
    : listener_(listen_tcp(host, port)), backend_port_(backend_port), secret_(std::move(secret)),
      auth_timeout_ms_(auth_timeout_ms) {
  port_ = net::local_port(listener_.get());
  thread_ = std::thread([this] { accept_loop(); });
}

gate_server::~gate_server() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> lock(mu_);
  links_.clear();
}

// Sequential on purpose, as in the rendezvous: authentication has its own short deadline, so a
// silent peer delays the next one by at most auth_timeout_ms and never reaches the middleman.
void gate_server::accept_loop() {
  while (!stop_) {
    if (!readable(listener_.get(), poll_ms)) continue;
    socket_fd c;
    try {
      c = accept_tcp(listener_.get(), poll_ms);
    } catch (const net_error&) {
      continue;
    }
    const std::string who = peer_name(c.get());
    try {
      const nonce challenge = auth_challenge(c.get(), auth_timeout_ms_);
      const auto claim = auth_verify(c.get(), secret_, challenge, auth_timeout_ms_);
      if (!claim) {
        ++refused_;
        spdlog::error("control gate: refused {}: it does not know the job's secret", who);
        continue;
      }
      socket_fd backend = connect_tcp("127.0.0.1", backend_port_, auth_timeout_ms_);
      spdlog::debug("control gate: admitted {} (rank {})", who, *claim);
      ++admitted_;
      std::lock_guard<std::mutex> lock(mu_);
      links_.push_back(std::make_unique<splice>(std::move(c), std::move(backend)));
    } catch (const net_error& e) {
      ++refused_;
      spdlog::error("control gate: refused {}: {}", who, e.what());
    }
  }
}

gate_client::gate_client(const std::string& host, uint16_t port, const std::string& secret, uint32_t rank,
                         int timeout_ms)
    : timeout_ms_(timeout_ms) {
  upstream_ = connect_tcp(host, port, timeout_ms);
  try {
    const auth_pending p = auth_respond(upstream_.get(), secret, rank, timeout_ms);
    auth_finish(upstream_.get(), secret, p, timeout_ms);
  } catch (const net_error& e) {
    throw net_error("the control gate at " + host + ":" + std::to_string(port) +
                    " did not accept us (is the secret the job's?): " + e.what());
  }
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

gate_client::~gate_client() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  link_.reset();
}

}  // namespace troupe::net
