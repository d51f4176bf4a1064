// simulate: a discrete-event run in virtual time. Each stage has a compute stream, idle from
// `free_at`; events (a compute action's end, a message's arrival, an all-gather's completion) wake
// the stage they concern, and at each event time the woken stages run what they may: the
// candidates of their dispatch policy (dispatch.hpp) whose inputs are there. Nothing else
// queues: a receive ends when its message arrives, a weight-reading compute starts no earlier
// than its parameters' all-gather is done. Each stage has one gather stream: a fetch's
// all-gather starts when it is issued (simulate_options::prefetch) and the previous gather of
// that stage is done. Under fixed dispatch an action therefore starts at the later of its
// predecessor's end and its input's arrival: the times the list-order sweep this replaced gave.
#include "schedules/simulate.hpp"

#include <algorithm>
#include <cmath>
#include <deque>
#include <functional>
#include <map>
#include <queue>
#include <random>
#include <stdexcept>
#include <string>
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

// The runtime's jitter draw (actors/config/train_config.cpp jitter_delay_ms), kept identical so the
// simulator is late where a run with the same seed is: schedules/ links nothing above it.
double jitter_draw(double max, uint64_t seed, int stage, int64_t step, std::size_t action_index) {
  std::seed_seq seq{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32), static_cast<uint32_t>(stage),
                    static_cast<uint32_t>(step), static_cast<uint32_t>(step >> 32),
                    static_cast<uint32_t>(action_index), 0x6a177e5u};
  std::mt19937_64 g(seq);
  return std::uniform_real_distribution<double>(0.0, max)(g);
}

void check_options(const schedule& s, const simulate_options& options) {
  if (options.prefetch < 0)
    throw std::invalid_argument("simulate: prefetch must be >= 0, got " + std::to_string(options.prefetch));
  if (options.ready_stash < 0)
    throw std::invalid_argument("simulate: ready_stash must be >= 0, got " + std::to_string(options.ready_stash));
  const std::vector<double>& j = options.jitter_max_seconds;
  if (!j.empty() && j.size() != static_cast<std::size_t>(s.num_stages))
    throw std::invalid_argument("simulate: jitter_max_seconds has " + std::to_string(j.size()) +
                                " entries for " + std::to_string(s.num_stages) + " stages (give none or one per stage)");
  for (double m : j)
    if (!std::isfinite(m) || m < 0)
      throw std::invalid_argument("simulate: jitter_max_seconds must be finite and >= 0, got " + std::to_string(m));
}

// One stage in the run.
struct stage_run {
  const std::vector<action>* row = nullptr;
  ready_row plan;
  row_progress progress;
  std::vector<double> extra;  // per action: its jitter (0 without)
  double free_at = 0;         // its compute stream is idle from then on
  double last_end = 0;        // the end of the last action it ran
  int live = 0;
  bool done() const { return progress.earliest >= row->size(); }
};

}  // namespace

simulation simulate(const schedule& s, const cost_model& costs, const simulate_options& options) {
  check_options(s, options);
  const validation check = validate(s);
  if (!check.ok()) throw std::invalid_argument("simulate: invalid schedule: " + check.error);

  const auto P = static_cast<std::size_t>(s.num_stages);
  simulation out;
  out.busy_seconds.assign(P, 0);
  out.peak_live_activations.assign(P, 0);
  out.peak_fetched = check.peak_fetched;
  out.exposed_fetch_seconds.assign(P, 0);
  out.out_of_order.assign(P, 0);
  out.events.name = s.name;
  out.events.stages.resize(P);

  std::vector<stage_run> st(P);
  for (std::size_t d = 0; d < P; ++d) {
    stage_run& r = st[d];
    r.row = &s.stages[d];
    r.progress.reset(r.row->size());
    if (options.dispatch == dispatch_policy::ready) r.plan = plan_ready_row(*r.row, options.ready_stash);
    r.extra.assign(r.row->size(), 0.0);
    const double max = options.jitter_max_seconds.empty() ? 0.0 : options.jitter_max_seconds[d];
    if (max > 0)
      for (std::size_t i = 0; i < r.row->size(); ++i)
        if (is_compute((*r.row)[i].kind))
          r.extra[i] = jitter_draw(max, options.jitter_seed, static_cast<int>(d), options.jitter_step, i);
  }

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

  // Events: (time, stage it may let go on), earliest first.
  using event = std::pair<double, std::size_t>;
  std::priority_queue<event, std::vector<event>, std::greater<>> events;
  double now = 0;
  std::vector<std::size_t> woken;  // stages to look at, now
  std::vector<bool> is_woken(P, false);
  auto wake = [&](double t, std::size_t d) {
    if (t > now) {
      events.push({t, d});
    } else if (!is_woken[d]) {
      is_woken[d] = true;
      woken.push_back(d);
    }
  };

  // When a weight-reading compute's parameters are there (0 when not fetched on this stage):
  // validate() proved a held fetch covers it when its chunk is fetched on this stage.
  auto gather_done = [&](std::size_t d, const action& a) -> double {
    if (!reads_weights(a.kind)) return 0;
    auto ready = gathered[d].find({a.chunk, -1});
    if (ready == gathered[d].end()) ready = gathered[d].find({a.chunk, a.microbatch});
    return ready == gathered[d].end() ? 0 : ready->second;
  };
  auto available = [&](std::size_t d, std::size_t i) {
    const action& a = (*st[d].row)[i];
    if (is_recv(a.kind)) {
      auto it = arrivals.find(key_of(s, a));
      return it != arrivals.end() && !it->second.empty() && it->second.front() <= now;
    }
    return gather_done(d, a) <= now;
  };

  // Runs action i of stage d at `now`.
  auto run = [&](std::size_t d, std::size_t i) {
    stage_run& r = st[d];
    const action& a = (*r.row)[i];
    double start = now, end = now;
    if (is_recv(a.kind)) {
      auto it = arrivals.find(key_of(s, a));
      start = r.last_end;  // the stage's wait for it, as the timeline shows a receive
      it->second.pop_front();
    } else if (is_send(a.kind)) {
      const double bytes = a.kind == op::send_act ? costs.activation_bytes : costs.grad_bytes;
      const std::pair<int, int> link{a.stage, a.peer};
      const double depart = std::max(now, link_free[link]);
      link_free[link] = depart + transfer_seconds(costs, bytes);
      arrivals[key_of(s, a)].push_back(link_free[link]);
      wake(link_free[link], static_cast<std::size_t>(a.peer));
      link_traffic& t = traffic[link];
      t.from_stage = a.stage;
      t.to_stage = a.peer;
      ++t.messages;
      t.bytes += bytes;
    } else {
      const double ready = gather_done(d, a);
      if (ready > r.last_end) out.exposed_fetch_seconds[d] += ready - r.last_end;
      if (is_compute(a.kind)) compute_starts[d].push_back(start);
      end = start + (duration(costs, a) + r.extra[i]);
      out.busy_seconds[d] += end - start;
      if (a.kind == op::fetch_params) {
        const std::vector<double>& starts = compute_starts[d];
        const double issue = prefetch == 0                ? end
                             : starts.size() >= prefetch ? starts[starts.size() - prefetch]
                                                         : 0.0;
        gather_free[d] = std::max(issue, gather_free[d]) + costs.param_gather_seconds;
        gathered[d][{a.chunk, a.microbatch}] = gather_free[d];
        wake(gather_free[d], d);
      } else if (a.kind == op::release_params) {
        gathered[d].erase({a.chunk, a.microbatch});
      }
      if (a.kind == op::forward) {
        out.peak_live_activations[d] = std::max(out.peak_live_activations[d], ++r.live);
      } else if (a.kind == op::backward || a.kind == op::backward_weight) {
        --r.live;
      }
      r.free_at = end;
      if (end > now) events.push({end, d});
    }
    if (i != r.progress.earliest) ++out.out_of_order[d];
    r.progress.mark(i);
    out.events.stages[d].push_back(timed_action{a, start, end});
    r.last_end = end;
  };

  // Stage d, idle now, runs its first candidate if that may run (level 0), or else the first that
  // may run among the others: communication only (level 1), or any (level 2). Zero-time actions
  // go first so that a stage settles for a lower-priority candidate only once nothing that
  // happens at this instant can make a higher one runnable.
  auto try_run = [&](std::size_t d, int level) {
    stage_run& r = st[d];
    if (r.done() || r.free_at > now) return false;
    if (options.dispatch == dispatch_policy::fixed || level == 0) {
      if (level > 0 || !available(d, r.progress.earliest)) return false;
      run(d, r.progress.earliest);
      return true;
    }
    const candidates next = next_candidates(r.plan, *r.row, r.progress, options.dispatch, r.live);
    for (std::size_t k = 1; k < next.size(); ++k) {
      if (level == 1 && !is_communication((*r.row)[next[k]].kind)) continue;
      if (!available(d, next[k])) continue;
      run(d, next[k]);
      return true;
    }
    return false;
  };

  for (std::size_t d = 0; d < P; ++d) wake(0, d);
  for (;;) {
    // Settle this instant: every woken stage runs what it may, first candidates before others.
    std::vector<std::size_t> looked;  // the woken stages, for the lower levels
    for (;;) {
      while (!woken.empty()) {
        const std::size_t d = woken.back();
        woken.pop_back();
        is_woken[d] = false;
        while (try_run(d, 0)) {
        }
        looked.push_back(d);
      }
      if (options.dispatch == dispatch_policy::fixed) break;
      std::sort(looked.begin(), looked.end());
      looked.erase(std::unique(looked.begin(), looked.end()), looked.end());
      bool moved = false;
      for (int level = 1; level <= 2 && !moved; ++level)
        for (std::size_t d : looked)
          if (try_run(d, level)) {
            wake(now, d);
            moved = true;
            break;
          }
      if (!moved) break;
    }
    // The next instant anything can change.
    while (!events.empty() && events.top().first <= now) events.pop();
    if (events.empty()) break;
    now = events.top().first;
    while (!events.empty() && events.top().first <= now) {
      wake(now, events.top().second);
      events.pop();
    }
  }
  for (std::size_t d = 0; d < P; ++d)
    if (!st[d].done())  // validate() and dispatch.hpp's argument say this cannot happen
      throw std::logic_error("simulate: stage " + std::to_string(d) + " stuck at action " +
                             std::to_string(st[d].progress.earliest) + " (" +
                             to_string((*st[d].row)[st[d].progress.earliest]) + ")");

  double makespan = 0;
  for (const stage_run& r : st) makespan = std::max(makespan, r.last_end);
  out.makespan_seconds = makespan;
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

step_statistics simulate_steps(const schedule& s, const cost_model& costs, const simulate_options& options,
                               int steps) {
  if (steps < 1) throw std::invalid_argument("simulate_steps: steps must be >= 1, got " + std::to_string(steps));
  step_statistics out;
  out.steps = steps;
  out.peak_live_activations.assign(static_cast<std::size_t>(s.num_stages), 0);
  simulate_options o = options;
  for (int k = 0; k < steps; ++k) {
    o.jitter_step = options.jitter_step + k;
    const simulation r = simulate(s, costs, o);
    out.mean_makespan_seconds += r.makespan_seconds / steps;
    out.max_makespan_seconds = std::max(out.max_makespan_seconds, r.makespan_seconds);
    out.mean_bubble_fraction += r.bubble_fraction / steps;
    for (std::size_t d = 0; d < r.peak_live_activations.size(); ++d)
      out.peak_live_activations[d] = std::max(out.peak_live_activations[d], r.peak_live_activations[d]);
    for (int n : r.out_of_order) out.out_of_order += n;
  }
  return out;
}

}  // namespace troupe::sched
