// dp_trace: measured data-parallel events -> schedules timeline, and the overlap share.
#include "actors/dp_trace.hpp"

#include <algorithm>
#include <limits>

namespace troupe {

sched::timeline to_timeline(const std::vector<dp_trace_event>& events, int ranks, const std::string& name) {
  sched::timeline t;
  t.name = name;
  t.stages.resize(static_cast<size_t>(2 * ranks));
  double origin = std::numeric_limits<double>::infinity();
  for (const auto& e : events) origin = std::min(origin, e.start);
  for (const auto& e : events) {
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
  double total = 0, hidden = 0;
  for (size_t lane = 0; lane + 1 < t.stages.size(); lane += 2) {
    std::vector<std::pair<double, double>> busy;  // backward intervals of this rank, sorted
    for (const auto& e : t.stages[lane])
      if (e.what.kind == sched::op::backward) busy.emplace_back(e.start_seconds, e.end_seconds);
    std::sort(busy.begin(), busy.end());
    for (const auto& r : t.stages[lane + 1]) {
      if (r.what.kind != sched::op::reduce_grads) continue;
      total += r.end_seconds - r.start_seconds;
      double covered_to = r.start_seconds;  // backward intervals do not overlap each other
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
