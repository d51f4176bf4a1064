// gate_server, the worker's gate connection, and rank 0's hold on what it admitted.
#include "comm/net_gate.hpp"

#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <list>
#include <memory>

#include "comm/tcp_auth.hpp"

namespace troupe::net {
namespace {

constexpr int poll_ms = 200;  // how often an idle thread looks at its stop flag
// Handoffs under way at once: each is a thread, and a peer must have proved the secret to get
// one, so this only bounds what a leaked secret could make the gate spend.
constexpr size_t max_handoffs = 64;

// The handoffs under way, each on a thread of its own; on the gate's thread only.
class handoffs {
 public:
  ~handoffs() { reap(true); }
  void start(std::function<void()> work) {
    reap(false);
    while (running_.size() >= max_handoffs) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      reap(false);
    }
    auto done = std::make_shared<std::atomic<bool>>(false);
    running_.push_back({std::thread([work = std::move(work), done] {
                          work();
                          *done = true;
                        }),
                        done});
  }
  // Joins those that ended (all: waits for every one).
  void reap(bool all) {
    for (auto it = running_.begin(); it != running_.end();) {
      if (!all && !*it->done) {
        ++it;
        continue;
      }
      it->thread.join();
      it = running_.erase(it);
    }
  }

 private:
  struct one {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::list<one> running_;
};

}  // namespace

gate_server::gate_server(const std::string& host, uint16_t port, std::string secret, admit_fn admit,
                         int auth_timeout_ms)
    : acceptor_(listen_tcp(host, port), std::move(secret), "control gate", auth_timeout_ms) {
  thread_ = std::thread([this, admit = std::move(admit)]() mutable {
    // Each connection is handed over on a thread of its own: a receiver's slow step (under TLS
    // the handshake, which a peer that proved the secret and then stays silent holds up to its
    // deadline) delays no other peer's.
    handoffs under_way;
    while (!stop_) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        if (changing_) {  // between two connections: the previous receiver gets no more
          under_way.reap(true);  // ... once every handoff to it has ended
          admit = std::move(next_admit_);
          changing_ = false;
          cv_.notify_all();
        }
        if (!admit) {  // held: the acceptor keeps what proved the secret until a receiver comes
          cv_.wait_for(lock, std::chrono::milliseconds(poll_ms), [this] { return changing_ || stop_; });
          continue;
        }
      }
      auto a = acceptor_.next(poll_ms);
      if (!a) continue;
      spdlog::debug("control gate: admitted {} (rank {})", a->who, a->claim);
      ++admitted_;
      under_way.start([admit, a = std::make_shared<auth_acceptor::admitted>(std::move(*a))] {
        try {
          admit(std::move(a->fd), a->claim, a->who);
        } catch (const std::exception& e) {
          spdlog::error("control gate: could not hand over {}: {}", a->who, e.what());
        }
      });
    }
  });
}

void gate_server::set_admit(admit_fn admit) {
  std::unique_lock<std::mutex> lock(mu_);
  next_admit_ = std::move(admit);
  changing_ = true;
  cv_.notify_all();
  cv_.wait(lock, [this] { return !changing_; });
}

gate_server::~gate_server() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
}

socket_fd connect_through_gate(const std::string& host, uint16_t port, const std::string& secret, uint32_t rank,
                               int timeout_ms) {
  socket_fd s = connect_tcp(host, port, timeout_ms);
  const std::string gate = "the control gate at " + host + ":" + std::to_string(port);
  auth_pending p;
  try {
    p = auth_respond(s.get(), secret, rank, timeout_ms);
  } catch (const net_error& e) {
    // No challenge came: nothing of ours was judged yet, so the secret is not in question; the
    // process that listened there ended (process 0 dying in a regroup, say) or is no troupe gate.
    throw net_error(gate + " closed the connection before its challenge (has process 0 ended?): " + e.what());
  }
  try {
    auth_finish(s.get(), secret, p, timeout_ms);
  } catch (const net_error& e) {
    throw net_error(gate + " did not accept our answer (is the secret the job's?): " + e.what());
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

}  // namespace troupe::net
