// spawn_ranks / spawn_mesh: a mesh's ranks as actors (mesh_job.hpp).
#include "actors/compose/mesh_job.hpp"

#include <map>

#include "actors/actors.hpp"
#include "actors/plan/accelerators.hpp"
#include "actors/compose/mesh_links.hpp"
#include "actors/compose/rank_parts.hpp"
#include "actors/stage/stage.hpp"
#include "comm/tp_groups.hpp"

namespace troupe {

namespace {

// A replica's ranks read one share; its context ranks, their tokens of it: one loader each.
caf::actor loader_of(const rank_site& r, rank_actors& out) {
  auto loader = out.loaders.find(r.replica);
  if (loader != out.loaders.end()) return loader->second;
  const eval_plan eval = plan_evaluation(r.cfg, r.data.eval->size(), r.data.rows_per_sample);
  auto l = spawn_data_loader(r.sys, {r.data.train, r.data.eval, r.cfg.batch_size, eval, r.cfg.seed, r.at.dp,
                                     r.plan.mesh.dp, r.at.cp, r.plan.mesh.cp});
  out.members.push_back(l);
  return out.loaders.emplace(r.replica, l).first->second;
}

// What every rank has: its place, its row of the schedule, its model chunks, the run.
stage_args common_args(const rank_site& r) {
  const train_config& cfg = r.cfg;
  stage_args a;
  a.rank = r.rank;
  a.stage = r.at.pp;
  a.plan = r.plan.schedule;
  a.dispatch = {cfg.dispatch, cfg.ready_stash};
  a.model = {r.data.model, r.plan.chunks, cfg.recompute, cfg.matmul, cfg.sequence_parallel, cfg.cp_mode};
  a.run = {cfg.seed, cfg.batch_size * r.data.rows_per_sample, r.data.total_steps, r.replica, r.plan.mesh.replicas()};
  a.buckets = r.plan.buckets.at(r.slot());
  for (int q : r.plan.mesh.group(sched::axis::pp, r.rank))
    a.peer_over_host.push_back(r.plan.mesh.process_of(q) != r.plan.mesh.process_of(r.rank) &&
                               !pipeline_on_device_link(cfg, r.rank, q));
  // Without ZeRO every replica holds the same state, but for the experts each of the first
  // expert group's holds.
  a.checkpoints = {cfg.zero >= 1 || r.replica < r.plan.mesh.ep, r.plan.resume};
  a.updates.commit = cfg.elastic;  // an elastic job's updates wait for the coordinator's commit
  return a;
}

}  // namespace

rank_actors spawn_ranks(caf::actor_system& sys, const train_config& cfg, const prepared_job& data,
                        const job_plan& plan, const std::vector<int>& ranks, const caf::actor& coordinator,
                        mesh_links& links, const std::vector<caf::actor>& observers,
                        const std::vector<caf::actor>& servers, const caf::actor& dispenser,
                        const std::function<std::shared_ptr<device_queue>(int rank)>& device_of) {
  rank_actors out;
  for (int rank : ranks) {
    const rank_site r{sys, cfg, data, plan, rank, plan.mesh.coords_of(rank), plan.mesh.replica_of(rank)};
    stage_args a = common_args(r);
    a.partners = {loader_of(r, out), {}, coordinator, observers};
    a.groups = links.groups_of(rank);
    for (const std::shared_ptr<tp_group>& member : a.groups.members)
      if (member) out.tp_members.push_back(member);
    a.faults = compose_faults(r);
    a.device = compose_device(r, device_of);
    a.zero = compose_zero(r, a);
    shard_placement shard = place_shard(r, a);
    rank_spawned parts;
    compose_offload(r, a, shard, parts);
    compose_optimizer(r, a, shard, servers, dispenser, parts);
    const bool own_thread = !is_asynchronous(a.device.queue);
    parts.add(spawn_stage(sys, std::move(a)), own_thread);
    out.stages.push_back(parts.members.back());
    out.members.insert(out.members.end(), parts.members.begin(), parts.members.end());
    out.detached.insert(out.detached.end(), parts.detached.begin(), parts.detached.end());
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
