// connect_gloo_member over Debian's Gloo (gloo_group.hpp). Gloo's exceptions come back as
// net_error naming the collective, so the owning actor reports them like a broken ring.
#include "comm/gloo_group.hpp"

#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/alltoallv.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/reduce_scatter.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

#include "comm/ring_schedule.hpp"
#include "comm/tcp_auth.hpp"
#include "comm/tcp_socket.hpp"

namespace troupe::net {

bool gloo_built() { return true; }

namespace {

constexpr int watch_slice_ms = 200;  // how often a member looks for another's failure

// One attempt at connecting the group: its keys in the store ("try<k>/..."), whether any member
// has given up on it, and the addresses of this member's own pair listeners (so that giving up
// can release a wait inside Gloo's connect: see release_own_listeners).
struct attempt {
  std::shared_ptr<kv_store> kv;
  std::string prefix;
  int timeout_ms = 0;
  std::atomic<bool> failed{false};
  std::mutex mu;
  std::string why;                        // the first failure this member heard of
  std::vector<sockaddr_in> own_listeners;  // from the addresses this member published

  std::string key(const std::string& k) const { return prefix + k; }
  void fail(const std::string& reason) {
    std::lock_guard<std::mutex> lock(mu);
    if (why.empty()) why = reason;
    failed = true;
  }
  std::string reason() {
    std::lock_guard<std::mutex> lock(mu);
    return why;
  }
  // One wait on the store's failure key; true once some member has failed this attempt.
  bool heard_of_failure(int wait_ms) {
    if (failed) return true;
    try {
      const std::vector<char> v = kv->get(key("failed"), wait_ms);
      fail(std::string(v.begin(), v.end()));
    } catch (const kv_timeout&) {
    }
    return failed;
  }
};

// Gloo's rendezvous Store over troupe's kv_store: the one place Gloo's pair addresses cross. Its
// waits end early, with an error, once another member has given up on the attempt.
class kv_gloo_store final : public gloo::rendezvous::Store {
 public:
  kv_gloo_store(attempt& a, int pairs) : a_(a), pairs_(pairs) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    if (is_addresses(key)) remember_listeners(data);
    a_.kv->set(a_.key(key), data);
  }
  std::vector<char> get(const std::string& key) override { return wait_for(key, a_.timeout_ms); }
  void wait(const std::vector<std::string>& keys) override { wait(keys, std::chrono::milliseconds(a_.timeout_ms)); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    for (const std::string& k : keys) wait_for(k, static_cast<int>(timeout.count()));
  }

 private:
  std::vector<char> wait_for(const std::string& key, int timeout_ms) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      try {
        return a_.kv->get(a_.key(key), static_cast<int>(std::clamp<int64_t>(left.count(), 0, watch_slice_ms)));
      } catch (const kv_timeout&) {
        if (a_.heard_of_failure(0)) throw net_error("another member gave up: " + a_.reason());
        if (left.count() <= 0) throw;
      }
    }
  }
  // connectFullMesh publishes each member's pair addresses under its bare rank ("0", "1", ...).
  static bool is_addresses(const std::string& key) {
    return !key.empty() && std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; });
  }
  // Each address is a sockaddr_storage first (gloo/transport/tcp/address.h), one per pair.
  void remember_listeners(const std::vector<char>& data) {
    std::lock_guard<std::mutex> lock(a_.mu);
    const size_t pairs = static_cast<size_t>(pairs_);
    if (pairs == 0 || data.size() % pairs != 0) return;
    const size_t each = data.size() / pairs;
    for (size_t off = 0; off + sizeof(sockaddr_in) <= data.size() && each >= sizeof(sockaddr_in); off += each) {
      sockaddr_in sa{};
      std::memcpy(&sa, data.data() + off, sizeof sa);
      if (sa.sin_family == AF_INET) a_.own_listeners.push_back(sa);
    }
  }

  attempt& a_;
  int pairs_;  // in one member's published addresses: one per other member
};

// Connecting to this member's own pair listeners, then closing: a thread waiting inside Gloo's
// Pair::connect for a peer that gave up (this Gloo waits there up to five times its timeout, and
// nothing cancels it) sees a connection that closes, and connectFullMesh throws at once.
void release_own_listeners(attempt& a) {
  std::vector<sockaddr_in> own;
  {
    std::lock_guard<std::mutex> lock(a.mu);
    own = a.own_listeners;
  }
  for (const sockaddr_in& sa : own) {
    socket_fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd) continue;
    if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&sa), sizeof sa) != 0 && errno != EINPROGRESS) continue;
    pollfd p{fd.get(), POLLOUT, 0};
    ::poll(&p, 1, 100);  // queued at the listener (or refused: it had its peer already)
  }
}

// The recv buffers a member is waiting on while its pairs prove the secret, so that hearing of
// another member's failure can abort those waits.
struct pending_recvs {
  std::mutex mu;
  std::vector<gloo::transport::UnboundBuffer*> buffers;
  bool aborted = false;
  // false when the attempt was already abandoned (then nothing is to be waited for)
  bool add(gloo::transport::UnboundBuffer* b) {
    std::lock_guard<std::mutex> lock(mu);
    buffers.push_back(b);
    return !aborted;
  }
  void abort_all() {
    std::lock_guard<std::mutex> lock(mu);
    aborted = true;
    for (auto* b : buffers) b->abortWaitRecv();
  }
  void clear() {
    std::lock_guard<std::mutex> lock(mu);
    buffers.clear();
  }
};

constexpr uint64_t challenge_slot = uint64_t{0x7f} << 48, answer_slot = challenge_slot + 1;

// Every pair proves the job's secret both ways over itself: a fresh challenge each way, then the
// answers (tcp_auth.hpp's HMAC, whose claim is the member's rank in the group). A connection that
// took a pair's listener without the secret cannot answer, and never sees a gradient.
void prove_pairs(gloo::rendezvous::Context& ctx, const std::string& secret, attempt& a, pending_recvs& waits) {
  const int me = ctx.rank, n = ctx.size;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(a.timeout_ms);
  std::vector<nonce> mine(static_cast<size_t>(n)), theirs(static_cast<size_t>(n));
  std::vector<auth_answer> out(static_cast<size_t>(n)), in(static_cast<size_t>(n));
  // One exchange with every other member: what `send` holds out, what arrives into `recv`.
  auto exchange = [&](uint64_t slot, auto& send, auto& recv, const char* what) {
    std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> sends, recvs;
    for (int p = 0; p < n; ++p) {
      if (p == me) continue;
      const auto i = static_cast<size_t>(p);
      recvs.push_back(ctx.createUnboundBuffer(recv[i].data(), recv[i].size()));
      if (!waits.add(recvs.back().get())) throw net_error("abandoned: " + a.reason());
      recvs.back()->recv(p, slot);
      sends.push_back(ctx.createUnboundBuffer(send[i].data(), send[i].size()));
      sends.back()->send(p, slot);
    }
    for (auto& r : recvs)
      if (!r->waitRecv(deadline)) {
        waits.clear();
        throw net_error("abandoned while waiting for a pair's " + std::string(what) + ": " + a.reason());
      }
    for (auto& x : sends) x->waitSend(deadline);
    waits.clear();
  };
  for (auto& c : mine) c = auth_fresh_nonce();
  exchange(challenge_slot, mine, theirs, "challenge");
  for (int p = 0; p < n; ++p)
    if (p != me) auth_answer_for(secret, static_cast<uint32_t>(me), theirs[static_cast<size_t>(p)], out[static_cast<size_t>(p)]);
  exchange(answer_slot, out, in, "answer");
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    const auto claim = auth_answer_claim(secret, mine[static_cast<size_t>(p)], in[static_cast<size_t>(p)]);
    if (!claim || *claim != static_cast<uint32_t>(p))
      throw net_error("the pair with member " + std::to_string(p) +
                      " did not prove the job's secret (a connection that did not know it took Gloo's listener)");
  }
}

int count_of(int64_t n) {
  if (n > INT_MAX) throw net_error("Gloo: " + std::to_string(n) + " elements exceed an int count");
  return static_cast<int>(n);
}

template <typename F>
void gloo_call(const char* what, F&& f) {
  try {
    f();
  } catch (const net_error&) {
    throw;
  } catch (const std::exception& e) {
    throw net_error(std::string("Gloo ") + what + ": " + e.what());
  }
}

class gloo_member final : public group_backend {
 public:
  gloo_member(std::shared_ptr<gloo::rendezvous::Context> ctx, std::shared_ptr<kv_store> store)
      : ctx_(std::move(ctx)), store_(std::move(store)) {}
  int rank() const override { return ctx_->rank; }
  int world() const override { return ctx_->size; }

  void all_reduce(float* data, int64_t n, reduce_op op) override {
    if (n == 0) return;
    gloo_call("all-reduce", [&] {
      gloo::AllreduceOptions o(ctx_);
      o.setOutput(data, static_cast<size_t>(n));
      o.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
      o.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
      gloo::allreduce(o);
    });
    if (op == reduce_op::average) ring::scale(data, n, 1.0f / static_cast<float>(world()));
  }

  void reduce_scatter(float* data, int64_t n, reduce_op op) override {
    if (n == 0) return;
    std::vector<int> counts(static_cast<size_t>(world()));
    for (int j = 0; j < world(); ++j) counts[static_cast<size_t>(j)] = count_of(ring::segment(n, world(), j).count);
    gloo_call("reduce-scatter", [&] {
      gloo::ReduceScatterHalvingDoubling<float> rs(ctx_, {data}, count_of(n), counts);
      rs.run();
    });
    // Gloo leaves this rank's part at the front; troupe's layout keeps it at its ring segment.
    const ring::range seg = ring::segment(n, world(), rank());
    std::memmove(data + seg.offset, data, static_cast<size_t>(seg.count) * sizeof(float));
    if (op == reduce_op::average) ring::scale(data + seg.offset, seg.count, 1.0f / static_cast<float>(world()));
  }

  void all_gather(float* data, int64_t n) override {
    if (n == 0) return;
    std::vector<size_t> counts(static_cast<size_t>(world()));
    for (int j = 0; j < world(); ++j) counts[static_cast<size_t>(j)] = static_cast<size_t>(ring::segment(n, world(), j).count);
    gloo_call("all-gather", [&] {
      gloo::AllgathervOptions o(ctx_);
      o.setOutput(data, std::move(counts));  // no input: this rank's segment is already in place
      gloo::allgatherv(o);
    });
  }

  void broadcast(float* data, int64_t n, int root) override {
    if (n == 0) return;
    gloo_call("broadcast", [&] {
      gloo::BroadcastOptions o(ctx_);
      o.setOutput(data, static_cast<size_t>(n));
      o.setRoot(root);
      gloo::broadcast(o);
    });
  }

  void all_to_all(const float* send, const std::vector<int64_t>& send_counts, float* recv,
                  const std::vector<int64_t>& recv_counts) override {
    if (world() == 1) {
      std::copy(send, send + send_counts.at(0), recv);
      return;
    }
    gloo_call("all-to-all", [&] {
      gloo::AlltoallvOptions o(ctx_);
      o.setInput(const_cast<float*>(send), send_counts);  // only read
      o.setOutput(recv, recv_counts);
      gloo::alltoallv(o);
    });
  }

  // Gloo's point-to-point pairs: this member's send to the next and receive from the previous,
  // under a slot of their own per step so two steps' bytes never meet.
  void shift(const float* send, int64_t n_send, float* recv, int64_t n_recv) override {
    const int next = ring::right_of(rank(), world()), prev = ring::left_of(rank(), world());
    const uint64_t slot = shift_slot + shifts_++;
    if (world() == 1) {
      if (n_send != n_recv) throw net_error("Gloo shift: a group of one shifts " + std::to_string(n_send) + " floats into " + std::to_string(n_recv));
      std::copy(send, send + n_send, recv);
      return;
    }
    gloo_call("shift", [&] {
      // Gloo's send buffer is not const, though a send only reads it. An empty side is skipped
      // on both ends alike: the receiver's n_recv is the sender's n_send.
      std::unique_ptr<gloo::transport::UnboundBuffer> out, in;
      if (n_recv > 0) {
        in = ctx_->createUnboundBuffer(recv, static_cast<size_t>(n_recv) * sizeof(float));
        in->recv(prev, slot);
      }
      if (n_send > 0) {
        out = ctx_->createUnboundBuffer(const_cast<float*>(send), static_cast<size_t>(n_send) * sizeof(float));
        out->send(next, slot);
      }
      if (in && !in->waitRecv(ctx_->getTimeout())) throw net_error("aborted waiting for rank " + std::to_string(prev));
      if (out && !out->waitSend(ctx_->getTimeout())) throw net_error("aborted sending to rank " + std::to_string(next));
    });
  }

 private:
  static constexpr uint64_t shift_slot = uint64_t{0x51} << 48;  // beside prove_pairs' slots
  uint64_t shifts_ = 0;
  std::shared_ptr<gloo::rendezvous::Context> ctx_;
  std::shared_ptr<kv_store> store_;  // the first member's serves the others for as long as the group lives
};

}  // namespace

std::unique_ptr<group_backend> connect_gloo_member(int rank, int world, std::shared_ptr<kv_store> store,
                                                   const gloo_options& opts) {
  if (world < 1 || rank < 0 || rank >= world)
    throw std::invalid_argument("connect_gloo_member: rank " + std::to_string(rank) + " of " + std::to_string(world));
  if (opts.secret.empty()) throw std::invalid_argument("connect_gloo_member: no secret for the pairs to prove");
  std::string last;
  for (int k = 0; k < std::max(1, opts.attempts); ++k) {
    attempt a;
    a.kv = store;
    a.prefix = "try" + std::to_string(k) + "/";
    a.timeout_ms = opts.timeout_ms;
    std::shared_ptr<gloo::rendezvous::Context> ctx;
    pending_recvs waits;
    std::mutex settle_mu;
    std::condition_variable settle_cv;
    bool settled = false;
    // Hears of another member's failure while this one waits in Gloo, and releases those waits.
    // It looks without waiting at the store (a client's requests share one connection, which a
    // waiting look would hold from the member's own requests).
    std::thread watcher([&] {
      std::unique_lock<std::mutex> lock(settle_mu);
      while (!settle_cv.wait_for(lock, std::chrono::milliseconds(watch_slice_ms), [&] { return settled; })) {
        lock.unlock();
        const bool failed_elsewhere = a.heard_of_failure(0);
        if (failed_elsewhere) {
          waits.abort_all();
          release_own_listeners(a);
          return;
        }
        lock.lock();
      }
    });
    std::string failed;
    try {
      gloo_call("rendezvous", [&] {
        gloo::transport::tcp::attr attr;
        attr.hostname = opts.host;
        auto device = gloo::transport::tcp::CreateDevice(attr);
        ctx = std::make_shared<gloo::rendezvous::Context>(rank, world);
        ctx->setTimeout(std::chrono::milliseconds(opts.timeout_ms));
        kv_gloo_store gs(a, world - 1);
        ctx->connectFullMesh(gs, device);
        prove_pairs(*ctx, opts.secret, a, waits);
      });
    } catch (const net_error& e) {
      failed = e.what();
    }
    // Every member says how its attempt went, and all decide from the same verdicts.
    std::string verdict_error;
    try {
      if (!failed.empty()) store->set(a.key("failed"), std::vector<char>(failed.begin(), failed.end()));
      const std::string mine = failed.empty() ? "ok" : failed;
      store->set(a.key("verdict/" + std::to_string(rank)), std::vector<char>(mine.begin(), mine.end()));
      for (int r = 0; r < world && verdict_error.empty(); ++r) {
        const std::vector<char> v = store->get(a.key("verdict/" + std::to_string(r)), opts.timeout_ms);
        if (std::string(v.begin(), v.end()) != "ok") last = "member " + std::to_string(r) + ": " + std::string(v.begin(), v.end());
      }
    } catch (const net_error& e) {
      verdict_error = e.what();
    }
    {
      std::lock_guard<std::mutex> lock(settle_mu);
      settled = true;
    }
    settle_cv.notify_all();
    watcher.join();
    if (!verdict_error.empty()) throw net_error("Gloo rendezvous: " + verdict_error);
    if (failed.empty() && last.empty()) return std::make_unique<gloo_member>(std::move(ctx), std::move(store));
    if (last.empty()) last = "member " + std::to_string(rank) + ": " + failed;
    spdlog::warn("Gloo group member {} of {}: connecting attempt {} of {} failed ({}); connecting again on new listeners",
                 rank, world, k + 1, opts.attempts, last);
    if (k + 1 < opts.attempts) last.clear();
  }
  throw net_error("Gloo rendezvous: " + std::to_string(opts.attempts) +
                  " attempts to connect every pair to a member that knows the job's secret failed; the last: " + last);
}

}  // namespace troupe::net
