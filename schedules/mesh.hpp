// The mesh: where every rank of a job sits. One value, dp x pp x tp ranks spread over a number of
// processes, from which every placement question is answered: a rank's coordinates, the ranks of
// each axis's group (who all-reduces gradients with whom, who passes activations to whom), and
// which process holds which ranks. Plain data here because the planner simulates meshes no
// machine at hand can hold; the runtime (actors/) builds its job from the same value.
//
// Rank order is tp innermost, then pp, then dp: rank = (d * pp + p) * tp + t. Processes hold
// contiguous blocks of ranks, so tensor-parallel peers (the most traffic) share a process first,
// then a pipeline, and data parallelism spans processes last: the usual placement on nodes.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace troupe::sched {

enum class axis { dp, pp, tp };
const char* to_string(axis a);  // "dp", "pp", "tp"

struct mesh_coords {
  int dp = 0, pp = 0, tp = 0;
  bool operator==(const mesh_coords& o) const { return dp == o.dp && pp == o.pp && tp == o.tp; }
};

struct mesh {
  int dp = 1, pp = 1, tp = 1;
  int processes = 1;  // the ranks are spread over this many processes, an equal block each

  int ranks() const { return dp * pp * tp; }
  int ranks_per_process() const { return ranks() / processes; }
  int size(axis a) const;
  mesh_coords coords_of(int rank) const;
  int rank_of(const mesh_coords& c) const;
  // The ranks that differ from `rank` only along `a`, ordered by that coordinate (rank's own
  // group: index i of it has coordinate i along a).
  std::vector<int> group(axis a, int rank) const;
  // Which of the ranks() / size(a) groups along `a` holds rank, numbered by the other two
  // coordinates in rank order (dp groups: p * tp + t; pp: d * tp + t; tp: d * pp + p).
  int group_index(axis a, int rank) const;
  int groups(axis a) const { return ranks() / size(a); }
  int process_of(int rank) const { return rank / ranks_per_process(); }
  std::vector<int> ranks_of_process(int process) const;
  // Whether rank's group along `a` has members in more than one process (its traffic leaves the
  // process: an engine across processes, not an in-process group, carries it).
  bool group_spans_processes(axis a, int rank) const;
  bool operator==(const mesh& o) const {
    return dp == o.dp && pp == o.pp && tp == o.tp && processes == o.processes;
  }
};

// "dp2.pp2.tp1" with "/2" appended when the ranks span more than one process: "dp2.pp2.tp1/2".
std::string to_string(const mesh& m);
std::optional<mesh> parse_mesh(const std::string& text);

// Empty when the mesh is valid, else a message for users naming the field: every axis >= 1,
// processes >= 1 and dividing the ranks.
std::string check(const mesh& m);

}  // namespace troupe::sched
