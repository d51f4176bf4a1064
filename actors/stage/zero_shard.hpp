// zero_shard: ZeRO's side of a stage, held by the ZeRO strategies alone (stage_strategies.hpp:
// zero_reduce and zero_gathered_params or zero_fetched_params share one): this rank's segment of
// every bucket and what the stage keeps of them between its bucket traffic
// (stage_collectives.cpp) and its optimizer shard. A stage that does not shard has none.
// Include only from actors/stage/*.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "actors/plan/dp_buckets.hpp"
#include "actors/stage/param_fetcher.hpp"
#include "kernels/tensor.hpp"

namespace troupe::stage_detail {

struct zero_shard {
  std::vector<shard_piece> pieces;  // this rank's segment of every bucket, in bucket order
  tensor grads;                     // ZeRO-2 and 3: the reduced gradients of those segments
  // ZeRO-2 and 3: each local chunk's gradient units (plan_grad_units), shared with its bucket hook.
  std::vector<std::shared_ptr<const grad_units>> units;
  int64_t gathers_pending = 0;  // ZeRO-1 and 2: the all-gathers of updated segments still out
  // ZeRO-3: this rank's parameter segments (its optimizer shard's answer), and the stream that
  // gathers the units.
  tensor params;
  std::shared_ptr<param_fetcher> fetcher;
};

}  // namespace troupe::stage_detail
