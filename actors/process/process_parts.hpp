// What the runner bodies of a multi-process job (process_job.cpp) share with the set-up every
// process makes first (process_plumbing.cpp). Include only from actors/process/*.cpp (CAF).
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "actors/job/mesh_links.hpp"
#include "actors/job/teardown_guard.hpp"
#include "actors/job/train_config.hpp"
#include "actors/messages.hpp"
#include "actors/process/middleman_link.hpp"
#include "actors/process/process_job.hpp"
#include "comm/net_gate.hpp"

namespace troupe::process_detail {

using std::chrono::milliseconds;
inline milliseconds to_ms(double s) { return milliseconds(static_cast<int64_t>(s * 1000.0)); }
inline bool use_tls(const process_config& p) { return !p.tls_cert.empty(); }

// The actor system of a process of the job: the runtime's settings, the middleman without a port
// of its own, TLS when configured.
void configure(caf::actor_system_config& sys_cfg, const process_config& p);
// The data plane's links of `process` (its host as the other processes reach it).
mesh_links_args links_args(const train_config& cfg, int process, const std::string& local_host,
                           std::shared_ptr<net::mpi_groups> mpi, const device_engines& engines);
// --backend mpi: this process's communicators, made before any other MPI call; null otherwise.
std::shared_ptr<net::mpi_groups> mpi_for(const train_config& cfg);
// Without MASTER_ADDR under mpirun: process 0's control plane address, told over MPI.
void learn_control_plane_over_mpi(train_config& cfg, net::mpi_groups& mpi);
// Stops the actors, waits until they are gone, and drops the registry entries the middleman made
// for them (see the definition).
void stop_all(caf::actor_system& sys, const std::vector<caf::actor>& actors);

// A process other than 0, admitted to the job: it reached process 0 through the gate (under TLS
// through a loopback bridge that lives as long as the connection), and the job hub answered its
// join. Members in the order they must be made; the guard outlives the actor system's destructor.
struct joined_process {
  teardown_guard guard;
  std::string local_host;  // the interface that reaches process 0
  caf::actor_system_config sys_cfg;
  std::unique_ptr<caf::actor_system> sys;
  std::unique_ptr<net::loopback_bridge> bridge;
  caf::actor hub;
  join_reply joined;

  joined_process(const train_config& cfg, const prepared_job& job);
};

}  // namespace troupe::process_detail
