// kv_store: the server's map behind one mutex, a thread per admitted member (a group has few),
// and the client's blocking requests (kv_store.hpp has the wire form).
#include "comm/kv_store.hpp"

#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "comm/tcp_auth.hpp"
#include "comm/tcp_socket.hpp"

namespace troupe::net {

namespace {

constexpr uint8_t op_set = 'S', op_get = 'G';
constexpr uint8_t status_ok = 0, status_timeout = 1, status_refused = 2;
constexpr int idle_poll_ms = 100;  // how often an idle connection's thread looks at the stop flag

void check_sizes(const std::string& key, size_t value_bytes) {
  if (key.empty() || key.size() > kv_max_key_bytes)
    throw net_error("kv store: a key of " + std::to_string(key.size()) + " bytes (1 to " +
                    std::to_string(kv_max_key_bytes) + " allowed)");
  if (value_bytes > kv_max_value_bytes)
    throw net_error("kv store: the value of \"" + key + "\" has " + std::to_string(value_bytes) +
                    " bytes, more than the " + std::to_string(kv_max_value_bytes) + " allowed");
}

std::string read_key(int fd, int timeout_ms) {
  uint16_t len = 0;
  read_all(fd, &len, sizeof len, timeout_ms, "kv key length");
  if (len == 0 || len > kv_max_key_bytes) throw net_error("a key length of " + std::to_string(len));
  std::string key(len, '\0');
  read_all(fd, key.data(), len, timeout_ms, "kv key");
  return key;
}

void write_key(std::vector<uint8_t>& out, const std::string& key) {
  const auto len = static_cast<uint16_t>(key.size());
  out.insert(out.end(), reinterpret_cast<const uint8_t*>(&len), reinterpret_cast<const uint8_t*>(&len) + 2);
  out.insert(out.end(), key.begin(), key.end());
}

void write_u32(std::vector<uint8_t>& out, uint32_t v) {
  out.insert(out.end(), reinterpret_cast<const uint8_t*>(&v), reinterpret_cast<const uint8_t*>(&v) + 4);
}

std::string timeout_text(const std::string& key, int timeout_ms) {
  return "kv store: \"" + key + "\" was not set within " + std::to_string(timeout_ms) + " ms";
}

class kv_client final : public kv_store {
 public:
  kv_client(socket_fd s, kv_options opts) : s_(std::move(s)), opts_(opts) {}

  void set(const std::string& key, const std::vector<char>& value) override {
    check_sizes(key, value.size());
    std::vector<uint8_t> req{op_set};
    write_key(req, key);
    write_u32(req, static_cast<uint32_t>(value.size()));
    req.insert(req.end(), value.begin(), value.end());
    std::lock_guard<std::mutex> lock(mu_);
    write_all(s_.get(), req.data(), req.size(), opts_.io_timeout_ms, "kv set");
    uint8_t status = status_refused;
    read_all(s_.get(), &status, 1, opts_.io_timeout_ms, "kv set reply");
    if (status != status_ok) throw net_error("kv store: the server refused to set \"" + key + "\"");
  }

  std::vector<char> get(const std::string& key, int timeout_ms) override {
    check_sizes(key, 0);
    std::vector<uint8_t> req{op_get};
    write_key(req, key);
    write_u32(req, static_cast<uint32_t>(std::max(timeout_ms, 0)));
    std::lock_guard<std::mutex> lock(mu_);
    write_all(s_.get(), req.data(), req.size(), opts_.io_timeout_ms, "kv get");
    uint8_t status = status_refused;
    read_all(s_.get(), &status, 1, timeout_ms + opts_.io_timeout_ms, "kv get reply");
    if (status == status_timeout) throw kv_timeout(timeout_text(key, timeout_ms));
    if (status != status_ok) throw net_error("kv store: the server refused to get \"" + key + "\"");
    uint32_t len = 0;
    read_all(s_.get(), &len, sizeof len, opts_.io_timeout_ms, "kv value length");
    if (len > kv_max_value_bytes) throw net_error("kv store: a value of " + std::to_string(len) + " bytes");
    std::vector<char> value(len);
    read_all(s_.get(), value.data(), len, opts_.io_timeout_ms, "kv value");
    return value;
  }

 private:
  socket_fd s_;
  kv_options opts_;
  std::mutex mu_;  // one request at a time on the connection
};

}  // namespace

kv_server::kv_server(const std::string& host, uint16_t port, std::string secret, kv_options opts)
    : acceptor_(listen_tcp(host, port), std::move(secret), "kv store", opts.auth_timeout_ms), opts_(opts) {
  admit_ = std::thread([this] { admit_loop(); });
}

kv_server::~kv_server() {
  stop_ = true;
  if (admit_.joinable()) admit_.join();
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (socket_fd& c : clients_) ::shutdown(c.get(), SHUT_RDWR);
  }
  changed_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void kv_server::admit_loop() {
  while (!stop_) {
    auto a = acceptor_.next(idle_poll_ms);
    if (!a) continue;
    std::lock_guard<std::mutex> lock(mu_);
    const int fd = a->fd.get();
    clients_.push_back(std::move(a->fd));
    threads_.emplace_back([this, fd, who = a->who] { serve(fd, who); });
  }
}

void kv_server::set(const std::string& key, const std::vector<char>& value) {
  check_sizes(key, value.size());
  {
    std::lock_guard<std::mutex> lock(mu_);
    values_[key] = value;
  }
  changed_.notify_all();
}

std::vector<char> kv_server::get(const std::string& key, int timeout_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!changed_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return stop_ || values_.count(key) > 0; }) ||
      stop_)
    throw kv_timeout(timeout_text(key, timeout_ms));
  return values_.at(key);
}

void kv_server::serve(int fd, std::string who) {
  try {
    for (;;) {
      pollfd p{fd, POLLIN, 0};
      while (!stop_ && ::poll(&p, 1, idle_poll_ms) == 0) {
      }
      if (stop_) return;
      uint8_t op = 0;
      const ssize_t k = ::recv(fd, &op, 1, 0);
      if (k == 0) return;  // the member closed its connection after its rendezvous: the normal end
      if (k < 0) {
        if (errno == EINTR || errno == EAGAIN) continue;
        return;
      }
      if (op != op_set && op != op_get) throw net_error("an unknown request " + std::to_string(op));
      const std::string key = read_key(fd, opts_.io_timeout_ms);
      uint32_t n = 0;
      read_all(fd, &n, sizeof n, opts_.io_timeout_ms, "kv request length");
      uint8_t status = status_ok;
      std::vector<uint8_t> reply;
      if (op == op_set) {
        if (n > kv_max_value_bytes) throw net_error("a value of " + std::to_string(n) + " bytes for \"" + key + "\"");
        std::vector<char> value(n);
        read_all(fd, value.data(), n, opts_.io_timeout_ms, "kv value");
        set(key, value);
        reply.push_back(status);
      } else {
        try {
          const std::vector<char> value = get(key, static_cast<int>(std::min<uint32_t>(n, 1u << 30)));
          reply.push_back(status);
          write_u32(reply, static_cast<uint32_t>(value.size()));
          reply.insert(reply.end(), value.begin(), value.end());
        } catch (const net_error&) {
          if (stop_) return;
          reply.push_back(status_timeout);
        }
      }
      write_all(fd, reply.data(), reply.size(), opts_.io_timeout_ms, "kv reply");
    }
  } catch (const net_error& e) {
    if (stop_) return;
    ++refused_;
    spdlog::error("kv store: refused {}: {}", who, e.what());
    const uint8_t refused = status_refused;
    try {
      write_all(fd, &refused, 1, opts_.auth_timeout_ms, "kv refusal");
    } catch (const net_error&) {
    }
    ::shutdown(fd, SHUT_RDWR);  // closed now; the descriptor itself goes with the server
  }
}

std::unique_ptr<kv_store> kv_connect(const std::string& host, uint16_t port, const std::string& secret, uint32_t claim,
                                     int connect_timeout_ms, kv_options opts) {
  socket_fd s = connect_tcp(host, port, connect_timeout_ms);
  const auth_pending pending = auth_respond(s.get(), secret, claim, opts.auth_timeout_ms);
  auth_finish(s.get(), secret, pending, opts.auth_timeout_ms);
  return std::make_unique<kv_client>(std::move(s), opts);
}

}  // namespace troupe::net
