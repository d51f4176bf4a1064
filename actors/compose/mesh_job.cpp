// spawn_ranks / spawn_mesh: a mesh's ranks as actors (mesh_job.hpp).
#include "actors/compose/mesh_job.hpp"

#include <unistd.h>

#include <filesystem>
#include <map>
#include <thread>

#include "actors/actors.hpp"
#include "actors/plan/accelerators.hpp"
#include "actors/plan/memory_plan.hpp"
#include "actors/compose/mesh_links.hpp"
#include "actors/store/offload_store.hpp"
#include "actors/stage/stage.hpp"
#include "comm/tp_groups.hpp"

namespace troupe {

rank_actors spawn_ranks(caf::actor_system& sys, const train_config& cfg, const prepared_job& data,
                        const job_plan& plan, const std::vector<int>& ranks, const caf::actor& coordinator,
                        mesh_links& links, const std::vector<caf::actor>& observers,
                        const std::vector<caf::actor>& servers, const caf::actor& dispenser,
                        const std::function<std::shared_ptr<device_queue>(int rank)>& device_of) {
  rank_actors out;
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  for (int rank : ranks) {
    const sched::mesh_coords at = plan.mesh.coords_of(rank);
    const int replica = plan.mesh.replica_of(rank);
    auto loader = out.loaders.find(replica);
    if (loader == out.loaders.end()) {  // a replica's ranks read one share; its context ranks, their tokens of it
      const eval_plan eval = plan_evaluation(cfg, data.eval->size(), data.rows_per_sample);
      auto l = spawn_data_loader(sys, {data.train, data.eval, cfg.batch_size, eval, cfg.seed, at.dp, plan.mesh.dp,
                                       at.cp, plan.mesh.cp});
      out.members.push_back(l);
      loader = out.loaders.emplace(replica, l).first;
    }
    stage_args a;
    a.rank = rank;
    a.stage = at.pp;
    a.plan = plan.schedule;
    a.model = data.model;
    a.model_chunks = plan.chunks;
    a.seed = cfg.seed;
    a.global_rows = cfg.batch_size * data.rows_per_sample;
    a.total_steps = data.total_steps;
    a.pin_cpu = cfg.pin_threads ? static_cast<int>(static_cast<unsigned>(rank) % cores) : -1;
    a.drop_send = cfg.drop_send;
    a.recompute = cfg.recompute;
    a.matmul = cfg.matmul;
    a.sequence_parallel = cfg.sequence_parallel;
    a.observers = observers;
    for (const auto& st : cfg.stragglers)
      if (st.rank == at.dp && at.pp == 0) a.straggler = st;
    if (replica == cfg.kill_replica) a.killed_at_step = cfg.kill_replica_step;
    a.commit_updates = cfg.elastic;
    for (const auto& j : cfg.jitter)
      if (j.rank == rank) a.jitter = j;
    a.dispatch = cfg.dispatch;
    a.ready_stash = cfg.ready_stash;
    a.buckets = plan.buckets.at(plan.slot(at.pp, at.tp));
    for (int q : plan.mesh.group(sched::axis::pp, rank))
      a.peer_over_host.push_back(plan.mesh.process_of(q) != plan.mesh.process_of(rank) &&
                                 !pipeline_on_device_link(cfg, rank, q));
    a.loader = loader->second;
    a.groups = links.groups_of(rank);
    for (const std::shared_ptr<tp_group>& member : a.groups.members)
      if (member) out.tp_members.push_back(member);
    a.coordinator = coordinator;
    a.context_mode = cfg.cp_mode;
    a.zero = cfg.zero;
    a.dp_rank = replica;
    a.dp_size = plan.mesh.replicas();
    // Without ZeRO every replica holds the same state, but for the experts each of the first
    // expert group's holds.
    a.writes_checkpoint = cfg.zero >= 1 || replica < plan.mesh.ep;
    a.resume = plan.resume;
    if (device_of) a.queue = device_of(rank);
    a.memory = device_memory::make(
        "rank " + std::to_string(rank) + " (" + (a.queue ? a.queue->where().to_string() : std::string("cpu")) + ")",
        cfg.device_memory);
    a.host_memory = device_memory::make("host of rank " + std::to_string(rank));  // counted for offload only
    int64_t n = plan.stage_params.at(plan.slot(at.pp, at.tp));
    shard_memory where;  // plain: the stage runs on the shard's tensor, counted as its parameters
    where.ledger = a.memory;
    if (a.queue && !a.queue->where().is_cpu()) {  // the update runs there too, on the stage's stream
      where.where = a.queue->where();
      where.queue = a.queue;
    }
    const bool dp_reducer = static_cast<bool>(a.groups.reducer(sched::axis::dp));
    if (cfg.zero >= 3 && dp_reducer) a.prefetch = cfg.prefetch;  // ZeRO-3: units gathered ahead
    const offload_target opt_to = optimizer_offload(cfg), params_to = params_offload(cfg);
    if (cfg.zero >= 1 && dp_reducer) {  // ZeRO: the shard keeps this rank's segments, its own copy
      a.shard = plan.shard_of(rank);
      n = shard_size(a.shard);
      // ZeRO-3's stage runs on the shard's tensor (its segments), as plain DP's does on the whole.
      where.master_kind = cfg.zero >= 3 ? memory_kind::parameters : memory_kind::optimizer_state;
      // Off the device: the master copy goes with the optimizer or (fp32: the same values) with
      // the parameters; the state only with the optimizer.
      if (opt_to != offload_target::none || params_to != offload_target::none) where.ledger = a.host_memory;
      where.state_ledger = opt_to != offload_target::none ? a.host_memory : a.memory;
      a.params_offloaded = params_to != offload_target::none;
      if (where.queue && !a.groups.reduces_on_device) {
        // A GPU stage whose group reduces its buckets on the host keeps the shard's segments of
        // the master copy and the state there with its update (ZeRO-Offload's placement): the
        // GPU keeps the parameters, the gradients (ZeRO-2: its segments) and activations. Where
        // the group reduces on the GPUs (NCCL), the shard stays on the GPU with them.
        where.where = device{};
        where.queue = nullptr;
        where.ledger = where.state_ledger = a.host_memory;
      }
    }
    storage::uring_options io;
    io.block_size = cfg.aio_block_size;
    io.queue_depth = cfg.aio_queue_depth;
    auto offload_path = [&](const char* what) {
      return (std::filesystem::path(cfg.offload_dir) /
              ("troupe-" + std::to_string(::getpid()) + "-rank" + std::to_string(rank) + "." + what))
          .string();
    };
    if (n > 0 && where.ledger == a.host_memory && (opt_to == offload_target::nvme || params_to == offload_target::nvme)) {
      where.state_in_store = opt_to == offload_target::nvme;
      where.tile_floats = offload_tile_floats(cfg);
      where.pipeline = cfg.offload_pipeline;
      where.host = a.host_memory;
      const int64_t tiles = (n + where.tile_floats - 1) / where.tile_floats;
      const int64_t slot_floats = where.tile_floats * (1 + (where.state_in_store ? optimizer_state_floats(cfg.optim) : 0));
      where.store = spawn_offload_store(sys, offload_path("optimizer"), tiles * slot_floats * static_cast<int64_t>(sizeof(float)),
                                        io, a.host_memory);
      out.members.push_back(where.store);
      out.detached.push_back(where.store);
    }
    if (n > 0 && a.groups.member(sched::axis::dp) && params_to == offload_target::nvme) {
      // ZeRO-Infinity's parameters: the stage's segments, one piece per bucket, in a file its
      // param_fetcher reads each unit's piece from ahead of the unit's gather.
      std::vector<storage::segment_file::piece> pieces;
      for (const shard_piece& p : a.shard) pieces.push_back({p.at_shard, p.count});
      a.param_file = std::make_shared<storage::segment_file>(offload_path("params"), std::move(pieces), io);
    }
    if (cfg.consistency != consistency_model::none) {
      // Parameter servers: the replicas meet at their slot's server, not in a collective.
      a.groups.set(sched::axis::dp, caf::actor{});
      a.host_gradients = true;
      if (n > 0) a.optimizer = servers.at(plan.slot(at.pp, at.tp));
      a.dispenser = dispenser;
    } else if (n > 0) {  // a stage of ReLUs alone has nothing to optimize
      a.optimizer = spawn_optimizer_shard(sys, cfg.optim, 0, n, where);
      out.members.push_back(a.optimizer);
      out.detached.push_back(a.optimizer);
    }
    const bool own_thread = !is_asynchronous(a.queue);
    out.stages.push_back(spawn_stage(sys, std::move(a)));
    out.members.push_back(out.stages.back());
    if (own_thread) out.detached.push_back(out.stages.back());
  }
  return out;
}

bool dispenses_batches(const train_config& cfg) {
  return cfg.consistency == consistency_model::ssp || cfg.consistency == consistency_model::asp;
}

std::vector<server_shard> server_layout(const train_config& cfg, const job_plan& plan) {
  std::vector<server_shard> out;
  if (cfg.consistency == consistency_model::none) return out;
  for (size_t slot = 0; slot < plan.stage_params.size(); ++slot) {
    const int64_t n = plan.stage_params[slot];
    if (n == 0) continue;  // a stage of ReLUs alone has nothing to serve
    const int K = static_cast<int>(std::min<int64_t>(cfg.server_shards, n));
    for (int k = 0; k < K; ++k)
      out.push_back({static_cast<int32_t>(slot) * cfg.server_shards + k, slot, n * k / K, n * (k + 1) / K});
  }
  return out;
}

caf::actor spawn_server_shard(caf::actor_system& sys, const train_config& cfg, const job_plan& plan,
                              const server_shard& shard, std::shared_ptr<std::vector<train_summary::server_update>> updates) {
  param_server_args ps{shard.id, plan.mesh.dp, shard.end - shard.begin, cfg.optim, cfg.consistency, cfg.staleness,
                       std::move(updates)};
  if (ps.slot == cfg.kill_server) ps.die_after = cfg.kill_server_after;
  return spawn_param_server(sys, std::move(ps));
}

std::vector<caf::actor> servers_by_slot(caf::actor_system& sys, const job_plan& plan,
                                        const std::vector<server_shard>& layout, const std::vector<caf::actor>& shards,
                                        std::vector<caf::actor>& proxies) {
  std::vector<caf::actor> by_slot(plan.stage_params.size());
  for (size_t i = 0; i < layout.size();) {
    size_t j = i;
    std::vector<caf::actor> of_slot;
    std::vector<int64_t> starts;
    for (; j < layout.size() && layout[j].slot == layout[i].slot; ++j) {
      of_slot.push_back(shards.at(j));
      starts.push_back(layout[j].begin);
    }
    starts.push_back(layout[j - 1].end);
    if (of_slot.size() == 1) {
      by_slot[layout[i].slot] = of_slot.front();
    } else {
      by_slot[layout[i].slot] = spawn_server_proxy(sys, std::move(of_slot), std::move(starts));
      proxies.push_back(by_slot[layout[i].slot]);
    }
    i = j;
  }
  return by_slot;
}

caf::actor spawn_dispenser(caf::actor_system& sys, const job_plan& plan, job_servers& out) {
  out.dispensed = std::make_shared<std::vector<train_summary::dispensed_batch>>();
  out.dispenser = spawn_batch_dispenser(sys, {plan.mesh.dp, plan.mesh.pp * plan.mesh.tp, out.dispensed});
  out.actors.push_back(out.dispenser);
  return out.dispenser;
}

job_servers spawn_servers(caf::actor_system& sys, const train_config& cfg, const job_plan& plan) {
  job_servers out;
  if (cfg.consistency == consistency_model::none) return out;
  if (dispenses_batches(cfg)) spawn_dispenser(sys, plan, out);
  const std::vector<server_shard> layout = server_layout(cfg, plan);
  std::vector<caf::actor> shards;
  for (const server_shard& sh : layout) {
    out.updates.push_back(std::make_shared<std::vector<train_summary::server_update>>());
    shards.push_back(spawn_server_shard(sys, cfg, plan, sh, out.updates.back()));
    out.actors.push_back(shards.back());
  }
  std::vector<caf::actor> proxies;
  out.by_slot = servers_by_slot(sys, plan, layout, shards, proxies);
  out.actors.insert(out.actors.end(), proxies.begin(), proxies.end());
  return out;
}

void abort_group_waits(const rank_actors& ranks, const std::string& why) {
  for (const auto& g : ranks.tp_members) net::abort_local_tp_group(g, why);
  for (const auto& e : ranks.engines) e->abort(why);
}

device_engines engines_of(const job_extras& extras) {
  return extras.device_collectives ? device_engines{extras.device_collectives} : gpu_group_engines();
}

rank_actors spawn_mesh(caf::actor_system& sys, const train_config& cfg, const prepared_job& data,
                       const job_plan& plan, const caf::actor& coordinator, const job_extras& extras) {
  mesh_links_args one_process;  // in-process groups, local peers, no transport
  one_process.zero3 = cfg.zero >= 3;
  one_process.slow_links = cfg.slow_links;  // shape the in-process rings' sends (fault injection)
  if (extras.device_of) {
    one_process.engines = engines_of(extras);
    one_process.dp_on_devices = device_groups_allowed(cfg);
    one_process.device_of = [&extras](int rank) {
      const std::shared_ptr<device_queue> q = extras.device_of(rank);
      return q ? q->where() : device{};
    };
  }
  mesh_links links(sys, plan, one_process);
  std::vector<int> all;
  for (int r = 0; r < plan.mesh.ranks(); ++r) all.push_back(r);
  std::vector<caf::actor> observers;
  for (const auto& make : extras.gradient_observers) observers.push_back(make(sys));
  const job_servers servers = spawn_servers(sys, cfg, plan);
  rank_actors out =
      spawn_ranks(sys, cfg, data, plan, all, coordinator, links, observers, servers.by_slot, servers.dispenser, extras.device_of);
  for (const auto& a : servers.actors) out.members.push_back(a), out.detached.push_back(a);
  out.server_updates = servers.updates;
  out.dispensed = servers.dispensed;
  out.members.insert(out.members.end(), observers.begin(), observers.end());
  links.connect_pipelines(out.stages, coordinator);
  out.members.insert(out.members.end(), links.actors().begin(), links.actors().end());
  out.collectives = links.collectives();
  out.engines = one_process.engines;
  return out;
}

}  // namespace troupe
