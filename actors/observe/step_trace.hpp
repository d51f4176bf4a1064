// The measured record of one training step: what each rank's stage did and when, and when each
// of its gradient buckets was all-reduced; and its conversion to the schedules' timeline, so the
// renderers that draw a simulated schedule (SVG, Chrome trace) draw a real run the same way, for
// every job shape. Plain data: the stage fills a record, the coordinator collects one per rank.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/layers_moe_block.hpp"
#include "schedules/timeline.hpp"

namespace troupe {

struct stage_step_record {
  int64_t step = 0;
  int32_t rank = 0;             // mesh rank
  double loss_sum = 0.0;        // the last stage's loss over its replica's rows (0 elsewhere)
  int64_t count = 0;
  int64_t correct = 0;
  int32_t peak_live = 0;        // most activations held at once during the step
  double step_start = 0;        // steady-clock seconds: ordered, or the previous step ended
  double step_end = 0;          // its optimizer step ended
  double compute_seconds = 0;   // forward, backward and optimizer actions
  double tp_seconds = 0;        // of which inside tensor-parallel collectives (waiting for peers included)
  int64_t peak_activation_bytes = 0;  // most bytes of saved activations held at once
  // The rank's device ledger (kernels/device_memory.hpp) over the run so far: the peak of each
  // memory_kind in its order, then the peak of all together. Empty when not counted.
  std::vector<int64_t> peak_memory;
  std::vector<int64_t> peak_host_memory;  // the same for what its offloaded optimizer holds on the host
  // The schedule row as executed: each action's text and its interval (steady-clock seconds).
  std::vector<std::string> actions;
  std::vector<double> start_seconds, end_seconds;
  // Gradient buckets: index, when handed to the collective, when the reduced values were back.
  std::vector<int32_t> buckets;
  std::vector<double> bucket_sent, bucket_done;
  // Per bucket, the bytes/s its collective's first hop came in at over this rank's left link (0:
  // not measured), for the slow-link detector.
  std::vector<double> bucket_left_rate;
  // Its left link's speed this step: the median of its buckets' measured rates (0: none measured).
  double left_link_rate() const;
  // A mixture of experts' routing over the step's forwards (expert_tally, flattened for the
  // wire): the rank's MoE blocks by model layer index, per block the assignments routed to each
  // expert (block after block) and those dropped for capacity, and the load-balancing losses'
  // sum over aux_forwards block forwards. Empty for a dense model.
  std::vector<int64_t> moe_layers, expert_routed, expert_dropped;
  double aux_loss_sum = 0;
  int64_t aux_forwards = 0;
  void set_experts(const expert_tally& t);
  expert_tally experts() const;
};

// Every rank of a step: lane 2r is rank r's actions ("rank r" "compute"), lane 2r+1 its bucket all-reduces (drawn as
// reduce_grads with the bucket as microbatch, from the moment the last rank of its group handed
// the bucket in: before that the ring cannot run, and the gap shows a rank waiting for a peer).
// Times start at the step's earliest event.
// The middle of v (the mean of the two middle values for an even count; 0 for none): the statistic
// the step figures are summarised by, robust to a step the machine interrupted.
double median(std::vector<double> v);

sched::timeline to_timeline(const std::vector<stage_step_record>& ranks, int ranks_per_replica, const std::string& name);

// One replica's pipeline as the schedule sees it: lane d is stage d's actions (records in stage
// order), so measure_bubble and calibrate_costs (pipeline_timing.hpp) read it like a simulation.
sched::timeline schedule_timeline(const std::vector<stage_step_record>& stages, const std::string& name);

// Share of all-reduce time, summed over ranks, that lies inside the step's backward (the union of
// every rank's backward intervals): the communication a synchronous step does not wait for. 0
// when there is no all-reduce.
double overlap_share(const sched::timeline& t);

}  // namespace troupe
