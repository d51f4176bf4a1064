// The actors of a job whose ranks are separate processes (process_job.cpp): the collective
// member that drives the TCP data plane, rank 0's job hub and every other rank's worker hub.
// Include only from actors/*.cpp (CAF). The control flow between them is described in
// process_job.cpp; the wire and the gate are CAF-free (tcp_ring.hpp, net_gate.hpp).
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <future>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "actors/messages.hpp"
#include "comm/collective_backend.hpp"
#include "comm/device_group.hpp"
#include "comm/launch_env.hpp"
#include "schedules/mesh.hpp"
#include "comm/tcp_ring.hpp"

namespace troupe {

// A collective member for one rank of a multi-process group: it answers collective_request
// with the same collective_result the in-process member gives (collective.hpp), running each
// call on the tcp_ring it owns, on its own thread (a detached blocking actor), in arrival order.
// The handle is a front actor linked to that thread: it answers collective_dump_request at once
// with the member's last collectives and their states, even while the thread waits in one.
// The ring is connected first (rendezvous at env.master_addr:master_port). A failed call (a
// peer gone) is answered with an error, the ring is closed at once so its neighbours fail fast
// too, and every later request gets the same error.
struct net_collective_args {
  launch_env env;
  std::string secret;
  net::ring_options ring;
  std::shared_ptr<net::ring_interrupt> interrupt;  // fired by whoever ends the job (optional)
  // A member other than the group's first: where the rendezvous listens, known once the job hub
  // has every process's addresses. Valid: connect() waits for it (rendezvous_timeout_ms at most).
  std::shared_future<std::pair<std::string, uint16_t>> rendezvous;
  int rendezvous_timeout_ms = 120000;
  // Another back end than the TCP ring (MPI): made on the collective's own thread, instead of
  // connecting the ring (env, secret, ring, rendezvous and interrupt are then unused).
  std::function<std::shared_ptr<net::group_backend>()> make_backend;
  // A member of a group whose values stay in its members' accelerator memory (NCCL between GPUs):
  // joined through `device_engine` on the collective's own thread (instead of any of the above),
  // as member env.rank of env.world_size on accelerator `device_index`, with the id the group's
  // first member makes and sends the others' collectives (`id_to`) as a device_group_id message;
  // the others wait for it, rendezvous_timeout_ms at most. Its requests carry device tensors.
  std::shared_ptr<net::device_group_engine> device_engine;
  int device_index = -1;
  std::vector<caf::actor> id_to;
  // Set for a device group that spans processes: the id, from the group's key-value store (the
  // first member makes it and sets it there; the others wait for it), instead of id_to's message.
  std::function<std::string()> group_id;
};
caf::actor spawn_net_collective(caf::actor_system& sys, net_collective_args args);
// What a net_collective does first, for any thread that needs a member of a group across
// processes: the back end made, or the TCP ring connected (after its rendezvous address came).
// Throws what the back end or the ring throws.
std::shared_ptr<net::group_backend> connect_member(net_collective_args args);

// What rank 0's job hub found wrong first (and what after), read once the job has stopped.
struct job_verdict {
  std::mutex mu;
  std::string first;               // "rank 2 lost: ..." ("" while every peer is fine)
  std::vector<std::string> later;
  // An elastic job's newcomers that never joined the membership that admitted them (the
  // job_hub_args::newcomers given up on): the membership ends to go on without them.
  std::vector<int32_t> abandoned;
};

struct job_hub_args {
  int world = 1;                   // processes: the mesh's, then the server processes (--servers)
  sched::mesh mesh;                // which ranks each process holds
  std::string config;              // rank 0's describe_for_join()
  std::chrono::milliseconds peer_timeout{30000}, join_timeout{120000};
  // The processes process 0 started itself and watches (exited_process): they have the join
  // timeout to join. Any other is given the peer timeout since the last process joined (or
  // since the hub started), then the job ends naming every process still missing.
  std::vector<int32_t> started_here;
  std::string job_id;              // process_config::job_id: a join_request with another is refused
  caf::actor coordinator;
  std::vector<caf::actor> servers;       // parameter servers by slot, handed to every joining process
  caf::actor dispenser;                  // ssp and asp: the batch dispenser, handed with them
  // --servers: every parameter server's id (server_layout order). The server processes report
  // theirs (server_ready); the mesh processes' joins are answered once all are in, with the
  // handles in this order (join_reply::shards), and on_servers gets them first (on the hub's
  // thread): process 0 points its stages' forwarders at them.
  std::vector<int32_t> server_ids;
  std::function<void(const std::vector<caf::actor>&)> on_servers;
  std::vector<caf::actor> local_stages;  // process 0's, in rank order
  caf::actor evaluator;            // process 0's, handed to the coordinator with the stages
  process_endpoints serves;        // what process 0 serves
  // Called (on the hub's thread) with every process's addresses once all are ready, before the
  // coordinator starts: process 0's mesh_links::apply.
  std::function<void(const mesh_addresses&)> on_addresses;
  std::vector<caf::actor> local_members;
  std::shared_ptr<job_verdict> verdict;
  // Closes every worker's connection (the process layer holds the sockets); called once every
  // worker acknowledged job_end.
  std::function<void()> disconnect;
  // --nodes: a process this one started that has exited abnormally, named with its status or
  // signal ("" while none has). Polled on every tick until all have joined, so one that dies
  // before it joins is named within a tick, not as missing at the join timeout.
  std::function<std::string()> exited_process;
  // An elastic job: a worker process lost while training runs is its coordinator's to drop (its
  // stages' down messages), not the job's end; a process that asks to join as the next index
  // (world, world + 1, ...) with admit_config (the job one replica larger) is held, the
  // coordinator told, and answered with the membership change that takes it in.
  bool elastic = false;
  std::string admit_config;
  // An elastic job's membership that admits processes (their index in it): a newcomer that has
  // not joined within the peer timeout while every other process has (it died after asking, or
  // an event admitted a replica nobody asked to be) is given up on: named in the log, put in the
  // verdict's `abandoned`, and the coordinator stopped, so that the job goes on without it.
  std::vector<int32_t> newcomers;
};
// Rank 0. Admits ranks (join_request), starts the coordinator once all are ready, watches them
// (down messages and pings) and on the first lost rank records why and stops the coordinator.
// job_end request: tells every worker, and once all acknowledged closes their connections and
// answers when the middleman has seen each of them close. Only then may the process stop its
// actors: CAF 0.17 can keep a detached actor referenced forever when its middleman shuts down
// while a connection is still being cleaned up (a worker then never exited).
caf::actor spawn_job_hub(caf::actor_system& sys, job_hub_args args);

struct worker_hub_args {
  int32_t rank = 0;                // the process index
  caf::actor job_hub;              // remote
  std::vector<caf::actor> stages;  // this process's, in rank order
  process_endpoints serves;
  std::vector<caf::actor> collectives;  // mesh_links::collectives, sent along for the watchdog
  std::function<void(const mesh_addresses&)> on_addresses;  // mesh_links::apply
  std::chrono::milliseconds peer_timeout{30000};
  std::shared_ptr<std::string> report;  // "" when rank 0 said the job ended well
  std::shared_ptr<job_end> ended;        // rank 0's job_end, whole (an elastic job's next membership)
  // A server process (--servers): `stages` are its parameter servers, reported with these ids in
  // a server_ready instead of a worker_ready.
  bool server_process = false;
  std::vector<int32_t> server_ids;
};
// Every other rank. Tells the job hub it is ready, answers pings, and ends once rank 0 closed
// the connection after job_end, or when rank 0 is lost (its connection closes or it stops
// pinging); either way the middleman has cleaned the connection up before the actors stop.
caf::actor spawn_worker_hub(caf::actor_system& sys, worker_hub_args args);

}  // namespace troupe
