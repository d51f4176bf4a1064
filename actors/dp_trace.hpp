// The measured timeline of a data-parallel step: what each rank computed (forward, backward per
// layer, optimizer) and when each gradient bucket's all-reduce ran, as plain events; their
// conversion to the schedules' timeline (so render_chrome_trace draws them) and the overlap share.
// No CAF here: the stage records events, training_job renders them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "schedules/timeline.hpp"

namespace troupe {

enum class dp_event_kind : int32_t {
  forward = 0,    // forward + loss of the rank's share of the batch
  backward = 1,   // backward of one layer; index = layer
  all_reduce = 2, // one bucket: from the moment it was sent to when its sum came back; index = bucket
  optimizer = 3,  // gradients to the optimizer shard and parameters back
};

struct dp_trace_event {
  int32_t rank = 0;
  int32_t kind = 0;   // dp_event_kind
  int32_t index = 0;  // layer or bucket
  double start = 0;   // seconds, steady clock
  double end = 0;
};

// Lanes: rank r's compute is lane 2r, its all-reduces lane 2r+1 (render_chrome_trace names them
// "stage 2r" and "stage 2r+1"). Ops: forward F0, backward of layer i B0.c<i> (the chunk field
// carries the layer), bucket k's all-reduce R<k> (reduce_grads, microbatch = bucket), optimizer O.
// An all-reduce is drawn from the moment the last rank handed the bucket in (before that the ring
// cannot run: a rank that is ahead waits for its peers, shown as the gap) to its sum's arrival.
// An injected straggler delay is not drawn: it is the gap before the rank's forward. Times start
// at the earliest event.
sched::timeline to_timeline(const std::vector<dp_trace_event>& events, int ranks, const std::string& name);

// Share of all-reduce time, summed over ranks, that lies inside the job's backward (the union of
// every rank's backward-layer intervals): the communication a synchronous step does not wait
// for. 0 when there is no all-reduce.
double overlap_share(const sched::timeline& t);

}  // namespace troupe
