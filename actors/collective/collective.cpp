// collective: one rank of a ring group. It keeps one record per collective in flight (by seq):
// chunks from the left neighbour that arrive before the local request wait in that record. Each
// chunk is handled on arrival and forwarded, so chunks pipeline through the ring. In one process
// the ranks of a collective share one accumulator: a partial sum is added in place where the
// left neighbour left it, and a final chunk is already where every rank reads it. It does not
// retry or time out: whoever owns the group monitors its members and stops the job when one dies.
#include "actors/collective/collective.hpp"

#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <deque>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

#include "actors/collective/collective_pool.hpp"

namespace troupe {

namespace {

struct op_record {
  bool started = false;
  ring::op_kind kind = ring::op_kind::all_reduce_sum;
  int64_t total = 0;
  tensor input;
  tensor acc;     // the group's shared accumulator (ranks > 1, reductions and all_gather)
  tensor result;  // all_reduce / all_gather: acc itself; broadcast: the root's input
  int64_t expected = 0, received = 0;  // elements this rank receives from its left neighbour
  caf::response_promise promise;
  std::vector<ring_chunk> early;  // arrived before the local request
  // The first hop from the left rank (chunks it sent as it started): bytes, from its start to
  // the last such chunk's arrival here. The link's speed, which a late left rank does not lower.
  double hop_bytes = 0, hop_from = 0, hop_last = 0;
};

struct collective_state {
  int rank = 0, ranks = 1;
  int64_t chunk_elems = 1 << 18;
  caf::actor right;
  double send_bytes_per_s = 0, send_latency_s = 0;  // a shaped link (ring_setup)
  double link_free_at = 0;                            // when the shaped link has sent what it was given
  int64_t latency_seq = -1;                           // the last collective whose first send waited the latency
  std::shared_ptr<collective_pool> pool;
  std::map<int64_t, op_record> ops;
  std::deque<collective_log_entry> log;  // the last kLogEntries collectives, oldest first
  static inline const char* name = "collective";
};

using self_ptr = caf::stateful_actor<collective_state>*;

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

[[noreturn]] void fail(const self_ptr self, int64_t seq, const std::string& what) {
  throw std::invalid_argument("collective rank " + std::to_string(self->state.rank) + ", seq " + std::to_string(seq) +
                              ": " + what);
}

collective_log_entry& log_entry(self_ptr self, int64_t seq) {
  auto& s = self->state;
  for (auto it = s.log.rbegin(); it != s.log.rend(); ++it)
    if (it->seq == seq) return *it;
  if (static_cast<int>(s.log.size()) >= kLogEntries) s.log.pop_front();
  collective_log_entry e;
  e.seq = seq;
  e.left = ring::left_of(s.rank, s.ranks);
  e.right = ring::right_of(s.rank, s.ranks);
  e.state = "chunks_before_request";
  return s.log.emplace_back(std::move(e));
}

// The segment this rank sends at hop 0 of phase p; every later send forwards what arrived.
int first_send(const collective_state& s, ring::phase p) { return ring::segments_at_hop(p, s.rank, s.ranks, 0).send; }

// Every chunk to the right neighbour goes here. A shaped link lets each leave only once the ones
// before it would have crossed at its rate (delayed sends whose due times never decrease, so
// their order holds), the first of each collective after the link's latency.
void to_right(self_ptr self, ring_chunk m) {
  auto& s = self->state;
  if (s.send_bytes_per_s <= 0 && s.send_latency_s <= 0) {
    self->send(s.right, std::move(m));
    return;
  }
  const double now = now_seconds();
  double leaves = std::max(now, s.link_free_at);
  if (m.seq != s.latency_seq) leaves += s.send_latency_s, s.latency_seq = m.seq;
  // A first-hop chunk is timed from when the link starts on it, not from when it queued behind
  // other collectives' traffic: the receiver measures the link's rate, as the TCP ring does.
  if (m.first_hop_sent_at > 0) m.first_hop_sent_at = leaves;
  if (s.send_bytes_per_s > 0) leaves += static_cast<double>(m.data.count * static_cast<int64_t>(sizeof(float))) / s.send_bytes_per_s;
  s.link_free_at = leaves;
  self->delayed_send(s.right, std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::duration<double>(leaves - now)),
                     std::move(m));
}

// A collective's first sends: the chunks carry when this rank started, for the receiver's timing.
void send_chunks(self_ptr self, int64_t seq, const op_record& op, int phase, int origin, ring::range span,
                 const tensor& base, int64_t base_at) {
  auto& s = self->state;
  const double started = now_seconds();
  for (int64_t c = 0; c < ring::chunk_count(span.count, s.chunk_elems); ++c) {
    const ring::range ch = ring::chunk(span, s.chunk_elems, c);
    to_right(self, ring_chunk{seq, static_cast<int32_t>(op.kind), phase, origin, op.total, ch.offset,
                              tensor_slice{base, ch.offset - base_at, ch.count}, started});
  }
}

// A chunk arrived: a first-hop one adds to the left link's timing.
void time_hop(op_record& op, const ring_chunk& m) {
  if (m.first_hop_sent_at <= 0) return;
  const double now = now_seconds();
  op.hop_bytes += static_cast<double>(m.data.count * static_cast<int64_t>(sizeof(float)));
  op.hop_from = op.hop_from > 0 ? std::min(op.hop_from, m.first_hop_sent_at) : m.first_hop_sent_at;
  op.hop_last = std::max(op.hop_last, now);
}

void finish_if_done(self_ptr self, int64_t seq) {
  auto it = self->state.ops.find(seq);
  op_record& op = it->second;
  if (!op.started || op.received < op.expected) return;
  op.result.freeze();  // every rank sharing it freezes it; nobody writes it any more
  const double now = now_seconds();
  collective_log_entry& e = log_entry(self, seq);
  e.state = "done";
  e.finished_at = now;
  // Drop this rank's hold on the accumulator before replying, so that once the requester has
  // every reply and lets go of the results, the buffer is free for the next collective.
  caf::response_promise promise = std::move(op.promise);
  const double hop_s = op.hop_last - op.hop_from;
  collective_result reply{seq, static_cast<int32_t>(op.kind), std::move(op.result), now,
                          op.hop_bytes > 0 && hop_s > 0 ? op.hop_bytes / hop_s : 0.0};
  e.left_link_rate = reply.left_link_rate;
  self->state.ops.erase(it);
  promise.deliver(std::move(reply));
}

// A final chunk (phase 1). In one process it already lies in this rank's result (the shared
// accumulator, or the broadcast root's tensor); otherwise it is copied there.
void take_final(op_record& op, const ring_chunk& m) {
  const tensor_slice& d = m.data;
  if (op.result.shares_storage_with(d.base)) return;
  if (op.result.empty() && op.total > 0 && d.base.numel() == op.total && d.offset == m.at) {
    op.result = d.base;  // a whole tensor aligned with ours: adopt it by reference
    return;
  }
  if (op.result.empty() || op.result.frozen()) {  // nothing yet, or someone else's: own a copy
    tensor mine = op.result.empty() ? tensor::uninitialized({op.total}) : op.result.clone();
    op.result = std::move(mine);
  }
  ring::copy(op.result.data() + m.at, d.data(), d.count);
}

void on_chunk(self_ptr self, op_record& op, const ring_chunk& m) {
  auto& s = self->state;
  if (m.op != static_cast<int32_t>(op.kind) || m.total != op.total)
    fail(self, m.seq, std::string("peers disagree: local ") + ring::to_string(op.kind) + " of " +
                          std::to_string(op.total) + ", left neighbour " +
                          ring::to_string(static_cast<ring::op_kind>(m.op)) + " of " + std::to_string(m.total));
  const int64_t n = m.data.count;
  op.received += n;
  log_entry(self, m.seq).received = op.received;
  if (m.phase == 0) {
    // partial (the left neighbour's input, or the accumulator in place) + own -> accumulator
    float* acc = op.acc.data() + m.at;
    ring::add(acc, m.data.data(), std::as_const(op.input).data() + m.at, n);
    // origin is the segment's index; before the last hop it is a partial sum to pass on.
    if (!ring::is_last_hop(ring::hop_receiving(ring::phase::reduce, s.rank, s.ranks, m.origin), s.ranks)) {
      to_right(self, ring_chunk{m.seq, m.op, 0, m.origin, m.total, m.at, tensor_slice{op.acc, m.at, n}});
      return;
    }
    if (ring::is_average(op.kind)) ring::scale(acc, n, 1.0f / static_cast<float>(s.ranks));
    if (ring::gathers(op.kind)) {  // the complete segment is this rank's first gather send
      to_right(self, ring_chunk{m.seq, m.op, 1, first_send(s, ring::phase::gather), m.total, m.at,
                                tensor_slice{op.acc, m.at, n}});
    } else {
      const int64_t at = m.at - ring::segment(op.total, s.ranks, s.rank).offset;
      ring::copy(op.result.data() + at, acc, n);
    }
  } else {
    take_final(op, m);
    const bool more = op.kind == ring::op_kind::broadcast
                          ? ring::forwards(s.rank, s.ranks, m.origin)
                          : !ring::is_last_hop(ring::hop_receiving(ring::phase::gather, s.rank, s.ranks, m.origin),
                                               s.ranks);
    if (more) {
      ring_chunk forward = m;
      forward.first_hop_sent_at = 0;
      to_right(self, std::move(forward));
    }
  }
}

void start(self_ptr self, collective_request& r) {
  auto& s = self->state;
  op_record& op = s.ops[r.seq];
  if (op.started) fail(self, r.seq, "seq requested twice");
  op.started = true;
  op.kind = static_cast<ring::op_kind>(r.op);
  op.total = r.total;
  op.input = std::move(r.data);
  op.input.freeze();
  op.promise = self->make_response_promise();
  if (r.op < 0 || r.op > static_cast<int32_t>(ring::op_kind::broadcast)) fail(self, r.seq, "unknown op");
  collective_log_entry& e = log_entry(self, r.seq);
  e.op = ring::to_string(op.kind);
  e.total = op.total;
  e.state = "running";
  e.started_at = now_seconds();
  const ring::range mine = ring::segment(op.total, s.ranks, s.rank);
  const bool root = op.kind == ring::op_kind::broadcast && r.root == s.rank;
  const int64_t want = op.kind == ring::op_kind::all_gather                             ? mine.count
                       : op.kind == ring::op_kind::broadcast && r.root != s.rank ? op.input.numel()
                                                                                        : op.total;
  if (op.input.numel() != want)
    fail(self, r.seq, std::string(ring::to_string(op.kind)) + " of " + std::to_string(op.total) + " got " +
                          std::to_string(op.input.numel()) + " elements");
  // What arrives from the left: every segment but the one this rank starts (reduce phase), and
  // every segment but its own (gather phase). A rank with an empty segment still relays.
  if (s.ranks == 1 || root) {  // nothing to receive: the input is the result, by reference
    if (root && s.ranks > 1) send_chunks(self, r.seq, op, 1, s.rank, {0, op.total}, op.input, 0);
    op.result = op.input;
    op.expected = 0;
  } else if (ring::is_reduction(op.kind)) {
    const int first = first_send(s, ring::phase::reduce);
    const ring::range first_seg = ring::segment(op.total, s.ranks, first);
    op.expected = op.total - first_seg.count + (ring::gathers(op.kind) ? op.total - mine.count : 0);
    op.acc = s.pool->acquire(r.seq, op.total, s.ranks);
    op.result = ring::gathers(op.kind) ? op.acc : tensor::uninitialized({mine.count});
    send_chunks(self, r.seq, op, 0, first, first_seg, op.input, 0);  // the first hop reads our input
  } else if (op.kind == ring::op_kind::all_gather) {
    op.expected = op.total - mine.count;
    op.acc = s.pool->acquire(r.seq, op.total, s.ranks);
    op.result = op.acc;
    // An empty segment is never written: the others may have finished (and frozen acc) already.
    if (mine.count > 0) ring::copy(op.acc.data() + mine.offset, std::as_const(op.input).data(), mine.count);
    send_chunks(self, r.seq, op, 1, first_send(s, ring::phase::gather), mine, op.acc, 0);
  } else {  // broadcast, not the root: the result comes with the root's chunks
    op.expected = op.total;
    if (op.total == 0) op.result = tensor::uninitialized({0});
  }
  e.expected = op.expected;
  std::vector<ring_chunk> early = std::move(op.early);
  for (const auto& m : early) on_chunk(self, op, m);
  finish_if_done(self, r.seq);
}

caf::behavior collective(self_ptr self, std::shared_ptr<collective_pool> pool) {
  self->state.pool = std::move(pool);
  // A refused request (or peers that disagree) ends this member with the reason, after telling
  // every requester still waiting on it.
  self->set_exception_handler([self](caf::scheduled_actor*, std::exception_ptr& eptr) -> caf::error {
    std::string what = "collective: unknown failure";
    try {
      std::rethrow_exception(eptr);
    } catch (const std::exception& e) {
      what = e.what();
    }
    auto err = caf::make_error(caf::sec::runtime_error, what);
    for (auto& [seq, op] : self->state.ops) {
      log_entry(self, seq).state = "failed";
      if (op.started && op.promise.pending()) op.promise.deliver(err);
    }
    return err;
  });
  return {
      [self](const ring_setup& m) {
        auto& s = self->state;
        s.rank = m.rank;
        s.ranks = m.ranks;
        s.chunk_elems = std::max<int64_t>(1, m.chunk_elems);
        s.right = m.right;
        s.send_bytes_per_s = m.send_bytes_per_s;
        s.send_latency_s = m.send_latency_s;
      },
      [self](collective_request& r) { start(self, r); },
      [self](ring_chunk& m) {
        op_record& op = self->state.ops[m.seq];
        time_hop(op, m);
        if (!op.started) {
          log_entry(self, m.seq).received += m.data.count;
          op.early.push_back(std::move(m));
          return;
        }
        on_chunk(self, op, m);
        finish_if_done(self, m.seq);
      },
      [self](const collective_dump_request&) {
        const auto& s = self->state;
        collective_log out{s.rank, s.ranks, {s.log.begin(), s.log.end()}, {}};
        out.stamp(now_seconds());
        return out;
      },
  };
}

}  // namespace

collective_options collective_options_from_env() {
  collective_options o;
  if (const char* kb = std::getenv("TROUPE_CHUNK_KB"); kb && std::atoll(kb) > 0) o.chunk_bytes = std::atoll(kb) * 1024;
  if (const char* mb = std::getenv("TROUPE_COLLECTIVE_POOL_MB"); mb && std::atoll(mb) >= 0)
    o.pool_bytes = std::atoll(mb) << 20;
  return o;
}

std::vector<caf::actor> spawn_collective_group(caf::actor_system& sys, int ranks, collective_options opt) {
  if (ranks <= 0) throw std::invalid_argument("spawn_collective_group: ranks must be positive");
  auto pool = std::make_shared<collective_pool>(opt.pool_bytes);
  std::vector<caf::actor> group;
  for (int r = 0; r < ranks; ++r) group.push_back(sys.spawn<caf::detached>(collective, pool));
  const int64_t chunk_elems = std::max<int64_t>(1, opt.chunk_bytes / static_cast<int64_t>(sizeof(float)));
  for (int r = 0; r < ranks; ++r) {
    const auto shape = opt.shaped.count(r) ? opt.shaped.at(r) : std::pair<double, double>{0, 0};
    caf::anon_send(group[r], ring_setup{r, ranks, chunk_elems, group[ring::right_of(r, ranks)], shape.first, shape.second});
  }
  return group;
}

std::vector<tensor> run_collective(caf::actor_system& sys, const std::vector<caf::actor>& group, int64_t seq,
                                   ring::op_kind op, const std::vector<tensor>& inputs, int64_t total, int root) {
  caf::scoped_actor self{sys};
  std::vector<tensor> out(group.size());
  using handle = decltype(self->request(group[0], caf::infinite, collective_request{}));
  std::vector<handle> pending;
  for (size_t r = 0; r < group.size(); ++r)
    pending.push_back(self->request(group[r], caf::infinite,
                                    collective_request{seq, static_cast<int32_t>(op), root, total, inputs[r]}));
  std::string error;
  for (size_t r = 0; r < group.size(); ++r)
    pending[r].receive([&](collective_result& res) { out[r] = std::move(res.data); },
                       [&](caf::error& e) { error = sys.render(e); });
  if (!error.empty()) throw std::runtime_error("run_collective: " + error);
  return out;
}

std::vector<collective_log> dump_collective_group(caf::actor_system& sys, const std::vector<caf::actor>& group,
                                                  std::chrono::milliseconds timeout) {
  caf::scoped_actor self{sys};
  std::vector<collective_log> out;
  for (const auto& member : group)
    self->request(member, timeout, collective_dump_request{})
        .receive([&](collective_log& log) { out.push_back(std::move(log)); }, [](caf::error&) {});
  return out;
}

std::string to_string(const collective_log& log) {
  const std::string who =
      (log.group.empty() ? "collective rank " : log.group + " member ") + std::to_string(log.rank) + "/" + std::to_string(log.ranks);
  if (log.entries.empty()) return who + ": no collective called yet\n";
  std::string s;
  for (const auto& e : log.entries) {
    // The ledger's times, from the member's clock: how long it took or has waited so far, and
    // how fast its left link delivered (a slow peer shows as a wait, a slow link as a low rate).
    std::string timing;
    if (e.started_at > 0 && e.finished_at > 0) timing = fmt::format(", took {:.1f} ms", 1e3 * e.seconds);
    else if (e.started_at > 0) timing = fmt::format(", waiting {:.1f} ms so far", 1e3 * e.seconds);
    if (e.left_link_rate > 0) timing += fmt::format(", left link {:.1f} MB/s", e.left_link_rate / 1e6);
    s += who + " seq " +
         std::to_string(e.seq) + " " + (e.op.empty() ? "?" : e.op) + " of " + std::to_string(e.total) +
         (e.left < 0 ? std::string() : " (left " + std::to_string(e.left) + ", right " + std::to_string(e.right) + ")") +
         ": " + e.state + ", " + std::to_string(e.received) + "/" + std::to_string(e.expected) + " elements received" +
         timing + "\n";
  }
  return s;
}

}  // namespace troupe
