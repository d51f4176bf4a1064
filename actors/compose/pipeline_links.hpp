// pipeline_links: how a stage's pipeline tensors reach a stage in another process, and how those
// from one arrive. Over the point-to-point transport (framed and checksummed), a proxy stands for
// the remote stage; between GPUs with --backend nccl, a device link per direction of a pair
// carries the bytes GPU to GPU (comm/device_group.hpp's device_link, NCCL send/recv) while the
// transport carries the link's id and each tensor's announcement, in the order the bytes follow.
// mesh_links wires them; include only from actors/ (CAF).
#pragma once

#include <caf/all.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "actors/messages.hpp"
#include "comm/device_group.hpp"
#include "comm/p2p_transport.hpp"
#include "comm/wire_frame.hpp"

namespace troupe {

// What the transport receives, turned into messages (its callbacks run on its thread): a tensor
// for a local stage goes to that stage, a device link's id and announcements to the link's
// receiving end. Bad input from a peer (a name that is no pipeline tensor's, a rank or link not
// here, a dtype or shape that does not fit) goes to the coordinator as a pipeline_failure naming it.
struct pipeline_receiver {
  std::mutex mu;
  std::map<int, caf::actor> local;  // local rank -> its stage
  std::map<std::pair<int, int>, caf::actor> device_in;  // (remote, local rank) -> receiving end of their device link
  caf::actor coordinator;
  void deliver(int from_process, const wire::tensor_meta& meta, std::vector<uint8_t> bytes);
  void refuse(int from_process, const std::string& why);
};

// Stands for rank to_rank in process to_process: what a local stage sends it crosses on the
// transport once send_p2p_address has said where that process listens (queued until then).
caf::actor spawn_pipeline_proxy(caf::actor_system& sys, int to_rank, int to_process,
                                std::shared_ptr<net::p2p_transport> transport, caf::actor coordinator);

// One end of the device link from_rank -> to_rank, on the local rank's device `where`.
struct device_link_end {
  int from_rank = 0, to_rank = 0;
  device where;
  std::shared_ptr<net::device_group_engine> engine;
  caf::actor coordinator;  // told of a failure as a pipeline_failure
};
// The sending end (a local stage's peer for to_rank; detached, as joining waits for the other
// end): told the address (send_p2p_address), it makes the link's id, sends it and joins; each
// device tensor then goes as an announcement on the transport and its bytes on the link, kept
// until the link has read them. Host tensors go through host_proxy.
caf::actor spawn_link_sender(caf::actor_system& sys, const device_link_end& end, int to_process,
                             std::shared_ptr<net::p2p_transport> transport, caf::actor host_proxy);
// The receiving end (detached): joins once the id arrives (pipeline_receiver routes it), then for
// each announcement, in order, receives the bytes into memory of its device and sends `stage` the
// tensor once they are there.
caf::actor spawn_link_receiver(caf::actor_system& sys, const device_link_end& end, caf::actor stage);

// Where the transport of the process of a proxy's or sending end's peer listens.
void send_p2p_address(const caf::actor& to, const std::string& host, int32_t port);

}  // namespace troupe
