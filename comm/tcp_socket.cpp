// TCP helpers: getaddrinfo for host names, poll for deadlines, MSG_NOSIGNAL so a dead peer is
// an error, not a SIGPIPE that kills the process.
#include "comm/tcp_socket.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

namespace troupe::net {
namespace {

using clock_type = std::chrono::steady_clock;

[[noreturn]] void fail_errno(const std::string& what) {
  throw net_error(what + ": " + std::strerror(errno));
}

int ms_left(clock_type::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_type::now()).count();
  return left < 0 ? 0 : static_cast<int>(left);
}

// Waits for `events` on fd until the deadline; false on timeout.
bool wait_for(int fd, short events, clock_type::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, ms_left(deadline));
    if (r > 0) return true;
    if (r == 0) return false;
    if (errno != EINTR) fail_errno("poll");
  }
}

addrinfo* resolve(const std::string& host, uint16_t port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_INET;  // IPv4 only for now: launchers hand out IPv4 addresses
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  const int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &res);
  if (rc != 0) throw net_error("cannot resolve " + host + ": " + gai_strerror(rc));
  return res;
}

std::string format(const sockaddr_in& a) {
  char buf[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &a.sin_addr, buf, sizeof buf);
  return buf;
}

}  // namespace

socket_fd& socket_fd::operator=(socket_fd&& o) noexcept {
  if (this != &o) {
    close();
    fd_ = o.release();
  }
  return *this;
}
socket_fd::~socket_fd() { close(); }
void socket_fd::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

socket_fd listen_tcp(const std::string& host, uint16_t port, int backlog) {
  addrinfo* res = resolve(host, port, true);
  socket_fd s(::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!s) {
    ::freeaddrinfo(res);
    fail_errno("socket");
  }
  const int one = 1;
  ::setsockopt(s.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  const int rc = ::bind(s.get(), res->ai_addr, res->ai_addrlen);
  ::freeaddrinfo(res);
  if (rc != 0) fail_errno("bind " + host + ":" + std::to_string(port));
  if (::listen(s.get(), backlog) != 0) fail_errno("listen " + host + ":" + std::to_string(port));
  return s;
}

socket_fd connect_tcp(const std::string& host, uint16_t port, int timeout_ms) {
  const auto deadline = clock_type::now() + std::chrono::milliseconds(timeout_ms);
  const std::string where = host + ":" + std::to_string(port);
  for (;;) {
    addrinfo* res = resolve(host, port, false);
    socket_fd s(::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!s) {
      ::freeaddrinfo(res);
      fail_errno("socket");
    }
    const int rc = ::connect(s.get(), res->ai_addr, res->ai_addrlen);
    ::freeaddrinfo(res);
    if (rc == 0) return s;
    const int err = errno;
    if ((err != ECONNREFUSED && err != ETIMEDOUT && err != EHOSTUNREACH && err != ENETUNREACH) ||
        clock_type::now() >= deadline)
      throw net_error("connect " + where + ": " + std::strerror(err) + " (gave up after " +
                      std::to_string(timeout_ms) + " ms)");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

socket_fd start_connect(const std::string& host, uint16_t port) {
  addrinfo* res = resolve(host, port, false);
  socket_fd s(::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!s) {
    ::freeaddrinfo(res);
    fail_errno("socket");
  }
  const int rc = ::connect(s.get(), res->ai_addr, res->ai_addrlen);
  ::freeaddrinfo(res);
  if (rc != 0 && errno != EINPROGRESS) fail_errno("connect " + host + ":" + std::to_string(port));
  return s;
}

int connect_error(int fd) {
  int err = 0;
  socklen_t len = sizeof err;
  if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) return errno;
  return err;
}

socket_fd accept_tcp(int listen_fd, int timeout_ms) {
  const auto deadline = clock_type::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    if (!wait_for(listen_fd, POLLIN, deadline))
      throw net_error("no connection within " + std::to_string(timeout_ms) + " ms");
    const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) return socket_fd(fd);
    if (errno != EINTR && errno != EAGAIN && errno != ECONNABORTED) fail_errno("accept");
  }
}

uint16_t local_port(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) fail_errno("getsockname");
  return ntohs(a.sin_port);
}

std::string local_host(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) fail_errno("getsockname");
  return format(a);
}

std::string this_host_address() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "127.0.0.1";
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(name, nullptr, &hints, &found) != 0 || !found) return "127.0.0.1";
  const std::string out = format(*reinterpret_cast<const sockaddr_in*>(found->ai_addr));
  ::freeaddrinfo(found);
  return out;
}

std::string peer_name(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return "unknown peer";
  return format(a) + ":" + std::to_string(ntohs(a.sin_port));
}

void write_all(int fd, const void* p, size_t n, int timeout_ms, const char* what) {
  const auto deadline = clock_type::now() + std::chrono::milliseconds(timeout_ms);
  const auto* b = static_cast<const uint8_t*>(p);
  while (n > 0) {
    const ssize_t k = ::send(fd, b, n, MSG_NOSIGNAL);
    if (k > 0) {
      b += k;
      n -= static_cast<size_t>(k);
    } else if (k < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (!wait_for(fd, POLLOUT, deadline)) throw net_error(std::string(what) + ": send timed out");
    } else {
      fail_errno(std::string(what) + ": send to " + peer_name(fd));
    }
  }
}

void read_all(int fd, void* p, size_t n, int timeout_ms, const char* what) {
  const auto deadline = clock_type::now() + std::chrono::milliseconds(timeout_ms);
  auto* b = static_cast<uint8_t*>(p);
  while (n > 0) {
    if (!wait_for(fd, POLLIN, deadline))
      throw net_error(std::string(what) + ": nothing from " + peer_name(fd) + " within " +
                      std::to_string(timeout_ms) + " ms");
    const ssize_t k = ::recv(fd, b, n, 0);
    if (k > 0) {
      b += k;
      n -= static_cast<size_t>(k);
    } else if (k == 0) {
      throw net_error(std::string(what) + ": " + peer_name(fd) + " closed the connection");
    } else if (errno != EAGAIN && errno != EINTR) {
      fail_errno(std::string(what) + ": recv");
    }
  }
}

void tune_bulk(int fd, int buffer_bytes) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (buffer_bytes > 0) {
    ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buffer_bytes, sizeof buffer_bytes);
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buffer_bytes, sizeof buffer_bytes);
  }
}

void set_nonblocking(int fd, bool on) {
  const int flags = ::fcntl(fd, F_GETFL, 0);
  if (flags < 0 || ::fcntl(fd, F_SETFL, on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK)) != 0)
    fail_errno("fcntl O_NONBLOCK");
}

}  // namespace troupe::net
