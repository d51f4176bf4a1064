// pipeline_timing: medians over measured actions, and the measured-vs-simulated table.
#include "actors/observe/pipeline_timing.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <tuple>

#include "actors/observe/step_trace.hpp"

namespace troupe {

namespace {

bool counts_as_busy(sched::op kind) { return !sched::is_communication(kind); }

}  // namespace

bubble_stats measure_bubble(const sched::timeline& t) {
  bubble_stats b;
  b.step_seconds = sched::end_seconds(t);
  double idle = 0;
  for (const auto& lane : t.stages) {
    double busy = 0;
    for (const auto& e : lane)
      if (counts_as_busy(e.what.kind)) busy += e.end_seconds - e.start_seconds;
    b.busy_seconds.push_back(busy);
    b.idle_seconds.push_back(b.step_seconds - busy);
    idle += b.idle_seconds.back();
  }
  if (b.step_seconds > 0 && !t.stages.empty())
    b.bubble_fraction = idle / (static_cast<double>(t.stages.size()) * b.step_seconds);
  return b;
}

sched::cost_model calibrate_costs(const sched::schedule& s, const std::vector<sched::timeline>& steps) {
  using sched::op;
  const auto P = static_cast<size_t>(s.num_stages);
  const auto V = static_cast<size_t>(s.virtual_stages);
  // [stage][chunk][op] -> durations
  std::map<std::tuple<size_t, size_t, op>, std::vector<double>> times;
  std::vector<std::vector<double>> reduce(P), optim(P);
  std::vector<double> delays;
  for (const auto& t : steps) {
    std::map<std::tuple<bool, int, int>, double> sent;  // message key -> send time
    for (const auto& lane : t.stages)
      for (const auto& e : lane)
        if (sched::is_send(e.what.kind)) {
          const auto key = sched::key_of(s, e.what);
          sent[{key.is_grad, key.microbatch, key.boundary}] = e.start_seconds;
        }
    for (size_t d = 0; d < t.stages.size() && d < P; ++d)
      for (const auto& e : t.stages[d]) {
        const double dt = e.end_seconds - e.start_seconds;
        if (sched::is_compute(e.what.kind))
          times[{d, static_cast<size_t>(e.what.chunk), e.what.kind}].push_back(dt);
        else if (e.what.kind == op::reduce_grads)
          reduce[d].push_back(dt);
        else if (e.what.kind == op::optimizer_step)
          optim[d].push_back(dt);
        else if (sched::is_recv(e.what.kind) && dt > 0) {
          const auto key = sched::key_of(s, e.what);
          auto it = sent.find({key.is_grad, key.microbatch, key.boundary});
          if (it != sent.end()) delays.push_back(std::max(0.0, e.end_seconds - it->second));
        }
      }
  }
  sched::cost_model costs;
  costs.per_chunk.assign(P, std::vector<sched::chunk_cost>(V));
  for (size_t d = 0; d < P; ++d)
    for (size_t c = 0; c < V; ++c) {
      auto& cc = costs.per_chunk[d][c];
      cc.forward = median(times[{d, c, op::forward}]);
      cc.backward = median(times[{d, c, op::backward}]);
      cc.backward_input = median(times[{d, c, op::backward_input}]);
      cc.backward_weight = median(times[{d, c, op::backward_weight}]);
    }
  costs.send_seconds = median(delays);
  for (size_t d = 0; d < P; ++d) {
    costs.reduce_grads_seconds = std::max(costs.reduce_grads_seconds, median(reduce[d]));
    costs.optimizer_step_seconds = std::max(costs.optimizer_step_seconds, median(optim[d]));
  }
  return costs;
}

size_t median_step(const std::vector<sched::timeline>& steps) {
  std::vector<std::pair<double, size_t>> v;
  for (size_t i = 0; i < steps.size(); ++i) v.push_back({sched::end_seconds(steps[i]), i});
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[(v.size() - 1) / 2].second;
}

std::string compare_bubbles(const bubble_stats& m, const sched::simulation& s) {
  std::string out;
  char line[160];
  std::snprintf(line, sizeof line, "%-22s %12s %12s\n", "", "measured", "simulated");
  out += line;
  std::snprintf(line, sizeof line, "%-22s %10.3f ms %10.3f ms\n", "step time", m.step_seconds * 1e3,
                s.makespan_seconds * 1e3);
  out += line;
  std::snprintf(line, sizeof line, "%-22s %11.1f%% %11.1f%%\n", "bubble", m.bubble_fraction * 100,
                s.bubble_fraction * 100);
  out += line;
  for (size_t d = 0; d < m.idle_seconds.size() && d < s.idle_seconds.size(); ++d) {
    std::snprintf(line, sizeof line, "%-22s %10.3f ms %10.3f ms\n", ("idle, stage " + std::to_string(d)).c_str(),
                  m.idle_seconds[d] * 1e3, s.idle_seconds[d] * 1e3);
    out += line;
  }
  return out;
}

}  // namespace troupe
