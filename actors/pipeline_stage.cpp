// pipeline_stage: one pipeline device as a thin interpreter of its schedule row. It holds its
// chunks, its action list and a cursor; every arriving message (order, batch, tensor, params) is
// stored by key and the cursor advances while the action there can run. It never reorders the
// list, never skips an action, and refuses (by name) an action whose data is not where the
// schedule says it is. Timing of every action is recorded for the measured timeline.
#include <pthread.h>
#include <sched.h>

#include <chrono>
#include <map>
#include <tuple>

#include "actors/actor_failure.hpp"
#include "actors/pipeline_actors.hpp"
#include "kernels/loss.hpp"
#include "kernels/pipeline_chunk.hpp"

namespace troupe {

namespace {

using clock_type = std::chrono::steady_clock;
using sched::op;
using slot = std::pair<int, int>;  // (microbatch, local chunk)

struct stage_state {
  pipeline_stage_args args;
  std::vector<std::unique_ptr<pipeline_chunk>> chunks;  // by local chunk
  // Weak: every stage holds every other, and strong handles in a cycle would keep the
  // detached threads alive past the end of the job.
  std::vector<caf::actor_addr> peers;
  // The current step; -1 between steps.
  int64_t step = -1;
  size_t cursor = 0;
  int64_t completed = 0;
  clock_type::time_point origin;
  bool blocked = false;
  clock_type::time_point blocked_since;
  std::string waiting_for;
  // Inputs by key; each is consumed by exactly one action of the list.
  int64_t next_request = 0;
  std::map<int64_t, batch> batches;  // global batches by step (stages with chunk 0 or the last)
  std::vector<batch> micro;          // the current step's microbatches
  std::map<std::tuple<int64_t, bool, int, int>, tensor> inbox;  // (step, is_grad, mb, boundary)
  std::map<slot, tensor> forward_in, backward_in, act_out, grad_out;
  enum class opt_phase { idle, sent, done } opt = opt_phase::idle;
  // What the step reports.
  pipeline_step_report report;
  int live = 0;
  static inline const char* name = "pipeline_stage";
};

using self_ptr = caf::stateful_actor<stage_state>*;

const std::vector<sched::action>& row(const stage_state& s) {
  return s.args.plan.stages[static_cast<size_t>(s.args.stage)];
}

int model_chunk_of(const stage_state& s, int chunk) { return sched::model_chunk(s.args.plan, s.args.stage, chunk); }
int last_model_chunk(const stage_state& s) { return sched::num_model_chunks(s.args.plan) - 1; }
bool needs_batch(const stage_state& s) {
  for (int c = 0; c < s.args.plan.virtual_stages; ++c) {
    const int k = model_chunk_of(s, c);
    if (k == 0 || k == last_model_chunk(s)) return true;
  }
  return false;
}

[[noreturn]] void refuse(const stage_state& s, const std::string& why) {
  const sched::action& a = row(s)[s.cursor];
  throw std::runtime_error("stage " + std::to_string(s.args.stage) + ", action " + std::to_string(s.cursor) + " (" +
                           sched::body_string(a) + "): " + why);
}

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

bool have_batch(stage_state& s) {
  if (!s.micro.empty()) return true;
  auto it = s.batches.find(s.step);
  if (it == s.batches.end()) {
    s.waiting_for = "the batch of step " + std::to_string(s.step) + " from the data loader";
    return false;
  }
  const int64_t M = s.args.plan.num_microbatches;
  const int64_t rows = s.args.batch_size / M;
  for (int64_t m = 0; m < M; ++m) s.micro.push_back(slice(it->second, m * rows, (m + 1) * rows));
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

void send(self_ptr self, const sched::action& a, bool is_grad) {
  auto& s = self->state;
  tensor t = take(s, is_grad ? s.grad_out : s.act_out, {a.microbatch, a.chunk},
                  is_grad ? "input gradient to send" : "output activation to send");
  if (!s.args.drop_send.empty() && sched::to_string(a) == s.args.drop_send) return;  // the injected loss
  t.freeze();
  const int32_t boundary = sched::key_of(s.args.plan, a).boundary;
  self->send(caf::actor_cast<caf::actor>(s.peers.at(static_cast<size_t>(a.peer))), pipeline_tensor_msg{s.step, is_grad, a.microbatch, boundary, t});
}

// Runs the action at the cursor if its inputs are there; false (with waiting_for set) if not.
bool execute(self_ptr self, const sched::action& a) {
  auto& s = self->state;
  const int k = model_chunk_of(s, a.chunk);
  const float grad_scale = 1.0f / static_cast<float>(s.args.global_rows);
  switch (a.kind) {
    case op::forward: {
      if ((k == 0 || k == last_model_chunk(s)) && !have_batch(s)) return false;
      const batch* mb = s.micro.empty() ? nullptr : &s.micro.at(static_cast<size_t>(a.microbatch));
      tensor x = k == 0 ? mb->inputs : take(s, s.forward_in, {a.microbatch, a.chunk}, "input activation");
      tensor y = s.chunks.at(static_cast<size_t>(a.chunk))->forward(a.microbatch, x);
      s.report.peak_live = std::max(s.report.peak_live, ++s.live);
      if (k == last_model_chunk(s)) {
        loss_result r = cross_entropy(y, mb->targets, grad_scale);
        s.report.loss_sum += r.loss_sum;
        s.report.count += r.count;
        s.report.correct += r.correct;
        s.backward_in[{a.microbatch, a.chunk}] = std::move(r.dlogits);
      } else {
        hand_off(s, a.microbatch, a.chunk, std::move(y), true);
      }
      return true;
    }
    case op::backward:
    case op::backward_input: {
      tensor dy = take(s, s.backward_in, {a.microbatch, a.chunk}, "output gradient");
      auto& chunk = *s.chunks.at(static_cast<size_t>(a.chunk));
      tensor dx = a.kind == op::backward ? chunk.backward(a.microbatch, dy, k > 0)
                                         : chunk.backward_input(a.microbatch, dy, k > 0);
      if (a.kind == op::backward) --s.live;
      if (k > 0) hand_off(s, a.microbatch, a.chunk, std::move(dx), false);
      return true;
    }
    case op::backward_weight:
      s.chunks.at(static_cast<size_t>(a.chunk))->backward_weight(a.microbatch);
      --s.live;
      return true;
    case op::send_act: send(self, a, false); return true;
    case op::send_grad: send(self, a, true); return true;
    case op::recv_act: return receive(s, a, false);
    case op::recv_grad: return receive(s, a, true);
    case op::reduce_grads:
      // A pipeline-only job has one data-parallel rank: the reduction over one peer is the
      // identity, so running it changes nothing (a DP x PP job replaces this with a collective).
      return true;
    case op::fetch_params:
    case op::release_params:
      refuse(s, sched::to_string(a.kind) + " needs ZeRO-3 parameter sharding, which this runtime does not have");
    case op::optimizer_step: {
      if (s.opt == stage_state::opt_phase::done) {
        s.opt = stage_state::opt_phase::idle;
        return true;
      }
      int64_t n = 0;
      for (auto& c : s.chunks) n += c->stack().num_params();
      if (n == 0) return true;  // only parameter-free layers (ReLUs) here: nothing to update
      if (s.opt == stage_state::opt_phase::idle) {
        tensor grads({n});
        int64_t at = 0;
        for (auto& c : s.chunks) {
          const tensor& g = c->stack().grads();
          std::copy(g.data(), g.data() + g.numel(), grads.data() + at);
          at += g.numel();
        }
        grads.freeze();
        self->send(s.args.optimizer, gradients_msg{s.step, 0, std::move(grads)});
        s.opt = stage_state::opt_phase::sent;
      }
      s.waiting_for = "the updated parameters from its optimizer shard";
      return false;
    }
  }
  refuse(s, "unknown op");  // unreachable: the switch names every op
}

void finish_step(self_ptr self) {
  auto& s = self->state;
  auto leftover = [&](const std::map<slot, tensor>& m, const char* what) {
    if (!m.empty())
      throw std::runtime_error("stage " + std::to_string(s.args.stage) + ": step " + std::to_string(s.step) +
                               " ended with " + std::to_string(m.size()) + " unconsumed " + what);
  };
  leftover(s.forward_in, "input activations");
  leftover(s.backward_in, "output gradients");
  leftover(s.act_out, "activations never sent");
  leftover(s.grad_out, "gradients never sent");
  if (s.live != 0)
    throw std::runtime_error("stage " + std::to_string(s.args.stage) + ": step " + std::to_string(s.step) +
                             " ended with " + std::to_string(s.live) + " live activations");
  s.report.step = s.step;
  s.report.stage = s.args.stage;
  self->send(caf::actor_cast<caf::actor>(s.args.driver), std::move(s.report));
  s.report = {};
  s.micro.clear();
  s.step = -1;
  s.waiting_for = "no step ordered";
}

double seconds_since(const stage_state& s, clock_type::time_point t) {
  return std::chrono::duration<double>(t - s.origin).count();
}

// Executes actions from the cursor until one must wait or the list is done.
void advance(self_ptr self) {
  auto& s = self->state;
  try {
    while (s.step >= 0 && s.cursor < row(s).size()) {
      const sched::action& a = row(s)[s.cursor];
      const auto start = s.blocked ? s.blocked_since : clock_type::now();
      if (!execute(self, a)) {
        if (!s.blocked) s.blocked_since = start;
        s.blocked = true;
        return;
      }
      // Sends take no device time, and a receive whose message was already there waited none.
      const bool instant = sched::is_send(a.kind) || (sched::is_recv(a.kind) && !s.blocked);
      const auto end = instant ? start : clock_type::now();
      s.blocked = false;
      s.report.actions.push_back(sched::to_string(a));
      s.report.start_seconds.push_back(seconds_since(s, start));
      s.report.end_seconds.push_back(seconds_since(s, end));
      ++s.cursor;
      ++s.completed;
      s.waiting_for.clear();
    }
    if (s.step >= 0) finish_step(self);
  } catch (const std::bad_alloc&) {
    const std::string why = describe_failure(std::current_exception(), "pipeline stage " + std::to_string(s.args.stage), s.step);
    self->send(caf::actor_cast<caf::actor>(s.args.driver), pipeline_failure{s.args.stage, why});
    self->quit(failure_error(why));
  } catch (const std::exception& e) {  // the action's error names the stage and the action already
    self->send(caf::actor_cast<caf::actor>(s.args.driver), pipeline_failure{s.args.stage, e.what()});
    self->quit(failure_error(e.what()));
  }
}

void request_batches(self_ptr self, int64_t up_to) {
  auto& s = self->state;
  if (!needs_batch(s)) return;
  for (; s.next_request < std::min(up_to, s.args.total_steps); ++s.next_request)
    self->send(s.args.loader, batch_request{s.next_request});
}

caf::behavior pipeline_stage(self_ptr self, pipeline_stage_args args) {
  auto& st = self->state;
  name_failures(self, [self] {
    return std::make_pair("pipeline stage " + std::to_string(self->state.args.stage), self->state.step);
  });
  st.args = std::move(args);
  if (st.args.pin_cpu >= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(st.args.pin_cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof(set), &set);  // best effort: a hint, not a contract
  }
  layer_list all = build_layers(st.args.model);
  for (int c = 0; c < st.args.plan.virtual_stages; ++c) {
    const layer_range r = st.args.model_chunks.at(static_cast<size_t>(model_chunk_of(st, c)));
    st.chunks.push_back(std::make_unique<pipeline_chunk>(take_layers(all, r), r.begin, st.args.seed));
  }
  int64_t n = 0;
  for (auto& c : st.chunks) n += c->stack().num_params();
  tensor initial({n});
  int64_t at = 0;
  for (auto& c : st.chunks) {
    std::copy(c->stack().params().data(), c->stack().params().data() + c->stack().num_params(), initial.data() + at);
    at += c->stack().num_params();
    c->stack().zero_grads();
  }
  initial.freeze();
  if (n > 0) self->send(st.args.optimizer, params_msg{-1, 0, std::move(initial)});
  st.waiting_for = "no step ordered";
  request_batches(self, 1);
  return {
      [self](peers_atom, const std::vector<caf::actor>& peers) {
        for (const auto& p : peers) self->state.peers.push_back(p.address());
      },
      [self](const pipeline_step_order& o) {
        auto& s = self->state;
        s.step = o.step;
        s.origin = clock_type::time_point(std::chrono::nanoseconds(o.origin_ns));
        s.cursor = 0;
        s.blocked = false;
        for (auto& c : s.chunks) c->stack().zero_grads();
        request_batches(self, o.step + 2);
        advance(self);
      },
      [self](batch_msg& m) {
        self->state.batches.emplace(m.step, std::move(m.data));
        advance(self);
      },
      [self](pipeline_tensor_msg& m) {
        self->state.inbox[{m.step, m.is_grad, m.microbatch, m.boundary}] = std::move(m.value);
        advance(self);
      },
      [self](const params_msg& m) {
        auto& s = self->state;
        int64_t at = 0;
        for (auto& c : s.chunks) {
          std::copy(m.params.data() + at, m.params.data() + at + c->stack().num_params(), c->stack().params().data());
          at += c->stack().num_params();
        }
        s.opt = stage_state::opt_phase::done;
        advance(self);
      },
      [self](const pipeline_status_request&) {
        auto& s = self->state;
        const bool active = s.step >= 0 && s.cursor < row(s).size();
        return pipeline_status{s.args.stage, s.step, static_cast<int32_t>(s.cursor),
                               static_cast<int32_t>(row(s).size()), s.completed,
                               active ? sched::to_string(row(s)[s.cursor]) : std::string(), s.waiting_for};
      },
      [self](const pipeline_params_request&) {
        auto& s = self->state;
        pipeline_params_msg out;
        out.stage = s.args.stage;
        for (size_t c = 0; c < s.chunks.size(); ++c) {
          tensor p = s.chunks[c]->stack().params().clone();
          p.freeze();
          out.model_chunks.push_back(model_chunk_of(s, static_cast<int>(c)));
          out.params.push_back(std::move(p));
        }
        return out;
      },
  };
}

}  // namespace

caf::actor spawn_pipeline_stage(caf::actor_system& sys, pipeline_stage_args args) {
  return sys.spawn<caf::detached>(pipeline_stage, std::move(args));
}

}  // namespace troupe
