// simulate: a discrete-event run of a valid schedule in virtual time under a cost model:
// step time, busy and idle (bubble) time per stage, peak live activations, bytes per link and
// a timeline for the renderers. It models one compute stream per device, FIFO links, and (ZeRO-3)
// one parameter all-gather stream per device beside compute; it does not model memory bandwidth,
// kernel overlap within a device or the gradient reduction's collective traffic.
#pragma once

#include <vector>

#include "schedules/schedule.hpp"
#include "schedules/timeline.hpp"

namespace troupe::sched {

// Seconds one chunk takes for one microbatch. `backward` is the full backward; a split
// backward costs backward_input + backward_weight (set backward to their sum to compare).
struct chunk_cost {
  double forward = 1;
  double backward = 2;
  double backward_input = 1;
  double backward_weight = 1;
};

struct cost_model {
  chunk_cost uniform;                             // used where per_chunk gives nothing
  std::vector<std::vector<chunk_cost>> per_chunk;  // optional [stage][chunk] overrides
  // A transfer between two stages takes send_seconds + bytes / link_bytes_per_second (the
  // second term only when the bandwidth is > 0). Each directed link carries one transfer at a
  // time, in the order the sender issued them; the receiver cannot go on before it arrives.
  double send_seconds = 0;
  double link_bytes_per_second = 0;
  double activation_bytes = 0;  // per microbatch per chunk boundary
  double grad_bytes = 0;
  double reduce_grads_seconds = 0;
  double optimizer_step_seconds = 0;
  // Device time of the fetch_params / release_params actions themselves (issuing the gather,
  // freeing the buffer): they sit on the stage's compute stream where the schedule puts them.
  double fetch_params_seconds = 0;
  double release_params_seconds = 0;
  // The all-gather of a chunk's parameters that a fetch_params starts, over the stage's
  // data-parallel group. It runs beside compute on the stage's gather stream, one at a time in
  // the order the fetches are issued; a forward, backward or backward_input of the fetched
  // (chunk, microbatch) cannot start before it is done. 0: parameters are ready at once.
  double param_gather_seconds = 0;

  const chunk_cost& cost_of(int stage, int chunk) const;
};

// A cost model where every chunk takes the same times.
cost_model uniform_costs(double forward, double backward, double backward_input,
                         double backward_weight);

struct link_traffic {
  int from_stage = 0;
  int to_stage = 0;
  int messages = 0;
  double bytes = 0;
};

struct simulate_options {
  // How early a fetch's all-gather is issued, in compute actions (F, B, I and W) of its stage.
  // 0: when the stage reaches its fetch_params action (after that action's device time).
  // p > 0: at the start of the p-th compute action before the fetch_params in the stage's
  // list, or at the step's start when there are fewer than p (FSDP's forward/backward
  // prefetch, DeepSpeed's prefetch bucket). The schedule's order is unchanged: p more gathered
  // chunks may be in memory at once than validate's peak_fetched counts, which is not modelled.
  int prefetch = 0;
};

struct simulation {
  double makespan_seconds = 0;               // step time: the last action's end
  std::vector<double> busy_seconds;          // per stage: compute, reduce, optimizer, fetch/release
  std::vector<double> idle_seconds;          // per stage: makespan - busy (the bubble)
  double bubble_fraction = 0;                // total idle / (P * makespan)
  std::vector<int> peak_live_activations;    // per stage; see validate.hpp for the accounting
  std::vector<int> peak_fetched;             // per stage, from validate (0 without fetches)
  // Per stage: how long its forwards, backwards and backward_inputs waited for their parameter
  // all-gather, i.e. the gather time compute, receive waits and prefetch did not hide. It is
  // part of idle_seconds (the stage is not busy while it waits), never of busy_seconds.
  std::vector<double> exposed_fetch_seconds;
  std::vector<link_traffic> links;           // per used directed link, ordered by (from, to)
  timeline events;                           // per stage, every action with start and end
};

// Throws std::invalid_argument carrying validate()'s message when the schedule is not valid:
// a compute-only schedule with P > 1 has no receives, so run passes.hpp's complete() first.
// Also throws when options.prefetch < 0.
simulation simulate(const schedule& s, const cost_model& costs, const simulate_options& options = {});

}  // namespace troupe::sched
