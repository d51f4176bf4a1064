// net_collective: a collective member over a back end of comm/: the TCP ring, MPI or Gloo
// across processes, or a device engine (NCCL) between accelerators (declared in net_actors.hpp). A detached blocking actor, so the thread that blocks in the back
// end is the actor's own and the
// requester (the stage) keeps computing while a bucket is on the wire, as with the in-process
// group. It deliberately pipelines nothing across requests: tcp_ring pipelines chunks within one.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>
#include <utility>

#include "comm/ring_schedule.hpp"
#include "actors/collective/collective.hpp"
#include "actors/collective/collective_pool.hpp"
#include "actors/messages.hpp"
#include "actors/process/net_actors.hpp"

namespace troupe {

namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Runs one request on the ring; the reply is shaped like collective.cpp's.
// A request whose tensor nobody else holds (the stage hands each bucket over) is reduced in its
// own storage: a copy of a 16 MiB bucket costs more than the all-reduce's whole overhead may.
// Otherwise buffers come from a pool, reused once the stage has let go of an earlier result: a
// fresh buffer per bucket costs a page fault per 4 KiB, more than the copy itself.
collective_result run_one(net::group_backend& ring, collective_pool& pool, collective_request& q) {
  const auto kind = static_cast<ring::op_kind>(q.op);
  if (!q.data.where().is_cpu())
    throw net::net_error("collective " + std::to_string(q.seq) + ": a tensor on " + q.data.where().to_string() +
                         " reaches a group that reduces host memory");
  const int N = ring.world(), r = ring.rank();
  const auto seg = ring::segment(q.total, N, r);
  const bool whole_input = kind != ring::op_kind::all_gather && q.data.numel() == q.total && q.total > 0;
  const bool handed_over = whole_input && q.data.reclaim();
  tensor full = handed_over ? std::move(q.data) : pool.acquire(q.seq, q.total, 1);
  const float* given = std::as_const(q.data).data();  // the request's values, read only
  if (!handed_over) switch (kind) {
    case ring::op_kind::all_reduce_sum:
    case ring::op_kind::all_reduce_average:
    case ring::op_kind::reduce_scatter_sum:
    case ring::op_kind::reduce_scatter_average:
    case ring::op_kind::broadcast:
      if (q.data.numel() == q.total && q.total > 0)
        std::copy(given, given + q.total, full.data());
      else if (kind != ring::op_kind::broadcast || r == q.root)
        throw net::net_error("collective " + std::to_string(q.seq) + ": " + std::to_string(q.data.numel()) +
                             " elements given, total is " + std::to_string(q.total));
      break;
    case ring::op_kind::all_gather:
      if (q.data.numel() != seg.count)
        throw net::net_error("all_gather " + std::to_string(q.seq) + ": segment of " +
                             std::to_string(q.data.numel()) + " elements, expected " + std::to_string(seg.count));
      std::copy(given, given + seg.count, full.data() + seg.offset);
      break;
  }
  const auto op = ring::is_average(kind) ? net::reduce_op::average : net::reduce_op::sum;
  switch (kind) {
    case ring::op_kind::all_reduce_sum:
    case ring::op_kind::all_reduce_average:
      ring.all_reduce(full.data(), q.total, op);
      break;
    case ring::op_kind::reduce_scatter_sum:
    case ring::op_kind::reduce_scatter_average: {
      ring.reduce_scatter(full.data(), q.total, op);
      tensor mine({seg.count}, std::vector<float>(full.data() + seg.offset, full.data() + seg.offset + seg.count));
      full = std::move(mine);
      break;
    }
    case ring::op_kind::all_gather:
      ring.all_gather(full.data(), q.total);
      break;
    case ring::op_kind::broadcast:
      ring.broadcast(full.data(), q.total, q.root);
      break;
  }
  full.freeze();
  collective_result out{q.seq, q.op, std::move(full), now_seconds()};
  if (const auto* tcp = dynamic_cast<const net::tcp_ring*>(&ring)) out.left_link_rate = tcp->last_left_rate();
  return out;
}

// A device group's member: the values stay where the stage put them. The stage hands each tensor
// over whole (nobody else holds it), so it is reduced or gathered in place and comes back as the
// result: a reduce-scatter's segment and an all-gather's input sit at their ring::segment places
// in it. Cutting or placing a segment here would need a device buffer of the collective's own,
// ordered on a stream it does not have; the stage does that on its own.
collective_result run_on_device(net::group_backend& group, collective_request& q) {
  const auto kind = static_cast<ring::op_kind>(q.op);
  const std::string what = "collective " + std::to_string(q.seq) + " (" + ring::to_string(kind) + ")";
  if (q.data.where().is_cpu())
    throw net::net_error(what + ": a host tensor reaches a group that reduces accelerator memory");
  if (q.data.numel() != q.total || q.data.type() != dtype::f32 || !q.data.reclaim())
    throw net::net_error(what + ": a device group works in place on an f32 tensor of all " + std::to_string(q.total) +
                         " elements that its sender handed over; got " + std::to_string(q.data.numel()) +
                         (q.data.type() != dtype::f32 ? " values of another dtype" : " values still held elsewhere"));
  float* data = q.data.data_as<float>();
  const auto op = ring::is_average(kind) ? net::reduce_op::average : net::reduce_op::sum;
  switch (kind) {
    case ring::op_kind::all_reduce_sum:
    case ring::op_kind::all_reduce_average:
      group.all_reduce(data, q.total, op);
      break;
    case ring::op_kind::reduce_scatter_sum:
    case ring::op_kind::reduce_scatter_average:
      group.reduce_scatter(data, q.total, op);
      break;
    case ring::op_kind::all_gather:
      group.all_gather(data, q.total);
      break;
    case ring::op_kind::broadcast:
      group.broadcast(data, q.total, q.root);
      break;
  }
  q.data.freeze();
  return collective_result{q.seq, q.op, std::move(q.data), now_seconds()};
}

// The first member makes the group's id and sends it to the others, which wait for it (across
// processes, group_id takes it through the group's store); then every member joins (each on its
// own thread: joining returns once all have).
std::shared_ptr<net::group_backend> join_device_group(caf::blocking_actor* self, const net_collective_args& a) {
  std::string id;
  if (a.group_id) {
    id = a.group_id();
  } else if (a.env.rank == 0) {
    id = a.device_engine->make_id();
    for (const caf::actor& peer : a.id_to) self->send(peer, device_group_id{id});
  } else {
    bool arrived = false;
    self->receive(
        [&](device_group_id& m) {
          id = std::move(m.id);
          arrived = true;
        },
        caf::after(std::chrono::milliseconds(a.rendezvous_timeout_ms)) >> [] {});
    if (!arrived)
      throw net::net_error("the id of its " + a.device_engine->name() + " group did not arrive from the group's first member within " +
                           std::to_string(a.rendezvous_timeout_ms) + " ms");
  }
  return a.device_engine->join(id, a.env.rank, a.env.world_size, a.device_index);
}

}  // namespace

std::shared_ptr<net::group_backend> connect_member(net_collective_args a) {
  if (a.make_backend) return a.make_backend();
  if (a.rendezvous.valid()) {
    if (a.rendezvous.wait_for(std::chrono::milliseconds(a.rendezvous_timeout_ms)) != std::future_status::ready)
      throw net::net_error("the address of its group's rendezvous did not arrive within " +
                           std::to_string(a.rendezvous_timeout_ms) + " ms");
    const auto [host, port] = a.rendezvous.get();  // a broken promise: the job ended first
    a.env.master_addr = host;
    a.env.master_port = port;
  }
  if (a.interrupt) a.ring.rendezvous.cancelled = [i = a.interrupt] { return i->fired(); };
  std::shared_ptr<net::tcp_ring> tcp = net::tcp_ring::connect(a.env, a.secret, a.ring);
  if (a.interrupt) a.interrupt->set(tcp);
  return tcp;
}

namespace {

// What a member's thread did last, for the watchdog: written by the thread that runs the
// collectives, read by the member's front actor while that thread may be inside one.
struct log_book {
  std::mutex mu;
  collective_log log;
  std::string engine;

  void begin(const collective_request& q) {
    std::lock_guard<std::mutex> lock(mu);
    collective_log_entry e;
    e.seq = q.seq;
    e.op = ring::to_string(static_cast<ring::op_kind>(q.op));
    e.total = q.total;
    e.left = e.right = -1;  // the engine's own peers: not known here
    e.state = "inside " + engine;
    e.expected = q.total;
    e.started_at = now_seconds();
    log.entries.push_back(std::move(e));
    if (log.entries.size() > static_cast<size_t>(kLogEntries)) log.entries.erase(log.entries.begin());
  }
  void end(int64_t seq, std::string state, double left_link_rate = 0) {
    std::lock_guard<std::mutex> lock(mu);
    for (auto& e : log.entries)
      if (e.seq == seq) {
        e.state = std::move(state);
        e.finished_at = now_seconds();
        e.left_link_rate = left_link_rate;
        if (e.state == "done") e.received = e.total;
      }
  }
  collective_log snapshot() {
    std::lock_guard<std::mutex> lock(mu);
    collective_log out = log;
    out.stamp(now_seconds());
    return out;
  }
};

void net_collective(caf::blocking_actor* self, net_collective_args a, std::shared_ptr<log_book> book) {
  std::shared_ptr<net::group_backend> ring;
  collective_pool pool(collective_options_from_env().pool_bytes);
  std::string broken;
  const int rank = a.env.rank;
  const bool on_device = a.device_engine != nullptr;
  try {
    ring = on_device ? join_device_group(self, a) : connect_member(std::move(a));
  } catch (const std::exception& e) {
    broken = std::string("data plane of rank ") + std::to_string(rank) + ": " + e.what();
    spdlog::error("{}", broken);
  }
  bool running = true;
  self->receive_while(running)(
      [&](collective_request& q) {
        auto rp = self->make_response_promise();
        book->begin(q);
        if (broken.empty()) {
          try {
            collective_result r = on_device ? run_on_device(*ring, q) : run_one(*ring, pool, q);
            const double rate = r.left_link_rate;
            rp.deliver(std::move(r));
            book->end(q.seq, "done", rate);
            return;
          } catch (const std::exception& e) {
            broken = "data plane of rank " + std::to_string(rank) + ", collective " + std::to_string(q.seq) +
                     ": " + e.what();
            spdlog::error("{}", broken);
            ring.reset();  // close the sockets now: the neighbours fail at once instead of timing out
          }
        }
        book->end(q.seq, "failed: " + broken);
        rp.deliver(caf::make_error(caf::sec::runtime_error, broken));
      },
      [&](caf::exit_msg& em) {
        running = false;
        self->fail_state(std::move(em.reason));
      });
}

// The member as its group and the job see it: collectives and a device group's id go on, in
// order, to the thread that runs them; a dump is answered from the log book at once, even while
// that thread waits inside a collective for a peer (what the watchdog needs to say which
// collective hangs). Linked: either ends with the other.
caf::behavior net_collective_front(caf::event_based_actor* self, caf::actor worker, std::shared_ptr<log_book> book) {
  self->link_to(worker);
  return {
      [self, worker](collective_request& q) { return self->delegate(worker, std::move(q)); },
      [self, worker](device_group_id& m) { self->send(worker, std::move(m)); },
      [book](const collective_dump_request&) { return book->snapshot(); },
  };
}

}  // namespace

caf::actor spawn_net_collective(caf::actor_system& sys, net_collective_args args) {
  auto book = std::make_shared<log_book>();
  book->log.rank = args.env.rank;
  book->log.ranks = args.env.world_size;
  book->engine = args.device_engine ? args.device_engine->name() : args.make_backend ? args.env.source : "the TCP ring";
  caf::actor worker = sys.spawn<caf::detached>(net_collective, std::move(args), book);
  return sys.spawn(net_collective_front, std::move(worker), std::move(book));
}

}  // namespace troupe
