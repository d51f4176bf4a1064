// tls_context and tls_channel (tls_channel.hpp). The session lives on one thread from handshake
// to close (an SSL object must not be read and written from two threads), with SIGPIPE blocked
// there: OpenSSL writes to the socket with write(2), and a peer that closed mid-record must give
// this thread EPIPE, not end the process. Both sockets are non-blocking; the thread polls them
// for whatever the session last said it wanted.
#include "comm/tls_channel.hpp"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <future>
#include <stdexcept>
#include <vector>

namespace troupe::net {
namespace {

constexpr int poll_ms = 200;           // how often an idle channel looks at its stop flag
constexpr size_t chunk = size_t{64} << 10;

// OpenSSL's queued reasons, oldest first, or `fallback` when it queued none.
std::string openssl_reasons(const char* fallback) {
  std::string all;
  while (const unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    if (!all.empty()) all += "; ";
    const char* reason = ERR_reason_error_string(e);
    all += reason ? reason : buf;
  }
  return all.empty() ? fallback : all;
}

void block_sigpipe_here() {
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &s, nullptr);
}


// Repeats a non-blocking SSL call until it succeeds (> 0), fails, the deadline passes or the
// channel is stopped; "" on success, else the reason.
template <typename Op>
std::string ssl_until(SSL* ssl, int fd, const std::atomic<bool>& stop, std::chrono::steady_clock::time_point deadline,
                      int timeout_ms, Op op) {
  for (;;) {
    ERR_clear_error();
    const int r = op();
    if (r > 0) return {};
    const int e = SSL_get_error(ssl, r);
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    const bool again = e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE;
    if (again && left.count() > 0) {
      pollfd p{fd, static_cast<short>(e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT), 0};
      if (::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), poll_ms))) < 0 && errno != EINTR)
        return std::string("poll: ") + std::strerror(errno);
      if (stop) return "stopped";
      continue;
    }
    if (again) return "no handshake within " + std::to_string(timeout_ms) + " ms";
    const long verify = SSL_get_verify_result(ssl);
    if (verify != X509_V_OK) return std::string("the peer's certificate: ") + X509_verify_cert_error_string(verify);
    return openssl_reasons(e == SSL_ERROR_SYSCALL || e == SSL_ERROR_ZERO_RETURN ? "the peer closed the connection"
                                                                                 : "handshake failed");
  }
}

}  // namespace

tls_context::tls_context(const std::string& cert, const std::string& key, const std::string& ca) {
  ctx_ = SSL_CTX_new(TLS_method());
  if (!ctx_) throw std::runtime_error("TLS: cannot make a context: " + openssl_reasons("out of memory"));
  SSL_CTX_set_min_proto_version(ctx_, TLS1_2_VERSION);
  SSL_CTX_set_mode(ctx_, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  SSL_CTX_set_verify(ctx_, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  auto refuse = [&](const std::string& flag, const std::string& file) {
    const std::string why = openssl_reasons("cannot be loaded");
    SSL_CTX_free(ctx_);
    ctx_ = nullptr;
    throw std::invalid_argument(flag + " " + file + ": " + why);
  };
  if (SSL_CTX_use_certificate_chain_file(ctx_, cert.c_str()) != 1) refuse("--tls-cert", cert);
  if (SSL_CTX_use_PrivateKey_file(ctx_, key.c_str(), SSL_FILETYPE_PEM) != 1) refuse("--tls-key", key);
  if (SSL_CTX_check_private_key(ctx_) != 1) refuse("--tls-key", key);
  if (SSL_CTX_load_verify_locations(ctx_, ca.c_str(), nullptr) != 1) refuse("--tls-ca", ca);
}

tls_context::~tls_context() {
  if (ctx_) SSL_CTX_free(ctx_);
}

tls_channel::tls_channel(socket_fd wire, side s, std::shared_ptr<const tls_context> ctx, int timeout_ms)
    : ctx_(std::move(ctx)), wire_(std::move(wire)) {
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0)
    throw net_error(std::string("TLS: socketpair: ") + std::strerror(errno));
  plain_ = socket_fd(pair[0]);
  plain_far_ = socket_fd(pair[1]);
  set_nonblocking(wire_.get(), true);
  set_nonblocking(plain_.get(), true);
  ssl_ = SSL_new(ctx_->get());
  if (!ssl_ || SSL_set_fd(ssl_, wire_.get()) != 1) {
    if (ssl_) SSL_free(ssl_);
    throw net_error("TLS: cannot start a session: " + openssl_reasons("out of memory"));
  }
  const std::string who = peer_name(wire_.get());
  std::promise<std::string> shaken;  // empty: the handshake succeeded
  std::future<std::string> outcome = shaken.get_future();
  thread_ = std::thread([this, s, timeout_ms, shaken = std::move(shaken)]() mutable {
    block_sigpipe_here();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    // Under TLS 1.3 a client's handshake ends before the server has checked the client's
    // certificate, so the server confirms with one byte: a refused worker learns why (the alert)
    // here, not as a broken middleman handshake later.
    char confirm = 'T';
    std::string failed = ssl_until(ssl_, wire_.get(), stop_, deadline, timeout_ms, [&] { return s == side::accept ? SSL_accept(ssl_) : SSL_connect(ssl_); });
    if (failed.empty())
      failed = ssl_until(ssl_, wire_.get(), stop_, deadline, timeout_ms, [&] {
        return s == side::accept ? SSL_write(ssl_, &confirm, 1) : SSL_read(ssl_, &confirm, 1);
      });
    const bool ok = failed.empty();
    shaken.set_value(std::move(failed));
    if (ok) pump();
    ::shutdown(wire_.get(), SHUT_RDWR);
    ::shutdown(plain_.get(), SHUT_RDWR);
    SSL_free(ssl_);  // the session and its error queue belong to this thread
    ssl_ = nullptr;
    done_ = true;
  });
  const std::string failed = outcome.get();
  if (!failed.empty()) {
    thread_.join();
    throw net_error("TLS handshake with " + who + " failed: " + failed);
  }
}

tls_channel::~tls_channel() {
  stop_ = true;
  ::shutdown(wire_.get(), SHUT_RDWR);
  ::shutdown(plain_.get(), SHUT_RDWR);
  if (thread_.joinable()) thread_.join();
}

// Moves bytes both ways until a side closes: plain -> `out` -> SSL_write, SSL_read -> `in` ->
// plain. Each buffer holds one chunk at a time, so a slow reader on either side holds its
// direction back (no unbounded queue) while the other direction keeps moving.
void tls_channel::pump() {
  std::vector<char> out, in;
  size_t in_done = 0;
  while (!stop_) {
    bool wire_in = false, wire_out = false, plain_out = false, closed = false, progress = true;
    // An SSL call that did not complete says which way the wire must move before it can (either
    // call may need either: a record to read, a write to flush); anything else ends the session.
    auto wait_on_wire = [&](int result) {
      const int e = SSL_get_error(ssl_, result);
      wire_in = wire_in || e == SSL_ERROR_WANT_READ;
      wire_out = wire_out || e == SSL_ERROR_WANT_WRITE;
      return e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE;
    };
    while (progress && !closed) {
      progress = wire_in = wire_out = plain_out = false;
      if (out.empty()) {
        out.resize(chunk);
        const ssize_t n = ::read(plain_.get(), out.data(), chunk);
        out.resize(n > 0 ? static_cast<size_t>(n) : 0);
        if (n > 0) progress = true;
        else if (n == 0 || (errno != EAGAIN && errno != EINTR)) closed = true;
      }
      if (!out.empty() && !closed) {
        const int w = SSL_write(ssl_, out.data(), static_cast<int>(out.size()));
        if (w > 0) {
          out.erase(out.begin(), out.begin() + w);
          progress = true;
        } else {
          closed = !wait_on_wire(w);
        }
      }
      if (in_done == in.size() && !closed) {
        in.resize(chunk);
        in_done = 0;
        const int r = SSL_read(ssl_, in.data(), static_cast<int>(chunk));
        in.resize(r > 0 ? static_cast<size_t>(r) : 0);
        if (r > 0) {
          progress = true;
        } else {
          closed = !wait_on_wire(r);
        }
      }
      if (in_done < in.size() && !closed) {
        const ssize_t n = ::send(plain_.get(), in.data() + in_done, in.size() - in_done, MSG_NOSIGNAL);
        if (n > 0) {
          in_done += static_cast<size_t>(n);
          progress = true;
        } else if (errno == EAGAIN) {
          plain_out = true;
        } else if (errno != EINTR) {
          closed = true;
        }
      }
    }
    if (closed) break;
    pollfd p[2] = {{plain_.get(), static_cast<short>((out.empty() ? POLLIN : 0) | (plain_out ? POLLOUT : 0)), 0},
                   {wire_.get(), static_cast<short>((wire_in ? POLLIN : 0) | (wire_out ? POLLOUT : 0)), 0}};
    if (::poll(p, 2, poll_ms) < 0 && errno != EINTR) break;
  }
  if (!stop_) SSL_shutdown(ssl_);  // best effort: the close_notify tells the peer this was an orderly end
}

}  // namespace troupe::net
