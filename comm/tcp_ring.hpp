// The bulk data plane for CPU collectives across processes: a ring of persistent, authenticated
// TCP connections (each rank sends to rank+1 and receives from rank-1) running chunked,
// pipelined ring all-reduce, reduce-scatter, all-gather and broadcast on float buffers.
// Blocking calls, meant to be made from one thread at a time (the collective actor's own worker
// thread); failures throw net_error and leave the ring broken. It deliberately knows nothing of
// CAF, actors or tensors: completions become messages in the caller.
//
// Reduction order and hop schedule: troupe::ring's (comm/ring_schedule.hpp), the same functions
// the in-process collective actors run, so the bits are the same on every rank and the same as
// ring::serial_ring and the in-process group give.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/collective_backend.hpp"
#include "comm/launch_env.hpp"
#include "comm/rendezvous.hpp"
#include "comm/ring_schedule.hpp"
#include "comm/tcp_socket.hpp"

namespace troupe::net {

struct ring_options {
  size_t chunk_bytes = size_t{512} << 10;  // pipelining unit (TROUPE_RING_CHUNK_BYTES)
  int socket_buffer_bytes = 4 << 20;       // SO_SNDBUF/SO_RCVBUF of the ring sockets
  int io_timeout_ms = 60000;               // no byte moving for this long: the peer is dead
  rendezvous_options rendezvous;
  // A slow link (fault injection, --slow-link): this member's sends to its right neighbour are
  // capped at send_bytes_per_s (0: no cap), and each collective's first byte waits
  // send_latency_s. Receives are not held back: the slow rank's left neighbour sees the cap.
  double send_bytes_per_s = 0;
  double send_latency_s = 0;
  // Rank 0 only: called with the bound rendezvous port (useful with master_port 0 in tests).
  std::function<void(uint16_t)> on_master_listening;
};

class tcp_ring final : public group_backend {
 public:
  // Rendezvous at env.master_addr:master_port (rank 0 listens there), then connect the ring.
  // Blocks until every rank has joined. A world of 1 makes no connection at all.
  static std::unique_ptr<tcp_ring> connect(const launch_env& env, const std::string& secret,
                                           ring_options opts = {});
  ~tcp_ring() override;

  int rank() const override { return rank_; }
  int world() const override { return world_; }

  // data[n] in, the reduction of all ranks' data[n] out, on every rank.
  void all_reduce(float* data, int64_t n, reduce_op op) override;
  // data[n] in; on return ring::segment(n, world, rank) of data holds this rank's reduced segment
  // (the rest of data holds partial sums and is garbage to the caller).
  void reduce_scatter(float* data, int64_t n, reduce_op op) override;
  // On entry ring::segment(n, world, rank) of data holds this rank's part; on return all of it.
  void all_gather(float* data, int64_t n) override;
  // data[n] of rank `root` copied to every rank.
  void broadcast(float* data, int64_t n, int root) override;
  // send[n_send] to the right rank, recv[n_recv] from the left: the ring's own step.
  void shift(const float* send, int64_t n_send, float* recv, int64_t n_recv) override;
  // Over the ring's own steps (ring::all_to_all_over_ring): a member reaches its neighbours only.
  void all_to_all(const float* send, const std::vector<int64_t>& send_counts, float* recv,
                  const std::vector<int64_t>& recv_counts) override;

  // Bytes this rank sent and received so far, for benchmarks.
  uint64_t bytes_sent() const { return bytes_sent_; }
  // Bytes per second at which the last collective's first hop came in from the left rank, from
  // its first byte to its last: that hop waits on nothing but the left rank's start, so this is
  // its link's speed (a --slow-link cap shows here, at the rank to the right of the slow one).
  // 0: not measured (a broadcast, one rank). At most the hop's bytes per 0.1 ms.
  double last_left_rate() const { return last_left_rate_; }

  // From any thread: ends a call blocked on a peer at once (it throws "stopped") and every later
  // one. When a job is over nobody may wait out io_timeout_ms for a peer that hangs.
  void abort();

  struct impl;  // the per-call schedule and event loop (tcp_ring.cpp)

 private:
  tcp_ring(int rank, int world, ring_options opts);
  void run(ring::op_kind kind, float* data, int64_t n, int root);
  void check_usable();
  // Moves one call's schedule both ways; `received` runs as each payload item completes.
  void pump(impl& s, const std::function<void(size_t)>& received);

  int rank_, world_;
  ring_options opts_;
  socket_fd to_right_, from_left_;
  uint64_t seq_ = 0;
  uint64_t bytes_sent_ = 0;
  double last_left_rate_ = 0;
  std::string broken_;  // why the ring can no longer be used; empty while healthy
  std::vector<float> staging_;
  std::atomic<bool> aborted_{false};
};

// Hands a ring's abort() to whoever ends the job (the process layer), while the ring itself is
// owned and used by the collective's thread. fire() before set() aborts the ring as it arrives.
class ring_interrupt {
 public:
  void set(std::shared_ptr<tcp_ring> ring);
  void fire();
  bool fired();  // the job ended: a ring still connecting gives up (rendezvous_options::cancelled)

 private:
  std::mutex mu_;
  std::weak_ptr<tcp_ring> ring_;
  bool fired_ = false;
};

}  // namespace troupe::net
