// Mutual TLS on the control plane, terminated in troupe's own thread rather than by caf_openssl.
// caf_openssl can only make its TLS sessions inside its own publish and connect, so rank 0's
// middleman had to listen on a loopback port (and each worker open one for its own middleman)
// while processes joined: a port any local process could reach without the job's secret. Here
// the gate's authenticated socket carries the TLS session, and the middleman reads and writes
// plain bytes on one end of a socketpair (serve_over / remote_actor_over, as without TLS), so no
// process of a TLS job listens anywhere a stranger can talk to CAF.
#pragma once

#include <openssl/types.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/tcp_socket.hpp"

namespace troupe::net {

// The job's certificate, key and CA (files check_tls_files accepted) loaded once per process.
// Peers must present a certificate the CA signed; host names are not checked (peers are named by
// rank, not by DNS). Throws std::invalid_argument naming a file OpenSSL cannot load.
class tls_context {
 public:
  tls_context(const std::string& cert, const std::string& key, const std::string& ca);
  ~tls_context();
  tls_context(const tls_context&) = delete;
  tls_context& operator=(const tls_context&) = delete;
  SSL_CTX* get() const { return ctx_; }

 private:
  SSL_CTX* ctx_ = nullptr;
};

// One TLS session over `wire` (a connection that already proved the job's secret). The
// constructor runs the handshake on the calling thread, as server (accept) or client (connect),
// and throws net_error naming OpenSSL's reason when it fails or takes longer than timeout_ms: a
// peer without a certificate the CA signed never gets a byte through. Afterwards a thread moves
// bytes between the session and plain(), until either side closes; then both are shut down, so
// the far end of each sees the close (a dead worker becomes a closed middleman connection).
class tls_channel {
 public:
  enum class side { accept, connect };
  tls_channel(socket_fd wire, side s, std::shared_ptr<const tls_context> ctx, int timeout_ms);
  ~tls_channel();  // shuts both sockets down and joins the thread
  tls_channel(const tls_channel&) = delete;
  tls_channel& operator=(const tls_channel&) = delete;

  // The plain end, for the middleman (once; later calls return an empty socket).
  socket_fd take_plain() { return std::move(plain_far_); }
  bool done() const { return done_; }

 private:
  void pump();

  std::shared_ptr<const tls_context> ctx_;
  socket_fd wire_, plain_, plain_far_;
  SSL* ssl_ = nullptr;
  std::atomic<bool> done_{false}, stop_{false};
  std::thread thread_;
};

// Rank 0's channels, one per admitted process, added on the gate's thread.
class tls_channels {
 public:
  void add(std::unique_ptr<tls_channel> c) {
    std::lock_guard<std::mutex> lock(mu_);
    channels_.push_back(std::move(c));
  }
  void clear() {
    std::lock_guard<std::mutex> lock(mu_);
    channels_.clear();
  }

 private:
  std::mutex mu_;
  std::vector<std::unique_ptr<tls_channel>> channels_;
};

}  // namespace troupe::net
