// MPI as a collective back end: one communicator per data-parallel group of the mesh, made by one
// MPI_Comm_split per group, in group order, on every process of the job (so every process must
// construct mpi_groups with the same number of groups, before any other MPI call of troupe's).
// MPI is initialized with MPI_THREAD_MULTIPLE on first use (each group's calls come from its
// collective actor's own thread) and finalized at exit. Built where CMake finds Open MPI; elsewhere
// (mpi_groups_missing.cpp) constructing it throws net_error saying so.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/collective_backend.hpp"

namespace troupe::net {

class mpi_groups {
 public:
  // member_of[g]: this process's coordinate in group g (its dp coordinate), or -1 when it holds
  // no member of g. Throws net_error when MPI cannot provide MPI_THREAD_MULTIPLE.
  explicit mpi_groups(const std::vector<int>& member_of);
  ~mpi_groups();
  mpi_groups(const mpi_groups&) = delete;
  mpi_groups& operator=(const mpi_groups&) = delete;

  int world_rank() const;  // MPI_COMM_WORLD
  int world_size() const;
  // Collective over MPI_COMM_WORLD: `text` of process `root`, on every process.
  std::string broadcast_text(const std::string& text, int root);
  // Group g's member in this process; at most once per group. Throws std::logic_error otherwise.
  std::unique_ptr<group_backend> take(int group);

  struct impl;

 private:
  std::unique_ptr<impl> impl_;
};

}  // namespace troupe::net
