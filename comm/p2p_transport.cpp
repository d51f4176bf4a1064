// p2p_transport: one poll loop over the wake-up eventfd, every outbound connection (connect,
// handshake and frame writes, all non-blocking, so one unreachable peer stalls no other) and
// every inbound one (frames read into word-aligned storage, decoded in place, assembled with one
// copy). The auth_acceptor's own thread proves inbound connections and wakes the loop.
#include "comm/p2p_transport.hpp"

#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <stdexcept>

#include "comm/tcp_auth.hpp"

namespace troupe::net {
namespace {

using clock_type = std::chrono::steady_clock;
constexpr auto retry_delay = std::chrono::milliseconds(20);  // a peer not listening yet, as connect_tcp
constexpr size_t turn_bytes = size_t{16} << 20;  // per connection, then poll again: one peer cannot starve the rest
const char* const stopped_msg = "stopped: the endpoint was aborted";

int64_t ms_between(clock_type::time_point a, clock_type::time_point b) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(b - a).count();
}

// Writes what is left of a frame from offset `off` in one sendmsg; the payload goes from the
// caller's buffer to the kernel without a copy of ours.
ssize_t write_parts(int fd, const wire::frame_parts& f, size_t off) {
  static const uint8_t zeros[8] = {};
  const std::pair<const uint8_t*, size_t> parts[3] = {
      {f.head.data(), f.head.size()}, {f.payload, f.payload_bytes}, {zeros, f.pad_bytes}};
  iovec iov[3];
  int k = 0;
  for (const auto& [p, n] : parts) {
    if (off >= n) {
      off -= n;
      continue;
    }
    iov[k++] = iovec{const_cast<uint8_t*>(p + off), n - off};
    off = 0;
  }
  msghdr m{};
  m.msg_iov = iov;
  m.msg_iovlen = static_cast<size_t>(k);
  return ::sendmsg(fd, &m, MSG_NOSIGNAL);
}

}  // namespace

struct p2p_transport::peer_out {
  enum class state { idle, connecting, challenge, answer, proof, ready };
  int rank = 0;
  std::string host;
  uint16_t port = 0;
  state st = state::idle;
  socket_fd fd;
  clock_type::time_point deadline;  // for the connect and handshake together
  clock_type::time_point retry_at;  // while idle after a refused connect
  bool retrying = false;
  clock_type::time_point last_progress;
  auth_pending pending;
  auth_answer answer{};
  std::array<uint8_t, 32> in{};  // the challenge, then the proof
  size_t done_bytes = 0;         // of the handshake message in hand
  std::deque<send_req> queue;
  uint32_t chunk = 0, chunks = 0;
  std::optional<wire::frame_parts> frame;
  size_t frame_off = 0;
  std::string where() const { return "rank " + std::to_string(rank) + " at " + host + ":" + std::to_string(port); }
};

struct p2p_transport::peer_in {
  int rank = 0;
  std::string who;
  socket_fd fd;
  std::vector<uint64_t> buf;  // one frame, word-aligned for decode_frame_view
  size_t want = wire::header_bytes, got = 0;
  bool in_body = false;
  bool mid_tensor = false;  // some chunks of a tensor came, not yet the last
  wire::tensor_assembler assembler;
  clock_type::time_point last_progress;
  explicit peer_in(const wire::limits& lim) : buf(wire::header_bytes / 8), assembler(lim) {}
  uint8_t* bytes() { return reinterpret_cast<uint8_t*>(buf.data()); }
};

p2p_transport::p2p_transport(int rank, const std::string& host, uint16_t port, std::string secret,
                             p2p_receive_fn on_receive, p2p_error_fn on_error, p2p_options opts)
    : rank_(rank), secret_(std::move(secret)), on_receive_(std::move(on_receive)), on_error_(std::move(on_error)),
      opts_(opts), name_("p2p rank " + std::to_string(rank)) {
  if (secret_.empty()) throw net_error(name_ + ": the point-to-point transport needs the job's secret");
  if (rank < 0) throw net_error(name_ + ": a rank cannot be negative");
  wire::chunk_payload_bytes(opts_.limits);  // throws for a frame size the encoder cannot use
  wake_fd_ = socket_fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake_fd_) throw net_error(name_ + ": eventfd: " + std::strerror(errno));
  acceptor_ = std::make_unique<auth_acceptor>(listen_tcp(host, port), secret_, name_, opts_.auth_timeout_ms,
                                              [this] { wake(); });
  port_ = acceptor_->port();
  thread_ = std::thread([this] { loop(); });
}

p2p_transport::~p2p_transport() {
  abort();
  if (thread_.joinable()) thread_.join();
  acceptor_.reset();  // before wake_fd_ closes: its thread may still call wake()
}

int p2p_transport::refused() const { return acceptor_->refused(); }

void p2p_transport::wake() {
  const uint64_t one = 1;
  if (::write(wake_fd_.get(), &one, sizeof one) < 0 && errno != EAGAIN)
    spdlog::error("{}: eventfd write: {}", name_, std::strerror(errno));
}

void p2p_transport::abort() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
  }
  abort_ = true;
  wake();
}

void p2p_transport::send(int peer_rank, const std::string& host, uint16_t port, wire::tensor_meta meta,
                         const void* bytes, size_t n, p2p_send_done_fn done) {
  if (peer_rank < 0) throw std::invalid_argument(name_ + ": send to rank " + std::to_string(peer_rank));
  wire::check_tensor(meta, n, opts_.limits);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stopped_) {
      submitted_.push_back(
          send_req{peer_rank, host, port, std::move(meta), static_cast<const uint8_t*>(bytes), n, std::move(done)});
      wake();
      return;
    }
  }
  if (done) done(std::string(stopped_msg));
}

void p2p_transport::loop() {
  std::map<int, peer_out> out;
  std::vector<std::unique_ptr<peer_in>> in;
  wire::frame_encoder encoder(opts_.limits);
  const auto io_timeout = std::chrono::milliseconds(opts_.io_timeout_ms);

  // Closes an outbound connection; every queued send fails with `why`.
  auto fail_out = [&](peer_out& p, const std::string& why) {
    if (!p.queue.empty()) {
      if (why == stopped_msg) spdlog::info("{}: {} send(s) to {} {}", name_, p.queue.size(), p.where(), why);
      else spdlog::error("{}: sending to {}: {}", name_, p.where(), why);
    }
    std::deque<send_req> failed;
    failed.swap(p.queue);
    p.fd.close();
    p.st = peer_out::state::idle;
    p.frame.reset();
    p.chunk = p.chunks = 0;
    p.retrying = false;
    for (auto& r : failed)
      if (r.done) r.done(why);
  };
  auto connect_out = [&](peer_out& p) {
    try {
      p.fd = start_connect(p.host, p.port);
      tune_bulk(p.fd.get(), opts_.socket_buffer_bytes);  // before the handshake: the window scale is set now
      p.st = peer_out::state::connecting;
    } catch (const net_error& e) {
      fail_out(p, e.what());
    }
  };
  // Bad input from an inbound peer: reported, logged, that connection closed.
  auto fail_in = [&](peer_in& c, wire::error e) {
    e.message = "from rank " + std::to_string(c.rank) + " (" + c.who + "): " + e.message;
    spdlog::error("{}: {}: {}", name_, wire::to_string(e.code), e.message);
    c.fd.close();
    if (on_error_) on_error_(c.rank, e);
  };
  auto read_in = [&](peer_in& c, clock_type::time_point now) {
    size_t turn = 0;
    while (c.fd && turn < turn_bytes) {
      const ssize_t k = ::recv(c.fd.get(), c.bytes() + c.got, c.want - c.got, 0);
      if (k < 0 && (errno == EAGAIN || errno == EINTR)) return;
      if (k <= 0) {
        const std::string how = k == 0 ? "closed the connection" : std::string(std::strerror(errno));
        if (c.got > 0)
          return fail_in(c, {wire::error_code::truncated, how + " " + std::to_string(c.got) + " of " +
                                                               std::to_string(c.want) + " bytes into a frame"});
        if (c.mid_tensor)
          return fail_in(c, {wire::error_code::truncated, how + " between the chunks of a tensor"});
        spdlog::debug("{}: rank {} ({}) {}", name_, c.rank, c.who, how);
        c.fd.close();
        return;
      }
      c.got += static_cast<size_t>(k);
      turn += static_cast<size_t>(k);
      c.last_progress = now;
      if (c.got < c.want) continue;
      if (!c.in_body) {
        auto h = wire::parse_header(c.bytes(), c.got, opts_.limits);
        if (!h.ok()) return fail_in(c, *h.err);
        c.want = wire::header_bytes + h.value->body_bytes;
        if (c.buf.size() * 8 < c.want) c.buf.resize(c.want / 8);  // body_bytes is a multiple of 8
        c.in_body = true;
        continue;
      }
      auto v = wire::decode_frame_view(c.bytes(), c.got, opts_.limits);
      if (!v.ok()) return fail_in(c, *v.err);
      if (auto e = c.assembler.add(*v.value)) return fail_in(c, *e);
      c.got = 0;
      c.want = wire::header_bytes;
      c.in_body = false;
      c.mid_tensor = !c.assembler.complete();
      if (!c.mid_tensor) {
        auto [meta, bytes] = c.assembler.take();
        if (on_receive_) on_receive_(c.rank, std::move(meta), std::move(bytes));
      }
    }
  };
  // Moves the handshake or the frames of an outbound connection on, as far as its socket allows.
  auto step_out = [&](peer_out& p, short revents, clock_type::time_point now) {
    using st = peer_out::state;
    if (p.st == st::connecting) {
      if (!(revents & (POLLOUT | POLLERR | POLLHUP))) return;
      const int err = connect_error(p.fd.get());
      if (err == ECONNREFUSED || err == ETIMEDOUT || err == EHOSTUNREACH || err == ENETUNREACH) {
        p.fd.close();
        p.st = st::idle;
        if (now >= p.deadline)
          return fail_out(p, "connect " + p.where() + ": " + std::strerror(err) + " (gave up after " +
                                 std::to_string(opts_.connect_timeout_ms) + " ms)");
        p.retrying = true;
        p.retry_at = now + retry_delay;
        return;
      }
      if (err != 0) return fail_out(p, "connect " + p.where() + ": " + std::strerror(err));
      p.st = st::challenge;
      p.done_bytes = 0;
    }
    auto read_handshake = [&](const char* what) {
      const ssize_t k = ::recv(p.fd.get(), p.in.data() + p.done_bytes, p.in.size() - p.done_bytes, 0);
      if (k > 0) p.done_bytes += static_cast<size_t>(k);
      if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR)) {
        fail_out(p, p.where() + " closed the connection during the " + what +
                        " (does it know the job's secret?)");
        return false;
      }
      return p.done_bytes == p.in.size();
    };
    if (p.st == st::challenge) {
      if (!read_handshake("auth challenge")) return;
      nonce challenge{};
      std::memcpy(challenge.data(), p.in.data(), challenge.size());
      p.pending = auth_answer_for(secret_, static_cast<uint32_t>(rank_), challenge, p.answer);
      p.st = st::answer;
      p.done_bytes = 0;
    }
    if (p.st == st::answer) {
      const ssize_t k = ::send(p.fd.get(), p.answer.data() + p.done_bytes, p.answer.size() - p.done_bytes, MSG_NOSIGNAL);
      if (k < 0 && errno != EAGAIN && errno != EINTR)
        return fail_out(p, "auth response to " + p.where() + ": " + std::strerror(errno));
      if (k > 0) p.done_bytes += static_cast<size_t>(k);
      if (p.done_bytes < p.answer.size()) return;
      p.st = st::proof;
      p.done_bytes = 0;
    }
    if (p.st == st::proof) {
      if (!read_handshake("auth proof")) return;
      if (!auth_proof_ok(secret_, p.pending, p.in)) return fail_out(p, p.where() + " does not know the job's secret");
      spdlog::debug("{}: connected to {}", name_, p.where());
      p.st = st::ready;
      p.last_progress = now;
    }
    if (p.st != st::ready) return;
    if (p.queue.empty()) {
      // A receiver never writes: readable means it closed (or broke the protocol). Either way the
      // next send opens a fresh connection.
      if (revents & (POLLIN | POLLERR | POLLHUP)) {
        spdlog::debug("{}: {} closed its end", name_, p.where());
        p.fd.close();
        p.st = st::idle;
      }
      return;
    }
    for (size_t turn = 0; !p.queue.empty() && turn < turn_bytes;) {
      send_req& r = p.queue.front();
      if (!p.frame) {
        if (p.chunk == 0) p.chunks = encoder.chunk_count(r.n);
        p.frame = encoder.encode(r.meta, r.bytes, r.n, p.chunk);
        p.frame_off = 0;
      }
      const ssize_t k = write_parts(p.fd.get(), *p.frame, p.frame_off);
      if (k < 0 && (errno == EAGAIN || errno == EINTR)) return;
      if (k < 0) return fail_out(p, "send to " + p.where() + ": " + std::strerror(errno));
      p.last_progress = now;
      turn += static_cast<size_t>(k);
      if ((p.frame_off += static_cast<size_t>(k)) < p.frame->size()) continue;
      p.frame.reset();
      if (++p.chunk < p.chunks) continue;
      p.chunk = 0;
      auto done = std::move(r.done);
      p.queue.pop_front();
      if (done) done(std::nullopt);
    }
  };

  std::vector<pollfd> fds;
  std::vector<peer_out*> fd_out;  // fds[1 .. 1 + fd_out.size()) are outbound, the rest inbound
  while (!abort_) {
    auto now = clock_type::now();
    // New sends, in the order they were made.
    std::deque<send_req> fresh;
    {
      std::lock_guard<std::mutex> lock(mu_);
      fresh.swap(submitted_);
    }
    for (auto& r : fresh) {
      peer_out& p = out[r.peer];
      const bool busy = p.st != peer_out::state::idle || !p.queue.empty();
      if (busy && (p.host != r.host || p.port != r.port)) {
        if (r.done)
          r.done("rank " + std::to_string(r.peer) + " is at " + p.host + ":" + std::to_string(p.port) +
                 ", this send names " + r.host + ":" + std::to_string(r.port));
        continue;
      }
      p.rank = r.peer;
      p.host = r.host;
      p.port = r.port;
      if (p.queue.empty()) p.last_progress = now;  // the stall clock starts with the first queued byte
      p.queue.push_back(std::move(r));
    }
    while (auto a = acceptor_->next(0)) {
      auto c = std::make_unique<peer_in>(opts_.limits);
      c->rank = static_cast<int>(a->claim);
      c->who = a->who;
      c->fd = std::move(a->fd);
      c->last_progress = now;
      try {
        tune_bulk(c->fd.get(), opts_.socket_buffer_bytes);
        set_nonblocking(c->fd.get(), true);
      } catch (const net_error& e) {
        spdlog::error("{}: rank {} ({}): {}", name_, c->rank, c->who, e.what());
        continue;
      }
      in.push_back(std::move(c));
    }
    // Start connections, and time out the ones that stalled.
    for (auto& [rank, p] : out) {
      using st = peer_out::state;
      if (p.st == st::idle && !p.queue.empty()) {
        if (!p.retrying) p.deadline = now + std::chrono::milliseconds(opts_.connect_timeout_ms);
        if (!p.retrying || now >= p.retry_at) {
          p.retrying = false;
          connect_out(p);
        }
      } else if (p.st != st::idle && p.st != st::ready && now >= p.deadline) {
        fail_out(p, "no authenticated connection to " + p.where() + " within " +
                        std::to_string(opts_.connect_timeout_ms) + " ms");
      } else if (p.st == st::ready && !p.queue.empty() && now - p.last_progress >= io_timeout) {
        fail_out(p, p.where() + " took no byte for " + std::to_string(opts_.io_timeout_ms) + " ms");
      }
    }
    for (auto& c : in)
      if (c->fd && (c->got > 0 || c->mid_tensor) && now - c->last_progress >= io_timeout)
        fail_in(*c, {wire::error_code::truncated, "no byte for " + std::to_string(opts_.io_timeout_ms) +
                                                       " ms mid-tensor, " + std::to_string(c->got) + " of " +
                                                       std::to_string(c->want) + " bytes into a frame"});
    in.erase(std::remove_if(in.begin(), in.end(), [](const auto& c) { return !c->fd; }), in.end());

    // Poll everything, waking for the nearest deadline.
    fds.assign(1, pollfd{wake_fd_.get(), POLLIN, 0});
    fd_out.clear();
    auto wake_at = now + std::chrono::seconds(1);
    for (auto& [rank, p] : out) {
      using st = peer_out::state;
      if (p.st == st::idle) {
        if (p.retrying) wake_at = std::min(wake_at, p.retry_at);
        continue;
      }
      short ev = POLLIN;
      if (p.st == st::connecting || p.st == st::answer || (p.st == st::ready && !p.queue.empty())) ev = POLLOUT;
      fds.push_back(pollfd{p.fd.get(), ev, 0});
      fd_out.push_back(&p);
      if (p.st != st::ready) wake_at = std::min(wake_at, p.deadline);
      else if (!p.queue.empty()) wake_at = std::min(wake_at, p.last_progress + io_timeout);
    }
    for (auto& c : in) {
      fds.push_back(pollfd{c->fd.get(), POLLIN, 0});
      if (c->got > 0 || c->mid_tensor) wake_at = std::min(wake_at, c->last_progress + io_timeout);
    }
    const int wait_ms = static_cast<int>(std::max<int64_t>(0, ms_between(now, wake_at) + 1));
    if (::poll(fds.data(), fds.size(), wait_ms) < 0 && errno != EINTR) {
      spdlog::error("{}: poll: {}", name_, std::strerror(errno));
      break;
    }
    if (abort_) break;
    if (fds[0].revents & POLLIN) {
      uint64_t n = 0;
      if (::read(wake_fd_.get(), &n, sizeof n) < 0 && errno != EAGAIN)
        spdlog::error("{}: eventfd read: {}", name_, std::strerror(errno));
    }
    now = clock_type::now();
    for (size_t i = 0; i < fd_out.size(); ++i)
      if (fds[1 + i].revents) step_out(*fd_out[i], fds[1 + i].revents, now);
    for (size_t i = 0; i < in.size(); ++i)
      if (fds[1 + fd_out.size() + i].revents) read_in(*in[i], now);
  }

  // Stopped: every send not yet written fails, every connection closes.
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
    for (auto& r : submitted_) out[r.peer].queue.push_back(std::move(r));
    submitted_.clear();
  }
  for (auto& [rank, p] : out) fail_out(p, stopped_msg);
  in.clear();
}

}  // namespace troupe::net
