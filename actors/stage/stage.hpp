// The stage: every rank of every job runs one, a thin interpreter of its row of the job's
// schedule. A single device is the one-stage schedule `F0 B0 R O`; a pipeline stage runs its
// row of GPipe, 1F1B, interleaved or zero-bubble; a data-parallel replica turns R into an
// all-reduce of its gradient buckets over its data-parallel group. Include only from actors/
// (it pulls in CAF).
#pragma once

#include <caf/all.hpp>

#include "actors/plan/checkpointing.hpp"
#include "actors/plan/dp_buckets.hpp"
#include "actors/messages.hpp"
#include "actors/stage/rank_groups.hpp"
#include "actors/config/train_config.hpp"
#include "kernels/device_queue.hpp"
#include "kernels/model.hpp"
#include "kernels/partition.hpp"
#include "schedules/schedule.hpp"
#include "storage/segment_file.hpp"

namespace troupe {

// coordinator -> stage, once after spawning: the stages of its replica, indexed by pipeline stage.
using peers_atom = caf::atom_constant<caf::atom("pp_peers")>;

struct stage_args {
  int rank = 0;                           // mesh rank (reports and failures name it)
  int stage = 0;                          // its pipeline coordinate: the row of `plan` it runs
  sched::schedule plan;                   // complete and validated
  model_spec model;
  std::vector<layer_range> model_chunks;  // model chunk k -> its layers (all chunks, P * v)
  uint64_t seed = 42;
  int64_t global_rows = 0;   // loss rows of the global batch (all replicas): grad_scale = 1 / global_rows
  int64_t total_steps = 0;   // bounds the batch prefetch
  int pin_cpu = -1;          // pin the stage's thread to this core (-1: leave it)
  std::string drop_send;     // fault injection: the text of a send that is lost
  straggler_spec straggler;  // ms > 0: sleep before the step's first forward
  int64_t killed_at_step = -1;  // fault injection: the stage is killed as this step begins
  bool commit_updates = false;  // an elastic job: each update waits for the coordinator's commit
  jitter_spec jitter;        // max_ms > 0: each compute action sleeps a seeded random extra first
  sched::dispatch_policy dispatch = sched::dispatch_policy::fixed;  // of its row (schedules/dispatch.hpp)
  int ready_stash = 0;  // ready dispatch: stash headroom beyond the fixed order's peak
  // Data parallelism: per local chunk, its gradient buckets (offsets into that chunk's flat
  // gradients); each goes to `collective` the moment the chunk's last backward finished its
  // lowest layer, and R waits for all of them. No dp reducer (groups): R is the identity (one
  // replica).
  std::vector<std::vector<grad_bucket>> buckets;
  caf::actor loader, optimizer;
  // The groups it works in, by axis. tp: its layers are its share of the model, their
  // collectives run on the stage's own thread inside F and B (so they sit on the critical path,
  // as Megatron's do), and the loss is the vocabulary-parallel one. cp: its tokens are its share
  // of every sequence (the loader cut them) and its blocks' attention meets the group's keys and
  // values inside F and B, as context_mode says. ep: its MoE blocks share out their experts over
  // the group (tokens move by all-to-all inside F and B), and the buckets marked `experts` reduce
  // over edp (a group of one when this replica is the only one holding them). dp: the buckets'
  // reducer, and with ZeRO-3 the parameter gathers' member.
  rank_groups groups;
  // By pipeline stage of its replica: whether what this stage sends it crosses the host transport
  // (a stage in another process, unless a device link joins their GPUs: pipeline_on_device_link),
  // which reads host memory, so a GPU's tensor goes as a copy in pinned memory made on the queue's
  // download stream. Otherwise the tensor itself goes (to the stage, or the link's sending end).
  std::vector<bool> peer_over_host;
  // Its gradients go to actors that read them on the host (parameter servers): on a GPU they
  // leave as a copy in pinned host memory, as they do for gradient observers.
  bool host_gradients = false;
  // Parameter servers under ssp and asp: the job's batch dispenser. Each step's batch is the unit
  // it grants (asked when the previous step's gradients are ready, so a fast replica takes more),
  // and a run of steps lasts until it grants none; the steps are the replica's own count.
  caf::actor dispenser;
  caf::actor coordinator;
  context::cp_mode context_mode = context::cp_mode::all_gather;
  recompute_mode recompute = recompute_mode::none;
  matmul_precision matmul = matmul_precision::f32;  // of every linear layer in the stage's chunks
  bool sequence_parallel = false;     // with tp: the stage's activations are its tp rank's share of the sequences
  std::vector<caf::actor> observers;  // each gets observed_gradients every step (job_extras.hpp)
  // ZeRO over the data-parallel group (with a dp reducer): rank dp_rank of dp_size owns segment
  // dp_rank of every bucket (`shard`, dp_buckets.hpp's shard_layout), and its optimizer shard holds just
  // those. 1: buckets are all-reduced as before and O sends the shard's part; 2: buckets are
  // reduce-scattered, and the stage's gradients are per bucket, freed once sent. After the
  // shard's update every bucket is all-gathered back into the stage's parameters.
  // 3: parameters too. The stage keeps only its segments; each unit is all-gathered (over
  // the dp member of `groups`, on a param_fetcher's thread, `prefetch` units ahead) right before its first
  // layer runs in F or B and dropped after its last, and the schedule's FP/RP bracket them.
  int zero = 0;
  int dp_rank = 0, dp_size = 1;
  // ZeRO: this rank's segments of its buckets (job_plan::shard_of: the experts' buckets cut over
  // the replicas holding those experts, the rest over the data-parallel group).
  std::vector<shard_piece> shard;
  int prefetch = 1;
  std::shared_ptr<device_memory> memory;       // the rank's device ledger (null: not counted)
  std::shared_ptr<device_memory> host_memory;  // what its offloaded optimizer shard holds in host memory
  // ZeRO-3 with the parameters offloaded: the segments are counted on host_memory, not the
  // device's; to NVMe, they live in `param_file` between uses (the param_fetcher's alone).
  bool params_offloaded = false;
  std::shared_ptr<storage::segment_file> param_file;
  // Checkpoints: a checkpoint_order has this rank's optimizer shard write its part (when
  // writes_checkpoint: ZeRO partitions, or the first replica's copy without ZeRO); with `resume`
  // the stage starts from the checkpoint's parameters and hands its shard the saved state.
  bool writes_checkpoint = false;
  std::shared_ptr<const resume_point> resume;
  // Where F, B, I and W compute (kernels/device_queue.hpp). Null or synchronous (the CPU): in
  // line, on the stage's own thread. Asynchronous: each is enqueued (with its tensor-parallel
  // collectives, ZeRO-3's parameter fetches and the loss inside it) and completes when the
  // queue's completion message comes back; until then the stage handles its other messages.
  std::shared_ptr<device_queue> queue;
};

// With a synchronous device, detached: compute runs on the actor's own thread, never on a
// scheduler thread. With an asynchronous one, a scheduled actor: the device computes, the
// stage only enqueues and hands results on, so it never holds the thread it runs on; except
// with a tensor-parallel group or ZeRO-3, whose collectives (a unit's gather) wait for their
// partners in the stage's launches: detached then too.
caf::actor spawn_stage(caf::actor_system& sys, stage_args args);

}  // namespace troupe
