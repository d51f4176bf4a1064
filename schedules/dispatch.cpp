// Lanes, barriers and the stash bound of ready dispatch (dispatch.hpp).
#include "schedules/dispatch.hpp"

#include <algorithm>
#include <map>
#include <stdexcept>

namespace troupe::sched {

const char* to_string(dispatch_policy d) { return d == dispatch_policy::ready ? "ready" : "fixed"; }

dispatch_policy parse_dispatch(const std::string& text) {
  if (text == "fixed") return dispatch_policy::fixed;
  if (text == "ready") return dispatch_policy::ready;
  throw std::invalid_argument("dispatch \"" + text + "\": expected fixed or ready");
}

lane lane_of(op kind) {
  switch (kind) {
    case op::forward:
    case op::recv_act:
    case op::send_act:
      return lane::forward;
    case op::backward:
    case op::backward_input:
    case op::backward_weight:
    case op::recv_grad:
    case op::send_grad:
      return lane::backward;
    case op::reduce_grads:
    case op::fetch_params:
    case op::release_params:
    case op::optimizer_step:
      return lane::barrier;
  }
  return lane::barrier;
}

ready_row plan_ready_row(const std::vector<action>& row, int headroom) {
  ready_row out;
  out.lanes.reserve(row.size());
  out.forward_of.assign(row.size(), -1);
  std::map<std::pair<int, int>, int> forward_at;  // (microbatch, chunk) -> index of its F
  int live = 0;
  for (size_t i = 0; i < row.size(); ++i) {
    const action& a = row[i];
    out.lanes.push_back(lane_of(a.kind));
    if (a.kind == op::forward) {
      forward_at[{a.microbatch, a.chunk}] = static_cast<int>(i);
      out.stash_bound = std::max(out.stash_bound, ++live);
    } else if (a.kind == op::backward || a.kind == op::backward_input || a.kind == op::backward_weight) {
      const auto f = forward_at.find({a.microbatch, a.chunk});
      if (f != forward_at.end()) out.forward_of[i] = f->second;
      if (a.kind != op::backward_input) --live;  // B and W free the stash, as validate counts
    }
  }
  out.stash_bound += headroom;
  return out;
}

void row_progress::reset(size_t n) {
  done.assign(n, false);
  earliest = 0;
}

void row_progress::mark(size_t i) {
  done.at(i) = true;
  while (earliest < done.size() && done[earliest]) ++earliest;
}

candidates next_candidates(const ready_row& plan, const std::vector<action>& row, const row_progress& p,
                                    dispatch_policy d, int stashed) {
  candidates out;
  if (p.earliest >= row.size()) return out;
  out.push_back(p.earliest);
  if (d == dispatch_policy::fixed || plan.lanes[p.earliest] == lane::barrier) return out;
  // The other lane's head: its first pending action, before the next barrier.
  const lane other = plan.lanes[p.earliest] == lane::forward ? lane::backward : lane::forward;
  for (size_t i = p.earliest + 1; i < row.size(); ++i) {
    if (plan.lanes[i] == lane::barrier) break;
    if (p.done[i] || plan.lanes[i] != other) continue;
    if (plan.forward_of[i] >= 0 && !p.done[static_cast<size_t>(plan.forward_of[i])]) break;
    if (row[i].kind == op::forward && stashed >= plan.stash_bound) break;
    out.push_back(i);
    break;
  }
  return out;
}

}  // namespace troupe::sched
