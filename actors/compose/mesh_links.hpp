// mesh_links: how the ranks of one process reach the ranks they work with, in this process or in
// another. For each rank: its member of its data-parallel group (an in-process collective when
// the whole group lives here, else a net_collective on the group's TCP ring, MPI communicator or
// Gloo context), its member of its tensor-parallel group (an in-process tp group, else a ring, MPI
// or Gloo member the stage's own thread drives), and for each replica: its pipeline peers (the
// local stage, or what carries activations and their gradients to another process:
// pipeline_links.hpp's proxy over the point-to-point transport or, between GPUs with --backend
// nccl, the sending end of a device link).
// A job held in one process and each process of a multi-process job wire their ranks the same
// way; across processes the addresses come from the job hub (mesh_addresses) before training
// starts. Include only from actors/ (CAF).
#pragma once

#include <caf/all.hpp>

#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "actors/plan/accelerators.hpp"
#include "actors/plan/job_plan.hpp"
#include "actors/compose/pipeline_links.hpp"
#include "actors/messages.hpp"
#include "actors/process/net_actors.hpp"
#include "actors/stage/rank_groups.hpp"
#include "comm/device_group.hpp"
#include "comm/mpi_groups.hpp"
#include "comm/tcp_ring.hpp"

namespace troupe {

// The mesh's groups that may span processes, by kind, in the order of one numbering every
// process derives alike: the data-parallel groups (mesh.group_index(dp)) first, then the
// tensor-parallel ones, then ZeRO-3's parameter groups (one per data-parallel group: the gathers
// of a stage's param_fetcher run beside its gradient collectives, so they get a connection of
// their own), then (cp > 1) the context-parallel groups, then (ep > 1) the expert groups and the
// expert-data-parallel ones. Ring rendezvous addresses and MPI communicators are indexed by it.
enum class comm_group { dp, tp, zero3_params, cp, ep, edp };
inline constexpr comm_group comm_groups[] = {comm_group::dp, comm_group::tp, comm_group::zero3_params,
                                             comm_group::cp, comm_group::ep, comm_group::edp};
sched::axis axis_of(comm_group g);  // the mesh axis its members differ along (zero3_params: dp)
int comm_group_id(const sched::mesh& m, comm_group g, int rank);
int comm_group_count(const sched::mesh& m);
// How many groups of kind g the numbering holds (0: none, as cp's at cp 1).
int comm_groups_of(const sched::mesh& m, comm_group g);

struct mesh_links_args {
  int process = 0;
  std::string local_host = "127.0.0.1";  // where this process's listeners bind
  std::string secret;                    // the job's (needed once a link leaves the process)
  net::ring_options ring;
  net::p2p_options p2p;
  int join_timeout_ms = 120000;  // the leaders' rendezvous must listen, and the addresses arrive, by then
  // Set: a data-parallel group that spans processes reduces through MPI (this process's
  // communicators, made before anything else by every process), not a TCP ring.
  std::shared_ptr<net::mpi_groups> mpi;
  // Set: such groups reduce through Gloo, each connecting through a kv_store its first member
  // serves (published like a ring's rendezvous).
  bool gloo = false;
  bool zero3 = false;  // ZeRO-3: each data-parallel group also gathers parameters (groups_of: its dp member)
  std::vector<slow_link_spec> slow_links;  // rings of these mesh ranks send at a cap (fault injection)
  // Set: a data-parallel group in this process whose every rank is on an accelerator reduces
  // there (when dp_on_devices), through the first of these engines that takes those devices
  // (choose_device_groups; a group across processes with devices_across_processes, through an
  // engine that spans them, NCCL); otherwise through the host as above. A tensor-parallel group on
  // accelerators always does: its layers' values never leave them.
  // device_of gives a rank's device.
  device_engines engines;
  bool dp_on_devices = true;
  // --backend nccl: a data- or tensor-parallel group that spans processes reduces on its GPUs
  // too.
  bool devices_across_processes = false;
  std::function<device(int rank)> device_of;
  // Set: whether rank `from`'s pipeline tensors reach rank `to`, in another process, over a link
  // between their devices (pipeline_on_device_link) through the first of `engines` that spans
  // processes; else over the host transport.
  std::function<bool(int from, int to)> device_link;
};

// A rank's member of its data-parallel group, and where that group reduces: on the ranks'
// accelerators (the buckets stay in device memory) or, by default, on the host.
struct rank_collective {
  caf::actor actor;
  bool on_device = false;
};

class mesh_links {
 public:
  mesh_links(caf::actor_system& sys, const job_plan& plan, mesh_links_args args);
  ~mesh_links();
  mesh_links(const mesh_links&) = delete;
  mesh_links& operator=(const mesh_links&) = delete;

  // Before the ranks are spawned: rank's groups (rank_groups.hpp). Its dp reducer (empty with one
  // replica); its edp reducer, the collective of the replicas holding its experts (empty at ep 1;
  // a group of one when ep is every replica); its members along tp, cp and ep (null where the
  // axis is 1: in-process, or across processes over the job's back end) and, with args.zero3
  // and more than one replica, its ZeRO-3 parameter group's along dp. Each member is logged for
  // the watchdog (ledgered).
  rank_groups groups_of(int rank);
  // After: this process's stages in rank order; each is told its pipeline peers. Link failures
  // (a bad frame, a peer that cannot be reached) go to `coordinator` as pipeline_failure.
  void connect_pipelines(const std::vector<caf::actor>& local_stages, const caf::actor& coordinator);
  // What this process serves to the others. Waits until its rendezvous listen; throws
  // std::runtime_error when one cannot within join_timeout_ms.
  process_endpoints serves();
  // Where the others listen: starts the rings this process joins and opens the proxies.
  void apply(const mesh_addresses& addresses);
  // Nothing waits for a peer any more: rings interrupted, the transport stopped.
  void stop();

  const std::vector<caf::actor>& actors() const { return actors_; }      // to monitor and stop
  const std::vector<caf::actor>& detached() const { return detached_; }  // net collectives
  const std::vector<caf::actor>& collectives() const { return collectives_; }  // for the watchdog's dump
  const device_engines& engines() const { return args_.engines; }  // what its device groups may have joined

 private:
  caf::actor spawn_member(net_collective_args a);  // a net_collective, kept as a member of the job
  // The in-process data-parallel group `id` (its ranks in member order) on their accelerators
  // through its chosen engine; empty, with a log line saying why, where it cannot run there.
  std::vector<caf::actor> device_group(int id, const std::vector<int>& ranks);
  // Where data-parallel group `id` (its ranks in member order) reduces, logged: its choice when
  // that is on the devices, else null.
  const device_group_choice* device_choice(int id, const std::vector<int>& ranks);
  // Member `member` of data-parallel group `id`, which spans processes, on its accelerator
  // through the engine chosen for it (one that spans processes: NCCL); null where the group
  // reduces through the host. The id travels through a key-value store the first member serves
  // (published by serves(), like a ring's rendezvous), since the actor messages of
  // device_group's in-process exchange do not cross processes.
  caf::actor spanning_device_member(int id, int member, const std::vector<int>& ranks);
  // Member `member` of tensor-parallel group `id`, which spans processes, on its accelerator
  // through the engine chosen for it, the id as above; null where the group is on the host.
  std::shared_ptr<tp_group> spanning_device_tp_member(int id, int member, const std::vector<int>& ranks);
  // Where member `member` of process-spanning group `id` gets the group's id from: the first
  // member makes it with `engine` now and serves it from a key-value store (published by
  // serves()); the others fetch it from there once apply() says where that is.
  std::function<std::string()> device_group_id_source(int id, int member,
                                                      const std::shared_ptr<net::device_group_engine>& engine);
  // The in-process tensor-parallel group `group` (mesh.group_index) on its ranks' accelerators,
  // through its chosen engine; empty when its ranks are on the host. Throws
  // std::invalid_argument naming the group when its ranks are on accelerators and no engine takes
  // them (its layers' collectives have no host path there).
  std::vector<std::shared_ptr<tp_group>> device_tp_group(int group, const std::vector<int>& ranks);
  // Where tensor-parallel group `group` (mesh.group_index) sums, the mesh's groups checked once
  // (check_tp_groups_on_devices).
  const device_group_choice& tp_choice(int group);
  // A member of process-spanning group `id` on the TCP ring, or on Gloo with args.gloo: the
  // group's first member listens (published by serves()), the others wait for its address from
  // apply().
  net_collective_args spanning_member(int id, int member, int size, int rank);
  net_collective_args ring_member(int id, int member, int size, int rank);
  net_collective_args gloo_member(int id, int member, int size);
  // Rank's data-parallel collective, and where it reduces; its expert-data-parallel one.
  rank_collective dp_reducer(int rank);
  caf::actor edp_reducer(int rank);
  // Rank's member along `a` (tp, cp, ep; dp: ZeRO-3's parameters) before it is logged for the
  // watchdog (ledgered: wrapped in a logged_tp_group whose log a tp_ledger actor serves, counted
  // among collectives()).
  std::shared_ptr<tp_group> unlogged_member(sched::axis a, int rank);
  std::shared_ptr<tp_group> unlogged_tp_member(int rank);  // tp's may sum on the devices
  // Rank's member of its group of kind g on the host: an in-process group's, or one across
  // processes (remote_group_member).
  std::shared_ptr<tp_group> host_group_member(comm_group g, int rank);
  // Member `member` of process-spanning group `id` of `size` that reduces buckets on the host:
  // through MPI's communicator, else the TCP ring or Gloo (spanning_member).
  caf::actor host_member(int id, int member, int size, int rank);
  std::shared_ptr<tp_group> ledgered(std::shared_ptr<tp_group> member, sched::axis a, int rank);
  // A member of process-spanning group `id` that a stage's own thread drives (tensor-parallel,
  // ZeRO-3 parameters): MPI's, or a ring or Gloo member connecting on a thread of its own.
  std::shared_ptr<tp_group> remote_group_member(int id, int member, int size, int rank);
  // Local rank r's ends of the device links with rank q in another process (r's sending end of
  // r -> q, its receiving end of q -> r, both detached actors), the receiving end registered for
  // the transport's announcements; returns the sending end, r's peer for q. Throws
  // std::invalid_argument when no engine spans processes.
  caf::actor link_ends(int r, int q, const caf::actor& stage, const caf::actor& host_proxy, const caf::actor& coordinator);

  caf::actor_system& sys_;
  job_plan plan_;
  mesh_links_args args_;
  struct local_group {
    std::vector<caf::actor> members;
    bool on_device = false;
  };
  std::map<int, local_group> local_groups_;  // dp group -> in-process group
  std::vector<device_group_choice> device_choices_;  // by dp group: where each reduces (device_group)
  std::vector<device_group_choice> tp_choices_;      // by tp group (device_tp_group)
  std::map<int, std::vector<std::shared_ptr<tp_group>>> local_tp_;  // tp or parameter group -> in-process group
  struct leader {
    int group = 0;
    std::shared_future<uint16_t> port;
  };
  std::vector<leader> leaders_;
  struct address_wait {
    std::promise<std::pair<std::string, uint16_t>> promise;
    std::shared_future<std::pair<std::string, uint16_t>> future = promise.get_future().share();
  };
  std::map<int, address_wait> rendezvous_;  // group -> where its rendezvous listens (for its other members)
  std::vector<std::shared_ptr<net::ring_interrupt>> interrupts_;
  std::shared_ptr<net::p2p_transport> transport_;
  std::map<int, caf::actor> proxies_;  // remote rank -> its proxy
  std::vector<std::pair<int, caf::actor>> link_senders_;  // (remote rank, the sending end of a device link to it)
  // Where received tensors go. Shared with the transport's callbacks, which run on its thread and
  // may outlive this object by a moment.
  std::shared_ptr<pipeline_receiver> receiver_ = std::make_shared<pipeline_receiver>();
  std::vector<caf::actor> actors_, detached_, collectives_;
};

}  // namespace troupe
