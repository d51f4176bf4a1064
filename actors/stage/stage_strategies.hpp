// The stage's strategies: how each instruction of its row is carried out. The interpreter
// (stage.cpp) walks the row and switches on the instruction; what differs between a plain
// replica, a data-parallel one, a ZeRO shard, a parameter-server client or a stage on a GPU is
// which strategy it holds, chosen once when the stage is set up (stage_setup.cpp) from the
// args the wiring code (actors/compose/mesh_job.cpp) filled in. Each kind lives in its own file:
//   executor          executors.cpp         where F, B, I, W and O's gradients compute
//   gradient_reducer  gradient_reducers.cpp B's bucket hook, R, and O's gradients to the shard
//   param_source      param_sources.cpp     the shard's first values, its answers, FP and RP
//   batch_source      batch_sources.cpp     which batch a step computes, and when steps begin
// Include only from actors/stage/*.cpp.
#pragma once

#include <caf/all.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "actors/messages.hpp"
#include "actors/stage/zero_shard.hpp"
#include "kernels/device_queue.hpp"
#include "kernels/layer_stack.hpp"
#include "schedules/schedule.hpp"

namespace troupe::stage_detail {

struct stage_state;
using self_ptr = caf::stateful_actor<stage_state>*;

// A compute action cut in two: `work` is what the device runs (the chunk's math and, inside it,
// its tensor-parallel collectives), touching only what it captured; `finish` hands the results
// on, on the stage's thread, once the work has completed.
struct compute_parts {
  std::function<void()> work;
  std::function<void()> finish;
};

// Bucket b of a chunk, cut out by its last backward, on its way to the data-parallel group.
using bucket_delivery = std::function<void(size_t b, tensor part)>;

class executor {
 public:
  virtual ~executor() = default;
  // F, B, I, W: true once both parts ran; false while the cursor waits for the device's
  // completion message (device_done_atom; meanwhile the stage answers other messages).
  virtual bool run(self_ptr self, const sched::action& a, compute_parts c) = 0;
  // O's gradients: on a device other than the host they leave once it has written them (a
  // compute of its own); on the host, in line.
  virtual bool run_update(self_ptr self, const sched::action& a, compute_parts c) = 0;
  // How a bucket cut in a backward's hook reaches `launch` on the stage's thread: at once when
  // the hook runs there, else as a message (bucket_ready_atom) once the device has the bucket.
  virtual bucket_delivery from_backward(self_ptr self, int chunk, bucket_delivery launch) = 0;
  // Whether the device holds a compute action now: the cursor stays on it until it completes.
  virtual bool holds_action() const { return false; }
  // The device's completion message (device_done_atom) for (step, index): whether it is the
  // action held, now marked done.
  virtual bool done(int64_t /*step*/, size_t /*index*/) { return false; }
  // The held action, completed: its results handed on, then what was deferred meanwhile; false
  // while it still runs (or the stage failed).
  virtual bool complete(self_ptr) { return true; }
  // While the device holds an action that reads the chunks, `f` (which writes them) waits for its
  // completion: true, kept for then. Otherwise false, and the caller runs it now.
  virtual bool defer(std::function<void()> /*f*/) { return false; }
};
// The host, synchronously: work and finish in line, on the stage's own thread.
std::unique_ptr<executor> inline_executor();
// An asynchronous queue (kernels/device_queue.hpp). updates_on_device: the stage computes in
// device memory (a GPU), so O's gradients are read there too.
std::unique_ptr<executor> queued_executor(bool updates_on_device);

class gradient_reducer {
 public:
  virtual ~gradient_reducer() = default;
  virtual void begin_step(self_ptr) {}
  // The hook for chunk's last weight-gradient action (null: nothing leaves during backward).
  virtual layer_stack::layer_done_fn bucket_hook(self_ptr, int /*chunk*/) { return nullptr; }
  // Sends bucket b of local chunk `chunk` to the group, on the stage's thread.
  virtual void launch(self_ptr self, int chunk, size_t b, tensor part);
  // R: true once the step's gradients are reduced, else waiting_for says for what.
  virtual bool reduced(self_ptr) { return true; }
  // O: the step's gradients (or this rank's segments of them) to the optimizer shard; by
  // default the whole gradients of the stage's n parameters.
  virtual compute_parts gradients_out(self_ptr self, int64_t n);
};
// One replica, or a parameter server's client (it pushes, the server reduces): R is the identity.
std::unique_ptr<gradient_reducer> no_reduction();
// Data parallelism: every bucket all-reduced over the group as backward produces it.
std::unique_ptr<gradient_reducer> bucket_all_reduce();
// ZeRO over the group: buckets reduce-scattered (partitioned: ZeRO-2 and 3) or all-reduced
// (ZeRO-1); O hands the shard this rank's segments.
std::unique_ptr<gradient_reducer> zero_reduce(std::shared_ptr<zero_shard> shard, bool partitioned);

class param_source {
 public:
  virtual ~param_source() = default;
  // The optimizer shard's first values (n: the stage's parameters); the stage sends them.
  virtual tensor initial(self_ptr self, int64_t n) = 0;
  virtual void begin_step(self_ptr) {}
  // FP and RP: only a source that streams parameters unit by unit (ZeRO-3) has them.
  virtual bool fetch(self_ptr self, const sched::action& a);
  virtual bool release(self_ptr self, const sched::action& a);
  // The shard's answer: its initial copy (step -1) or a step's update.
  virtual void updated(self_ptr self, const params_msg& m) = 0;
  // A segment of updated parameters copied on the device, ready for its all-gather
  // (gather_ready_atom): only a source that gathers them (ZeRO-1 and 2) sends it.
  virtual void gather_ready(self_ptr self, int64_t step, size_t i, tensor part);
  // What O waits for once the gradients are gone.
  virtual std::string awaited(const stage_state&) const { return "the updated parameters from its optimizer shard"; }
  // Local chunk c's parameters for the coordinator (evaluation, export), into `out`.
  virtual void copy_out(self_ptr self, size_t c, pipeline_params_msg& out) = 0;
};
// The stage's chunks hold all their parameters; the shard's update replaces them.
std::unique_ptr<param_source> own_params();
// ZeRO-1 and 2: the shard updates this rank's segments; every bucket is all-gathered back.
std::unique_ptr<param_source> zero_gathered_params(std::shared_ptr<zero_shard> shard);
// ZeRO-3: the stage keeps its segments; each unit is gathered right before use (param_fetcher).
std::unique_ptr<param_source> zero_fetched_params(std::shared_ptr<zero_shard> shard);

class batch_source {
 public:
  virtual ~batch_source() = default;
  // Asks the loader for the batches of the steps before up_to.
  virtual void request(self_ptr self, int64_t up_to) = 0;
  // The coordinator orders a run of steps.
  virtual void ordered(self_ptr self, const step_order& o) = 0;
  // The dispenser's answer.
  virtual void granted(self_ptr, const unit_grant&) {}
  // O may send its gradients (a dispenser first says which batch the next step computes; an
  // elastic job's coordinator that every rank has its gradients). `has_params`: a stage of
  // parameter-free layers has nothing to update, and is asked all the same.
  virtual bool ready_to_update(self_ptr, bool /*has_params*/) { return true; }
  // The coordinator's commit of a step's updates (an elastic job).
  virtual void committed(self_ptr, const update_commit&) {}
  // A collective of the step failed (a peer's process is gone): the stage fails, naming it; an
  // elastic job's holds its state for the coordinator, which drops the lost replica.
  virtual void reduction_failed(self_ptr self, const std::string& why);
  // What the push of the step's gradients says of its batch.
  virtual void label(const stage_state&, gradients_msg&) const {}
  // Step next-1 has ended: whether step `next` begins now.
  virtual bool begins_next(self_ptr self, int64_t next) = 0;

  // The loader's batch of step `step`, kept until its step (every source's; stages with model
  // chunk 0 or the last). With inputs_onto(queue) (an accelerator's stage with model chunk 0) its
  // microbatches' inputs start for the device as it arrives, while the current step computes (the
  // targets stay on the host: the loss copies them).
  void keep(const stage_state& s, int64_t step, batch b);
  // The current step's microbatches into the stage's `micro`: false (waiting_for says why) while
  // its batch has not arrived.
  bool take(stage_state& s);
  void inputs_onto(std::shared_ptr<device_queue> queue) { input_queue_ = std::move(queue); }

 private:
  std::map<int64_t, batch> batches_;  // global batches by step
  // With input_queue_: a step's microbatches, their inputs staged onto the device
  // (device_queue::stage_in), instead of batches_.
  std::map<int64_t, std::vector<std::shared_ptr<const batch>>> staged_;
  std::shared_ptr<device_queue> input_queue_;
};
// The replica's fixed share of every step's global batch, steps as the coordinator orders them.
std::unique_ptr<batch_source> fixed_share();
// fixed_share, each step's update once the coordinator commits it (an elastic job).
std::unique_ptr<batch_source> committed_share();
// Parameter servers under ssp and asp: the job's batch dispenser grants each step its batch.
std::unique_ptr<batch_source> dispensed_batches();

}  // namespace troupe::stage_detail
