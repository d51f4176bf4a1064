// passes: add_communication, add_optimizer_step and add_param_fetches, each a single walk over
// every stage's list.
// They trust the builder's compute order and do not validate it: run validate() on the result.
#include "schedules/passes.hpp"

#include <stdexcept>

namespace troupe::sched {

namespace {

// Where the tensors of an action come from and go to; -1 when no transfer is needed.
struct transfers {
  op recv_kind = op::recv_act;
  int recv_from = -1;
  op send_kind = op::send_act;
  int send_to = -1;
};

// The stage holding model chunk `k`, or -1 if k is outside the model or on `stage` itself.
int remote_stage(const schedule& s, int stage, int k) {
  if (k < 0 || k >= num_model_chunks(s)) return -1;
  const int other = stage_of(s, k);
  return other == stage ? -1 : other;
}

transfers transfers_of(const schedule& s, const action& a) {
  const int k = model_chunk(s, a.stage, a.chunk);
  transfers t;
  switch (a.kind) {
    case op::forward:
      t = {op::recv_act, remote_stage(s, a.stage, k - 1), op::send_act,
           remote_stage(s, a.stage, k + 1)};
      break;
    case op::backward:
    case op::backward_input:
      t = {op::recv_grad, remote_stage(s, a.stage, k + 1), op::send_grad,
           remote_stage(s, a.stage, k - 1)};
      break;
    case op::backward_weight:
    case op::reduce_grads:
    case op::fetch_params:
    case op::release_params:
    case op::optimizer_step:
      break;
    case op::send_act:
    case op::recv_act:
    case op::send_grad:
    case op::recv_grad:
      throw std::invalid_argument("add_communication: schedule already has communication: stage " +
                                  std::to_string(a.stage) + " has " + to_string(a));
  }
  return t;
}

}  // namespace

schedule add_communication(const schedule& s) {
  schedule out = s;
  for (std::size_t d = 0; d < s.stages.size(); ++d) {
    std::vector<action> list;
    list.reserve(s.stages[d].size() * 2);
    for (const action& a : s.stages[d]) {
      const transfers t = transfers_of(s, a);
      if (t.recv_from >= 0) list.push_back(action{a.stage, t.recv_kind, a.microbatch, a.chunk, t.recv_from});
      list.push_back(a);
      if (t.send_to >= 0) list.push_back(action{a.stage, t.send_kind, a.microbatch, a.chunk, t.send_to});
    }
    out.stages[d] = std::move(list);
  }
  return out;
}

schedule add_optimizer_step(const schedule& s) {
  schedule out = s;
  for (std::size_t d = 0; d < s.stages.size(); ++d) {
    for (const action& a : s.stages[d]) {
      if (a.kind == op::reduce_grads || a.kind == op::optimizer_step)
        throw std::invalid_argument("add_optimizer_step: stage " + std::to_string(d) +
                                    " already has " + to_string(a));
    }
    const int stage = static_cast<int>(d);
    out.stages[d].push_back(action{stage, op::reduce_grads, -1, 0, -1});
    out.stages[d].push_back(action{stage, op::optimizer_step, -1, 0, -1});
  }
  return out;
}

schedule complete(const schedule& s) { return add_optimizer_step(add_communication(s)); }

namespace {

// Whether `r` is the receive that brings `a` its input (a forward's activation, a backward's
// output gradient).
bool is_receive_for(const action& r, const action& a) {
  const op wanted = a.kind == op::forward ? op::recv_act : op::recv_grad;
  return r.kind == wanted && r.microbatch == a.microbatch && r.chunk == a.chunk;
}

}  // namespace

schedule add_param_fetches(const schedule& s) {
  schedule out = s;
  for (std::size_t d = 0; d < s.stages.size(); ++d) {
    std::vector<action> list;
    list.reserve(s.stages[d].size() * 3);
    for (const action& a : s.stages[d]) {
      if (a.kind == op::fetch_params || a.kind == op::release_params)
        throw std::invalid_argument("add_param_fetches: schedule already has parameter fetches: stage " +
                                    std::to_string(d) + " has " + to_string(a));
      if (!reads_weights(a.kind)) {
        list.push_back(a);
        continue;
      }
      const action fetch{a.stage, op::fetch_params, a.microbatch, a.chunk, -1};
      if (!list.empty() && is_receive_for(list.back(), a)) list.insert(list.end() - 1, fetch);
      else list.push_back(fetch);
      list.push_back(a);
      list.push_back(action{a.stage, op::release_params, a.microbatch, a.chunk, -1});
    }
    out.stages[d] = std::move(list);
  }
  return out;
}

}  // namespace troupe::sched
