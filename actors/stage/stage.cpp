// stage: one rank as a thin interpreter of its schedule row. It holds its chunks, its action list
// and a cursor; every arriving message (order, batch, tensor, reduced bucket, params) is stored
// by key and the stage runs the next action that can run: under fixed dispatch always the row's
// next, under ready dispatch the row's earliest pending action or the other lane's head
// (schedules/dispatch.hpp: the same bits either way). It never skips an action, and refuses (by
// name) an action whose data is not where the schedule says it is. Ordered a run of steps, it
// starts each as soon as the previous one's parameters are back, and reports every step with the
// timing of each action. How an action is carried out is a strategy's (stage_strategies.hpp:
// where it computes, how gradients are reduced, where parameters come from, which batch a step
// computes), chosen once by stage_setup.cpp; the order it runs its row in is the dispatch policy's
// (a parameter of next_candidates, not a branch here); its
// pipeline traffic is stage_pipeline.cpp's and its part in checkpoints stage_checkpoint.cpp's.
#include "actors/stage/stage.hpp"

#include <spdlog/spdlog.h>

#include <chrono>
#include <thread>
#include <utility>

#include "actors/actor_failure.hpp"
#include "actors/stage/stage_state.hpp"

namespace troupe {

namespace {

using namespace stage_detail;

// Hands a chunk's output to the next chunk: locally when it is on this stage, else to the outbox
// its send action empties. `toward_output`: activation (up) or gradient (down).
void hand_off(stage_state& s, int microbatch, int chunk, tensor t, bool toward_output) {
  const int k = model_chunk_of(s, chunk) + (toward_output ? 1 : -1);
  if (sched::stage_of(s.args.plan, k) == s.args.stage)
    (toward_output ? s.forward_in : s.backward_in)[{microbatch, sched::chunk_of(s.args.plan, k)}] = std::move(t);
  else
    (toward_output ? s.act_out : s.grad_out)[{microbatch, chunk}] = std::move(t);
}

// The injected straggler's delay before the step's first forward (0: none, or already taken);
// it is slept where the forward computes, so an asynchronous device's stage is not held.
double straggle_ms(stage_state& s) {
  const straggler_spec& st = s.args.faults.straggler;
  if (st.ms <= 0 || s.straggled) return 0;
  s.straggled = true;
  return straggler_delay_ms(st, s.args.run.seed, s.step);
}

// The injected jitter of the action at the cursor (0: none).
double jitter_ms(const stage_state& s) {
  return s.args.faults.jitter.max_ms > 0 ? jitter_delay_ms(s.args.faults.jitter, s.args.run.seed, s.step, s.cursor) : 0.0;
}

// Runs the action at the cursor if its inputs are there; false (with waiting_for set) if not.
bool execute(self_ptr self, const sched::action& a) {
  auto& s = self->state;
  if (s.exec->holds_action()) {  // the cursor stays on the device's action
    if (!s.exec->complete(self)) return false;
    if (a.kind != op::optimizer_step) return true;
    // The gradients left with the completion; O goes on to wait for the parameters.
  }
  const int k = model_chunk_of(s, a.chunk);
  const float grad_scale = 1.0f / static_cast<float>(s.args.run.global_rows);
  const bool last_weight_action = s.cursor == s.last_weight_action.at(static_cast<size_t>(a.chunk));
  switch (a.kind) {
    case op::forward: {
      if ((k == 0 || k == last_model_chunk(s)) && !s.batches_in->take(s)) return false;
      std::shared_ptr<const batch> mb = s.micro.empty() ? nullptr : s.micro.at(static_cast<size_t>(a.microbatch));
      tensor x = k == 0 ? mb->inputs : take(s, s.forward_in, {a.microbatch, a.chunk}, "input activation");
      const bool last = k == last_model_chunk(s);
      auto out = std::make_shared<std::pair<tensor, loss_result>>();
      compute_parts c;
      // `tp`: the layers call their group by a plain pointer, so the work holds it while it runs.
      c.work = [chunk = s.chunks.at(static_cast<size_t>(a.chunk)), tp = s.args.groups.member(sched::axis::tp), mb,
                x = std::move(x), out, last, loss = last ? s.loss : nullptr, grad_scale, pause = straggle_ms(s) + jitter_ms(s), m = a.microbatch] {
        if (pause > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(pause));
        out->first = chunk->forward(m, x);
        if (last) out->second = loss(out->first, mb->targets, grad_scale);
      };
      c.finish = [self, a, out, last] {
        auto& s = self->state;
        s.record.peak_live = std::max(s.record.peak_live, ++s.live);
        if (!last) return hand_off(s, a.microbatch, a.chunk, std::move(out->first), true);
        out->second.settle();  // a GPU's loss has reached the host: its queue has completed
        if (s.reports_loss) {
          s.record.loss_sum += out->second.loss_sum;
          s.record.count += out->second.count;
          s.record.correct += out->second.correct;
        }
        s.backward_in[{a.microbatch, a.chunk}] = std::move(out->second.dlogits);
      };
      return s.exec->run(self, a, std::move(c));
    }
    case op::backward:
    case op::backward_input:
    case op::backward_weight: {
      tensor dy = a.kind == op::backward_weight ? tensor() : take(s, s.backward_in, {a.microbatch, a.chunk}, "output gradient");
      layer_stack::layer_done_fn buckets;
      if (a.kind != op::backward_input && last_weight_action) buckets = s.reducer->bucket_hook(self, a.chunk);
      auto dx = std::make_shared<tensor>();
      compute_parts c;
      // `tp`: the layers call their group by a plain pointer, so the work holds it while it runs.
      c.work = [chunk = s.chunks.at(static_cast<size_t>(a.chunk)), tp = s.args.groups.member(sched::axis::tp),
                dy = std::move(dy), dx, buckets = std::move(buckets), kind = a.kind, m = a.microbatch, k, pause = jitter_ms(s)] {
        if (pause > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(pause));
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
      return s.exec->run(self, a, std::move(c));
    }
    case op::send_act: return send(self, a, false);
    case op::send_grad: return send(self, a, true);
    case op::recv_act: return receive(s, a, false);
    case op::recv_grad: return receive(s, a, true);
    case op::reduce_grads: return s.reducer->reduced(self);
    case op::fetch_params: return s.params->fetch(self, a);
    case op::release_params: return s.params->release(self, a);
    case op::optimizer_step: {
      if (s.opt == stage_state::opt_phase::done) {
        s.opt = stage_state::opt_phase::idle;
        return true;
      }
      int64_t n = 0;
      for (auto& c : s.chunks) n += c->stack().num_params();
      if (s.opt == stage_state::opt_phase::idle) {
        if (!s.batches_in->ready_to_update(self, n > 0)) return false;
        if (n == 0) return true;  // only parameter-free layers (ReLUs) here: nothing to update
        if (!s.exec->run_update(self, a, s.reducer->gradients_out(self, n))) {
          s.opt = stage_state::opt_phase::sent;  // the device's completion brings the cursor back
          return false;
        }
      }
      s.waiting_for = s.params->awaited(s);
      return false;
    }
  }
  refuse(s, "unknown op");  // unreachable: the switch names every op
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
  s.record.tp_seconds = tp_seconds(s) - s.tp_seconds_before;
  for (const auto& c : s.chunks) s.record.peak_activation_bytes += c->peak_bytes();  // exact for one chunk
  if (s.args.device.memory) {
    const memory_figures peak = s.args.device.memory->peak();
    s.record.peak_memory.assign(peak.bytes.begin(), peak.bytes.end());
    s.record.peak_memory.push_back(s.args.device.memory->peak_total());
  }
  if (s.args.device.host_memory) {
    const memory_figures peak = s.args.device.host_memory->peak();
    s.record.peak_host_memory.assign(peak.bytes.begin(), peak.bytes.end());
    s.record.peak_host_memory.push_back(s.args.device.host_memory->peak_total());
  }
  expert_tally experts;  // every chunk's forwards of the step have finished
  for (const auto& c : s.chunks) experts.add(c->take_routing());
  s.record.set_experts(experts);
  s.record.step_end = now_seconds();
  const double next_start = s.record.step_end;
  self->send(s.args.partners.coordinator, std::move(s.record));
  s.record = {};
  s.micro.clear();
  const int64_t next = s.step + 1;
  s.step = -1;
  s.waiting_for = "no step ordered";
  if (!s.batches_in->begins_next(self, next)) return;
  begin_step(self, next);
  s.record.step_start = next_start;
}

// Runs action i of the row if its inputs are there: true once it completed.
bool run_action(self_ptr self, size_t i, double start) {
  auto& s = self->state;
  const sched::action& a = row(s)[i];
  s.cursor = i;
  if (!execute(self, a)) return false;
  // Sends take no device time, and a receive whose message was already there waited none.
  const bool instant = sched::is_send(a.kind) || (sched::is_recv(a.kind) && !s.blocked);
  const double end = instant ? start : now_seconds();
  if (sched::is_compute(a.kind) || a.kind == op::optimizer_step) s.record.compute_seconds += end - start;
  s.blocked = false;
  s.record.actions.push_back(sched::to_string(a));
  s.record.start_seconds.push_back(start);
  s.record.end_seconds.push_back(end);
  s.progress.mark(i);
  ++s.completed;
  s.last_completed_at = end;
  s.waiting_for.clear();
  return true;
}

// Runs actions until none can run now or the run of steps is done: the row's next under fixed
// dispatch; under ready dispatch the earliest pending action, else the other lane's head.
void advance(self_ptr self) {
  auto& s = self->state;
  while (s.step >= 0) {
    for (;;) {
      // An asynchronous device's action holds the stage until it completes.
      sched::candidates next;
      if (s.exec->holds_action()) next.push_back(s.cursor);
      else next = sched::next_candidates(s.ready, row(s), s.progress, s.args.dispatch.policy, s.live);
      if (next.empty()) break;  // the row is done
      const double start = s.blocked ? s.blocked_since : now_seconds();
      bool ran = false;
      std::string waiting;  // what the earliest candidate waits for, which is what the stage waits for
      for (size_t i : next) {
        if (run_action(self, i, start)) {
          ran = true;
          break;
        }
        if (s.failed) return;
        if (waiting.empty()) waiting = s.waiting_for;
        if (s.exec->holds_action()) break;  // it went to the device: nothing else runs until it completes
      }
      if (!ran) {
        if (!waiting.empty()) s.waiting_for = waiting;
        if (!s.blocked) s.blocked_since = start;
        s.blocked = true;
        return;
      }
    }
    finish_step(self);  // begins the next ordered step, if any
  }
}

}  // namespace

void stage_detail::refuse(const stage_state& s, const std::string& why) { throw std::runtime_error(at_cursor(s) + why); }

void stage_detail::fail(self_ptr self, const std::string& why) {
  self->state.failed = true;
  // Its tp peers may be waiting for it inside a collective: they fail now, not at a timeout.
  net::abort_local_tp_group(self->state.args.groups.member(sched::axis::tp), "a tensor-parallel peer failed: " + why);
  self->send(self->state.args.partners.coordinator, pipeline_failure{self->state.args.rank, why});
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

void stage_detail::begin_step(self_ptr self, int64_t step) {
  auto& s = self->state;
  if (step == s.args.faults.killed_at_step) {  // the injected loss: gone without a word, as a dead machine
    spdlog::warn("fault injection: rank {} killed as step {} begins", s.args.rank, step);
    s.step = -1;  // nothing more runs in the handler that began it
    s.failed = true;
    return self->quit(caf::exit_reason::kill);
  }
  s.step = step;
  s.cursor = 0;
  s.progress.reset(row(s).size());
  s.blocked = false;
  s.straggled = false;
  s.record = {};
  s.buckets_launched = 0;
  s.record.step_start = now_seconds();
  s.tp_seconds_before = tp_seconds(s);
  for (auto& c : s.chunks) {
    launch(s, [&] { c->stack().zero_grads(); });  // on a GPU, ordered before this step's backward
    c->reset_peak();
  }
  s.params->begin_step(self);
  s.reducer->begin_step(self);
  s.batches_in->request(self, step + 2);
}

namespace {

caf::behavior stage(self_ptr self, stage_args args) {
  name_failures(self, [self] {
    return std::make_pair("the stage of rank " + std::to_string(self->state.args.rank), self->state.step);
  });
  set_up(self, std::move(args));
  return {
      [self](peers_atom, const std::vector<caf::actor>& peers) {
        for (const auto& p : peers) self->state.peers.push_back(p.address());
      },
      [self](const step_order& o) { self->state.batches_in->ordered(self, o); },
      [self](const unit_grant& g) { self->state.batches_in->granted(self, g); },
      [self](const update_commit& c) { self->state.batches_in->committed(self, c); },
      [self](batch_msg& m) {
        self->state.batches_in->keep(self->state, m.step, std::move(m.data));
        advance_after_message(self);
      },
      [self](device_done_atom, int64_t step, uint64_t index) {
        if (self->state.exec->done(step, static_cast<size_t>(index))) advance_after_message(self);
      },
      [self](bucket_ready_atom, int64_t step, int32_t chunk, uint64_t b, tensor& part) {
        if (step != self->state.step) return;  // cut by a step that failed: the job is stopping
        self->state.reducer->launch(self, chunk, static_cast<size_t>(b), std::move(part));
      },
      [self](gather_ready_atom, int64_t step, uint64_t i, tensor& part) {
        if (step != self->state.step) return;
        self->state.params->gather_ready(self, step, static_cast<size_t>(i), std::move(part));
      },
      [self](pipeline_tensor_msg& m) {
        note_arrival(self->state, m);
        self->state.inbox[{m.step, m.is_grad, m.microbatch, m.boundary}] = std::move(m.value);
        advance_after_message(self);
      },
      [self](const params_msg& m) { self->state.params->updated(self, m); },
      [self](const checkpoint_order& o) { return write_checkpoint(self, o); },
      [self](const pipeline_status_request&) {
        auto& s = self->state;
        const bool active = s.step >= 0 && s.progress.earliest < row(s).size();
        // The earliest pending action is the one the stage waits at (under ready dispatch the
        // cursor may be on a later one that ran).
        const double since = s.last_completed_at > 0 ? now_seconds() - s.last_completed_at : 0;
        return pipeline_status{s.args.rank,
                               s.step,
                               static_cast<int32_t>(s.progress.earliest),
                               static_cast<int32_t>(row(s).size()),
                               s.completed,
                               active ? sched::to_string(row(s)[s.progress.earliest]) : std::string(),
                               s.waiting_for,
                               since,
                               s.pipe_log.lines(now_seconds())};
      },
      [self](const pipeline_params_request&) {
        auto& s = self->state;
        pipeline_params_msg out;
        out.stage = s.args.stage;
        for (size_t c = 0; c < s.chunks.size(); ++c) {
          out.model_chunks.push_back(model_chunk_of(s, static_cast<int>(c)));
          s.params->copy_out(self, c, out);
        }
        return out;
      },
  };
}

}  // namespace

caf::actor spawn_stage(caf::actor_system& sys, stage_args args) {
  if (!needs_own_thread(args)) return sys.spawn(stage, std::move(args));  // it never waits for its device
  return sys.spawn<caf::detached>(stage, std::move(args));
}

}  // namespace troupe
