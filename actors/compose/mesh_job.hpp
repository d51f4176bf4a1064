// The ranks of a mesh as actors: for each rank a stage (stage.hpp) and its optimizer shard, for
// each replica a data loader, wired to the coordinator. One function serves the job held in one
// process and each process's share of a multi-process job; what differs is only where a rank's
// groups are (mesh_links: in-process members, or members across processes). Include only from
// actors/ (CAF).
#pragma once

#include <caf/all.hpp>

#include <functional>
#include <map>
#include <vector>

#include "actors/actors.hpp"
#include "actors/observe/job_outputs.hpp"
#include "actors/compose/job_extras.hpp"
#include "actors/plan/job_plan.hpp"
#include "actors/compose/mesh_links.hpp"

namespace troupe {

struct rank_actors {
  std::vector<caf::actor> stages;     // in the order of the ranks asked for
  std::vector<caf::actor> members;    // every actor spawned: monitored and stopped by the job
  std::vector<caf::actor> detached;   // stages and optimizer shards (their own threads)
  std::map<int, caf::actor> loaders;  // by replica (dp coordinate)
  std::vector<caf::actor> collectives;  // in-process groups' members (spawn_mesh only)
  std::vector<std::shared_ptr<tp_group>> tp_members;  // the stages' tp group members (tp > 1)
  device_engines engines;  // what its device groups may have joined (spawn_mesh)
  std::vector<std::shared_ptr<std::vector<train_summary::server_update>>> server_updates;  // spawn_mesh's servers' records
  std::shared_ptr<std::vector<train_summary::dispensed_batch>> dispensed;  // spawn_mesh's dispenser's record
};

// A failed job's stages may wait inside a tensor-parallel collective, and its device groups'
// collectives inside NCCL, for a peer that is gone, where no message reaches them: their
// in-process groups and the device engine end those waits with `why`.
void abort_group_waits(const rank_actors& ranks, const std::string& why);

// With --consistency: server_shards parameter servers per (stage, tp) slot that holds parameters
// (over a proxy when more than one), all in the process that calls it (process 0 of a job over
// several without --servers), by slot; empty handles for slots
// of parameter-free stages. Each server's records, and the actors to stop, come with them.
struct job_servers {
  std::vector<caf::actor> by_slot;  // what a slot's stages push to: its server, or the proxy of its shards
  caf::actor dispenser;             // ssp and asp: the batches, on demand (null under bsp: fixed shares)
  std::vector<caf::actor> actors;   // every server and proxy, and the dispenser
  std::vector<std::shared_ptr<std::vector<train_summary::server_update>>> updates;
  std::shared_ptr<std::vector<train_summary::dispensed_batch>> dispensed;
};
// ssp and asp hand batches out on demand; bsp and collectives keep each replica's fixed share.
bool dispenses_batches(const train_config& cfg);
job_servers spawn_servers(caf::actor_system& sys, const train_config& cfg, const job_plan& plan);
// ssp and asp: the batch dispenser alone, into `out` (a job whose servers are in processes of their own).
caf::actor spawn_dispenser(caf::actor_system& sys, const job_plan& plan, job_servers& out);

// Every parameter server of a job with --consistency, in id order (slot x server_shards + shard),
// the key range [begin, end) of its slot's parameters. The order is what records, --kill-server
// and the dealing over server processes (--servers) go by.
struct server_shard {
  int32_t id = 0;
  size_t slot = 0;
  int64_t begin = 0, end = 0;
};
std::vector<server_shard> server_layout(const train_config& cfg, const job_plan& plan);
caf::actor spawn_server_shard(caf::actor_system& sys, const train_config& cfg, const job_plan& plan,
                              const server_shard& shard, std::shared_ptr<std::vector<train_summary::server_update>> updates);
// What each slot's stages push to, given every shard's server (in layout order, local or remote):
// the server of a slot held whole, else a proxy spawned in this process (appended to `proxies`).
std::vector<caf::actor> servers_by_slot(caf::actor_system& sys, const job_plan& plan,
                                        const std::vector<server_shard>& layout, const std::vector<caf::actor>& shards,
                                        std::vector<caf::actor>& proxies);

// `links`: every rank's groups (data, tensor, context and expert parallel, ZeRO-3's parameters).
// `observers`: actors every rank sends its gradients to each step (job_extras.hpp). `servers`:
// with --consistency, every slot's parameter server (spawn_servers, here or in process 0), and
// `dispenser` its batch dispenser under ssp and asp. `device_of`: each rank's device queue
// (job_extras.hpp; empty: the CPU).
rank_actors spawn_ranks(caf::actor_system& sys, const train_config& cfg, const prepared_job& data,
                        const job_plan& plan, const std::vector<int>& ranks, const caf::actor& coordinator,
                        mesh_links& links, const std::vector<caf::actor>& observers = {},
                        const std::vector<caf::actor>& servers = {}, const caf::actor& dispenser = {},
                        const std::function<std::shared_ptr<device_queue>(int rank)>& device_of = {});

// What the job's groups of ranks on accelerators reduce through: the composition's engine, else
// the build's (gpu_group_engines).
device_engines engines_of(const job_extras& extras);

// Every rank of the mesh in this process: one in-process collective group per data-parallel
// group, one in-process tp group per tensor-parallel group, and each pipeline's stages told
// their peers.
rank_actors spawn_mesh(caf::actor_system& sys, const train_config& cfg, const prepared_job& data,
                       const job_plan& plan, const caf::actor& coordinator, const job_extras& extras = {});

// The coordinator's arguments for this job (the same in one process and in process 0 of many).
coordinator_args coordinator_args_for(const train_config& cfg, const prepared_job& data, const job_plan& plan,
                                      const job_outputs& out);

}  // namespace troupe
