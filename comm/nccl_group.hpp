// NCCL as the collective engine between GPUs (DESIGN.md: "On CUDA, bulk collectives and pipeline
// sends go through NCCL; the communicator id is exchanged over actor messages"): one member of one
// mesh group, over one NCCL communicator on one device. The group's first member makes the id,
// which travels to the others as plain bytes (an actor message, a kv_store value); every member
// then joins with it. No CAF here: the owning actor carries the id and turns completions into
// messages. Built where CUDA and NCCL are (TROUPE_HAVE_CUDA), into troupe_comm_nccl.
//
// Every operation is enqueued on the stream it is given and returns at once; the caller learns
// of completion from the stream (an event, or a host callback that sends a message), so no
// thread waits on the GPU unless it asks to (synchronize()). Layout follows troupe::ring, as the
// other back ends do: a reduce-scatter leaves rank r's ring::segment reduced in place, an
// all-gather starts from it. Segments may be uneven (n not a multiple of the group), which NCCL's
// ReduceScatter and AllGather do not allow: those cases run as one grouped call of per-segment
// Reduce or Broadcast, as PyTorch does for uneven shards.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "comm/collective_backend.hpp"
#include "comm/device_group.hpp"
#include "kernels/dtype.hpp"

namespace troupe::net {

// The communicator's id: made once per group, by its first member, and sent to the rest.
struct nccl_id {
  std::array<char, NCCL_UNIQUE_ID_BYTES> bytes{};
};
nccl_id make_nccl_id();
// The bytes as they cross a message; from_bytes refuses any other length, naming it.
std::string to_bytes(const nccl_id& id);
nccl_id nccl_id_from_bytes(const std::string& bytes);

// NCCL's name for a dtype (kernels/dtype.hpp). A pipeline link moves any dtype as u8 bytes.
ncclDataType_t nccl_type(dtype t);

class nccl_group {
 public:
  // Member `rank` of `world` on CUDA device `device`. Collective: blocks until every member has
  // joined with the same id. Throws net_error naming NCCL's reason (a duplicate GPU among the
  // members is one: NCCL takes one rank per device).
  nccl_group(const nccl_id& id, int rank, int world, int device);
  ~nccl_group();
  nccl_group(const nccl_group&) = delete;
  nccl_group& operator=(const nccl_group&) = delete;

  int rank() const { return rank_; }
  int world() const { return world_; }
  int device() const { return device_; }

  // Enqueued on `stream`; `data` is device memory of n elements of dtype t.
  void all_reduce(void* data, int64_t n, dtype t, reduce_op op, cudaStream_t stream);
  void reduce_scatter(void* data, int64_t n, dtype t, reduce_op op, cudaStream_t stream);
  void all_gather(void* data, int64_t n, dtype t, cudaStream_t stream);
  void broadcast(void* data, int64_t n, dtype t, int root, cudaStream_t stream);
  // Point to point, for pipeline activations and gradients. A send and its receive must be
  // enqueued by both sides in the same order per peer pair (NCCL matches them in order).
  void send(const void* data, int64_t n, dtype t, int peer, cudaStream_t stream);
  void recv(void* data, int64_t n, dtype t, int peer, cudaStream_t stream);
  // One step of a ring: send to rank + 1 and receive from rank - 1 in one NCCL group, so the
  // two never wait on each other (group_backend::shift).
  void shift(const void* send, int64_t n_send, void* recv, int64_t n_recv, dtype t, cudaStream_t stream);
  // Every member's block to every member, in one NCCL group of sends and receives (self included).
  void all_to_all(const void* send, const std::vector<int64_t>& send_counts, void* recv,
                  const std::vector<int64_t>& recv_counts, dtype t, cudaStream_t stream);

  // Waits for the stream, and turns an error NCCL met asynchronously (a peer gone) into
  // net_error. For a thread that owns the wait (a collective actor's own), never a scheduler's.
  void synchronize(cudaStream_t stream);

  // Makes every later and pending operation fail with `why` instead of hanging on a dead peer.
  // From any thread, as a watchdog would, while another is inside an operation or synchronize()
  // (ncclCommAbort is made for that); the communicator is not touched again afterwards.
  void abort(const std::string& why = "aborted");
  // Why the group was aborted; nullopt while it is live.
  std::optional<std::string> aborted_why() const;

 private:
  void live(const char* call) const;  // throws net_error once aborted

  ncclComm_t comm_ = nullptr;
  int rank_ = 0, world_ = 1, device_ = 0;
  std::atomic<bool> aborted_{false};
  mutable std::mutex why_mu_;
  std::string why_;
};

// group_backend over a member, for the collective actor that drives one blocking call at a time
// from its own thread: each call enqueues on the backend's own stream and waits for it there.
// The pointers are device memory.
std::unique_ptr<group_backend> nccl_backend(std::shared_ptr<nccl_group> group);

// NCCL as the job's engine for groups on GPUs: its id is nccl_id's bytes, a joined member is
// nccl_backend over an nccl_group (join_in_stream's enqueues on caller_stream(), the calling
// thread's current stream, and returns), it refuses a group with two members on one GPU, and its
// abort aborts every communicator it made. Without caller_stream, join_in_stream throws. Its links
// (join_link) are communicators of two, one per direction of a pipeline pair, each with a stream
// of its own, as PyTorch's pairwise send/recv communicators are.
std::shared_ptr<device_group_engine> nccl_engine(std::function<cudaStream_t()> caller_stream = {});

}  // namespace troupe::net
