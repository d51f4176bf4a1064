// Ring set-up (rendezvous, then one authenticated connection to each neighbour) and the
// collectives. Each call lays out its whole schedule as two ordered lists: the byte stream this
// rank sends right and the stream it receives from the left, each cut into chunks. A send chunk
// may depend on one received chunk (the partial sum or gathered bytes it forwards), so one
// thread with non-blocking sockets and poll keeps both directions busy and pipelines chunks
// across ring steps without per-chunk headers: both sides know the schedule.
#include "comm/tcp_ring.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "comm/auth_acceptor.hpp"
#include "comm/tcp_auth.hpp"

namespace troupe::net {
namespace {

// First bytes of every collective, checked against the left neighbour's: mismatched calls
// (another op, size or root, or a skipped call) fail loudly instead of mixing buffers.
struct op_header {
  uint32_t magic = 0x474e5254;  // "TRNG"
  int32_t kind = 0;  // ring::op_kind, which also says sum or average
  uint64_t seq = 0;
  int64_t n = 0;
  int32_t root = 0;
  int32_t zero = 0;  // no padding: every byte that goes on the wire is initialized
};

// A ring step (tcp_ring::shift) in the header's kind field: not one of ring::op_kind's.
constexpr int32_t shift_kind = 64;

const char* call_name(int32_t kind) {
  return kind == shift_kind ? "shift" : ring::to_string(static_cast<ring::op_kind>(kind));
}

}  // namespace

// One call's schedule: the header each way, then the payload's chunks in order.
struct tcp_ring::impl {
  struct send_item {
    const uint8_t* p;
    size_t len;
    int64_t dep;  // receive item that must be complete first, or -1
  };
  struct recv_item {
    uint8_t* dst;
    size_t len;
    float* reduce_into = nullptr;  // if set: reduce_into = staging + reduce_into
    int64_t count = 0;
    bool scale = false;            // then multiply by 1/N (average, at the segment's owner)
  };
  impl(int32_t kind, uint64_t seq, int64_t n_out, int root, int64_t n_in) : expect_n(n_in) {
    mine.kind = kind;
    mine.seq = seq;
    mine.n = n_out;
    mine.root = root;
    sends.push_back({reinterpret_cast<const uint8_t*>(&mine), sizeof mine, -1});
    recvs.push_back({reinterpret_cast<uint8_t*>(&theirs), sizeof theirs});
  }
  op_header mine{}, theirs{};
  int64_t expect_n;  // what the left rank's header must say it sends
  std::vector<send_item> sends;
  std::vector<recv_item> recvs;
  // The first hop's receives [1, first_hop_end): what the left rank sends as soon as it starts,
  // waiting on nothing else, so how fast it arrives is its link's speed (last_left_rate).
  size_t first_hop_end = 1, first_hop_bytes = 0;
};

tcp_ring::tcp_ring(int rank, int world, ring_options opts) : rank_(rank), world_(world), opts_(std::move(opts)) {}
tcp_ring::~tcp_ring() = default;

std::unique_ptr<tcp_ring> tcp_ring::connect(const launch_env& env, const std::string& secret, ring_options opts) {
  std::unique_ptr<tcp_ring> ring(new tcp_ring(env.rank, env.world_size, std::move(opts)));
  const int N = env.world_size, r = env.rank;
  if (N == 1) return ring;
  if (secret.empty())
    throw net_error("a job of " + std::to_string(N) + " processes needs a shared secret: --secret-file or TROUPE_SECRET");
  const auto& o = ring->opts_;
  // The listener runs the job's challenge from the moment it exists (not only once the
  // rendezvous is over), so no port of the job holds a stranger's connection unanswered.
  const std::string who = "ring rank " + std::to_string(r);
  std::vector<peer_addr> table;
  std::unique_ptr<auth_acceptor> from_left;
  auto listen_on = [&](const std::string& host) {
    socket_fd l = listen_tcp(host, 0);
    const peer_addr me{local_host(l.get()), local_port(l.get())};
    from_left = std::make_unique<auth_acceptor>(std::move(l), secret, who, o.rendezvous.auth_timeout_ms);
    return me;
  };
  if (r == 0) {
    rendezvous_server server(env.master_addr, env.master_port, N, secret, o.rendezvous);
    if (o.on_master_listening) o.on_master_listening(server.port());
    table = server.run(listen_on(env.master_addr));
  } else {
    rendezvous_client client(env.master_addr, env.master_port, r, N, secret, o.rendezvous);
    table = client.join(listen_on(client.local_host()).port);
  }
  // The acceptor answers the left neighbour on its own thread while this one authenticates to
  // the right, so the ring cannot wait on itself; strangers at the listener delay neither.
  const int left = ring::left_of(r, N), timeout = o.rendezvous.timeout_ms;
  const peer_addr& right = table[static_cast<size_t>(ring::right_of(r, N))];
  ring->to_right_ = connect_tcp(right.host, right.port, timeout);
  const auth_pending pending = auth_respond(ring->to_right_.get(), secret, static_cast<uint32_t>(r), timeout);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout);
  for (;;) {
    const auto left_ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    auto a = from_left->next(static_cast<int>(std::clamp<int64_t>(left_ms.count(), 0, rendezvous_poll_ms)));
    if (!a && o.rendezvous.cancelled && o.rendezvous.cancelled())
      throw net_error("ring rank " + std::to_string(r) + ": the job ended while rank " + std::to_string(left) +
                      " was still to connect");
    if (!a && std::chrono::steady_clock::now() < deadline) continue;
    if (!a)
      throw net_error("ring rank " + std::to_string(r) + ": rank " + std::to_string(left) + " did not connect within " +
                      std::to_string(timeout) + " ms");
    if (a->claim == static_cast<uint32_t>(left)) {
      ring->from_left_ = std::move(a->fd);
      break;
    }
    spdlog::error("ring rank {}: refused {}: it is rank {}, expected {}", r, a->who, a->claim, left);
  }
  auth_finish(ring->to_right_.get(), secret, pending, timeout);
  for (int fd : {ring->to_right_.get(), ring->from_left_.get()}) {
    tune_bulk(fd, o.socket_buffer_bytes);
    set_nonblocking(fd, true);
  }
  return ring;
}

void tcp_ring::abort() {
  aborted_ = true;
  // shutdown(2), not close(2): the descriptors stay valid for the thread inside run(), whose
  // blocked poll wakes with a hang-up.
  for (int fd : {to_right_.get(), from_left_.get()})
    if (fd >= 0) ::shutdown(fd, SHUT_RDWR);
}

void ring_interrupt::set(std::shared_ptr<tcp_ring> ring) {
  std::lock_guard<std::mutex> lock(mu_);
  ring_ = ring;
  if (fired_ && ring) ring->abort();
}

bool ring_interrupt::fired() {
  std::lock_guard<std::mutex> lock(mu_);
  return fired_;
}

void ring_interrupt::fire() {
  std::lock_guard<std::mutex> lock(mu_);
  fired_ = true;
  if (auto r = ring_.lock()) r->abort();
}

void tcp_ring::all_reduce(float* data, int64_t n, reduce_op op) {
  run(op == reduce_op::average ? ring::op_kind::all_reduce_average : ring::op_kind::all_reduce_sum, data, n, 0);
}
void tcp_ring::reduce_scatter(float* data, int64_t n, reduce_op op) {
  run(op == reduce_op::average ? ring::op_kind::reduce_scatter_average : ring::op_kind::reduce_scatter_sum, data, n, 0);
}
void tcp_ring::all_gather(float* data, int64_t n) { run(ring::op_kind::all_gather, data, n, 0); }
void tcp_ring::broadcast(float* data, int64_t n, int root) { run(ring::op_kind::broadcast, data, n, root); }

void tcp_ring::check_usable() {
  if (aborted_) broken_ = "stopped: the job is over";
  if (!broken_.empty()) throw net_error("tcp_ring rank " + std::to_string(rank_) + " is broken: " + broken_);
}

void tcp_ring::shift(const float* send, int64_t n_send, float* recv, int64_t n_recv) {
  check_usable();
  if (n_send < 0 || n_recv < 0) throw net_error("tcp_ring: bad arguments to shift");
  if (world_ == 1) {  // the next member is this one
    if (n_send != n_recv)
      throw net_error("tcp_ring: a ring of one shifts " + std::to_string(n_send) + " floats into " +
                      std::to_string(n_recv));
    std::copy(send, send + n_send, recv);
    return;
  }
  const int64_t chunk_elems = std::max<int64_t>(1, static_cast<int64_t>(opts_.chunk_bytes / sizeof(float)));
  impl s(shift_kind, seq_++, n_send, 0, n_recv);
  for (int64_t c = 0; c < ring::chunk_count(n_send, chunk_elems); ++c) {
    const ring::range ch = ring::chunk({0, n_send}, chunk_elems, c);
    s.sends.push_back({reinterpret_cast<const uint8_t*>(send + ch.offset), static_cast<size_t>(ch.count) * sizeof(float), -1});
  }
  for (int64_t c = 0; c < ring::chunk_count(n_recv, chunk_elems); ++c) {
    const ring::range ch = ring::chunk({0, n_recv}, chunk_elems, c);
    s.recvs.push_back({reinterpret_cast<uint8_t*>(recv + ch.offset), static_cast<size_t>(ch.count) * sizeof(float)});
    s.first_hop_bytes += static_cast<size_t>(ch.count) * sizeof(float);
  }
  s.first_hop_end = s.recvs.size();
  pump(s, [](size_t) {});
}

void tcp_ring::all_to_all(const float* send, const std::vector<int64_t>& send_counts, float* recv,
                          const std::vector<int64_t>& recv_counts) {
  ring::all_to_all_over_ring([this](const float* s, int64_t ns, float* r, int64_t nr) { shift(s, ns, r, nr); }, world_,
                             rank_, send, send_counts, recv, recv_counts);
}

void tcp_ring::run(ring::op_kind kind, float* data, int64_t n, int root) {
  check_usable();
  if (n < 0 || root < 0 || root >= world_)
    throw net_error(std::string("tcp_ring: bad arguments to ") + ring::to_string(kind));
  const int N = world_, r = rank_;
  if (N == 1) return;  // one rank: the sum is the input; 1/N == 1 needs no scaling
  const int64_t chunk_elems = std::max<int64_t>(1, static_cast<int64_t>(opts_.chunk_bytes / sizeof(float)));
  staging_.resize(static_cast<size_t>(chunk_elems));
  impl s(static_cast<int32_t>(kind), seq_++, n, root, n);
  auto bytes = [&](const ring::range& ch) { return reinterpret_cast<uint8_t*>(data + ch.offset); };
  auto len = [](const ring::range& ch) { return static_cast<size_t>(ch.count) * sizeof(float); };
  // Both phases follow ring::segments_at_hop. A send at hop h forwards what was received at hop
  // h - 1 (the same segment, so chunk c waits on receive chunk c); the gather phase's first send
  // is the segment completed by the reduce phase's last receive.
  int64_t prev_recv = -1;  // index of the first receive item of the previous hop, or -1
  auto run_phase = [&](ring::phase p) {
    for (int hop = 0; hop < N - 1; ++hop) {
      const ring::hop_segments seg = ring::segments_at_hop(p, r, N, hop);
      const ring::range to_send = ring::segment(n, N, seg.send), to_recv = ring::segment(n, N, seg.recv);
      for (int64_t c = 0; c < ring::chunk_count(to_send.count, chunk_elems); ++c) {
        const ring::range ch = ring::chunk(to_send, chunk_elems, c);
        s.sends.push_back({bytes(ch), len(ch), prev_recv < 0 ? -1 : prev_recv + c});
      }
      prev_recv = static_cast<int64_t>(s.recvs.size());
      for (int64_t c = 0; c < ring::chunk_count(to_recv.count, chunk_elems); ++c) {
        const ring::range ch = ring::chunk(to_recv, chunk_elems, c);
        if (p == ring::phase::reduce)  // a partial sum: into staging, then added to ours
          s.recvs.push_back({reinterpret_cast<uint8_t*>(staging_.data()), len(ch), data + ch.offset, ch.count,
                             ring::is_average(kind) && ring::is_last_hop(hop, N)});
        else
          s.recvs.push_back({bytes(ch), len(ch)});
        if (hop == 0 && prev_recv == 1) s.first_hop_bytes += len(ch);
      }
      if (hop == 0 && prev_recv == 1) s.first_hop_end = s.recvs.size();
    }
  };
  if (ring::is_reduction(kind)) run_phase(ring::phase::reduce);
  if (ring::gathers(kind)) run_phase(ring::phase::gather);
  if (kind == ring::op_kind::broadcast) {
    const int64_t first = static_cast<int64_t>(s.recvs.size());
    const ring::range all{0, n};
    for (int64_t c = 0; c < ring::chunk_count(n, chunk_elems); ++c) {
      const ring::range ch = ring::chunk(all, chunk_elems, c);
      if (r == root) {
        s.sends.push_back({bytes(ch), len(ch), -1});
      } else {
        s.recvs.push_back({bytes(ch), len(ch)});
        if (ring::forwards(r, N, root)) s.sends.push_back({bytes(ch), len(ch), first + c});
      }
    }
  }
  pump(s, [&](size_t i) {
    const auto& it = s.recvs[i];
    if (!it.reduce_into) return;
    ring::add(it.reduce_into, staging_.data(), it.reduce_into, it.count);  // partial first: the ring's order
    if (it.scale) ring::scale(it.reduce_into, it.count, 1.0f / static_cast<float>(N));
  });
}

void tcp_ring::pump(impl& s, const std::function<void(size_t)>& received) {
  const int N = world_, r = rank_;
  const char* what = call_name(s.mine.kind);
  auto complete = [&](size_t i) {
    if (i > 0) return received(i);
    const op_header &mine = s.mine, &theirs = s.theirs;
    if (theirs.magic != mine.magic || theirs.kind != mine.kind || theirs.seq != mine.seq || theirs.n != s.expect_n ||
        theirs.root != mine.root)
      throw net_error("collective mismatch: rank " + std::to_string(r) + " runs " + what + " #" +
                      std::to_string(mine.seq) + " expecting " + std::to_string(s.expect_n) + " floats, its left rank " +
                      std::to_string(ring::left_of(r, N)) + " runs " + call_name(theirs.kind) + " #" +
                      std::to_string(theirs.seq) + " of " + std::to_string(theirs.n));
  };
  const size_t first_hop_end = s.first_hop_end, first_hop_bytes = s.first_hop_bytes;
  // The slow link's shaper: how many bytes the cap lets out by now, and how long until the next
  // slice (64 KiB, or what is left) may go; unlimited without --slow-link.
  const bool shaped = opts_.send_bytes_per_s > 0 || opts_.send_latency_s > 0;
  const auto started = std::chrono::steady_clock::now();
  double shaped_sent = 0;
  auto budget = [&]() -> size_t {
    if (!shaped) return SIZE_MAX;
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count() - opts_.send_latency_s;
    if (t < 0) return 0;
    if (opts_.send_bytes_per_s <= 0) return SIZE_MAX;
    const double allowed = t * opts_.send_bytes_per_s - shaped_sent;
    return allowed < 1 ? 0 : static_cast<size_t>(allowed);
  };
  auto wait_ms = [&](size_t want) {
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    double until = opts_.send_latency_s;
    if (opts_.send_bytes_per_s > 0) until += (shaped_sent + double(want)) / opts_.send_bytes_per_s;
    return std::max(1, static_cast<int>(std::ceil((until - t) * 1e3)));
  };
  last_left_rate_ = 0;
  std::chrono::steady_clock::time_point first_byte{};
  try {
    const int out = to_right_.get(), in = from_left_.get();
    size_t si = 0, ri = 0, soff = 0, roff = 0;
    while (si < s.sends.size() || ri < s.recvs.size()) {
      bool moved = false;
      while (si < s.sends.size() && s.sends[si].dep < static_cast<int64_t>(ri)) {
        const auto& it = s.sends[si];
        const size_t allowed = budget();
        if (allowed == 0) break;
        const ssize_t k = ::send(out, it.p + soff, std::min(it.len - soff, allowed), MSG_NOSIGNAL);
        if (k < 0 && (errno == EAGAIN || errno == EINTR)) break;
        if (k < 0) throw net_error(std::string("send to right rank: ") + std::strerror(errno));
        moved = true;
        bytes_sent_ += static_cast<uint64_t>(k);
        shaped_sent += double(k);
        if ((soff += static_cast<size_t>(k)) == it.len) ++si, soff = 0;
      }
      while (ri < s.recvs.size()) {
        const auto& it = s.recvs[ri];
        const ssize_t k = ::recv(in, it.dst + roff, it.len - roff, 0);
        if (k < 0 && (errno == EAGAIN || errno == EINTR)) break;
        if (k < 0) throw net_error(std::string("recv from left rank: ") + std::strerror(errno));
        if (k == 0) throw net_error("left rank " + std::to_string(ring::left_of(r, N)) + " closed the connection");
        moved = true;
        if (ri == 1 && roff == 0 && first_hop_bytes > 0) first_byte = std::chrono::steady_clock::now();
        if ((roff += static_cast<size_t>(k)) == it.len) {
          complete(ri++), roff = 0;
          if (ri == first_hop_end && first_hop_bytes > 0) {
            // Below 0.1 ms the clock's and the loop's granularity decide: the rate is "at least".
            const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - first_byte).count();
            last_left_rate_ = static_cast<double>(first_hop_bytes) / std::max(took, 1e-4);
          }
        }
      }
      if (moved) continue;
      // An fd with nothing to wait for is left out (-1), so a hang-up there cannot spin this loop.
      bool can_send = si < s.sends.size() && s.sends[si].dep < static_cast<int64_t>(ri);
      // Held back by the slow link's cap: wake when the next slice may go, not on POLLOUT.
      int timeout = opts_.io_timeout_ms;
      if (can_send && budget() == 0) {
        timeout = std::min(timeout, wait_ms(std::min<size_t>(s.sends[si].len - soff, size_t{64} << 10)));
        can_send = false;
      }
      pollfd p[2] = {{ri < s.recvs.size() ? in : -1, POLLIN, 0}, {can_send ? out : -1, POLLOUT, 0}};
      const int rc = ::poll(p, 2, timeout);
      if (rc == 0 && timeout < opts_.io_timeout_ms) continue;  // the shaper's wait is over
      if (rc == 0)
        throw net_error("no progress for " + std::to_string(opts_.io_timeout_ms) + " ms (left rank " +
                        std::to_string(ring::left_of(r, N)) + ", right rank " + std::to_string(ring::right_of(r, N)) + ")");
      if (rc < 0 && errno != EINTR) throw net_error(std::string("poll: ") + std::strerror(errno));
    }
  } catch (const net_error& e) {
    broken_ = std::string(what) + ": " + (aborted_ ? "stopped: the job is over" : e.what());
    throw net_error("tcp_ring rank " + std::to_string(r) + ": " + broken_);
  }
}

}  // namespace troupe::net
