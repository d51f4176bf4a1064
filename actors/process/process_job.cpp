// run_process_training: a mesh spread over processes, each holding its block of ranks (spawned by
// spawn_ranks exactly as a job held in one process is). Two planes:
//  * control: CAF's middleman carries step orders, reports, evaluation and the hubs' messages.
//    The middleman listens nowhere: the gate (net_gate) runs the job's HMAC challenge on every
//    connection and only then hands the socket to the middleman (middleman_link), so a peer
//    without the secret never reaches an actor. With --tls-cert/--tls-key/--tls-ca the middleman
//    speaks caf_openssl mutual TLS on a loopback port that the gate splices to.
//  * data (mesh_links): gradient buckets go through a tcp_ring per data-parallel group that spans
//    processes, activations and their gradients through each process's point-to-point endpoint.
//    Where they listen is learnt only over the authenticated control plane: every process tells
//    the job hub what it serves (worker_ready), and the hub hands out every address
//    (mesh_addresses) before training starts.
#include "actors/job/runtime_config.hpp"
#include "actors/process/process_job.hpp"

#include <caf/io/all.hpp>
#include <caf/openssl/all.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <mutex>
#include <thread>

#include "actors/actors.hpp"
#include "actors/job/accelerators.hpp"
#include "actors/job/mesh_job.hpp"
#include "actors/job/mesh_links.hpp"
#include "actors/job/metrics_log.hpp"
#include "actors/process/net_actors.hpp"
#include "actors/process/process_parts.hpp"
#include "actors/process/middleman_link.hpp"
#include "comm/tcp_auth.hpp"
#include "comm/net_gate.hpp"
#include "actors/job/teardown_guard.hpp"

namespace troupe {

namespace {

using namespace process_detail;

// --servers: the servers in processes of their own, as process 0 learns them (on the job hub's
// thread): their handles in server_layout order (for the records at the end), and the proxies
// of sharded slots this process spawned for its own stages.
struct remote_servers {
  std::mutex mu;
  std::vector<caf::actor> shards, proxies;
};

train_summary run_rank0(const train_config& cfg, const prepared_job& job, const job_plan& plan,
                        std::shared_ptr<net::mpi_groups> mpi, const rank_devices& device_of,
                        const device_engines& engines) {
  const process_config& pc = cfg.process;
  job_outputs out(cfg, job);
  const auto& summary = out.summary;
  const auto& failure = out.failure;
  auto verdict = std::make_shared<job_verdict>();
  teardown_guard guard;  // declared before the actor system: it outlives the system's destructor
  caf::actor_system_config sys_cfg;
  configure(sys_cfg, pc);
  caf::actor_system sys{sys_cfg};

  auto links = std::make_shared<mesh_links>(sys, plan, links_args(cfg, 0, pc.master_addr, std::move(mpi), engines));
  auto coordinator = spawn_coordinator(sys, coordinator_args_for(cfg, job, plan, out));
  // The servers here (the workers get their handles), or with --servers a forwarder per slot here,
  // pointed at the slot's servers once their processes have joined.
  const bool servers_apart = cfg.server_processes > 0;
  job_servers servers;
  if (!servers_apart) {
    servers = spawn_servers(sys, cfg, plan);
  } else {
    if (dispenses_batches(cfg)) spawn_dispenser(sys, plan, servers);
    servers.by_slot.resize(plan.stage_params.size());
    for (size_t slot = 0; slot < plan.stage_params.size(); ++slot)
      if (plan.stage_params[slot] > 0) servers.actors.push_back(servers.by_slot[slot] = spawn_server_forwarder(sys));
  }
  auto remote = std::make_shared<remote_servers>();
  rank_actors p = spawn_ranks(
      sys, cfg, job, plan, cfg.mesh.ranks_of_process(0), coordinator, [&](int rank) { return links->collective_of(rank); },
      [&](int rank) { return links->tp_of(rank); }, {},
      [&](int rank) { return links->params_of(rank); }, servers.by_slot, servers.dispenser, device_of);
  p.engines = links->engines();  // a failed job ends their waits (abort_group_waits)
  for (const auto& a : servers.actors) p.members.push_back(a), p.detached.push_back(a);
  links->connect_pipelines(p.stages, coordinator);
  auto evaluator = spawn_evaluator(sys, job.model, cfg.seed, p.loaders.at(0), coordinator);
  middleman_drain drain;  // the detached actors, watched before their handles leave the process
  for (const auto& a : p.detached) drain.watch(a);
  for (const auto& a : links->detached()) drain.watch(a);
  drain.watch(evaluator);
  std::vector<caf::actor> local = p.members;
  local.insert(local.end(), links->actors().begin(), links->actors().end());
  local.push_back(evaluator);
  caf::anon_send(coordinator, watch_atom::value, links->collectives());
  process_endpoints serves;
  try {
    serves = links->serves();  // its rendezvous listen before any process can ask where they are
  } catch (const std::exception&) {
    links->stop();
    stop_all(sys, local);
    stop_all(sys, {coordinator});
    throw;
  }
  auto connections = std::make_shared<net::connection_set>();
  job_hub_args ha;
  ha.world = cfg.mesh.processes + cfg.server_processes;
  ha.mesh = cfg.mesh;
  ha.config = describe_for_join(cfg, job);
  ha.peer_timeout = to_ms(pc.peer_timeout_seconds);
  ha.join_timeout = to_ms(pc.join_timeout_seconds);
  ha.coordinator = coordinator;
  if (!servers_apart) ha.servers = servers.by_slot;
  ha.dispenser = servers.dispenser;
  if (servers_apart) {
    const std::vector<server_shard> layout = server_layout(cfg, plan);
    for (const auto& sh : layout) ha.server_ids.push_back(sh.id);
    ha.on_servers = [&sys, &plan, layout, remote, forwarders = servers.by_slot](const std::vector<caf::actor>& shards) {
      std::vector<caf::actor> proxies;
      const std::vector<caf::actor> by_slot = servers_by_slot(sys, plan, layout, shards, proxies);
      for (size_t slot = 0; slot < forwarders.size(); ++slot)
        if (forwarders[slot]) caf::anon_send(forwarders[slot], server_target_atom::value, by_slot.at(slot));
      std::lock_guard<std::mutex> lock(remote->mu);
      remote->shards = shards;
      remote->proxies = std::move(proxies);
    };
  }
  ha.local_stages = p.stages;
  ha.evaluator = evaluator;
  ha.serves = serves;
  ha.on_addresses = [links, started = pc.on_training_start](const mesh_addresses& a) {
    links->apply(a);
    if (started) started();  // every process joined: training starts now
  };
  ha.local_members = local;
  ha.verdict = verdict;
  ha.disconnect = [connections] { connections->shutdown_all(); };
  auto hub = spawn_job_hub(sys, std::move(ha));
  // Plain TCP: the middleman gets no port; the gate hands it each admitted socket (serve_over).
  // TLS: the TLS middleman listens on loopback, behind its mutual TLS and the gate's splices.
  std::unique_ptr<net::loopback_splices> splices;
  if (use_tls(pc)) {
    auto tls_port = caf::openssl::publish(hub, 0, "127.0.0.1");
    if (!tls_port) {
      stop_all(sys, local);
      stop_all(sys, {hub, coordinator});
      throw std::runtime_error("rank 0: cannot publish the job hub over TLS: " + sys.render(tls_port.error()));
    }
    splices = std::make_unique<net::loopback_splices>(*tls_port);
  }
  const int auth_ms = static_cast<int>(std::min<int64_t>(5000, to_ms(pc.peer_timeout_seconds).count()));
  std::string report;
  bool ok = false;
  std::vector<train_summary::server_update> remote_records;  // --servers: read from the server processes
  {
    net::gate_server gate(
        pc.master_addr, pc.master_port, pc.secret,
        [&](net::socket_fd fd, uint32_t, const std::string&) {
          connections->add(fd.get());
          if (splices)
            splices->add(std::move(fd), auth_ms);
          else
            serve_over(sys, std::move(fd), hub);
        },
        auth_ms);
    spdlog::info("process 0 of {}: control gate on {}:{}{}", cfg.mesh.processes, pc.master_addr, gate.port(),
                 use_tls(pc) ? " (TLS)" : "");
    if (pc.on_listening) pc.on_listening(gate.port());
    caf::scoped_actor self{sys};
    self->wait_for(coordinator);
    ok = failure->what.empty() && summary->steps == job.total_steps;
    if (ok && servers_apart) {
      // The records stay where the servers are: read them before job_end lets those processes go.
      std::vector<caf::actor> shards;
      {
        std::lock_guard<std::mutex> lock(remote->mu);
        shards = std::exchange(remote->shards, {});
      }
      for (const auto& a : shards)
        self->request(a, to_ms(pc.peer_timeout_seconds), server_records_atom::value)
            .receive([&](server_records& r) { remote_records.insert(remote_records.end(), r.updates.begin(), r.updates.end()); },
                     [&](caf::error& e) {
                       if (ok) report = "the job ended, but a parameter server's records did not come back: " + sys.render(e);
                       ok = false;
                     });
    }
    if (!ok && report.empty()) {
      // A rank that died shows as a closed connection within milliseconds, a silent one within
      // the peer timeout: give the hub that long to name it before settling for the symptom.
      // The coordinator's own error (a full disk) is a cause already: no rank to wait for.
      const auto deadline = std::chrono::steady_clock::now() + to_ms(pc.peer_timeout_seconds * 1.25);
      while (!failure->own && std::chrono::steady_clock::now() < deadline) {
        {
          std::lock_guard<std::mutex> lock(verdict->mu);
          if (!verdict->first.empty()) break;
        }
        std::this_thread::sleep_for(milliseconds(10));
      }
      std::lock_guard<std::mutex> lock(verdict->mu);
      report = "job stopped during step " + std::to_string(summary->steps) + ": " +
               (failure->own || verdict->first.empty() ? failure->what : verdict->first);
      for (const auto& l : verdict->later) spdlog::warn("also: {}", l);
    }
    self->request(hub, std::chrono::seconds(10), job_end{ok, report}).receive([](bool) {}, [](caf::error&) {});
    links->stop();  // a collective or a link blocked on a lost peer returns now, not at its timeout
    if (!ok) {
      guard.arm(report, failed_job_grace);
      abort_group_waits(p, report);
    }
    stop_all(sys, local);
    stop_all(sys, {hub, coordinator});
    {
      std::lock_guard<std::mutex> lock(remote->mu);
      remote->shards.clear();
      stop_all(sys, std::exchange(remote->proxies, {}));
    }
    drain.drain(sys);  // before ~actor_system (see middleman_link.hpp)
  }
  if (!ok) throw std::runtime_error(report);
  train_summary s = finish_summary(cfg, plan, out);
  for (const auto& u : servers.updates) s.server_updates.insert(s.server_updates.end(), u->begin(), u->end());
  s.server_updates.insert(s.server_updates.end(), remote_records.begin(), remote_records.end());
  if (servers.dispensed) s.dispensed = *servers.dispensed;
  return s;
}

train_summary run_worker(const train_config& cfg, const prepared_job& job, const job_plan& plan,
                         std::shared_ptr<net::mpi_groups> mpi, const rank_devices& device_of,
                         const device_engines& engines) {
  const process_config& pc = cfg.process;
  auto report = std::make_shared<std::string>();
  joined_process in(cfg, job);
  caf::actor_system& sys = *in.sys;
  const join_reply& joined = in.joined;
  // --servers: every shard's server is in a server process; sharded slots get proxies here.
  std::vector<caf::actor> by_slot = joined.servers, proxies;
  if (!joined.shards.empty()) by_slot = servers_by_slot(sys, plan, server_layout(cfg, plan), joined.shards, proxies);
  auto links = std::make_shared<mesh_links>(sys, plan, links_args(cfg, pc.index, in.local_host, std::move(mpi), engines));
  rank_actors p = spawn_ranks(
      sys, cfg, job, plan, cfg.mesh.ranks_of_process(pc.index), joined.coordinator,
      [&](int rank) { return links->collective_of(rank); }, [&](int rank) { return links->tp_of(rank); }, {},
      [&](int rank) { return links->params_of(rank); }, by_slot, joined.dispenser, device_of);
  p.engines = links->engines();
  p.members.insert(p.members.end(), proxies.begin(), proxies.end());
  links->connect_pipelines(p.stages, joined.coordinator);
  middleman_drain drain;  // the detached actors, watched before their handles leave the process
  for (const auto& a : p.detached) drain.watch(a);
  for (const auto& a : links->detached()) drain.watch(a);
  std::vector<caf::actor> local = p.members;
  local.insert(local.end(), links->actors().begin(), links->actors().end());
  worker_hub_args wa;
  wa.rank = pc.index;
  wa.job_hub = in.hub;
  wa.stages = p.stages;
  try {
    wa.serves = links->serves();
  } catch (const std::exception&) {
    links->stop();
    stop_all(sys, local);
    throw;
  }
  wa.on_addresses = [links](const mesh_addresses& a) { links->apply(a); };
  wa.peer_timeout = to_ms(pc.peer_timeout_seconds);
  wa.report = report;
  auto worker = spawn_worker_hub(sys, std::move(wa));
  {
    caf::scoped_actor self{sys};
    self->wait_for(worker);
  }
  links->stop();
  if (!report->empty()) {
    in.guard.arm("rank " + std::to_string(pc.index) + ": " + *report, failed_job_grace);
    abort_group_waits(p, *report);
  }
  spdlog::debug("rank {}: stopping its actors", pc.index);
  local.push_back(worker);
  stop_all(sys, local);
  spdlog::debug("rank {}: actors stopped; shutting the actor system down", pc.index);
  drain.drain(sys);  // before ~actor_system (see middleman_link.hpp)
  if (!report->empty()) throw std::runtime_error("rank " + std::to_string(pc.index) + ": " + *report);
  return {};
}

// A process of parameter servers (--servers; its index is past the mesh's processes): it joins,
// spawns its share of the servers (server_layout's, dealt round-robin over the server processes),
// reports them to the job hub, and then, like a worker, answers pings until job_end. Its
// servers' records are read by process 0 at the end.
train_summary run_server_process(const train_config& cfg, const prepared_job& job, const job_plan& plan) {
  const process_config& pc = cfg.process;
  auto report = std::make_shared<std::string>();
  joined_process in(cfg, job);
  caf::actor_system& sys = *in.sys;
  const std::vector<server_shard> layout = server_layout(cfg, plan);
  const size_t mine = static_cast<size_t>(pc.index - cfg.mesh.processes);
  worker_hub_args wa;
  middleman_drain drain;  // the servers are detached: watched before their handles leave the process
  for (size_t i = mine; i < layout.size(); i += static_cast<size_t>(cfg.server_processes)) {
    // The records are kept here; process 0 asks for them at the end (server_records_atom).
    wa.stages.push_back(
        spawn_server_shard(sys, cfg, plan, layout[i], std::make_shared<std::vector<train_summary::server_update>>()));
    wa.server_ids.push_back(layout[i].id);
    drain.watch(wa.stages.back());
  }
  spdlog::info("parameter server process {}: servers {}", pc.index, fmt::join(wa.server_ids, ", "));
  std::vector<caf::actor> local = wa.stages;
  wa.rank = pc.index;
  wa.job_hub = in.hub;
  wa.server_process = true;
  wa.peer_timeout = to_ms(pc.peer_timeout_seconds);
  wa.report = report;
  auto worker = spawn_worker_hub(sys, std::move(wa));
  {
    caf::scoped_actor self{sys};
    self->wait_for(worker);
  }
  const std::string who = "parameter server process " + std::to_string(pc.index);
  if (!report->empty()) in.guard.arm(who + ": " + *report, failed_job_grace);
  local.push_back(worker);
  stop_all(sys, local);
  drain.drain(sys);  // before ~actor_system (see middleman_link.hpp)
  if (!report->empty()) throw std::runtime_error(who + ": " + *report);
  return {};
}

}  // namespace

train_summary run_process_training(const train_config& given, const rank_devices& given_devices,
                                   const device_engines& engines) {
  train_config cfg = given;
  const process_config& pc = cfg.process;
  validate(cfg);
  if (!(pc.peer_timeout_seconds > 0)) throw std::invalid_argument("peer timeout must be positive");
  // The communicators come first on every process: MPI collectives must be called in one order.
  auto mpi = mpi_for(cfg);
  if (mpi && pc.master_addr.empty()) learn_control_plane_over_mpi(cfg, *mpi);
  if (pc.master_addr.empty())
    throw std::invalid_argument("a job of " + std::to_string(cfg.mesh.processes) +
                                " processes needs process 0's address: MASTER_ADDR or --master-addr");
  if (pc.secret.empty())
    throw std::invalid_argument("a job of " + std::to_string(cfg.mesh.processes) +
                                " processes needs a shared secret: --secret-file or TROUPE_SECRET");
  const prepared_job job = prepare_job(cfg);
  const job_plan plan = plan_job(cfg, job);
  if (pc.index == 0) log_plan(cfg, job, plan);
  if (cfg.server_processes > static_cast<int>(server_layout(cfg, plan).size()))
    throw std::invalid_argument("--servers " + std::to_string(cfg.server_processes) + ": the job has " +
                                std::to_string(server_layout(cfg, plan).size()) +
                                " parameter servers, so a server process would hold none (fewer --servers, or more "
                                "--server-shards)");
  if (pc.index >= cfg.mesh.processes) {
    spdlog::info("parameter server process {} ({} of {}): model {} ({} parameters)", pc.index,
                 pc.index - cfg.mesh.processes + 1, cfg.server_processes, describe(job.model), job.num_params);
    return run_server_process(cfg, job, plan);
  }
  spdlog::info("rank {} of {}: model {} ({} parameters), {} steps of {} samples", pc.index, cfg.mesh.processes,
               describe(job.model), job.num_params, job.total_steps, cfg.batch_size);
  // Each GPU rank's activations cross to other processes through host memory; its buckets too,
  // unless its data-parallel group reduces on the devices through an engine that spans
  // processes (mesh_links). Its queue is this process's alone.
  const rank_devices device_of = open_rank_devices(cfg, cfg.mesh.ranks_of_process(pc.index), given_devices);
  return pc.index == 0 ? run_rank0(cfg, job, plan, std::move(mpi), device_of, engines)
                       : run_worker(cfg, job, plan, std::move(mpi), device_of, engines);
}

}  // namespace troupe
