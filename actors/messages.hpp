// Every message that actors of troupe exchange, with its CAF `inspect` and its registration, in
// one place. Tensors travel by reference inside one process (their storage is frozen when a
// message is built) and are serialized only when a message leaves the process.
// Include this only from actors/*.cpp: it pulls in CAF headers, which are slow to compile.
#pragma once

#include <caf/all.hpp>
#include <caf/meta/load_callback.hpp>
#include <caf/meta/type_name.hpp>

#include <cstring>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "actors/observe/step_trace.hpp"
#include "actors/config/train_config.hpp"
#include "kernels/batch.hpp"
#include "kernels/tensor.hpp"

namespace troupe {

// ---- tensors and batches on the wire ----

// A tensor crosses as its shape, its dtype's byte (kernels/dtype.hpp) and its values as raw
// little-endian bytes (every supported host is little-endian): CAF copies byte sequences in one
// block, element-wise float vectors one value at a time. A GPU tensor is refused, not copied to
// the host on the quiet: bulk device bytes go through NCCL, and a host copy is the sender's
// decision (kernels/cuda/device_alloc.hpp's to_device), made where its stream is known.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, tensor& x) {
  if constexpr (Inspector::reads_state) {
    shape_t shape = x.shape();
    auto type = static_cast<uint8_t>(x.type());
    std::vector<char> bytes;
    if (!x.where().is_cpu()) {
      // Only serializers can refuse (CAF's to_string inspector returns nothing): it prints no bytes.
      if constexpr (std::is_same<typename Inspector::result_type, caf::error>::value)
        return caf::make_error(caf::sec::invalid_argument,
                               "tensor: a " + std::string(to_string(x.type())) + " tensor " + to_string(x.shape()) +
                                   " on " + x.where().to_string() +
                                   " cannot cross in an actor message: device bytes go through NCCL; copy it to "
                                   "the host first");
    } else if (x.nbytes() > 0) {
      bytes.resize(static_cast<size_t>(x.nbytes()));
      std::memcpy(bytes.data(), std::as_const(x).raw(), bytes.size());
    }
    return f(caf::meta::type_name("tensor"), shape, type, bytes);
  } else {
    shape_t shape;
    uint8_t type = 0;
    std::vector<char> bytes;
    return f(caf::meta::type_name("tensor"), shape, type, bytes, caf::meta::load_callback([&]() -> caf::error {
               const std::optional<dtype> d = dtype_from_byte(type);
               if (!d)
                 return caf::make_error(caf::sec::invalid_argument,
                                        "tensor: dtype byte " + std::to_string(type) +
                                            " on the wire is no dtype (kernels/dtype.hpp: f32 0 to u8 " +
                                            std::to_string(static_cast<int>(dtype::u8)) + ")");
               if (shape.empty() && bytes.empty()) {  // the empty (default) tensor
                 x = tensor();
                 return caf::none;
               }
               int64_t n = 1;
               for (int64_t dim : shape) {
                 if (dim < 0 || (dim > 0 && n > (int64_t{1} << 40) / dim))
                   return caf::make_error(caf::sec::invalid_argument, "tensor: bad shape on the wire");
                 n *= dim;
               }
               if (static_cast<uint64_t>(n) * size_of(*d) != bytes.size())
                 return caf::make_error(caf::sec::invalid_argument,
                                        "tensor: shape " + to_string(shape) + " of " + to_string(*d) + " needs " +
                                            std::to_string(static_cast<uint64_t>(n) * size_of(*d)) +
                                            " bytes, the wire has " + std::to_string(bytes.size()));
               x = tensor::uninitialized(shape, *d, device{});
               if (n > 0) std::memcpy(x.raw(), bytes.data(), bytes.size());
               x.freeze();
               return caf::none;
             }));
  }
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, batch& x) {
  return f(caf::meta::type_name("batch"), x.inputs, x.targets);
}

// ---- data_loader <-> stage ----

// stage -> data_loader: send me the training batch of `step`: this rank's share of global batch
// `step`, or, with batches dispensed (unit >= 0), the dispensed batch `unit` (batch_dispenser.cpp).
struct batch_request {
  int64_t step = 0;
  int64_t unit = -1;
};

// ---- batch_dispenser <-> stage (parameter servers under ssp and asp) ----

// stage -> batch_dispenser: which batch does replica `replica` compute in its step `step` of the
// run of rounds [run, until)? Every rank of the replica asks once and gets the same answer.
struct unit_request {
  int64_t run = 0;
  int64_t until = 0;
  int32_t replica = 0;
  int64_t step = 0;
};
// batch_dispenser -> stage: `unit` is the run's next batch not yet handed out (one replica's
// share of a global batch: unit / replicas is its round); -1: the run's batches are all taken.
struct unit_grant {
  int64_t run = 0;
  int64_t step = 0;
  int64_t unit = -1;
};
// data_loader -> stage. inputs (B, features) or (B, T); targets (B) or (B*T).
struct batch_msg {
  int64_t step = 0;
  batch data;
};
// stage -> data_loader: send me evaluation batch `index` of the held-out set.
struct eval_batch_request {
  int64_t epoch = 0;
  int64_t index = 0;
};
// data_loader -> stage. `total` is the number of evaluation batches in the held-out set.
struct eval_batch_msg {
  int64_t epoch = 0;
  int64_t index = 0;
  int64_t total = 0;
  batch data;
};

// ---- coordinator <-> stage ----

// coordinator -> stage: compute steps [step, until), one after the other, each as soon as the
// previous one's parameters are back. Ordering a run of steps (up to the next evaluation) keeps
// the coordinator off each step's critical path; the stage still reports every step.
struct step_order {
  int64_t step = 0;
  int64_t until = 0;
};
// An elastic job's updates go ahead only once every rank's gradients of the step are reduced, so
// a replica lost during a step leaves every live shard at the steps before it (membership.hpp).
// stage -> coordinator: rank `rank` has its gradients of step `step`; coordinator -> every stage
// once all have: step `step`'s updates go ahead.
// update_ready carries the rank's share of the step's loss: a rank lost after the commit (its
// update done, its record never sent) still counts in the step's loss.
struct update_ready {
  int64_t step = 0;
  int32_t rank = 0;
  double loss_sum = 0.0;
  int64_t count = 0, correct = 0;
};
struct update_commit {
  int64_t step = 0;
};
// stage -> coordinator (an elastic job): a collective of step `step` failed; the stage holds its
// state (the step never commits) for the coordinator, which drops a lost replica.
struct step_failed {
  int64_t step = 0;
  int32_t rank = 0;
  std::string what;
};
// coordinator -> stage: evaluate on the held-out set after epoch `epoch`.
struct eval_order {
  int64_t epoch = 0;
};
// stage -> coordinator
struct eval_report {
  int64_t epoch = 0;
  double loss_sum = 0.0;
  int64_t count = 0;
  int64_t correct = 0;
  int64_t samples = 0;
};

// ---- optimizer_shard <-> offload_store ----

// optimizer shard -> offload_store, and its answers: bytes of the store's file at `offset` (a
// multiple of 4096), written from / read into a tensor. An offload store answers requests in
// the order they came, so a read sees every earlier write. `seconds`: the store's time on it.
struct store_write {
  int64_t offset = 0;
  tensor data;  // f32, flat
};
struct store_read {
  int64_t offset = 0;
  int64_t count = 0;  // floats
};
struct store_done {
  tensor data;  // what was read (empty for a write)
  double seconds = 0;
};

// anyone -> an optimizer shard offloaded to NVMe: what its steps cost so far. io_seconds: the
// store's time on the shard's reads and writes; update_seconds: the updates themselves;
// step_seconds: gradients in to parameters out. The I/O the steps hid behind the updates is
// io + update - step (at most the smaller of the two).
struct offload_stats_request {};
struct offload_stats {
  int64_t steps = 0;
  double io_seconds = 0, update_seconds = 0, step_seconds = 0;
};

// anyone -> an optimizer shard: its state, for a checkpoint. The answer is a shard_state, and a
// shard_state sent to a shard (of the same range, optimizer and size) restores it; that answer
// is a shard_state_restored. master: the fp32 master copy; state: the optimizer's state arrays
// (state_floats of them, each of the shard's size, one after another); steps: its step count.
struct shard_state_request {};
struct shard_state {
  int64_t offset = 0;
  int64_t steps = 0;
  std::string optimizer;  // "adamw" or "sgd"
  int32_t state_floats = 0;
  tensor master, state;
};
struct shard_state_restored {
  int64_t steps = 0;
};

// ---- checkpoints: coordinator -> stage -> its optimizer shard, and back (storage/checkpoint.hpp) ----

// coordinator -> every stage once step `step` - 1 is done everywhere: have checkpoint `step`'s
// part of this rank written into `dir` (the checkpoint's partial directory), or with an empty
// dir (an elastic regroup's image) answered in memory. Answered with a checkpoint_part.
struct checkpoint_order {
  int64_t step = 0;
  std::string dir;
  // An image's: the stage's own parameters (each rank holds its stage's whole under ZeRO 1 and
  // 2), not its shard's, for the segments of a lost replica's shards.
  bool stage_params = false;
};
// stage -> its optimizer shard: write master copy and state as shard file `file` of `dir`.
// runs: (shard float, global float, count) triples, where the shard's values sit in the
// checkpoint's global layout.
struct checkpoint_write {
  int64_t step = 0;
  std::string dir, file, writer;
  std::vector<int64_t> runs;
};
// optimizer shard -> coordinator (the stage delegates): the file it wrote, as its manifest
// entry. sections: (byte offset, floats, CRC-32) per array. An empty file: this rank writes
// nothing (a data-parallel replica of rank dp 0's state without ZeRO).
struct checkpoint_part {
  std::string file, writer;
  int64_t bytes = 0;
  std::vector<std::string> arrays;
  std::vector<int64_t> sections;
  std::vector<int64_t> runs;
  int64_t optimizer_steps = 0;
  double seconds = 0;  // the shard's time on it: snapshot, write, fsync
  // Into memory (no dir): the master copy, then each state array, in the shard's own layout.
  tensor values;
};

// ---- stage <-> optimizer_shard ----

// stage -> optimizer_shard: gradients of the flat range [offset, offset + grads.numel()).
struct gradients_msg {
  int64_t step = 0;
  int64_t offset = 0;
  tensor grads;
  int32_t replica = 0;  // the sender's dp coordinate: a parameter server's workers are told apart by it
  // Parameter servers with dispensed batches (unit >= 0): the batch the gradients are of, and the
  // round the answer's parameters will be used for; `fresh`: the replica's run is over, so the
  // answer waits for every round before next_round (the next run starts from the whole run's
  // updates). unit -1: this replica's share of global batch `step`, and the next round is step + 1.
  int64_t unit = -1;
  int64_t next_round = 0;
  bool fresh = false;
};
// stage -> a job's gradient observer (job_extras.hpp), every step: the rank's gradients, reduced
// over its data-parallel group and about to go to its optimizer shard (its tp share, its
// stage's chunks end to end). The same frozen tensor the shard gets: shared, never copied.
struct observed_gradients {
  int32_t rank = 0;
  int64_t step = 0;
  tensor grads;
};
// optimizer_shard -> stage: updated parameters of the flat range after `step`
// (step = -1: the initial values, sent so every stage starts from the shard's master copy).
struct params_msg {
  int64_t step = 0;
  int64_t offset = 0;
  tensor params;
};
// stage -> coordinator (at the end): the stage's final parameters, for checks and checkpoints.
struct params_request {
  int64_t stage = 0;
};

// ---- collectives (data parallelism; collective.hpp) ----

// Elements [offset, offset + count) of a frozen tensor. In one process it refers to the
// storage (no copy); on the wire only the slice travels and arrives as its own tensor.
struct tensor_slice {
  tensor base;
  int64_t offset = 0;
  int64_t count = 0;
  const float* data() const { return base.data() + offset; }
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, tensor_slice& x) {
  if constexpr (Inspector::reads_state) {
    if (!x.base.where().is_cpu()) return f(caf::meta::type_name("tensor_slice"), x.base);  // refused as a tensor
    tensor piece = tensor::uninitialized({x.count}, x.base.type(), device{});
    const size_t element = size_of(x.base.type());
    const auto* from = static_cast<const char*>(std::as_const(x.base).raw()) + static_cast<size_t>(x.offset) * element;
    if (x.count > 0) std::memcpy(piece.raw(), from, static_cast<size_t>(x.count) * element);
    return f(caf::meta::type_name("tensor_slice"), piece);
  } else {
    return f(caf::meta::type_name("tensor_slice"), x.base, caf::meta::load_callback([&]() -> caf::error {
               x.offset = 0;
               x.count = x.base.numel();
               return caf::none;
             }));
  }
}
// requester -> collective rank r: run collective `seq` (ring::op_kind `op`) on `data`. Every rank
// of the group gets the same seq, op and total; ranks may issue their requests in any order.
// data: the full tensor (reductions; broadcast at the root, empty elsewhere) or the rank's
// segment (all_gather). total: elements of the full tensor.
struct collective_request {
  int64_t seq = 0;
  int32_t op = 0;
  int32_t root = 0;
  int64_t total = 0;
  tensor data;
};
// A device group's first collective member -> each of the others, once, before any collective:
// the id the group's engine made, which they join with (comm/device_group.hpp).
struct device_group_id {
  std::string id;
};
// collective rank r -> requester: the full tensor, or rank r's segment after a reduce_scatter.
// finished_at: steady-clock seconds when its last chunk landed (the requester may be busy then).
struct collective_result {
  int64_t seq = 0;
  int32_t op = 0;
  tensor data;
  double finished_at = 0.0;
  // Bytes/s at which this member's left link delivered the collective's first hop (TCP ring:
  // tcp_ring::last_left_rate); 0 where not measured.
  double left_link_rate = 0.0;
};
// collective rank r -> rank r+1: one chunk of collective `seq`, holding elements [at, at + count)
// of the full tensor. phase 0: a partial sum travelling to its owner; phase 1: a final segment
// (all-gather or broadcast) that started at rank `origin`.
struct ring_chunk {
  int64_t seq = 0;
  int32_t op = 0;
  int32_t phase = 0;
  int32_t origin = 0;
  int64_t total = 0;
  int64_t at = 0;
  tensor_slice data;
  // Set on a collective's first sends (steady-clock seconds when the sender started it): the
  // receiver times its first hop from there, as the TCP ring does (0: a forwarded chunk).
  double first_hop_sent_at = 0;
};
// spawner -> collective: your place in the ring.
struct ring_setup {
  int32_t rank = 0;
  int32_t ranks = 1;
  int64_t chunk_elems = 0;
  caf::actor right;
  // A slow link (fault injection, --slow-link in one process): this member's sends to its right
  // neighbour leave at most this fast (0: no cap), each collective's first held back this long.
  double send_bytes_per_s = 0;
  double send_latency_s = 0;
};
// anyone (a watchdog, a test) -> collective rank r, answered with collective_log.
struct collective_dump_request {};
// One recent collective at rank r: what it was asked (seq, op, total elements), its ring peers,
// and how far it got (received / expected elements from the left; state waiting, running, done).
// started_at / finished_at: steady-clock seconds (0 when not yet).
struct collective_log_entry {
  int64_t seq = 0;
  std::string op;
  int64_t total = 0;
  int32_t left = 0;
  int32_t right = 0;
  std::string state;
  int64_t received = 0;
  int64_t expected = 0;
  double started_at = 0.0;
  double finished_at = 0.0;
  double left_link_rate = 0.0;  // bytes/s of its first hop from the left rank (TCP ring), 0: not measured
  // Set by the member when it answers a dump (its own clock): how long it took, or has waited so far.
  double seconds = 0.0;
};
// rank r's last few collectives, oldest first.
struct collective_log {
  int32_t rank = 0;
  int32_t ranks = 0;
  std::vector<collective_log_entry> entries;
  std::string group;  // set where a report must say which group ("tp group 0 (ranks 0,1)")
  // Each entry's `seconds`, from the member's own clock now (another process's may differ).
  void stamp(double now) {
    for (auto& e : entries) e.seconds = e.started_at <= 0 ? 0 : (e.finished_at > 0 ? e.finished_at : now) - e.started_at;
  }
};

#define TROUPE_INSPECT(type, ...)                                       \
  template <class Inspector>                                            \
  typename Inspector::result_type inspect(Inspector& f, type& x) {      \
    return f(caf::meta::type_name(#type), __VA_ARGS__);                 \
  }
TROUPE_INSPECT(batch_request, x.step, x.unit)
TROUPE_INSPECT(unit_request, x.run, x.until, x.replica, x.step)
TROUPE_INSPECT(unit_grant, x.run, x.step, x.unit)
TROUPE_INSPECT(update_ready, x.step, x.rank, x.loss_sum, x.count, x.correct)
TROUPE_INSPECT(update_commit, x.step)
TROUPE_INSPECT(step_failed, x.step, x.rank, x.what)
TROUPE_INSPECT(batch_msg, x.step, x.data)
TROUPE_INSPECT(eval_batch_request, x.epoch, x.index)
TROUPE_INSPECT(eval_batch_msg, x.epoch, x.index, x.total, x.data)
TROUPE_INSPECT(step_order, x.step, x.until)
TROUPE_INSPECT(eval_order, x.epoch)
TROUPE_INSPECT(eval_report, x.epoch, x.loss_sum, x.count, x.correct, x.samples)
TROUPE_INSPECT(gradients_msg, x.step, x.offset, x.grads, x.replica, x.unit, x.next_round, x.fresh)
TROUPE_INSPECT(observed_gradients, x.rank, x.step, x.grads)
TROUPE_INSPECT(store_write, x.offset, x.data)
TROUPE_INSPECT(store_read, x.offset, x.count)
TROUPE_INSPECT(store_done, x.data, x.seconds)
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, offload_stats_request&) {
  return f(caf::meta::type_name("offload_stats_request"));
}
TROUPE_INSPECT(offload_stats, x.steps, x.io_seconds, x.update_seconds, x.step_seconds)
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, shard_state_request&) {
  return f(caf::meta::type_name("shard_state_request"));
}
TROUPE_INSPECT(shard_state, x.offset, x.steps, x.optimizer, x.state_floats, x.master, x.state)
TROUPE_INSPECT(shard_state_restored, x.steps)
TROUPE_INSPECT(checkpoint_order, x.step, x.dir, x.stage_params)
TROUPE_INSPECT(checkpoint_write, x.step, x.dir, x.file, x.writer, x.runs)
TROUPE_INSPECT(checkpoint_part, x.file, x.writer, x.bytes, x.arrays, x.sections, x.runs, x.optimizer_steps, x.seconds,
               x.values)
TROUPE_INSPECT(params_msg, x.step, x.offset, x.params)
TROUPE_INSPECT(params_request, x.stage)
TROUPE_INSPECT(collective_request, x.seq, x.op, x.root, x.total, x.data)
TROUPE_INSPECT(collective_result, x.seq, x.op, x.data, x.finished_at, x.left_link_rate)
TROUPE_INSPECT(device_group_id, x.id)
TROUPE_INSPECT(ring_chunk, x.seq, x.op, x.phase, x.origin, x.total, x.at, x.data, x.first_hop_sent_at)
TROUPE_INSPECT(ring_setup, x.rank, x.ranks, x.chunk_elems, x.right, x.send_bytes_per_s, x.send_latency_s)
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, collective_dump_request&) {
  return f(caf::meta::type_name("collective_dump_request"));
}
TROUPE_INSPECT(collective_log_entry, x.seq, x.op, x.total, x.left, x.right, x.state, x.received, x.expected,
               x.started_at, x.finished_at, x.left_link_rate, x.seconds)
TROUPE_INSPECT(collective_log, x.rank, x.ranks, x.entries, x.group)
// stage -> coordinator, once per step of every rank: the measured record (step_trace.hpp).
TROUPE_INSPECT(stage_step_record, x.step, x.rank, x.loss_sum, x.count, x.correct, x.peak_live, x.step_start,
               x.step_end, x.compute_seconds, x.tp_seconds, x.peak_activation_bytes, x.peak_memory, x.peak_host_memory, x.actions, x.start_seconds,
               x.end_seconds, x.buckets, x.bucket_sent, x.bucket_done, x.bucket_left_rate, x.moe_layers,
               x.expert_routed, x.expert_dropped, x.aux_loss_sum, x.aux_forwards)
#undef TROUPE_INSPECT

// ---- stage <-> stage (pipeline peers), coordinator -> stage ----

// pipeline_stage -> pipeline_stage: the tensor crossing the cut between model chunks boundary
// and boundary + 1 for one microbatch: an activation going up, or its gradient coming down
// (the same shape: (rows, features) for the MLP, (B, T, C) for the GPT; f32).
struct pipeline_tensor_msg {
  int64_t step = 0;
  bool is_grad = false;
  int32_t microbatch = 0;
  int32_t boundary = 0;
  tensor value;
};
// coordinator (watchdog) -> stage, answered with pipeline_status.
struct pipeline_status_request {
  int64_t step = 0;
};
// Where a stage stands: its cursor in the action list and what the action there waits for.
struct pipeline_status {
  int32_t rank = 0;  // mesh rank of the stage
  int64_t step = -1;
  int32_t cursor = 0;
  int32_t actions = 0;
  int64_t completed = 0;  // actions completed since the stage started: progress
  std::string action;     // text form of the action at the cursor ("" when idle)
  std::string waiting_for;
  double waited_seconds = 0;  // since its last completed action (or its start), by its own clock
  std::vector<std::string> pipeline_log;  // its last pipeline sends and receives, oldest first
};
// stage -> coordinator: an action failed (its text names it); the stage has stopped.
struct pipeline_failure {
  int32_t rank = 0;  // mesh rank of the stage that failed (-1: a link, not a stage)
  std::string what;
};
// coordinator -> stage, answered with pipeline_params_msg: the stage's chunk parameters.
struct pipeline_params_request {
  int32_t stage = 0;
};
struct pipeline_params_msg {
  int32_t stage = 0;
  std::vector<int32_t> model_chunks;  // model chunk index of each params entry
  std::vector<tensor> params;         // flat f32, one per chunk
  // ZeRO-3: per chunk, the (offset, count) runs of params this replica holds (the rest are
  // zeros); empty: all of them.
  std::vector<std::vector<int64_t>> owned;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, pipeline_tensor_msg& x) {
  return f(caf::meta::type_name("pipeline_tensor_msg"), x.step, x.is_grad, x.microbatch, x.boundary, x.value);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, pipeline_status_request& x) {
  return f(caf::meta::type_name("pipeline_status_request"), x.step);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, pipeline_status& x) {
  return f(caf::meta::type_name("pipeline_status"), x.rank, x.step, x.cursor, x.actions, x.completed, x.action,
           x.waiting_for, x.waited_seconds, x.pipeline_log);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, pipeline_failure& x) {
  return f(caf::meta::type_name("pipeline_failure"), x.rank, x.what);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, pipeline_params_request& x) {
  return f(caf::meta::type_name("pipeline_params_request"), x.stage);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, pipeline_params_msg& x) {
  return f(caf::meta::type_name("pipeline_params_msg"), x.stage, x.model_chunks, x.params, x.owned);
}

#define TROUPE_INSPECT_NET(type, ...)                                   \
  template <class Inspector>                                            \
  typename Inspector::result_type inspect(Inspector& f, type& x) {      \
    return f(caf::meta::type_name(#type), __VA_ARGS__);                 \
  }
// ---- across processes (process_job.cpp): rank 0's job hub <-> each other rank ----

// rank r -> job hub, first message after the gate: may I join? config is rank r's
// describe_for_join() text; it must equal rank 0's (the same model, batch, seed, ...). job_id is
// the job it means to join (process_config::job_id): another job's process, sent here with the
// same secret, is refused by it.
struct join_request {
  int32_t rank = 0;
  std::string config;
  std::string job_id;
};
// job hub -> each worker hub at the end (answered with job_end_ack): ok, or why the job stopped
// (the report names the rank and the step).
struct job_end {
  bool ok = false;
  std::string report;
  // An elastic job's membership change (no `processes`: none): each next process's index in this
  // membership (one replica each), the events in their text form (membership.hpp), and the state
  // every process goes on from (resume_point::image) after `step` steps and `optimizer_steps`
  // updates.
  std::vector<int32_t> processes;
  std::string events;
  int64_t step = 0, optimizer_steps = 0;
  tensor image;
};
// job hub -> rank r: whom its stage reports to, and where the data-plane ring meets.
struct join_reply {
  caf::actor coordinator;
  std::vector<caf::actor> servers;  // parameter servers by (stage, tp) slot (none without --consistency)
  caf::actor dispenser;             // ssp and asp: the batch dispenser (batch_dispenser.cpp)
  // --servers: every parameter server by id (server_layout order), all in server processes; the
  // joining process makes its own proxies of sharded slots from them (`servers` is then empty).
  std::vector<caf::actor> shards;
  // An elastic job admitting this process (it asked while the job ran): the membership change
  // that takes it in, as the other processes get it in their job_end; it joins the next one.
  job_end admitted;
};
// server process p -> job hub (instead of worker_ready, after its join_request was answered):
// its parameter servers are up, their ids (server_layout's) and handles in one order. The hub
// pings `hub`, monitors the servers, and answers the mesh processes' joins once every server
// process is in.
struct server_ready {
  int32_t process = 0;
  caf::actor hub;
  std::vector<int32_t> ids;
  std::vector<caf::actor> servers;
};
// param_server -> process 0, at the end of a job whose servers are processes of their own
// (answering server_records_atom): every push it applied, in order (train_summary::server_update).
struct server_records {
  std::vector<train_summary::server_update> updates;
};
// What one process serves to the others on the data plane: the rendezvous of each data-parallel
// group whose first member it holds (group = pipeline stage), and its point-to-point endpoint
// for activations (port 0: it has no pipeline peer in another process).
struct process_endpoints {
  std::vector<int32_t> ring_groups;
  std::vector<std::string> ring_hosts;
  std::vector<int32_t> ring_ports;
  std::string p2p_host;
  int32_t p2p_port = 0;
};
// process r -> job hub: its ranks' actors are up (its stages, in rank order) and what it serves;
// the hub monitors and pings them.
struct worker_ready {
  int32_t rank = 0;  // the process index
  caf::actor hub;
  std::vector<caf::actor> stages;
  process_endpoints serves;
  std::vector<caf::actor> collectives;  // its collective members' ledgers, for the watchdog's report
};
// job hub -> every process, once all are ready and before training starts: where each data-parallel
// group's rendezvous listens (by group) and each process's point-to-point endpoint (by process).
struct mesh_addresses {
  std::vector<std::string> ring_hosts;
  std::vector<int32_t> ring_ports;
  std::vector<std::string> p2p_hosts;
  std::vector<int32_t> p2p_ports;
};
TROUPE_INSPECT_NET(join_request, x.rank, x.config, x.job_id)
TROUPE_INSPECT_NET(job_end, x.ok, x.report, x.processes, x.events, x.step, x.optimizer_steps, x.image)
TROUPE_INSPECT_NET(join_reply, x.coordinator, x.servers, x.dispenser, x.shards, x.admitted)
TROUPE_INSPECT_NET(server_ready, x.process, x.hub, x.ids, x.servers)
TROUPE_INSPECT_NET(train_summary::server_update, x.server, x.replica, x.step, x.unit, x.version_read, x.version_applied,
                   x.slowest, x.held)
TROUPE_INSPECT_NET(server_records, x.updates)
TROUPE_INSPECT_NET(process_endpoints, x.ring_groups, x.ring_hosts, x.ring_ports, x.p2p_host, x.p2p_port)
TROUPE_INSPECT_NET(worker_ready, x.rank, x.hub, x.stages, x.serves, x.collectives)
TROUPE_INSPECT_NET(mesh_addresses, x.ring_hosts, x.ring_ports, x.p2p_hosts, x.p2p_ports)
#undef TROUPE_INSPECT_NET
// Liveness: the job hub pings every worker hub, which answers with its rank; each side takes
// silence longer than the peer timeout as a lost peer.
using peer_ping_atom = caf::atom_constant<caf::atom("peerping")>;
using peer_pong_atom = caf::atom_constant<caf::atom("peerpong")>;
using job_end_ack_atom = caf::atom_constant<caf::atom("jobendack")>;
// job hub -> coordinator (an elastic job): a process asks to join the running job.
using admit_atom = caf::atom_constant<caf::atom("admit")>;
// process 0 -> a remote param_server at the job's end: answered with server_records.
using server_records_atom = caf::atom_constant<caf::atom("psrecords")>;

// Registers every message type above with an actor system configuration.
void add_message_types(caf::actor_system_config& cfg);

}  // namespace troupe
