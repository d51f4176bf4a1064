// collective: a group of N actors, one per rank, that run ring all-reduce (sum, average),
// reduce-scatter, all-gather and broadcast over actor messages (collective_request in,
// collective_result out; messages.hpp). Chunks of each segment travel the ring independently, so
// a large tensor pipelines; in one process they move by reference and reduce in place into one
// accumulator the ranks share (collective_pool.hpp). The arithmetic is in comm/ring_schedule.hpp.
// It does not pick buckets or know about models: stages do that.
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "comm/ring_schedule.hpp"
#include "actors/messages.hpp"
#include "kernels/tensor.hpp"

namespace troupe {

struct collective_options {
  // Largest chunk that travels as one message. Smaller chunks pipeline deeper through the ring
  // and cost more messages; 1 MiB measured best here (bench/README.md). Env TROUPE_CHUNK_KB.
  int64_t chunk_bytes = int64_t{1} << 20;
  // Accumulators kept for reuse by the group once every result referring to them is dropped, so
  // repeated collectives touch warm pages instead of faulting in fresh ones. Env
  // TROUPE_COLLECTIVE_POOL_MB.
  int64_t pool_bytes = int64_t{256} << 20;
  // Slow links (fault injection): member -> its sends' cap in bytes/s and latency in seconds.
  std::map<int, std::pair<double, double>> shaped = {};
};
// collective_options with chunk_bytes from TROUPE_CHUNK_KB and pool_bytes from
// TROUPE_COLLECTIVE_POOL_MB when they are set.
collective_options collective_options_from_env();

// Spawns the group: result[r] is rank r. Each member is a detached actor (its own thread), so
// the additions and copies never run on CAF's scheduler threads. A request's reply goes to its
// sender as a collective_result with the request's seq. After an all-reduce, all-gather or
// broadcast every rank's result refers to the same frozen storage (equal bits by construction).
// A collective_dump_request is answered with the member's collective_log (its last
// kLogEntries collectives), even while a collective waits on a peer.
inline constexpr int kLogEntries = 16;
std::vector<caf::actor> spawn_collective_group(caf::actor_system& sys, int ranks, collective_options opt = {});

// Every member's log, in rank order (a member that does not answer within `timeout` is left out),
// and a text form of one log for watchdog reports: one line per collective.
std::vector<collective_log> dump_collective_group(caf::actor_system& sys, const std::vector<caf::actor>& group,
                                                  std::chrono::milliseconds timeout = std::chrono::seconds(1));
std::string to_string(const collective_log& log);

// Blocking convenience for tests and benchmarks: every rank's request sent at once from one
// scoped actor, results returned in rank order. inputs as for collective_request::data.
std::vector<tensor> run_collective(caf::actor_system& sys, const std::vector<caf::actor>& group, int64_t seq,
                                   ring::op_kind op, const std::vector<tensor>& inputs, int64_t total, int root = 0);

}  // namespace troupe
