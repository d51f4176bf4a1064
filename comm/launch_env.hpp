// Where a process stands in a multi-process job: its rank, the world size and the rendezvous
// address, read from explicit flags or from whichever launcher started it (torchrun, mpirun,
// srun, Kubeflow Trainer). A pure function of an environment map and the flags, so every case is a unit test; it
// deliberately reads no real environment, opens no socket and resolves no host name.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace troupe {

constexpr uint16_t default_master_port = 29500;  // torchrun's default

struct launch_env {
  int rank = 0;
  int world_size = 1;
  std::string master_addr = "127.0.0.1";
  uint16_t master_port = default_master_port;
  // "flags", "torchrun", "kubeflow", "mpirun", "srun" or "single" (nothing given: one process).
  std::string source = "single";
  // Processes this one starts on its node, itself included, as torchrun would (Kubeflow Trainer's
  // PET_NPROC_PER_NODE): ranks rank .. rank + node_processes - 1. 1 for every other launcher.
  int node_processes = 1;
};

// Values from the command line (--rank, --world-size, --master-addr, --master-port), kept as
// text so a bad value is reported with the flag's own name.
struct launch_flags {
  std::optional<std::string> rank, world_size, master_addr, master_port;
  // The job learns process 0's address over MPI (--backend mpi): under mpirun none is needed, and
  // master_addr stays empty when none is given.
  bool address_from_mpi = false;
};

struct launch_result {
  std::optional<launch_env> env;
  std::string error;  // names the variable or flag and its value; empty when env is set
};

// Rules (why: launchers nest — torchrun inside an srun allocation, mpirun inside sbatch — so the
// most specific launcher wins rather than a disagreement being an error):
//   * rank/world come from flags if --rank or --world-size is given (both are then required),
//     else from torchrun (RANK, WORLD_SIZE), else Kubeflow Trainer (node PET_NODE_RANK of
//     PET_NNODES, PET_NPROC_PER_NODE processes each: rank = node x per node, the first of its
//     node), else mpirun (OMPI_COMM_WORLD_RANK/_SIZE), else srun (SLURM_PROCID/SLURM_NTASKS); a
//     launcher that sets one of its pair but not the other is an error. A flag that contradicts
//     the launcher's own variable is an error naming both. Torchrun comes before Kubeflow
//     because a pod whose command is torchrun has both: its children carry RANK.
//   * the address comes from --master-addr/--master-port, else MASTER_ADDR/MASTER_PORT (under
//     Kubeflow: PET_MASTER_ADDR/PET_MASTER_PORT first); a world of more than one process needs an
//     address (mpirun and srun do not provide one).
//   * values must be decimal integers; 0 <= rank < world_size; 1 <= port <= 65535.
launch_result parse_launch_env(const std::map<std::string, std::string>& env, const launch_flags& flags = {});

// Every environment variable parse_launch_env reads, with what it means, in the order it looks
// (for the generated flag reference).
struct launch_variable {
  std::string name, meaning;
};
std::vector<launch_variable> launch_variables();

// The process environment as a map (for the CLI; tests pass their own maps).
std::map<std::string, std::string> current_environment();

}  // namespace troupe
