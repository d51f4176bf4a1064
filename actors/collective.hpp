// collective: a group of N actors, one per rank, that run ring all-reduce (sum, average),
// reduce-scatter, all-gather and broadcast over actor messages (collective_request in,
// collective_result out; messages.hpp). Chunks of each segment travel the ring independently, so
// a large tensor pipelines; in one process they move by reference. The arithmetic is in
// collective_ring.hpp. It does not pick buckets or know about models: stages do that.
#pragma once

#include <caf/all.hpp>

#include <cstdint>
#include <vector>

#include "actors/collective_ring.hpp"
#include "kernels/tensor.hpp"

namespace troupe {

struct collective_options {
  // Largest chunk that travels as one message. Smaller chunks pipeline deeper through the ring
  // and cost more messages; 1 MiB measured best here (bench/README.md). Env TROUPE_CHUNK_KB.
  int64_t chunk_bytes = int64_t{1} << 20;
};
// collective_options with chunk_bytes from TROUPE_CHUNK_KB when it is set.
collective_options collective_options_from_env();

// Spawns the group: result[r] is rank r. Each member is a detached actor (its own thread), so
// the additions and copies never run on CAF's scheduler threads. A request's reply goes to its
// sender as a collective_result with the request's seq.
std::vector<caf::actor> spawn_collective_group(caf::actor_system& sys, int ranks, collective_options opt = {});

// Blocking convenience for tests and benchmarks: every rank's request sent at once from one
// scoped actor, results returned in rank order. inputs as for collective_request::data.
std::vector<tensor> run_collective(caf::actor_system& sys, const std::vector<caf::actor>& group, int64_t seq,
                                   ring::op_kind op, const std::vector<tensor>& inputs, int64_t total, int root = 0);

}  // namespace troupe
