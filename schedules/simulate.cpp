// simulate: steps every stage through its list like validate's dry run, but with a clock per
// stage and an arrival time per message. A stage's next action starts when its previous one
// ended (for a receive, no earlier than the message arrives; for a weight-reading compute, no
// earlier than its parameters' all-gather is done): no other queueing exists. Each stage has
// one gather stream: a fetch's all-gather starts when it is issued (simulate_options::prefetch)
// and the previous gather of that stage is done.
#include "schedules/simulate.hpp"

#include <algorithm>
#include <deque>
#include <map>
#include <stdexcept>
#include <utility>

#include "schedules/validate.hpp"

namespace troupe::sched {

const chunk_cost& cost_model::cost_of(int stage, int chunk) const {
  const auto d = static_cast<std::size_t>(stage);
  const auto c = static_cast<std::size_t>(chunk);
  if (d < per_chunk.size() && c < per_chunk[d].size()) return per_chunk[d][c];
  return uniform;
}

cost_model uniform_costs(double forward, double backward, double backward_input,
                         double backward_weight) {
  cost_model costs;
  costs.uniform = chunk_cost{forward, backward, backward_input, backward_weight};
  return costs;
}

namespace {

// Device time of a non-communication action.
double duration(const cost_model& costs, const action& a) {
  const chunk_cost& c = costs.cost_of(a.stage, a.chunk);
  switch (a.kind) {
    case op::forward: return c.forward;
    case op::backward: return c.backward;
    case op::backward_input: return c.backward_input;
    case op::backward_weight: return c.backward_weight;
    case op::reduce_grads: return costs.reduce_grads_seconds;
    case op::fetch_params: return costs.fetch_params_seconds;
    case op::release_params: return costs.release_params_seconds;
    case op::optimizer_step: return costs.optimizer_step_seconds;
    case op::send_act:
    case op::recv_act:
    case op::send_grad:
    case op::recv_grad:
      return 0;  // transfers run on the link, not on the device
  }
  return 0;
}

double transfer_seconds(const cost_model& costs, double bytes) {
  double t = costs.send_seconds;
  if (costs.link_bytes_per_second > 0) t += bytes / costs.link_bytes_per_second;
  return t;
}

}  // namespace

simulation simulate(const schedule& s, const cost_model& costs, const simulate_options& options) {
  if (options.prefetch < 0)
    throw std::invalid_argument("simulate: prefetch must be >= 0, got " + std::to_string(options.prefetch));
  const validation check = validate(s);
  if (!check.ok()) throw std::invalid_argument("simulate: invalid schedule: " + check.error);

  const auto P = static_cast<std::size_t>(s.num_stages);
  simulation out;
  out.busy_seconds.assign(P, 0);
  out.peak_live_activations = check.peak_live_activations;
  out.peak_fetched = check.peak_fetched;
  out.exposed_fetch_seconds.assign(P, 0);
  out.events.name = s.name;
  out.events.stages.resize(P);

  std::vector<double> clock(P, 0);
  std::vector<std::size_t> cursor(P, 0);
  std::map<message_key, std::deque<double>> arrivals;  // per tensor, FIFO of arrival times
  std::map<std::pair<int, int>, double> link_free;     // when each directed link is idle again
  std::map<std::pair<int, int>, link_traffic> traffic;
  // ZeRO-3, per stage: when each compute action started (prefetch issues relative to them),
  // when the gather stream is idle again, and for each held fetch (chunk, microbatch or -1)
  // when its gather is done.
  std::vector<std::vector<double>> compute_starts(P);
  std::vector<double> gather_free(P, 0);
  std::vector<std::map<std::pair<int, int>, double>> gathered(P);
  const auto prefetch = static_cast<std::size_t>(options.prefetch);

  // validate() proved the run finishes, so each sweep makes progress until all are done.
  bool progress = true;
  while (progress) {
    progress = false;
    for (std::size_t d = 0; d < P; ++d) {
      while (cursor[d] < s.stages[d].size()) {
        const action& a = s.stages[d][cursor[d]];
        double start = clock[d], end = clock[d];
        if (is_recv(a.kind)) {
          auto it = arrivals.find(key_of(s, a));
          if (it == arrivals.end() || it->second.empty()) break;  // its send has not run yet
          end = std::max(clock[d], it->second.front());
          it->second.pop_front();
        } else if (is_send(a.kind)) {
          const double bytes = a.kind == op::send_act ? costs.activation_bytes : costs.grad_bytes;
          const std::pair<int, int> link{a.stage, a.peer};
          const double depart = std::max(clock[d], link_free[link]);
          link_free[link] = depart + transfer_seconds(costs, bytes);
          arrivals[key_of(s, a)].push_back(link_free[link]);
          link_traffic& t = traffic[link];
          t.from_stage = a.stage;
          t.to_stage = a.peer;
          ++t.messages;
          t.bytes += bytes;
        } else {
          if (reads_weights(a.kind)) {
            // validate() proved a held fetch covers it when its chunk is fetched on this stage.
            auto ready = gathered[d].find({a.chunk, -1});
            if (ready == gathered[d].end()) ready = gathered[d].find({a.chunk, a.microbatch});
            if (ready != gathered[d].end() && ready->second > start) {
              out.exposed_fetch_seconds[d] += ready->second - start;
              start = ready->second;
            }
          }
          if (is_compute(a.kind)) compute_starts[d].push_back(start);
          end = start + duration(costs, a);
          out.busy_seconds[d] += end - start;
          if (a.kind == op::fetch_params) {
            const std::vector<double>& starts = compute_starts[d];
            const double issue = prefetch == 0                ? end
                                 : starts.size() >= prefetch ? starts[starts.size() - prefetch]
                                                             : 0.0;
            gather_free[d] = std::max(issue, gather_free[d]) + costs.param_gather_seconds;
            gathered[d][{a.chunk, a.microbatch}] = gather_free[d];
          } else if (a.kind == op::release_params) {
            gathered[d].erase({a.chunk, a.microbatch});
          }
        }
        out.events.stages[d].push_back(timed_action{a, start, end});
        clock[d] = end;
        ++cursor[d];
        progress = true;
      }
    }
  }

  out.makespan_seconds = clock.empty() ? 0 : *std::max_element(clock.begin(), clock.end());
  double idle_total = 0;
  for (std::size_t d = 0; d < P; ++d) {
    out.idle_seconds.push_back(out.makespan_seconds - out.busy_seconds[d]);
    idle_total += out.idle_seconds.back();
  }
  if (out.makespan_seconds > 0)
    out.bubble_fraction = idle_total / (static_cast<double>(P) * out.makespan_seconds);
  for (const auto& entry : traffic) out.links.push_back(entry.second);
  return out;
}

}  // namespace troupe::sched
