// device_group_engine: what reduces values that stay in the members' accelerator memory (NCCL
// between GPUs), for the collective actor that drives one member of a data-parallel group, or the
// stage whose layers call a tensor-parallel one. A group is made in two moves, as NCCL's own are:
// its first member makes an id, which travels to the others as plain bytes (an actor message, or,
// across processes, the group's key-value store), and then every member joins with it. A joined
// member is a group_backend whose pointers are the device's memory; join's calls return once
// their result is in place, so only the member's own thread ever waits for the device;
// join_in_stream's are stream-ordered.
// No CAF here.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/collective_backend.hpp"

namespace troupe::net {

// One direction of a pipeline link between two accelerators in different processes (NCCL send
// and receive between the two GPUs): what the sending end sends, the receiving end receives, in
// the order sent. Each call enqueues the transfer on the link's own stream and returns; `done`
// runs once the bytes have left (send: the buffer may be reused) or arrived (recv), with the
// engine's reason when the link failed instead, from any thread, and must only signal (send a
// message). One direction per link, because a send is matched with the receive posted in the same
// place of the peer's order: two ends that both sent first would wait for each other.
class device_link {
 public:
  using done_fn = std::function<void(std::optional<std::string> error)>;
  virtual ~device_link() = default;
  virtual void send(const void* data, size_t bytes, done_fn done) = 0;
  virtual void recv(void* data, size_t bytes, done_fn done) = 0;
};

class device_group_engine {
 public:
  virtual ~device_group_engine() = default;
  virtual std::string name() const = 0;  // "nccl", for logs
  // Empty when a group whose members (in member order) are on these accelerators can run on this
  // engine; else why not, in a clause ("NCCL takes one member per GPU: cuda:0 holds members 0
  // and 1"), and the group reduces its values through the host instead.
  virtual std::string refuses(const std::vector<int>& devices) const = 0;
  // True when a device may serve the members of one group at most: NCCL does not order the
  // kernels of two communicators on one GPU driven from two threads (each group's collective
  // has its own), which can deadlock.
  virtual bool one_group_per_device() const = 0;
  // True when a group's members may live in different processes (NCCL bootstraps over the
  // network from the id alone); false for an engine whose members meet in one process's memory.
  virtual bool spans_processes() const { return false; }
  // The group's id, made once, by its first member.
  virtual std::string make_id() = 0;
  // Member `rank` of `world` on accelerator `device`, with the id its first member made.
  // Collective: returns once every member has joined. Throws net_error naming the engine's reason.
  virtual std::unique_ptr<group_backend> join(const std::string& id, int rank, int world, int device) = 0;
  // The same member for a caller that launches on the device itself (a tensor-parallel layer in
  // the middle of its stage's compute, on the stage's thread): each call is ordered on the
  // calling thread's current stream, after what was launched there before and before what is
  // launched after, and needs no wait for the device. NCCL enqueues it and returns; an engine
  // whose members meet on the host waits for the caller's stream and for its peers (the stage's
  // thread waits then, as a CPU stage's does for its tensor-parallel peers).
  virtual std::unique_ptr<group_backend> join_in_stream(const std::string& id, int rank, int world, int device) = 0;
  // One end of a link between two accelerators (device_link), made as a group of two is: the
  // sending end makes the id and is member 0. Collective: returns once both ends have joined.
  // Null from an engine that has no links (its members meet in one process, where tensors pass
  // by handle).
  virtual std::unique_ptr<device_link> join_link(const std::string& /*id*/, bool /*sender*/, int /*device*/) {
    return nullptr;
  }
  // Ends every wait of every member it joined so far, now and later, with net_error naming
  // `why`: the job has failed, and a peer it waits for may never come. From any thread. Groups
  // joined afterwards (a restarted job's) are not affected.
  virtual void abort(const std::string& why) = 0;
};

}  // namespace troupe::net
