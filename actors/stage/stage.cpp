// stage: one rank as a thin interpreter of its schedule row. It holds its chunks, its action list
// and a cursor; every arriving message (order, batch, tensor, reduced bucket, params) is stored
// by key and the cursor advances while the action there can run. It never reorders the list,
// never skips an action, and refuses (by name) an action whose data is not where the schedule
// says it is. Ordered a run of steps, it starts each as soon as the previous one's parameters
// are back, and reports every step with the timing of each action. Its traffic with its
// data-parallel group is stage_collectives.cpp's, its compute on a device stage_device.cpp's, and
// its part in checkpoints stage_checkpoint.cpp's.
#include "actors/stage/stage.hpp"

#include <pthread.h>
#include <sched.h>

#include <chrono>
#include <cstdio>
#include <limits>
#include <map>
#include <random>
#include <thread>
#include <tuple>
#include <utility>

#include "actors/actor_failure.hpp"
#include "actors/stage/stage_state.hpp"
#include "comm/ring_schedule.hpp"
#include "kernels/device_ops.hpp"
#include "kernels/loss.hpp"

namespace troupe {

namespace {

using namespace stage_detail;

[[noreturn]] void refuse(const stage_state& s, const std::string& why) { throw std::runtime_error(at_cursor(s) + why); }

tensor take(stage_state& s, std::map<slot, tensor>& from, slot key, const std::string& what) {
  auto it = from.find(key);
  if (it == from.end()) refuse(s, "no " + what + " for microbatch " + std::to_string(key.first) + " on chunk " +
                                      std::to_string(key.second) + " (the schedule never delivered it here)");
  tensor t = std::move(it->second);
  from.erase(it);
  return t;
}

// Hands a chunk's output to the next chunk: locally when it is on this stage, else to the outbox
// its send action empties. `toward_output`: activation (up) or gradient (down).
void hand_off(stage_state& s, int microbatch, int chunk, tensor t, bool toward_output) {
  const int k = model_chunk_of(s, chunk) + (toward_output ? 1 : -1);
  if (sched::stage_of(s.args.plan, k) == s.args.stage)
    (toward_output ? s.forward_in : s.backward_in)[{microbatch, sched::chunk_of(s.args.plan, k)}] = std::move(t);
  else
    (toward_output ? s.act_out : s.grad_out)[{microbatch, chunk}] = std::move(t);
}

// The replica's share of a step's batch, cut into the schedule's M microbatches (the first
// rows % M one row longer, so any share of at least M rows works).
std::vector<std::shared_ptr<const batch>> microbatches(const stage_state& s, batch b) {
  const int64_t M = s.args.plan.num_microbatches;
  const int64_t rows = b.samples();
  if (rows < M) refuse(s, "the batch share has " + std::to_string(rows) + " samples, fewer than the " +
                              std::to_string(M) + " microbatches");
  std::vector<std::shared_ptr<const batch>> out;
  if (M == 1) {  // the whole share is the one microbatch: no copy
    out.push_back(std::make_shared<const batch>(std::move(b)));
    return out;
  }
  int64_t at = 0;
  for (int64_t m = 0; m < M; ++m) {
    const int64_t n = rows / M + (m < rows % M ? 1 : 0);
    out.push_back(std::make_shared<const batch>(slice(b, at, at + n)));
    at += n;
  }
  return out;
}

// A batch for a later step, on an accelerator: its microbatches' inputs start for the device now,
// while the current step computes (the targets stay on the host: the loss copies them).
void stage_batch(stage_state& s, int64_t step, batch b) {
  std::vector<std::shared_ptr<const batch>> micro = microbatches(s, std::move(b));
  for (auto& mb : micro) mb = std::make_shared<const batch>(batch{s.args.queue->stage_in(mb->inputs), mb->targets});
  s.staged.emplace(step, std::move(micro));
}

bool have_batch(stage_state& s) {
  if (!s.micro.empty()) return true;
  if (auto staged = s.staged.find(s.step); staged != s.staged.end()) {
    s.micro = std::move(staged->second);
    s.staged.erase(staged);
    return true;
  }
  auto it = s.batches.find(s.step);
  if (it == s.batches.end()) {
    s.waiting_for = "the batch of step " + std::to_string(s.step) + " from the data loader";
    return false;
  }
  s.micro = microbatches(s, std::move(it->second));
  s.batches.erase(it);
  return true;
}

bool receive(stage_state& s, const sched::action& a, bool is_grad) {
  const sched::message_key key = sched::key_of(s.args.plan, a);
  auto it = s.inbox.find({s.step, is_grad, a.microbatch, key.boundary});
  if (it == s.inbox.end()) {
    s.waiting_for = std::string(is_grad ? "the gradient" : "the activation") + " of microbatch " +
                    std::to_string(a.microbatch) + " across boundary " + std::to_string(key.boundary) +
                    " from stage " + std::to_string(a.peer);
    return false;
  }
  (is_grad ? s.backward_in : s.forward_in)[{a.microbatch, a.chunk}] = std::move(it->second);
  s.inbox.erase(it);
  return true;
}

// True once sent (a GPU's value for a stage in another process over the host transport: once its
// copy to the host is asked for; the message goes when the copy is there, and the stage goes on
// meanwhile).
bool send(self_ptr self, const sched::action& a, bool is_grad) {
  auto& s = self->state;
  tensor t = take(s, is_grad ? s.grad_out : s.act_out, {a.microbatch, a.chunk},
                  is_grad ? "input gradient to send" : "output activation to send");
  if (!s.args.drop_send.empty() && sched::to_string(a) == s.args.drop_send) return true;  // the injected loss
  t.freeze();
  const int32_t boundary = sched::key_of(s.args.plan, a).boundary;
  const auto to = caf::actor_cast<caf::actor>(s.peers.at(static_cast<size_t>(a.peer)));
  pipeline_tensor_msg m{s.step, is_grad, a.microbatch, boundary, t};
  const bool over_host = static_cast<size_t>(a.peer) < s.args.peer_over_host.size() &&
                         s.args.peer_over_host[static_cast<size_t>(a.peer)];
  // In the process, or to a device link's sending end, the tensor goes as it is: the action that
  // made it has completed (the cursor waited for that), so any stream may read it.
  if (t.where().is_cpu() || !over_host) {
    self->send(to, std::move(m));
    return true;
  }
  // The link between processes reads host memory: the value leaves the GPU as a pinned copy,
  // on the queue's copy stream, while the compute enqueued after it runs.
  s.args.queue->stage_out(t, [to, m = std::move(m)](tensor host) mutable {
    m.value = std::move(host);
    m.value.freeze();
    caf::anon_send(to, std::move(m));
  });
  return true;
}

// Asks the dispenser which batch the replica's step `step` computes (once per step and run).
void ask_unit(self_ptr self, int64_t step) {
  auto& s = self->state;
  if (!s.units.ask(step)) return;
  self->send(s.args.dispenser, unit_request{s.units.run(), s.units.until(), s.args.dp_rank, step});
}

// The injected straggler's delay before the step's first forward (0: none, or already taken);
// it is slept where the forward computes, so an asynchronous device's stage is not held.
double straggle_ms(stage_state& s) {
  const straggler_spec& st = s.args.straggler;
  if (st.ms <= 0 || s.straggled) return 0;
  s.straggled = true;
  return straggler_delay_ms(st, s.args.seed, s.step);
}

// Runs the action at the cursor if its inputs are there; false (with waiting_for set) if not.
bool execute(self_ptr self, const sched::action& a) {
  auto& s = self->state;
  if (s.on_device) {  // the cursor stays on the device's action
    if (!complete_on_device(self)) return false;
    if (a.kind != op::optimizer_step) return true;
    // The gradients left with the completion; O goes on to wait for the parameters.
  }
  const int k = model_chunk_of(s, a.chunk);
  const float grad_scale = 1.0f / static_cast<float>(s.args.global_rows);
  auto& chunk = *s.chunks.at(static_cast<size_t>(a.chunk));
  const bool last_weight_action = s.cursor == s.last_weight_action.at(static_cast<size_t>(a.chunk));
  switch (a.kind) {
    case op::forward: {
      if ((k == 0 || k == last_model_chunk(s)) && !have_batch(s)) return false;
      std::shared_ptr<const batch> mb = s.micro.empty() ? nullptr : s.micro.at(static_cast<size_t>(a.microbatch));
      tensor x = k == 0 ? mb->inputs : take(s, s.forward_in, {a.microbatch, a.chunk}, "input activation");
      const bool last = k == last_model_chunk(s);
      const bool vocab_parallel = splits_logits(s.args.model, tp_size(s.args.tp.get()));
      auto out = std::make_shared<std::pair<tensor, loss_result>>();
      compute_parts c;
      c.work = [chunk = s.chunks.at(static_cast<size_t>(a.chunk)), tp = s.args.tp, mb, x = std::move(x), out, last,
                vocab_parallel, features = output_features(s.args.model), grad_scale, pause = straggle_ms(s),
                m = a.microbatch] {
        if (pause > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(pause));
        out->first = chunk->forward(m, x);
        if (!last) return;
        out->second = vocab_parallel ? vocab_parallel_cross_entropy(out->first, mb->targets, grad_scale, features, *tp)
                                     : cross_entropy(out->first, mb->targets, grad_scale);
      };
      c.finish = [self, a, out, last] {
        auto& s = self->state;
        s.record.peak_live = std::max(s.record.peak_live, ++s.live);
        if (!last) return hand_off(s, a.microbatch, a.chunk, std::move(out->first), true);
        out->second.settle();  // a GPU's loss has reached the host: its queue has completed
        // Every tp rank holds the same loss: the first reports it, so the job counts it once.
        if (tp_rank(s.args.tp.get()) == 0) {
          s.record.loss_sum += out->second.loss_sum;
          s.record.count += out->second.count;
          s.record.correct += out->second.correct;
        }
        s.backward_in[{a.microbatch, a.chunk}] = std::move(out->second.dlogits);
      };
      return run_compute(self, a, std::move(c));
    }
    case op::backward:
    case op::backward_input:
    case op::backward_weight: {
      tensor dy = a.kind == op::backward_weight ? tensor() : take(s, s.backward_in, {a.microbatch, a.chunk}, "output gradient");
      layer_stack::layer_done_fn buckets;
      if (a.kind != op::backward_input && last_weight_action)
        buckets = is_asynchronous(s.args.queue) ? bucket_poster(self, a.chunk) : bucket_launcher(self, a.chunk);
      auto dx = std::make_shared<tensor>();
      compute_parts c;
      // `tp`: the layers call their group by a plain pointer, so the work holds it while it runs.
      c.work = [chunk = s.chunks.at(static_cast<size_t>(a.chunk)), tp = s.args.tp, dy = std::move(dy), dx,
                buckets = std::move(buckets), kind = a.kind, m = a.microbatch, k] {
        if (kind == op::backward_weight) {
          if (buckets) chunk->backward_weight(m, buckets);
          else chunk->backward_weight(m);
        } else {
          *dx = kind == op::backward_input ? chunk->backward_input(m, dy, k > 0)
                : buckets                  ? chunk->backward(m, dy, k > 0, buckets)
                                           : chunk->backward(m, dy, k > 0);
        }
      };
      c.finish = [self, a, dx, k] {
        auto& s = self->state;
        if (a.kind != op::backward_input) --s.live;
        if (a.kind != op::backward_weight && k > 0) hand_off(s, a.microbatch, a.chunk, std::move(*dx), false);
      };
      return run_compute(self, a, std::move(c));
    }
    case op::send_act: return send(self, a, false);
    case op::send_grad: return send(self, a, true);
    case op::recv_act: return receive(s, a, false);
    case op::recv_grad: return receive(s, a, true);
    case op::reduce_grads:
      // One replica: the reduction over one peer is the identity. Several: every bucket went to
      // the collective during the chunks' last backward; R waits for the sums.
      if (s.buckets_pending == 0) return true;
      s.waiting_for = "the all-reduce of " + std::to_string(s.buckets_pending) +
                      " gradient bucket(s) over its data-parallel group";
      return false;
    case op::fetch_params:  // the units stream in as the action reaches them (param_fetcher)
      if (!params_partitioned(s)) refuse(s, sched::to_string(a.kind) + " needs ZeRO-3 (--zero 3 over a data-parallel group)");
      return true;
    case op::release_params: {
      if (!params_partitioned(s)) refuse(s, sched::to_string(a.kind) + " needs ZeRO-3 (--zero 3 over a data-parallel group)");
      const layer_stack& stack = chunk.stack();
      for (size_t u = 0; u < stack.num_units(); ++u)
        if (stack.has_unit_params(u)) refuse(s, "unit " + std::to_string(u) + " of the chunk still holds its parameters");
      return true;
    }
    case op::optimizer_step: {
      if (s.opt == stage_state::opt_phase::done) {
        s.opt = stage_state::opt_phase::idle;
        return true;
      }
      int64_t n = 0;
      for (auto& c : s.chunks) n += c->stack().num_params();
      if (n == 0) return true;  // only parameter-free layers (ReLUs) here: nothing to update
      if (s.opt == stage_state::opt_phase::idle && dispensing(s)) {
        // On demand: the replica takes its next batch now that this one's gradients are ready,
        // and the server needs that batch's round to know how long to hold the answer.
        ask_unit(self, s.step + 1);
        if (!s.units.answered(s.step + 1)) {
          s.waiting_for = "the batch dispenser's answer: which batch step " + std::to_string(s.step + 1) + " computes";
          return false;
        }
      }
      if (s.opt == stage_state::opt_phase::idle) {
        // ZeRO: the shard updates this rank's segments only; the all-gathers of the result
        // bring every bucket back (params_msg handler).
        compute_parts c = zero_on(s) ? shard_gradients_out(self) : gradients_out(self, n);
        // On a GPU the gradients leave once the device has written them (the reduced buckets
        // copied in, the buffers laid end to end): a compute of its own, whose completion brings
        // the cursor back here to wait for the parameters.
        if (on_accelerator(s)) {
          run_compute(self, a, std::move(c));
          s.opt = stage_state::opt_phase::sent;
          return false;
        }
        c.work();
        c.finish();
      }
      s.waiting_for = s.gathers_pending > 0 ? "the all-gather of " + std::to_string(s.gathers_pending) +
                                                  " bucket(s) of updated parameters over its data-parallel group"
                                            : "the updated parameters from its optimizer shard";
      return false;
    }
  }
  refuse(s, "unknown op");  // unreachable: the switch names every op
}

void begin_step(self_ptr self, int64_t step);

void request_batches(self_ptr self, int64_t up_to) {
  auto& s = self->state;
  if (!needs_batch(s) || dispensing(s)) return;  // dispensed batches are asked for as each is granted
  for (; s.next_request < std::min(up_to, s.args.total_steps); ++s.next_request)
    self->send(s.args.loader, batch_request{s.next_request});
}

void finish_step(self_ptr self) {
  auto& s = self->state;
  auto leftover = [&](const std::map<slot, tensor>& m, const char* what) {
    if (!m.empty())
      throw std::runtime_error("rank " + std::to_string(s.args.rank) + ": step " + std::to_string(s.step) +
                               " ended with " + std::to_string(m.size()) + " unconsumed " + what);
  };
  leftover(s.forward_in, "input activations");
  leftover(s.backward_in, "output gradients");
  leftover(s.act_out, "activations never sent");
  leftover(s.grad_out, "gradients never sent");
  if (s.live != 0)
    throw std::runtime_error("rank " + std::to_string(s.args.rank) + ": step " + std::to_string(s.step) +
                             " ended with " + std::to_string(s.live) + " live activations");
  s.record.step = s.step;
  s.record.rank = s.args.rank;
  if (s.tp_clock) s.record.tp_seconds = s.tp_clock->seconds() - s.tp_seconds_before;
  for (const auto& c : s.chunks) s.record.peak_activation_bytes += c->peak_bytes();  // exact for one chunk
  if (s.args.memory) {
    const memory_figures peak = s.args.memory->peak();
    s.record.peak_memory.assign(peak.bytes.begin(), peak.bytes.end());
    s.record.peak_memory.push_back(s.args.memory->peak_total());
  }
  if (s.args.host_memory) {
    const memory_figures peak = s.args.host_memory->peak();
    s.record.peak_host_memory.assign(peak.bytes.begin(), peak.bytes.end());
    s.record.peak_host_memory.push_back(s.args.host_memory->peak_total());
  }
  s.record.step_end = now_seconds();
  const double next_start = s.record.step_end;
  self->send(s.args.coordinator, std::move(s.record));
  s.record = {};
  s.micro.clear();
  const int64_t next = s.step + 1;
  if (dispensing(s)) s.units.done(s.step);
  s.step = -1;
  s.waiting_for = "no step ordered";
  if (dispensing(s)) {
    s.next_step = next;
    ask_unit(self, next);  // a stage without parameters has not asked yet: it pushes nothing
    if (!s.units.answered(next)) {
      s.waiting_for = "the batch dispenser's answer: which batch step " + std::to_string(next) + " computes";
      return;
    }
    if (s.units.unit(next) < 0) {
      s.waiting_for = "the next run of steps (this run's batches are all taken)";
      return;
    }
  } else if (next >= s.until) {
    return;
  }
  begin_step(self, next);
  s.record.step_start = next_start;
}

// Executes actions from the cursor until one must wait or the run of steps is done.
void advance(self_ptr self) {
  auto& s = self->state;
  while (s.step >= 0) {
    while (s.cursor < row(s).size()) {
      const sched::action& a = row(s)[s.cursor];
      const double start = s.blocked ? s.blocked_since : now_seconds();
      if (!execute(self, a)) {
        if (s.failed) return;
        if (!s.blocked) s.blocked_since = start;
        s.blocked = true;
        return;
      }
      // Sends take no device time, and a receive whose message was already there waited none.
      const bool instant = sched::is_send(a.kind) || (sched::is_recv(a.kind) && !s.blocked);
      const double end = instant ? start : now_seconds();
      if (sched::is_compute(a.kind) || a.kind == op::optimizer_step) s.record.compute_seconds += end - start;
      s.blocked = false;
      s.record.actions.push_back(sched::to_string(a));
      s.record.start_seconds.push_back(start);
      s.record.end_seconds.push_back(end);
      ++s.cursor;
      ++s.completed;
      s.waiting_for.clear();
    }
    finish_step(self);  // begins the next ordered step, if any
  }
}

}  // namespace

void stage_detail::fail(self_ptr self, const std::string& why) {
  self->state.failed = true;
  // Its tp peers may be waiting for it inside a collective: they fail now, not at a timeout.
  if (self->state.args.tp) net::abort_local_tp_group(self->state.args.tp, "a tensor-parallel peer failed: " + why);
  self->send(self->state.args.coordinator, pipeline_failure{self->state.args.rank, why});
  self->quit(failure_error(why));
}

// Every handler that delivers an input ends here: the action waiting for it may run now.
void stage_detail::advance_after_message(self_ptr self) {
  auto& s = self->state;
  try {
    advance(self);
  } catch (const std::bad_alloc&) {
    fail(self, describe_failure(std::current_exception(), "the stage of rank " + std::to_string(s.args.rank), s.step));
  } catch (const std::exception& e) {  // a refusal names the rank and the action already; a kernel's or a
    const std::string what = e.what();  // tensor-parallel group's error gets them here
    fail(self, what.rfind("rank ", 0) == 0 ? what : at_cursor(s) + what);
  }
}

namespace {

void begin_step(self_ptr self, int64_t step) {
  auto& s = self->state;
  s.step = step;
  s.cursor = 0;
  s.blocked = false;
  s.straggled = false;
  s.record = {};
  s.record.step_start = now_seconds();
  if (s.tp_clock) s.tp_seconds_before = s.tp_clock->seconds();
  for (auto& c : s.chunks) {
    launch(s, [&] { c->stack().zero_grads(); });  // on a GPU, ordered before this step's backward
    c->reset_peak();
  }
  if (params_partitioned(s)) {
    // From here the gathers hold the segments; once the last is done the optimizer shard is
    // their only holder and updates them in place.
    if (s.fetcher->has_file()) s.fetcher->keep(s.param_shard);  // this step's segments, read back unit by unit
    s.fetcher->begin_step(fetch_order(s));
    s.param_shard = tensor();
  }
  if (grads_partitioned(s)) {  // every segment is written by its bucket's reduce-scatter
    launch(s, [&] { s.shard_grads = ops_for(shard_device(s)).empty({shard_size(s.pieces)}); });
    if (const auto& ledger = shard_ledger(s)) ledger->charge(s.shard_grads, memory_kind::gradients);
  }
  request_batches(self, step + 2);
}

caf::behavior stage(self_ptr self, stage_args args) {
  auto& st = self->state;
  name_failures(self, [self] {
    return std::make_pair("the stage of rank " + std::to_string(self->state.args.rank), self->state.step);
  });
  st.args = std::move(args);
  if (st.args.pin_cpu >= 0 && !is_asynchronous(st.args.queue)) {  // a scheduler thread is not the stage's to pin
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(st.args.pin_cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof(set), &set);  // best effort: a hint, not a contract
  }
  if (st.args.tp) {
    st.tp_clock = std::make_shared<net::timed_tp_group>(st.args.tp);
    st.args.tp = st.tp_clock;
  }
  layer_list all = build_layers(st.args.model, st.args.tp.get(), st.args.sequence_parallel);
  // Runs first: taking a chunk's layers out of `all` leaves holes a later chunk's runs would read.
  std::vector<storage::value_run> stage_runs;  // the stage's chunks end to end
  std::vector<int64_t> chunk_at;
  int64_t at = 0;
  for (int c = 0; c < st.args.plan.virtual_stages; ++c) {
    const layer_range r = st.args.model_chunks.at(static_cast<size_t>(model_chunk_of(st, c)));
    st.chunk_runs.push_back(chunk_runs(all, r, 0));
    chunk_at.push_back(at);
    for (storage::value_run run : st.chunk_runs.back()) {  // the same runs, where the chunk sits in the stage
      run.local += at;
      stage_runs.push_back(run);
    }
    for (int64_t l = r.begin; l < r.end; ++l) at += all.at(static_cast<size_t>(l))->num_params();
  }
  launch(st, [&] {  // on a GPU, the initial values are copied in on the stage's own stream
    for (int c = 0; c < st.args.plan.virtual_stages; ++c) {
      const layer_range r = st.args.model_chunks.at(static_cast<size_t>(model_chunk_of(st, c)));
      st.chunks.push_back(std::make_shared<pipeline_chunk>(take_layers(all, r), r.begin, st.args.seed,
                                                           st.args.recompute, compute_device(st.args)));
      st.chunks.back()->stack().set_matmul_precision(st.args.matmul);
    }
  });
  st.args.buckets.resize(st.chunks.size());
  for (const auto& b : st.args.buckets) st.buckets_per_step += static_cast<int64_t>(b.size());
  if (st.args.zero >= 1 && st.args.collective) st.pieces = shard_layout(st.args.buckets, st.args.dp_size, st.args.dp_rank);
  st.seqs_per_step = st.buckets_per_step * (zero_on(st) ? 2 : 1);
  for (size_t c = 0; c < st.chunks.size(); ++c) {
    if (grads_partitioned(st)) {  // one gradient unit per bucket, in bucket order
      std::vector<std::pair<size_t, size_t>> units;
      for (const grad_bucket& b : st.args.buckets[c])
        units.emplace_back(static_cast<size_t>(b.first_layer), static_cast<size_t>(b.last_layer));
      st.chunks[c]->stack().split_grads(units);
    }
  }
  st.last_weight_action.assign(st.chunks.size(), row(st).size());
  for (size_t i = 0; i < row(st).size(); ++i) {
    const sched::action& a = row(st)[i];
    if (a.kind == op::backward || a.kind == op::backward_weight)
      st.last_weight_action.at(static_cast<size_t>(a.chunk)) = i;
  }
  int64_t n = 0;
  for (auto& c : st.chunks) n += c->stack().num_params();
  if (st.args.resume) {  // the checkpoint's values replace the initial ones before anyone sees them
    const resume_point& from = *st.args.resume;
    for (size_t c = 0; c < st.chunks.size(); ++c) {
      tensor& params = st.chunks[c]->stack().params();
      if (params.where().is_cpu()) {
        storage::read_values(from.dir, from.manifest, "params", st.chunk_runs[c], params.data());
        continue;
      }
      // On a GPU, read on the host and copied in on the stage's stream (from pageable memory the
      // copy has taken the bytes when it returns).
      tensor saved = tensor::uninitialized({params.numel()});
      storage::read_values(from.dir, from.manifest, "params", st.chunk_runs[c], saved.data());
      launch(st, [&] { ops_for(params.where()).copy_floats(f32_out(params), saved.data(), params.numel()); });
    }
    st.next_request = from.manifest.step;
  }
  st.shard_runs = zero_on(st) ? shard_runs(st.pieces, st.args.buckets, chunk_at, stage_runs) : stage_runs;
  tensor initial;
  if (st.chunks.size() == 1 && !zero_on(st)) {
    // The shard's master copy is the stack's own buffer (frozen: neither writes it again), so the
    // rank holds its parameters once.
    initial = st.chunks[0]->stack().params();
  } else if (!zero_on(st)) {  // (ZeRO's shard takes its segments below, from the chunks)
    launch(st, [&] { initial = end_to_end(st.chunks, compute_device(st.args), n, false); });
  }
  if (zero_on(st)) initial = shard_params(st);  // the shard starts from this rank's segments only
  if (params_partitioned(st)) {
    // The whole stage was built (its init needs every layer); from here on it keeps its segments.
    initial.freeze();
    st.param_shard = initial;
    // Offloaded, the segments are the host's (to NVMe, only until the fetcher has written them);
    // a GPU's are too, as its shard is (its group gathers on the host).
    if (st.args.params_offloaded && st.args.host_memory)
      st.args.host_memory->charge(st.param_shard, st.args.param_file ? memory_kind::buffers : memory_kind::parameters);
    else if (const auto& ledger = shard_ledger(st))
      ledger->charge(st.param_shard, memory_kind::parameters);
    param_fetcher::place_fn place;
    if (auto gpu = gpu_queue(st))  // prefetched into device memory, counted there
      place = [queue = std::move(gpu), memory = st.args.memory](tensor unit) {
        tensor on = queue->stage_in(unit);
        if (memory) memory->charge(on, memory_kind::parameters);
        return on;
      };
    st.fetcher = std::make_shared<param_fetcher>(st.args.dp_group, st.args.prefetch, st.args.param_file, std::move(place));
    for (size_t c = 0; c < st.chunks.size(); ++c) {
      st.chunks[c]->stack().split_params();
      stream_params(self, c);
    }
  }
  for (auto& c : st.chunks) c->account_to(st.args.memory);
  initial.freeze();
  if (n > 0 && st.args.resume) restore_shard(self, std::move(initial));
  else if (n > 0 && st.args.host_gradients && !initial.where().is_cpu())
    // A parameter server keeps its copy on the host: the first values go there (waited for once, at the start).
    launch(st, [&] { self->send(st.args.optimizer, params_msg{-1, 0, on_host(initial)}); });
  else if (n > 0) self->send(st.args.optimizer, params_msg{-1, 0, std::move(initial)});
  st.waiting_for = "no step ordered";
  request_batches(self, 1);
  return {
      [self](peers_atom, const std::vector<caf::actor>& peers) {
        for (const auto& p : peers) self->state.peers.push_back(p.address());
      },
      [self](const step_order& o) {
        auto& s = self->state;
        if (dispensing(s)) {  // the run lasts while the dispenser has batches; its steps are the replica's own
          s.units.begin_run(o.step, o.until);
          s.until = std::numeric_limits<int64_t>::max();
          ask_unit(self, s.next_step);
          return;
        }
        s.until = o.until;
        if (s.step < 0) begin_step(self, o.step);
        advance_after_message(self);
      },
      [self](const unit_grant& g) {
        auto& s = self->state;
        if (!s.units.grant(g.run, g.step, g.unit)) return;
        if (g.unit >= 0 && needs_batch(s)) self->send(s.args.loader, batch_request{g.step, g.unit});
        if (s.step < 0 && g.step == s.next_step) {
          if (g.unit < 0) {
            s.waiting_for = "the next run of steps (this run's batches are all taken)";
            return;
          }
          begin_step(self, g.step);
        }
        advance_after_message(self);
      },
      [self](batch_msg& m) {
        auto& s = self->state;
        if (stages_inputs(s)) stage_batch(s, m.step, std::move(m.data));
        else s.batches.emplace(m.step, std::move(m.data));
        advance_after_message(self);
      },
      [self](device_done_atom, int64_t step, uint64_t index) {
        auto& s = self->state;
        if (!s.on_device || s.on_device->step != step || s.on_device->index != index) return;  // not the action it holds
        s.on_device->done = true;
        advance_after_message(self);
      },
      [self](bucket_ready_atom, int64_t step, int32_t chunk, uint64_t b, tensor& part) {
        if (step != self->state.step) return;  // cut by a step that failed: the job is stopping
        launch_bucket(self, chunk, static_cast<size_t>(b), std::move(part));
      },
      [self](gather_ready_atom, int64_t step, uint64_t i, tensor& part) {
        if (step != self->state.step) return;
        request_gather(self, step, static_cast<size_t>(i), std::move(part));
      },
      [self](pipeline_tensor_msg& m) {
        self->state.inbox[{m.step, m.is_grad, m.microbatch, m.boundary}] = std::move(m.value);
        advance_after_message(self);
      },
      [self](const params_msg& m) {
        auto& s = self->state;
        if (params_partitioned(s)) {  // the updated segments are all the stage keeps
          if (m.step < 0) return;
          s.param_shard = m.params;
          s.opt = stage_state::opt_phase::done;
          advance_after_message(self);
          return;
        }
        if (zero_on(s)) {
          if (m.step >= 0) gather_params(self, m);
          return;
        }
        if (s.on_device) {  // the device reads these parameters now: they change once it is done
          s.after_device.push_back([self, m] {
            adopt_params(self->state, m);
            if (m.step >= 0) self->state.opt = stage_state::opt_phase::done;
          });
          return;
        }
        adopt_params(s, m);
        if (m.step < 0) return;  // the shard's initial copy
        s.opt = stage_state::opt_phase::done;
        advance_after_message(self);
      },
      [self](const checkpoint_order& o) { return write_checkpoint(self, o); },
      [self](const pipeline_status_request&) {
        auto& s = self->state;
        const bool active = s.step >= 0 && s.cursor < row(s).size();
        return pipeline_status{s.args.rank, s.step, static_cast<int32_t>(s.cursor),
                               static_cast<int32_t>(row(s).size()), s.completed,
                               active ? sched::to_string(row(s)[s.cursor]) : std::string(), s.waiting_for};
      },
      [self](const pipeline_params_request&) {
        auto& s = self->state;
        pipeline_params_msg out;
        out.stage = s.args.stage;
        for (size_t c = 0; c < s.chunks.size(); ++c) {
          out.model_chunks.push_back(model_chunk_of(s, static_cast<int>(c)));
          if (!params_partitioned(s)) {
            tensor p;
            if (on_accelerator(s)) launch(s, [&] { p = on_host(s.chunks[c]->stack().params()); });
            else p = s.chunks[c]->stack().params().clone();
            p.freeze();
            out.params.push_back(std::move(p));
            continue;
          }
          // ZeRO-3: only this rank's segments, where they sit in the chunk; the coordinator
          // puts the replicas' answers together.
          if (s.param_shard.empty())
            throw std::logic_error("rank " + std::to_string(s.args.rank) + ": parameters asked for during a step");
          tensor p({s.chunks[c]->stack().num_params()});
          std::vector<int64_t> runs;
          for (const shard_piece& piece : s.pieces) {
            if (piece.chunk != static_cast<int>(c) || piece.count == 0) continue;
            const int64_t at = s.args.buckets[c][piece.bucket].offset + piece.in_bucket;
            const float* from = std::as_const(s.param_shard).data() + piece.at_shard;
            std::copy(from, from + piece.count, p.data() + at);
            runs.push_back(at);
            runs.push_back(piece.count);
          }
          p.freeze();
          out.params.push_back(std::move(p));
          out.owned.push_back(std::move(runs));
        }
        return out;
      },
  };
}

}  // namespace

caf::actor spawn_stage(caf::actor_system& sys, stage_args args) {
  // A stage on an accelerator runs only what training_job.cpp's with_checked_devices allows.
  // Its tensor-parallel collectives wait inside its launches for the group's other members (the
  // first NCCL call for them all to join; the local engine's meeting every time), and ZeRO-3's
  // for each unit's gather, so with either it keeps a thread of its own: a scheduler thread held
  // there could be the one a partner needs to arrive.
  if (is_asynchronous(args.queue) && !args.tp && args.zero < 3)
    return sys.spawn(stage, std::move(args));  // it never waits for its device
  return sys.spawn<caf::detached>(stage, std::move(args));
}

}  // namespace troupe
