// The state of one stage actor and what the files of its implementation share (stage.cpp: the
// interpreter of its schedule row; stage_setup.cpp: its chunks and strategies; the strategies,
// stage_strategies.hpp; stage_collectives.cpp: its traffic with its data-parallel group).
// Include only from actors/stage/*.cpp.
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <exception>
#include <functional>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "actors/stage/param_fetcher.hpp"
#include "actors/stage/stage.hpp"
#include "actors/stage/stage_strategies.hpp"
#include "comm/tp_groups.hpp"
#include "kernels/loss.hpp"
#include "kernels/pipeline_chunk.hpp"

namespace troupe::stage_detail {

using clock_type = std::chrono::steady_clock;
using sched::op;
using slot = std::pair<int, int>;  // (microbatch, local chunk)

inline double now_seconds() { return std::chrono::duration<double>(clock_type::now().time_since_epoch()).count(); }

// An asynchronous device's messages to its own stage (never across processes: the queue is the
// stage's): (step, action index) completed; and a gradient bucket its backward cut out on the
// device's thread, (step, local chunk, bucket, values), for the stage to send to its collective.
using device_done_atom = caf::atom_constant<caf::atom("dev_done")>;
using bucket_ready_atom = caf::atom_constant<caf::atom("bkt_ready")>;
using gather_ready_atom = caf::atom_constant<caf::atom("gth_ready")>;

// A stage's last pipeline sends and receives, by its own clock: what the watchdog's report shows
// under the stage's line (the link's ledger, as a collective member keeps one). A receive the
// stage had been waiting for says how long it waited.
struct pipeline_ledger {
  struct entry {
    bool sent = false, is_grad = false;
    int32_t microbatch = 0, boundary = 0, peer = 0;
    int64_t elements = 0;
    double at = 0, waited = 0;
  };
  static constexpr size_t keep = 6;
  std::deque<entry> entries;
  // The receive the stage waits for now (set when one first finds its input missing).
  int64_t waiting_key_step = -1;
  bool waiting_is_grad = false;
  int32_t waiting_microbatch = -1, waiting_boundary = -1;
  double waiting_since = 0;

  void add(entry e) {
    entries.push_back(e);
    if (entries.size() > keep) entries.pop_front();
  }
  // One line per entry, oldest first, with how long ago each was by `now`.
  std::vector<std::string> lines(double now) const;
};

struct stage_state {
  stage_args args;
  // By local chunk. Shared: work on an asynchronous device holds its chunk, so a stage that fails
  // while the device runs it does not pull the layers from under the device's thread.
  std::vector<std::shared_ptr<pipeline_chunk>> chunks;
  std::vector<size_t> last_weight_action;  // per local chunk: its last B or W in the row
  // Weak: every stage holds every other, and strong handles in a cycle would keep the
  // detached threads alive past the end of the job.
  std::vector<caf::actor_addr> peers;
  // The current step (-1 between runs) and the end of the ordered run.
  int64_t step = -1, until = 0;
  size_t cursor = 0;  // the action running or last run (under ready dispatch, not always the earliest pending)
  sched::ready_row ready;         // its row's lanes, forwards and stash bound (schedules/dispatch.hpp)
  sched::row_progress progress;   // which of the step's actions ran
  int64_t completed = 0;
  double last_completed_at = 0;  // now_seconds() of the last completed action (0: none yet)
  bool blocked = false;
  bool failed = false;  // fail() ran: nothing more is executed
  double blocked_since = 0;
  std::string waiting_for;
  pipeline_ledger pipe_log;  // its last sends and receives, for the watchdog
  // Inputs by key; each is consumed by exactly one action of the list.
  int64_t next_request = 0;
  std::vector<std::shared_ptr<const batch>> micro;  // the current step's microbatches (work on the device holds its own)
  std::map<std::tuple<int64_t, bool, int, int>, tensor> inbox;  // (step, is_grad, mb, boundary)
  std::map<slot, tensor> forward_in, backward_in, act_out, grad_out;
  int64_t buckets_pending = 0;
  // Buckets handed to the collective this step: R waits for all buckets_per_step of them, since
  // one still crossing from a device (its copy stream, its queue) is not yet pending.
  int64_t buckets_launched = 0;
  int64_t buckets_per_step = 0;  // over all local chunks
  // Collective seqs of a step: step * seqs_per_step + bucket for its reductions, and with ZeRO
  // + buckets_per_step + bucket for the all-gathers of the updated parameters.
  int64_t seqs_per_step = 0;
  // Where this rank's values sit in the checkpoints' global layout: each local chunk's
  // parameters (from its buffer's start), and its optimizer shard's floats.
  std::vector<std::vector<storage::value_run>> chunk_runs;
  std::vector<storage::value_run> shard_runs;
  std::vector<storage::value_run> stage_runs;  // the chunks' parameters end to end, in the global layout
  bool straggled = false;
  enum class opt_phase { idle, sent, done } opt = opt_phase::idle;
  stage_step_record record;  // what the step reports
  std::shared_ptr<net::logged_tp_group> tp_clock;  // args.groups.member(sched::axis::tp), logged and timed (tp > 1)
  double tp_seconds_before = 0;                   // its count when the step began
  int live = 0;
  // What the stage is, chosen once at set-up (stage_setup.cpp, stage_strategies.hpp).
  std::unique_ptr<executor> exec;
  std::unique_ptr<gradient_reducer> reducer;
  std::unique_ptr<param_source> params;
  std::unique_ptr<batch_source> batches_in;
  // The last model chunk's loss over its logits (run where the forward computes: it holds what it
  // needs, a tensor-parallel group included), and whether this rank's loss is the one reported
  // (every tp rank holds the same: the first reports it, so the job counts it once).
  std::function<loss_result(const tensor& logits, const std::vector<int32_t>& targets, float grad_scale)> loss;
  bool reports_loss = true;
  static inline const char* name = "stage";
};

using self_ptr = caf::stateful_actor<stage_state>*;

inline const std::vector<sched::action>& row(const stage_state& s) {
  return s.args.plan.stages[static_cast<size_t>(s.args.stage)];
}

// Where the stage's chunks hold their parameters, gradients and activations: its queue's device
// when that is not the host (a GPU), else the host (every CPU queue computes on host memory).
inline device compute_device(const stage_args& a) {
  return a.device.queue && !a.device.queue->where().is_cpu() ? a.device.queue->where() : device{};
}
inline bool on_accelerator(const stage_state& s) { return !compute_device(s.args).is_cpu(); }
// The stage's queue when it is an asynchronous GPU's, whose copies between host and device go on
// the queue's own copy streams (stage_in, stage_out); null for a stage on the host.
inline std::shared_ptr<device_queue> gpu_queue(const stage_state& s) {
  return on_accelerator(s) && is_asynchronous(s.args.device.queue) ? s.args.device.queue : nullptr;
}
// Runs the stage's own device bookkeeping between actions (device_queue::launch); in line on the host.
inline void launch(stage_state& s, const std::function<void()>& f) {
  if (s.args.device.queue) s.args.device.queue->launch(f);
  else f();
}
// Where the stage keeps what its ZeRO shard reads and writes (the shard's gradients, its initial
// segments): with the shard on the stage's device when its group reduces there (NCCL), else on
// the host (a GPU stage's shard there is ZeRO-Offload's placement).
inline device shard_device(const stage_state& s) {
  return s.args.groups.reduces_on_device ? compute_device(s.args) : device{};
}
// The ledger that counts it: the device's, or a GPU stage's host ledger; on the CPU the host is the device.
inline const std::shared_ptr<device_memory>& shard_ledger(const stage_state& s) {
  return on_accelerator(s) && shard_device(s).is_cpu() ? s.args.device.host_memory : s.args.device.memory;
}

// Seconds the stage spent in its tensor-parallel collectives so far (0 without a tp group).
inline double tp_seconds(const stage_state& s) { return s.tp_clock ? s.tp_clock->seconds() : 0; }

inline int model_chunk_of(const stage_state& s, int chunk) { return sched::model_chunk(s.args.plan, s.args.stage, chunk); }
inline int last_model_chunk(const stage_state& s) { return sched::num_model_chunks(s.args.plan) - 1; }
inline bool needs_batch(const stage_state& s) {
  for (int c = 0; c < s.args.plan.virtual_stages; ++c) {
    const int k = model_chunk_of(s, c);
    if (k == 0 || k == last_model_chunk(s)) return true;
  }
  return false;
}

// "rank R (stage S), action I (X): " for the action at the cursor.
inline std::string at_cursor(const stage_state& s) {
  std::string where = "rank " + std::to_string(s.args.rank) + " (stage " + std::to_string(s.args.stage) + ")";
  if (s.step < 0 || s.cursor >= row(s).size()) return where + ": ";
  return where + ", action " + std::to_string(s.cursor) + " (" + sched::body_string(row(s)[s.cursor]) + "): ";
}

// stage_pipeline.cpp: a pipeline tensor arrived (the ledger's receive entry).
void note_arrival(stage_state& s, const pipeline_tensor_msg& m);

// stage.cpp: the job hears of the failure and the stage quits; the action waiting for a message
// that just arrived runs if it can (a failure there ends the stage the same way).
void fail(self_ptr self, const std::string& why);
void advance_after_message(self_ptr self);
// The step begins: the cursor at the row's start, the chunks' gradients zeroed, its strategies told.
void begin_step(self_ptr self, int64_t step);
// Throws the refusal of the action at the cursor.
[[noreturn]] void refuse(const stage_state& s, const std::string& why);

// stage_setup.cpp: the stage's chunks built from its args and its strategies chosen; the shard
// handed its first values.
void set_up(self_ptr self, stage_args args);
// Whether the stage keeps a thread of its own (a detached actor).
bool needs_own_thread(const stage_args& args);

// stage_pipeline.cpp: its traffic with the other stages of its pipeline. A receive is true once
// the message is there (else waiting_for says which); a send is true once sent (a GPU's value
// for a stage in another process: once its copy to the host is asked for).
bool receive(stage_state& s, const sched::action& a, bool is_grad);
bool send(self_ptr self, const sched::action& a, bool is_grad);
tensor take(stage_state& s, std::map<slot, tensor>& from, slot key, const std::string& what);


// stage_params.cpp: the stage's side of its optimizer shard.
// The chunks' gradients (grads) or parameters (n in all) laid end to end on `where`. Touches only
// the chunks: it may run as a device's work.
tensor end_to_end(const std::vector<std::shared_ptr<pipeline_chunk>>& chunks, const device& where, int64_t n,
                  bool grads);
// O's gradients: the work takes them (on a GPU, once the device has written them), the finish
// sends them to the optimizer shard and any observers.
compute_parts gradients_out(self_ptr self, int64_t n);
// ZeRO's O: this rank's segments of the reduced gradients, to its shard (on shard_device).
// Partitioned (ZeRO-2 and 3), the reduce-scatters wrote them there already; ZeRO-1's are cut out
// of the chunks' gradients (on a GPU, copied by the work, to pinned memory for a shard on the
// host; sent once the device is done).
compute_parts shard_gradients_out(self_ptr self, zero_shard& z, bool partitioned);
// ZeRO: this rank's segments of the chunks' parameters, on shard_device (the shard's start).
tensor shard_params(stage_state& s, const zero_shard& z);
// The shard's parameters into the chunks: adopted when they are the one chunk's and on its
// device, else copied in (launched on the stage's stream).
void adopt_params(stage_state& s, const params_msg& m);

// stage_checkpoint.cpp.
// Resuming: the shard gets its master copy with the saved optimizer state and step count, in
// one message, instead of the initial parameters.
void restore_shard(self_ptr self, tensor initial);
// The coordinator's checkpoint order: this rank's shard writes its part, and its answer goes
// back to the coordinator; a rank that holds a copy of another's state answers with no file.
caf::result<checkpoint_part> write_checkpoint(self_ptr self, const checkpoint_order& o);

// stage_collectives.cpp.
// A bucket's values, cut out of the chunk's gradients (partitioned: gradient unit `unit`'s,
// plan_grad_units), where the hook runs (see the definition).
tensor cut_bucket(layer_stack& stack, const grad_bucket& bucket, size_t unit, bool partitioned, bool on_device,
                  const std::shared_ptr<device_memory>& memory);
// `count` gradients of a shared unit's values `unit` (ZeRO-2 under expert parallelism, on the
// host) from `at`, as a bucket of their own.
tensor slice_bucket(const tensor& unit, int64_t at, int64_t count, const std::shared_ptr<device_memory>& memory);
// Sends bucket b of local chunk c (its values cut out) to the collective, on the stage's thread:
// all-reduced, or (with ZeRO-2 and 3's shard, `partitioned`) reduce-scattered into it.
void launch_bucket(self_ptr self, int chunk, size_t b, tensor part, std::shared_ptr<zero_shard> partitioned);
// ZeRO: the shard's updated segments are back; the buckets are all-gathered from them. For a
// group on the devices each bucket's segment is first copied into a bucket-sized buffer on the
// stage's stream, and posted (gather_ready_atom) once the copy is done, whose handler calls
// request_gather.
void gather_params(self_ptr self, const params_msg& m, const std::shared_ptr<zero_shard>& z);
void request_gather(self_ptr self, int64_t step, size_t i, tensor part, std::shared_ptr<zero_shard> z);
// ZeRO-3: the units in the order the row's actions use them, and the chunk's hooks that take
// each from the fetcher and let it go.
std::vector<param_fetcher::request> fetch_order(const stage_state& s, const zero_shard& z);
void stream_params(self_ptr self, size_t c, const zero_shard& z);

}  // namespace troupe::stage_detail
