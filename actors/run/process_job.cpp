// run_process_training: a mesh spread over processes, each holding its block of ranks (spawned by
// spawn_ranks exactly as a job held in one process is). Two planes:
//  * control: CAF's middleman carries step orders, reports, evaluation and the hubs' messages.
//    The middleman listens nowhere: the gate (net_gate) runs the job's HMAC challenge on every
//    connection and only then hands the socket to the middleman (middleman_link), so a peer
//    without the secret never reaches an actor. With --tls-cert/--tls-key/--tls-ca both ends
//    first run mutual TLS over that socket in a tls_channel, and the middleman gets its plain end.
//  * data (mesh_links): gradient buckets go through a tcp_ring per data-parallel group that spans
//    processes, activations and their gradients through each process's point-to-point endpoint.
//    Where they listen is learnt only over the authenticated control plane: every process tells
//    the job hub what it serves (worker_ready), and the hub hands out every address
//    (mesh_addresses) before training starts.
//
// Each process runs its part through run_job as a placement: process 0 (process_zero.cpp), a
// worker or a process of parameter servers (process_worker.cpp).
#include "actors/run/process_job.hpp"

#include <spdlog/spdlog.h>

#include "actors/compose/mesh_job.hpp"
#include "actors/run/run_job.hpp"
#include "actors/run/process_parts.hpp"

namespace troupe {

train_summary run_process_training(const train_config& given, const rank_devices& given_devices,
                                   const device_engines& engines) {
  train_config cfg = given;
  const process_config& pc = cfg.process;
  validate(cfg);
  if (!(pc.peer_timeout_seconds > 0)) throw std::invalid_argument("peer timeout must be positive");
  // The communicators come first on every process: MPI collectives must be called in one order.
  auto mpi = process_detail::mpi_for(cfg);
  if (mpi && pc.master_addr.empty()) process_detail::learn_control_plane_over_mpi(cfg, *mpi);
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
    return run_job(*process_detail::server_placement(cfg, job, plan));
  }
  spdlog::info("rank {} of {}: model {} ({} parameters), {} steps of {} samples", pc.index, cfg.mesh.processes,
               describe(job.model), job.num_params, job.total_steps, cfg.batch_size);
  // Each GPU rank's activations cross to other processes through host memory; its buckets too,
  // unless its data-parallel group reduces on the devices through an engine that spans
  // processes (mesh_links). Its queue is this process's alone.
  const rank_devices device_of = open_rank_devices(cfg, cfg.mesh.ranks_of_process(pc.index), given_devices);
  const std::unique_ptr<placement> here =
      pc.index == 0 ? process_detail::process_zero_placement(cfg, job, plan, std::move(mpi), device_of, engines)
                    : process_detail::worker_placement(cfg, job, plan, std::move(mpi), device_of, engines);
  return run_job(*here);
}

}  // namespace troupe
