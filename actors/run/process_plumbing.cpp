// process_plumbing: what every process of a multi-process job sets up for its placement
// (process_zero.cpp, process_worker.cpp): its actor system's configuration, its data-plane links'
// options, its MPI communicators, and what every process must share to be admitted.
#include <caf/io/all.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "actors/run/runtime_config.hpp"
#include "actors/run/process_parts.hpp"
#include "comm/net_gate.hpp"
#include "comm/tcp_auth.hpp"

namespace troupe {

namespace {

// A user's schedule by name and a fingerprint (FNV-1a of its text form): two processes that read
// different schedule files under one name are refused at join, not left to deadlock mid-step.
std::string describe_schedule(const train_config& c) {
  if (c.user_schedule.stages.empty()) return c.schedule;
  uint64_t h = 14695981039346656037ull;
  for (unsigned char ch : sched::to_string(c.user_schedule)) h = (h ^ ch) * 1099511628211ull;
  return fmt::format("{}#{:016x}", c.user_schedule.name, h);
}

}  // namespace

std::string describe_for_join(const train_config& c, const prepared_job& job) {
  return fmt::format("{}; {} lr {} wd {} momentum {} betas {},{} eps {}; batch {} seed {} steps {}; buckets {} MiB; "
                     "mesh {}{}{}; recompute {}; matmul {}; schedule {} M {} v {} dispatch {} +{}; backend {}; eval {}x{}; "
                     "servers {} s{} x{} in {} processes",
                     describe(job.model), to_string(c.optim.kind), c.optim.lr, c.optim.weight_decay, c.optim.momentum,
                     c.optim.beta1, c.optim.beta2, c.optim.eps, c.batch_size, c.seed, job.total_steps, c.bucket_mb,
                     sched::to_string(c.mesh), c.sequence_parallel ? " sp" : "",
                     c.mesh.cp > 1 ? std::string(" cp ") + context::to_string(c.cp_mode) : std::string(), to_string(c.recompute), to_string(c.matmul),
                     describe_schedule(c),
                     c.micro_batches, c.virtual_stages, sched::to_string(c.dispatch), c.ready_stash, net::to_string(c.backend), c.eval_batch_size,
                     c.eval_max_batches, to_string(c.consistency), c.staleness, c.server_shards, c.server_processes);
}

namespace process_detail {

void configure(caf::actor_system_config& sys_cfg) {
  configure_runtime(sys_cfg);
  sys_cfg.load<caf::io::middleman>();
}

std::shared_ptr<const net::tls_context> tls_context_for(const process_config& p) {
  if (!use_tls(p)) return nullptr;
  return std::make_shared<net::tls_context>(p.tls_cert, p.tls_key, p.tls_ca);
}

net::ring_options ring_options_for(const process_config& p) {
  net::ring_options o;
  // Twice the peer timeout: the hubs' pings name a silent rank first; the ring only unblocks.
  o.io_timeout_ms = static_cast<int>(2 * to_ms(p.peer_timeout_seconds).count());
  o.rendezvous.timeout_ms = static_cast<int>(to_ms(p.join_timeout_seconds).count());
  return o;
}

mesh_links_args links_args(const train_config& cfg, int process, const std::string& local_host,
                           std::shared_ptr<net::mpi_groups> mpi, const device_engines& engines) {
  const process_config& pc = cfg.process;
  mesh_links_args a;
  // Ranks on GPUs (--device): a data-parallel group of them in this process reduces on the
  // devices, and one across processes too with --backend nccl (NCCL refuses a GPU that two
  // processes name, so it is asked for, not assumed: on one GPU the processes share, the groups
  // meet on the host). Every process derives every rank's device from the one --device list, so
  // all choose alike.
  if (std::any_of(cfg.devices.begin(), cfg.devices.end(), [](const device& d) { return !d.is_cpu(); })) {
    a.engines = engines.empty() ? gpu_group_engines() : engines;
    a.dp_on_devices = device_groups_allowed(cfg);
    a.devices_across_processes = cfg.backend == net::backend_kind::nccl;
    a.device_of = [devices = cfg.devices](int rank) { return device_of_rank(devices, rank); };
    a.device_link = [cfg](int from, int to) { return pipeline_on_device_link(cfg, from, to); };
  }
  a.mpi = std::move(mpi);
  a.gloo = cfg.backend == net::backend_kind::gloo;
  a.zero3 = cfg.zero >= 3;
  a.process = process;
  a.local_host = local_host;
  a.secret = pc.secret;
  a.ring = ring_options_for(pc);
  a.slow_links = cfg.slow_links;
  // Twice the peer timeout, as for the ring: the hubs' pings name a silent process first.
  a.p2p.io_timeout_ms = static_cast<int>(2 * to_ms(pc.peer_timeout_seconds).count());
  a.p2p.connect_timeout_ms = static_cast<int>(to_ms(pc.join_timeout_seconds).count());
  a.join_timeout_ms = static_cast<int>(to_ms(pc.join_timeout_seconds).count());
  return a;
}

// --backend mpi: this process's communicators, one per process-spanning group, made by every process
// in group order before any other MPI call (so before the control plane, whose order of events
// differs between processes). A group held in one process needs none.
std::shared_ptr<net::mpi_groups> mpi_for(const train_config& cfg) {
  if (cfg.backend != net::backend_kind::mpi) return nullptr;
  const sched::mesh& m = cfg.mesh;
  // Every process-spanning group, numbered as mesh_links numbers them (comm_group_id); ZeRO-3's
  // parameter groups (the data-parallel groups once more) only with ZeRO-3.
  std::vector<int> member_of(static_cast<size_t>(comm_group_count(m)), -1);
  for (comm_group g : comm_groups) {
    const sched::axis a = axis_of(g);
    if (comm_groups_of(m, g) == 0 || m.size(a) == 1 || (g == comm_group::zero3_params && cfg.zero < 3)) continue;
    for (int r : m.ranks_of_process(cfg.process.index))
      if (m.group_spans_processes(a, r)) member_of[static_cast<size_t>(comm_group_id(m, g, r))] = m.place_in(a, r);
  }
  auto mpi = std::make_shared<net::mpi_groups>(member_of);
  if (mpi->world_size() != m.processes || mpi->world_rank() != cfg.process.index)
    throw std::runtime_error("--backend mpi: MPI says this is process " + std::to_string(mpi->world_rank()) + " of " +
                             std::to_string(mpi->world_size()) + ", the job says " + std::to_string(cfg.process.index) +
                             " of " + std::to_string(m.processes) + " (start every process with the same mpirun)");
  return mpi;
}

// --backend mpi under mpirun with no MASTER_ADDR: process 0 tells every process, over MPI (the
// launcher's own channel, which only the job's processes share), where its control gate listens
// and the job's secret (one it makes when none was given). Right after the communicators, so
// every process makes this broadcast as its second collective.
void learn_control_plane_over_mpi(train_config& cfg, net::mpi_groups& mpi) {
  process_config& pc = cfg.process;
  std::string text;
  if (pc.index == 0) {
    if (pc.secret.empty()) pc.secret = net::random_secret();
    pc.master_addr = net::this_host_address();
    text = pc.master_addr + "\n" + std::to_string(pc.master_port) + "\n" + pc.secret;
  }
  text = mpi.broadcast_text(text, 0);
  const auto a = text.find('\n'), b = text.find('\n', a + 1);
  if (a == std::string::npos || b == std::string::npos)
    throw std::runtime_error("--backend mpi: process 0's control-plane address did not arrive whole");
  if (pc.index != 0) {
    pc.master_addr = text.substr(0, a);
    pc.master_port = static_cast<uint16_t>(std::stoi(text.substr(a + 1, b - a - 1)));
    pc.secret = text.substr(b + 1);
  }
  spdlog::info("process {}: control plane at {}:{} (from MPI)", pc.index, pc.master_addr, pc.master_port);
}

}  // namespace process_detail

}  // namespace troupe
