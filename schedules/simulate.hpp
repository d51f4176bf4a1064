// simulate: a discrete-event run of a valid schedule in virtual time under a cost model:
// step time, busy and idle (bubble) time per stage, peak live activations, bytes per link and
// a timeline for the renderers. It models one compute stream per device, FIFO links, and (ZeRO-3)
// one parameter all-gather stream per device beside compute; it does not model memory bandwidth,
// kernel overlap within a device or the gradient reduction's collective traffic.
//
// It follows a stage's dispatch policy (dispatch.hpp) as the runtime's stage does: fixed runs each
// row as written; ready lets a stage whose next action waits run the other lane's head instead.
// What ready dispatch buys depends on how late actions are, so the simulator can also make them
// late: seeded per-action jitter, drawn as the runtime's --jitter draws it, so `troupe schedule`
// can say before a run what a jittery cluster would gain, and tests can compare the two policies
// on the very same per-action times.
#pragma once

#include <cstdint>
#include <vector>

#include "schedules/dispatch.hpp"
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

  // Which action a stage runs next (dispatch.hpp). Under `ready`, whenever a stage's compute
  // stream is idle it runs the first of next_candidates() whose inputs are there now: a receive's
  // message has arrived, a weight-reading compute's all-gather is done (anything else an action
  // needs comes from earlier actions of its lane, which ran). If none is, it waits for the next
  // event: it never runs an action that is not yet a candidate, however long the wait, because
  // the runtime's stage does not either. At one instant the simulator lets every zero-time
  // consequence (sends, arrivals over a free link) happen before a stage settles for a lower-
  // priority candidate, so ties go to the row's order. `fixed` gives the results simulate gave
  // before dispatch existed, bit for bit.
  // Ready is greedy and does not preempt, so it is not always faster: an action that fills a wait
  // and outlasts it delays the action that waited (ZB-H1 at P = 3 with F = 1, I = W = 0.5 ends half
  // a unit later with no jitter at all), and a backward that overtakes a forward delays the next
  // stage's input (1F1B at ready_stash 0 under jitter is slightly slower on average; from 1 on it
  // is faster). simulate_steps() over jittered steps tells, per schedule and headroom, before a run.
  dispatch_policy dispatch = dispatch_policy::fixed;
  // Ready dispatch's stash headroom above the fixed order's peak (the runtime's --ready-stash).
  // At 0 a forward may overtake a waiting backward only while the stage holds fewer activations
  // than its fixed peak, which 1F1B's stages never do in their steady state; 1 lets a forward
  // fill the wait for a late gradient, at the cost of one more live activation.
  int ready_stash = 0;

  // Per-action variability: every compute action (F, B, I, W) of stage s takes its cost plus an
  // extra drawn uniformly from [0, jitter_max_seconds[s]). Empty: no jitter; otherwise one
  // entry (>= 0) per stage. The draw depends only on (jitter_seed, stage, jitter_step, the
  // action's index in its row), not on when the action runs, so fixed and ready dispatch of
  // one schedule see the same per-action times, and a simulation repeats. It is the draw of the
  // runtime's --jitter S:MAX (actors/config/train_config.cpp jitter_delay_ms, with the job's seed,
  // mesh rank S = stage and the step), so a pipeline-only run with the same seed is late where
  // the simulation is. jitter_step picks the step: simulate_steps() averages several.
  std::vector<double> jitter_max_seconds = {};
  uint64_t jitter_seed = 0;
  int64_t jitter_step = 0;
};

struct simulation {
  double makespan_seconds = 0;               // step time: the last action's end
  std::vector<double> busy_seconds;          // per stage: compute, reduce, optimizer, fetch/release
  std::vector<double> idle_seconds;          // per stage: makespan - busy (the bubble)
  double bubble_fraction = 0;                // total idle / (P * makespan)
  // Per stage, in the order the actions ran (see validate.hpp for the accounting): under fixed
  // dispatch validate's peak; under ready dispatch never more than that plus ready_stash.
  std::vector<int> peak_live_activations;
  std::vector<int> peak_fetched;             // per stage, from validate (0 without fetches)
  // Per stage: how long its forwards, backwards and backward_inputs waited for their parameter
  // all-gather, i.e. the gather time compute, receive waits and prefetch did not hide. It is
  // part of idle_seconds (the stage is not busy while it waits), never of busy_seconds.
  std::vector<double> exposed_fetch_seconds;
  std::vector<link_traffic> links;           // per used directed link, ordered by (from, to)
  // Per stage, every action with start and end, in the order it ran (the row's order under
  // fixed dispatch; under ready dispatch a receive's interval is the stage's idle time before
  // it, as under fixed, and zero when the stage was busy until then).
  timeline events;
  // Per stage, how many actions ran before an action earlier in the row (0 under fixed dispatch):
  // how often ready dispatch used its freedom.
  std::vector<int> out_of_order;
};

// Throws std::invalid_argument carrying validate()'s message when the schedule is not valid:
// a compute-only schedule with P > 1 has no receives, so run passes.hpp's complete() first.
// Also throws when options.prefetch < 0, options.ready_stash < 0, or jitter_max_seconds is
// neither empty nor one finite value >= 0 per stage.
simulation simulate(const schedule& s, const cost_model& costs, const simulate_options& options = {});

// Several steps with fresh jitter each: step k is simulate() with jitter_step = options.jitter_step
// + k. Steps are simulated one by one, each from time 0: a step's makespan, as the runtime's
// step time is its first action's start to its last action's end; overlap between steps (a
// stage starting the next step while a later stage still drains) is not modelled. Without
// jitter every step is the same. Throws as simulate() does, and when steps < 1.
struct step_statistics {
  int steps = 0;
  double mean_makespan_seconds = 0;
  double max_makespan_seconds = 0;
  double mean_bubble_fraction = 0;
  std::vector<int> peak_live_activations;  // per stage, the most over the steps
  int out_of_order = 0;                    // over all stages and steps
};
step_statistics simulate_steps(const schedule& s, const cost_model& costs, const simulate_options& options,
                               int steps);

}  // namespace troupe::sched
