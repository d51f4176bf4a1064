// dp_trace: measured data-parallel events -> schedules timeline, and the overlap share.
#include "actors/dp_trace.hpp"

#include <algorithm>
#include <limits>
#include <map>

namespace troupe {

sched::timeline to_timeline(const std::vector<dp_trace_event>& events, int ranks, const std::string& name) {
  sched::timeline t;
  t.name = name;
  t.stages.resize(static_cast<size_t>(2 * ranks));
  double origin = std::numeric_limits<double>::infinity();
  std::map<int32_t, double> last_handed_in;  // bucket -> when the last rank sent it
  for (const auto& e : events) {
    origin = std::min(origin, e.start);
    if (e.kind == static_cast<int32_t>(dp_event_kind::all_reduce))
      last_handed_in[e.index] = std::max(last_handed_in[e.index], e.start);
  }
  for (dp_trace_event e : events) {
    sched::action a;
    int lane = 2 * e.rank;
    switch (static_cast<dp_event_kind>(e.kind)) {
      case dp_event_kind::forward:
        a.kind = sched::op::forward;
        a.microbatch = 0;
        break;
      case dp_event_kind::backward:
        a.kind = sched::op::backward;
        a.microbatch = 0;
        a.chunk = e.index;
        break;
      case dp_event_kind::all_reduce:
        e.start = std::min(e.end, last_handed_in[e.index]);
        a.kind = sched::op::reduce_grads;
        a.microbatch = e.index;
        lane += 1;
        break;
      case dp_event_kind::optimizer:
        a.kind = sched::op::optimizer_step;
        break;
    }
    a.stage = lane;
    t.stages[static_cast<size_t>(lane)].push_back({a, e.start - origin, e.end - origin});
  }
  for (auto& lane : t.stages)
    std::stable_sort(lane.begin(), lane.end(),
                     [](const sched::timed_action& x, const sched::timed_action& y) { return x.start_seconds < y.start_seconds; });
  return t;
}

double overlap_share(const sched::timeline& t) {
  // Backward of the job: the union of every rank's backward intervals. In a synchronous step an
  // all-reduce that runs while any rank still computes backward is off the critical path.
  std::vector<std::pair<double, double>> busy;
  for (size_t lane = 0; lane < t.stages.size(); lane += 2)
    for (const auto& e : t.stages[lane])
      if (e.what.kind == sched::op::backward) busy.emplace_back(e.start_seconds, e.end_seconds);
  std::sort(busy.begin(), busy.end());
  double total = 0, hidden = 0;
  for (size_t lane = 1; lane < t.stages.size(); lane += 2) {
    for (const auto& r : t.stages[lane]) {
      if (r.what.kind != sched::op::reduce_grads) continue;
      total += r.end_seconds - r.start_seconds;
      double covered_to = r.start_seconds;  // count each instant once where intervals overlap
      for (const auto& [b0, b1] : busy) {
        const double lo = std::max(b0, covered_to), hi = std::min(b1, r.end_seconds);
        if (hi > lo) {
          hidden += hi - lo;
          covered_to = hi;
        }
      }
    }
  }
  return total > 0 ? hidden / total : 0.0;
}

}  // namespace troupe
