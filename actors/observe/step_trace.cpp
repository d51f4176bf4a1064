// step_trace: measured stage records -> schedules timeline, and the overlap share.
#include "actors/observe/step_trace.hpp"

#include <algorithm>
#include <limits>
#include <map>
#include <utility>

#include "schedules/action.hpp"

namespace troupe {

namespace {

double earliest(const std::vector<stage_step_record>& ranks) {
  double origin = std::numeric_limits<double>::infinity();
  for (const auto& r : ranks) {
    for (double t : r.start_seconds) origin = std::min(origin, t);
    for (double t : r.bucket_sent) origin = std::min(origin, t);
  }
  return origin == std::numeric_limits<double>::infinity() ? 0.0 : origin;
}

void add_actions(sched::timeline& t, size_t lane, const stage_step_record& r, double origin) {
  for (size_t i = 0; i < r.actions.size(); ++i) {
    sched::action a = sched::parse_action(r.actions[i]);
    a.stage = static_cast<int>(lane);
    t.stages[lane].push_back({a, r.start_seconds[i] - origin, r.end_seconds[i] - origin});
  }
}

bool is_backward(sched::op k) {
  return k == sched::op::backward || k == sched::op::backward_input || k == sched::op::backward_weight;
}

}  // namespace

double stage_step_record::left_link_rate() const {
  std::vector<double> known;
  for (double x : bucket_left_rate)
    if (x > 0) known.push_back(x);
  return known.empty() ? 0 : median(std::move(known));
}

void stage_step_record::set_experts(const expert_tally& t) {
  moe_layers.clear(), expert_routed.clear(), expert_dropped.clear();
  for (const auto& [layer, counts] : t.routed) {
    moe_layers.push_back(layer);
    expert_routed.insert(expert_routed.end(), counts.begin(), counts.end());
    const auto d = t.dropped.find(layer);
    expert_dropped.push_back(d == t.dropped.end() ? 0 : d->second);
  }
  aux_loss_sum = t.aux_loss_sum;
  aux_forwards = t.forwards;
}

expert_tally stage_step_record::experts() const {
  expert_tally t;
  const size_t blocks = moe_layers.size();
  const size_t E = blocks ? expert_routed.size() / blocks : 0;
  for (size_t b = 0; b < blocks; ++b) {
    t.routed[moe_layers[b]].assign(expert_routed.begin() + static_cast<std::ptrdiff_t>(b * E),
                                   expert_routed.begin() + static_cast<std::ptrdiff_t>((b + 1) * E));
    t.dropped[moe_layers[b]] = b < expert_dropped.size() ? expert_dropped[b] : 0;
  }
  t.aux_loss_sum = aux_loss_sum;
  t.forwards = aux_forwards;
  return t;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

sched::timeline to_timeline(const std::vector<stage_step_record>& ranks, int ranks_per_replica, const std::string& name) {
  sched::timeline t;
  t.name = name;
  t.stages.resize(2 * ranks.size());
  for (size_t r = 0; r < ranks.size(); ++r) {
    t.lanes.push_back({"rank " + std::to_string(r), "compute"});
    t.lanes.push_back({"rank " + std::to_string(r), "all-reduce"});
  }
  const double origin = earliest(ranks);
  // A bucket is reduced by the ranks of one data-parallel group: those at the same position in
  // their replica. Its all-reduce can start once the last of them handed it in.
  std::map<std::pair<int, int32_t>, double> last_handed_in;
  for (size_t r = 0; r < ranks.size(); ++r)
    for (size_t i = 0; i < ranks[r].buckets.size(); ++i) {
      double& at = last_handed_in[{static_cast<int>(r) % ranks_per_replica, ranks[r].buckets[i]}];
      at = std::max(at, ranks[r].bucket_sent[i]);
    }
  for (size_t r = 0; r < ranks.size(); ++r) {
    add_actions(t, 2 * r, ranks[r], origin);
    const size_t lane = 2 * r + 1;
    for (size_t i = 0; i < ranks[r].buckets.size(); ++i) {
      const double done = ranks[r].bucket_done[i];
      const double start = std::min(done, last_handed_in[{static_cast<int>(r) % ranks_per_replica, ranks[r].buckets[i]}]);
      sched::action a{static_cast<int>(lane), sched::op::reduce_grads, ranks[r].buckets[i], 0, -1};
      t.stages[lane].push_back({a, start - origin, done - origin});
    }
    std::stable_sort(t.stages[lane].begin(), t.stages[lane].end(),
                     [](const sched::timed_action& x, const sched::timed_action& y) { return x.start_seconds < y.start_seconds; });
  }
  return t;
}

sched::timeline schedule_timeline(const std::vector<stage_step_record>& stages, const std::string& name) {
  sched::timeline t;
  t.name = name;
  t.stages.resize(stages.size());
  const double origin = earliest(stages);
  for (size_t d = 0; d < stages.size(); ++d) add_actions(t, d, stages[d], origin);
  return t;
}

double overlap_share(const sched::timeline& t) {
  // Backward of the job: the union of every rank's backward intervals. In a synchronous step an
  // all-reduce that runs while any rank still computes backward is off the critical path.
  std::vector<std::pair<double, double>> busy;
  for (size_t lane = 0; lane < t.stages.size(); lane += 2)
    for (const auto& e : t.stages[lane])
      if (is_backward(e.what.kind)) busy.emplace_back(e.start_seconds, e.end_seconds);
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
