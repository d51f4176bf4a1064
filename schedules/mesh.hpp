// The mesh: where every rank of a job sits. One value, dp x cp x pp x tp ranks spread over a number
// of processes, from which every placement question is answered: a rank's coordinates, the ranks of
// each axis's group (who all-reduces gradients with whom, who passes activations to whom), and
// which process holds which ranks. Plain data here because the planner simulates meshes no
// machine at hand can hold; the runtime (actors/) builds its job from the same value.
//
// Rank order is tp innermost, then pp, then cp, then dp: rank = ((d * cp + c) * pp + p) * tp + t.
// Processes hold contiguous blocks of ranks, so tensor-parallel peers (the most traffic) share a
// process first, then a pipeline, and data parallelism spans processes last: the usual placement
// on nodes.
//
// Context parallelism (cp) splits each microbatch's sequence over cp ranks that otherwise act as
// data-parallel replicas: they hold the same parameters, and their gradients are partial sums of
// the one microbatch's. So the data-parallel group, the one gradients reduce over and ZeRO shards
// over, is dp x cp (Megatron's data-parallel group with context): group(axis::dp) holds those
// replicas() ranks, replica_of(rank) = d * cp + c is a rank's place in it, and cp consecutive
// replicas share a microbatch. The context group (axis::cp) is the cp ranks that split one
// sequence; attention is the only layer that talks over it. cp before pp in the order keeps
// replica_of a rank's place along one strided axis, as dp alone is.
//
// Expert parallelism (ep) adds no ranks: it is formed inside the dp x cp replicas, as Megatron
// forms it. ep consecutive replicas (replica_of / ep equal) are an expert group (axis::ep): each
// holds E/ep of an MoE layer's experts and sends every token to the replica owning its expert.
// The replicas holding the same experts (replica_of % ep equal) are an expert-data-parallel group
// (axis::edp), the one an expert's gradients reduce over; every other parameter still reduces
// over the whole data-parallel group.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace troupe::sched {

enum class axis { dp, pp, tp, cp, ep, edp };
const char* to_string(axis a);  // "dp", "pp", "tp", "cp", "ep", "edp"

struct mesh_coords {
  int dp = 0, pp = 0, tp = 0, cp = 0;
  bool operator==(const mesh_coords& o) const { return dp == o.dp && pp == o.pp && tp == o.tp && cp == o.cp; }
};

struct mesh {
  int dp = 1, pp = 1, tp = 1;
  int processes = 1;  // the ranks are spread over this many processes, an equal block each
  int cp = 1;         // context-parallel ranks per data-parallel replica
  int ep = 1;         // replicas per expert group (divides dp x cp)

  int ranks() const { return dp * cp * pp * tp; }
  int ranks_per_process() const { return ranks() / processes; }
  // The data-parallel group with context: dp x cp ranks hold each set of parameters.
  int replicas() const { return dp * cp; }
  int replica_of(int rank) const;  // d * cp + c: the rank's index in group(axis::dp, rank)
  // rank's index in group(a, rank): replica_of for dp, its coordinate for pp, tp and cp, its
  // replica's place among ep consecutive ones for ep, and which of the groups of ep it is in for edp.
  int place_in(axis a, int rank) const;
  // The group's size along a: replicas() for dp, replicas() / ep for edp.
  int size(axis a) const;
  mesh_coords coords_of(int rank) const;
  int rank_of(const mesh_coords& c) const;
  // The ranks that differ from `rank` only along `a`, ordered by that coordinate (rank's own
  // group: index i of it has coordinate i along a). dp's group differs along dp and cp, ordered
  // by replica_of.
  std::vector<int> group(axis a, int rank) const;
  // Which of the ranks() / size(a) groups along `a` holds rank, numbered by the other
  // coordinates in rank order (dp groups: p * tp + t; pp: replica * tp + t; tp: replica * pp + p;
  // cp: (d * pp + p) * tp + t; ep: (replica / ep * pp + p) * tp + t; edp: (replica % ep * pp + p)
  // * tp + t).
  int group_index(axis a, int rank) const;
  int groups(axis a) const { return ranks() / size(a); }
  int process_of(int rank) const { return rank / ranks_per_process(); }
  std::vector<int> ranks_of_process(int process) const;
  // Whether rank's group along `a` has members in more than one process (its traffic leaves the
  // process: an engine across processes, not an in-process group, carries it).
  bool group_spans_processes(axis a, int rank) const;
  bool operator==(const mesh& o) const {
    return dp == o.dp && pp == o.pp && tp == o.tp && processes == o.processes && cp == o.cp && ep == o.ep;
  }
};

// "dp2.pp2.tp1", with ".cp2" when cp > 1, ".ep2" when ep > 1 and "/2" when the ranks span more
// than one process: "dp2.pp2.tp1.cp2.ep2/2".
std::string to_string(const mesh& m);
std::optional<mesh> parse_mesh(const std::string& text);

// Empty when the mesh is valid, else a message for users naming the field: every axis >= 1,
// processes >= 1 and dividing the ranks, ep dividing dp x cp.
std::string check(const mesh& m);

}  // namespace troupe::sched
