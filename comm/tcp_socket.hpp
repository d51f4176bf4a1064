// Thin, blocking-with-deadline TCP helpers for the data plane and the rendezvous: an owning file
// descriptor, listen/connect/accept with timeouts, whole-buffer reads and writes. Failures throw
// net_error with the peer and the call in the message. It deliberately has no event loop, no
// TLS and no protocol: tcp_auth, rendezvous and tcp_ring build on it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace troupe::net {

struct net_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class socket_fd {
 public:
  socket_fd() = default;
  explicit socket_fd(int fd) : fd_(fd) {}
  socket_fd(socket_fd&& o) noexcept : fd_(o.release()) {}
  socket_fd& operator=(socket_fd&& o) noexcept;
  socket_fd(const socket_fd&) = delete;
  socket_fd& operator=(const socket_fd&) = delete;
  ~socket_fd();
  int get() const { return fd_; }
  int release() {
    const int f = fd_;
    fd_ = -1;
    return f;
  }
  explicit operator bool() const { return fd_ >= 0; }
  void close();

 private:
  int fd_ = -1;
};

// Listens on host:port (port 0: the kernel picks one; read it back with local_port).
socket_fd listen_tcp(const std::string& host, uint16_t port, int backlog = 64);
// Connects, retrying refused connections until timeout_ms: the peer may not listen yet.
socket_fd connect_tcp(const std::string& host, uint16_t port, int timeout_ms);
// A connect for a poll loop: returns a non-blocking socket whose connection is in progress (or
// made). Poll it for POLLOUT, then connect_error says how it went. Throws net_error if the host
// does not resolve or the attempt fails at once.
socket_fd start_connect(const std::string& host, uint16_t port);
int connect_error(int fd);  // 0 once connected, else the errno the attempt failed with
// Waits up to timeout_ms for a connection; throws net_error on timeout.
socket_fd accept_tcp(int listen_fd, int timeout_ms);

uint16_t local_port(int fd);
std::string local_host(int fd);  // numeric address this end of a connection uses
// The IPv4 address this machine's host name resolves to (what other nodes of a cluster reach it
// by); 127.0.0.1 when the name does not resolve.
std::string this_host_address();
std::string peer_name(int fd);   // "host:port" of the other end, for logs

// Whole-buffer I/O on a blocking or non-blocking socket, each with its own deadline.
void write_all(int fd, const void* p, size_t n, int timeout_ms, const char* what);
void read_all(int fd, void* p, size_t n, int timeout_ms, const char* what);

// Bulk sockets: no Nagle delay, large kernel buffers, non-blocking for the ring's event loop.
void tune_bulk(int fd, int buffer_bytes);
void set_nonblocking(int fd, bool on);

}  // namespace troupe::net
