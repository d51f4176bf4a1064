// What the placements of a multi-process job (process_zero.cpp, process_worker.cpp) share: the
// set-up every process makes first (process_plumbing.cpp). Include only from actors/process/*.cpp
// (CAF).
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "actors/compose/mesh_links.hpp"
#include "actors/run/run_job.hpp"
#include "actors/config/train_config.hpp"
#include "actors/messages.hpp"
#include "actors/process/middleman_link.hpp"
#include "actors/run/process_job.hpp"
#include "comm/net_gate.hpp"
#include "comm/tls_channel.hpp"

namespace troupe::process_detail {

using std::chrono::milliseconds;
inline milliseconds to_ms(double s) { return milliseconds(static_cast<int64_t>(s * 1000.0)); }
inline bool use_tls(const process_config& p) { return !p.tls_cert.empty(); }

// The actor system of a process of the job: the runtime's settings, the middleman without a port
// of its own.
void configure(caf::actor_system_config& sys_cfg);
// The job's certificates loaded for its TLS channels (tls_channel.hpp); null without TLS.
std::shared_ptr<const net::tls_context> tls_context_for(const process_config& p);
// The data plane's links of `process` (its host as the other processes reach it).
mesh_links_args links_args(const train_config& cfg, int process, const std::string& local_host,
                           std::shared_ptr<net::mpi_groups> mpi, const device_engines& engines);
// --backend mpi: this process's communicators, made before any other MPI call; null otherwise.
std::shared_ptr<net::mpi_groups> mpi_for(const train_config& cfg);
// Without MASTER_ADDR under mpirun: process 0's control plane address, told over MPI.
void learn_control_plane_over_mpi(train_config& cfg, net::mpi_groups& mpi);
// The placements of run_job for a process of a job over several: process 0 (process_zero.cpp),
// a worker, a process of parameter servers (process_worker.cpp).
std::unique_ptr<placement> process_zero_placement(const train_config& cfg, const prepared_job& job,
                                                  const job_plan& plan, std::shared_ptr<net::mpi_groups> mpi,
                                                  const rank_devices& device_of, const device_engines& engines);
std::unique_ptr<placement> worker_placement(const train_config& cfg, const prepared_job& job, const job_plan& plan,
                                            std::shared_ptr<net::mpi_groups> mpi, const rank_devices& device_of,
                                            const device_engines& engines);
std::unique_ptr<placement> server_placement(const train_config& cfg, const prepared_job& job, const job_plan& plan);

}  // namespace troupe::process_detail
