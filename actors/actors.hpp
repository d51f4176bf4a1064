// Spawn functions of troupe's actors (DESIGN.md, actors/): what each one is given when it
// starts. Each actor's behavior lives in its own file, named for it.
#pragma once

#include <caf/all.hpp>

#include <memory>

#include "actors/observe/prometheus_file.hpp"
#include "actors/observe/slow_rank.hpp"
#include "actors/messages.hpp"
#include "actors/observe/job_outputs.hpp"
#include "actors/config/train_config.hpp"
#include "kernels/device_queue.hpp"
#include "kernels/partition.hpp"
#include "schedules/schedule.hpp"
#include "storage/checkpoint.hpp"
#include "storage/dataset.hpp"

namespace troupe {

class metrics_log;

using start_atom = caf::atom_constant<caf::atom("start")>;

// Serves this rank's share of each training batch and the held-out batches. Gathering a batch
// is a copy of a few hundred KB: short enough to run on CAF's scheduler threads.
struct data_loader_args {
  std::shared_ptr<const storage::dataset> train, eval;
  int64_t global_batch = 128;
  eval_plan held_out;  // held-out samples served, and per eval_batch_msg (train_config.hpp)
  uint64_t seed = 42;
  int rank = 0, ranks = 1;
  // Context parallelism: the training batches' tokens (and targets) at context rank
  // context_rank's balanced positions of each sequence (kernels/context_attention.hpp) only.
  // Held-out batches stay whole: the evaluator's model is unsplit.
  int context_rank = 0, context_ranks = 1;
};
caf::actor spawn_data_loader(caf::actor_system& sys, data_loader_args args);

// Evaluates the held-out set on the parameters it was last sent (params_msg, the whole model's
// flat parameters in layer order), one eval_batch_msg at a time from `loader`, and answers
// eval_order with an eval_report to `coordinator`. Detached: a forward pass is compute.
caf::actor spawn_evaluator(caf::actor_system& sys, const model_spec& model, uint64_t seed, caf::actor loader,
                           caf::actor coordinator);

// Master parameters and optimizer state for the flat range it owns. Detached, like a stage. With
// a ledger, its state (and its master copy, as `master_kind`: parameters when the stage runs on
// the shard's own tensors, optimizer_state when a ZeRO shard keeps a part of its own) is counted:
// the device's ledger, or the host's when the optimizer is offloaded to host memory. With a
// store (offload_store.hpp) master copy and state live in the store's file instead, tile_floats
// (a multiple of 1024) of each per tile, and `host` counts the tiles in memory. Parameter offload
// with the optimizer left on the device moves the master copy alone (in fp32 training it is the
// parameters): its state then stays in memory (`state_in_store` false), counted on
// `state_ledger`.
struct shard_memory {
  std::shared_ptr<device_memory> ledger;
  std::shared_ptr<device_memory> state_ledger;  // null: `ledger`
  memory_kind master_kind = memory_kind::parameters;
  caf::actor store;
  bool state_in_store = true;
  int64_t tile_floats = 0;
  bool pipeline = true;  // read tile i+1 while tile i is updated (else one tile at a time)
  std::shared_ptr<device_memory> host;
  // Where the master copy and the state live and the update runs: its stage's device. A GPU
  // shard updates in place on the device (device_ops::optimizer_step), without offload, on its
  // stage's queue, so one rank's device work is one stream (kernels/allocator.hpp hands a freed
  // block out again to its own stream only, so several ranks can share a GPU).
  device where;
  std::shared_ptr<device_queue> queue;
};
caf::actor spawn_optimizer_shard(caf::actor_system& sys, optimizer_config cfg, int64_t offset, int64_t size,
                                 shard_memory memory = {});

// One parameter server (train_config.hpp: consistency_model): the parameters of one (pipeline
// stage, tp rank) slot, `size` of them, with their optimizer, for `replicas` data-parallel
// replicas. Each applied push is appended to `updates` (the server's own list). Detached.
struct param_server_args {
  int32_t slot = 0;  // what its records name it by: (stage, tp) slot x shards + its shard
  int32_t replicas = 1;
  int64_t size = 0;
  optimizer_config optim;
  consistency_model consistency = consistency_model::bsp;
  int staleness = 0;
  std::shared_ptr<std::vector<train_summary::server_update>> updates;
  int64_t die_after = -1;  // fault injection: stop with an error once this many updates are applied
};
caf::actor spawn_param_server(caf::actor_system& sys, param_server_args args);
// ssp and asp: hands each replica the next batch when it asks (unit_request), so a fast replica
// computes more batches than a slow one and a run ends when its batches are all taken, not when
// the slowest replica has done its share (batch_dispenser.cpp).
struct batch_dispenser_args {
  int32_t replicas = 1;
  int32_t ranks_per_replica = 1;  // every rank of a replica asks once per step
  std::shared_ptr<std::vector<train_summary::dispensed_batch>> record;
};
caf::actor spawn_batch_dispenser(caf::actor_system& sys, batch_dispenser_args args);
// One slot's parameters over several servers, server k holding [starts[k], starts[k + 1]): it
// answers a push as one server would (server_proxy.cpp).
caf::actor spawn_server_proxy(caf::actor_system& sys, std::vector<caf::actor> servers, std::vector<int64_t> starts);
// --servers: what process 0's stages of one slot push to, spawned before the servers' processes
// have joined. Until it gets (server_target_atom, server) it keeps what arrives; then it hands
// that and everything after on with delegate, so the server answers the stage directly
// (server_forwarder.cpp).
using server_target_atom = caf::atom_constant<caf::atom("pstarget")>;
caf::actor spawn_server_forwarder(caf::actor_system& sys);

// Drives the job, every shape of it: it orders runs of steps (up to the next evaluation) to every
// stage of the mesh, collects one stage_step_record per rank and step, sums the loss in rank
// order, writes metrics, at each epoch's end gathers the first replica's parameters for the
// evaluator, and commits checkpoints. Started with (start_atom, stages by mesh rank, evaluator, members). It monitors
// every member and stops the job with the reason when one dies; an error of its own (a metrics
// line it cannot write) stops the job the same way. Its watchdog polls the stages when no step
// finished for a while and stops the job, naming each stage's blocked action and the
// collectives' recent operations, when none of them moved for watchdog_seconds.
struct coordinator_args {
  int64_t steps_per_epoch = 0;
  int64_t epochs = 0;
  int64_t total_steps = 0;
  int64_t samples_per_step = 0;
  sched::mesh mesh;
  sched::schedule plan;         // the rows the stages run (for the watchdog's report)
  model_spec model;             // with chunks: how tp ranks' shares merge into the evaluator's model
  bool sharded_params = false;  // ZeRO-3: each replica holds a part of the parameters; ask them all
  std::vector<layer_range> chunks;
  int64_t trace_step = -1;      // -1: the last
  std::shared_ptr<metrics_log> log;
  std::shared_ptr<prometheus_file> prom;  // --metrics-prom: rewritten after every step (null: none)
  slow_rank_options slow_ranks;           // live straggler detection (window 0: off)
  std::shared_ptr<train_summary> summary;
  std::shared_ptr<job_failure> failure;  // set when the job stopped on an error
  std::shared_ptr<job_record> record;
  double watchdog_seconds = 0;  // no progress this long: report and stop (0: never)
  int64_t first_step = 0;       // a resumed job's: the checkpoint's step
  // Checkpoints (an empty dir: none): after every checkpoint_every steps (0: only the last) and
  // after the last step, every stage has its shard write its part into the checkpoint's partial
  // directory while the next steps run; once all parts are in, the coordinator commits the
  // manifest (checkpoint_base: its fields that do not come from the parts).
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;
  int keep = 0;
  storage::checkpoint_manifest checkpoint_base;
  // ssp and asp: each replica's steps are its own (batches dispensed on demand), so a step of the
  // job is counted when dp replica steps are reported, whichever replicas did them (push_rounds.hpp).
  bool dispensed = false;
  // An elastic job (membership.hpp; membership_change.cpp). At a membership change (an event
  // given in advance, or a replica's stage that went down) the coordinator has the live shards
  // hand their state in memory once the steps before it are done, puts the image and the change
  // in the summary (regroup, membership) and ends this membership's part of the job.
  struct elastic_args {
    bool on = false;
    int min_replicas = 1;
    std::vector<membership_event> events;  // given in advance (--membership-events)
    // No ZeRO: every replica holds the whole state, so one expert group's replicas (one replica
    // without ep) make the image; under ZeRO every rank's shard does, and a lost one's is gone.
    bool replicas_hold_all = true;
  } elastic;
};
// coordinator <- job: the collective group(s) whose recent operations a watchdog report shows.
using watch_atom = caf::atom_constant<caf::atom("watch")>;
caf::actor spawn_coordinator(caf::actor_system& sys, coordinator_args args);

}  // namespace troupe
