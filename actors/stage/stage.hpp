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

// What a stage's layers are: the model, the chunks of it this stage runs, and how they compute.
struct stage_model {
  model_spec spec;
  std::vector<layer_range> chunks;  // model chunk k -> its layers (all chunks, P * v)
  recompute_mode recompute = recompute_mode::none;
  matmul_precision matmul = matmul_precision::f32;  // of every linear layer in the stage's chunks
  bool sequence_parallel = false;  // with tp: the stage's activations are its tp rank's share of the sequences
  context::cp_mode context_mode = context::cp_mode::all_gather;  // with cp: how attention meets the group
};

// The run as this rank sees it.
struct stage_run {
  uint64_t seed = 42;
  int64_t global_rows = 0;  // loss rows of the global batch (all replicas): grad_scale = 1 / global_rows
  int64_t total_steps = 0;  // bounds the batch prefetch
  int replica = 0, replicas = 1;  // its data-parallel replica of how many (reports, servers, shards)
};

// How its row is dispatched (schedules/dispatch.hpp).
struct stage_dispatch {
  sched::dispatch_policy policy = sched::dispatch_policy::fixed;
  int ready_stash = 0;  // ready dispatch: stash headroom beyond the fixed order's peak
};

// The actors a stage talks to besides its pipeline peers and groups.
struct stage_partners {
  caf::actor loader, optimizer, coordinator;
  std::vector<caf::actor> observers;  // each gets observed_gradients every step (job_extras.hpp)
};

// Fault injection (troupe stress, the tests): what this rank is told to do wrong.
struct rank_faults {
  std::string drop_send;        // the text of a send that is lost
  straggler_spec straggler;     // ms > 0: sleep before the step's first forward
  int64_t killed_at_step = -1;  // the stage is killed as this step begins
  jitter_spec jitter;           // max_ms > 0: each compute action sleeps a seeded random extra first
};

// ZeRO over the data-parallel group (with a dp reducer): the rank owns segment `replica` of every
// bucket (`shard`, dp_buckets.hpp's shard_layout), and its optimizer shard holds just those.
// 1: buckets are all-reduced as before and O sends the shard's part; 2: buckets are
// reduce-scattered, and the stage's gradients are per bucket, freed once sent. After the shard's
// update every bucket is all-gathered back into the stage's parameters. 3: parameters too. The
// stage keeps only its segments; each unit is all-gathered (over the dp member of its groups, on
// a param_fetcher's thread, `prefetch` units ahead) right before its first layer runs in F or B
// and dropped after its last, and the schedule's FP/RP bracket them.
struct zero_part {
  int stage = 0;
  // This rank's segments of its buckets (job_plan::shard_of: the experts' buckets cut over the
  // replicas holding those experts, the rest over the data-parallel group).
  std::vector<shard_piece> shard;
  int prefetch = 1;
  // ZeRO-3 with the parameters offloaded: the segments are counted on the host ledger, not the
  // device's; to NVMe, they live in `param_file` between uses (the param_fetcher's alone).
  bool params_offloaded = false;
  std::shared_ptr<storage::segment_file> param_file;
};

// Where the stage computes and what counts its memory.
struct rank_device {
  // Where F, B, I and W compute (kernels/device_queue.hpp). Null or synchronous (the CPU): in
  // line, on the stage's own thread. Asynchronous: each is enqueued (with its tensor-parallel
  // collectives, ZeRO-3's parameter fetches and the loss inside it) and completes when the
  // queue's completion message comes back; until then the stage handles its other messages.
  std::shared_ptr<device_queue> queue;
  std::shared_ptr<device_memory> memory;       // the rank's device ledger (null: not counted)
  std::shared_ptr<device_memory> host_memory;  // what its offloaded optimizer shard holds in host memory
  int pin_cpu = -1;                            // pin the stage's thread to this core (-1: leave it)
};

// How its updates are agreed beyond its groups: parameter servers, or an elastic job's commit.
struct update_flow {
  // Parameter servers under ssp and asp: the job's batch dispenser. Each step's batch is the unit
  // it grants (asked when the previous step's gradients are ready, so a fast replica takes more),
  // and a run of steps lasts until it grants none; the steps are the replica's own count.
  caf::actor dispenser;
  // Its gradients go to actors that read them on the host (parameter servers): on a GPU they
  // leave as a copy in pinned host memory, as they do for gradient observers.
  bool host_gradients = false;
  bool commit = false;  // an elastic job: each update waits for the coordinator's commit
};

// Checkpoints: a checkpoint_order has this rank's optimizer shard write its part (when `writes`:
// ZeRO partitions, or the first replica's copy without ZeRO); with `resume` the stage starts from
// the checkpoint's parameters and hands its shard the saved state.
struct stage_checkpoints {
  bool writes = false;
  std::shared_ptr<const resume_point> resume;
};

// What a stage is given: what every rank has, and one part per feature that composes it
// (compose/: the rank_* files fill them).
struct stage_args {
  int rank = 0;          // mesh rank (reports and failures name it)
  int stage = 0;         // its pipeline coordinate: the row of `plan` it runs
  sched::schedule plan;  // complete and validated
  stage_dispatch dispatch;
  stage_model model;
  stage_run run;
  // Data parallelism: per local chunk, its gradient buckets (offsets into that chunk's flat
  // gradients); each goes to the dp reducer the moment the chunk's last backward finished its
  // lowest layer, and R waits for all of them. No dp reducer (groups): R is the identity (one
  // replica).
  std::vector<std::vector<grad_bucket>> buckets;
  // The groups it works in, by axis. tp: its layers are its share of the model, their
  // collectives run on the stage's own thread inside F and B (so they sit on the critical path,
  // as Megatron's do), and the loss is the vocabulary-parallel one. cp: its tokens are its share
  // of every sequence (the loader cut them) and its blocks' attention meets the group's keys and
  // values inside F and B. ep: its MoE blocks share out their experts over the group (tokens move
  // by all-to-all inside F and B), and the buckets marked `experts` reduce over edp (a group of
  // one when this replica is the only one holding them). dp: the buckets' reducer, and with
  // ZeRO-3 the parameter gathers' member.
  rank_groups groups;
  // By pipeline stage of its replica: whether what this stage sends it crosses the host transport
  // (a stage in another process, unless a device link joins their GPUs: pipeline_on_device_link),
  // which reads host memory, so a GPU's tensor goes as a copy in pinned memory made on the queue's
  // download stream. Otherwise the tensor itself goes (to the stage, or the link's sending end).
  std::vector<bool> peer_over_host;
  stage_partners partners;
  rank_faults faults;
  zero_part zero;
  rank_device device;
  update_flow updates;
  stage_checkpoints checkpoints;
};

// With a synchronous device, detached: compute runs on the actor's own thread, never on a
// scheduler thread. With an asynchronous one, a scheduled actor: the device computes, the
// stage only enqueues and hands results on, so it never holds the thread it runs on; except
// with a tensor-parallel group or ZeRO-3, whose collectives (a unit's gather) wait for their
// partners in the stage's launches: detached then too.
caf::actor spawn_stage(caf::actor_system& sys, stage_args args);

}  // namespace troupe
