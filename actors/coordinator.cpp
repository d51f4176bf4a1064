// coordinator: the job's clock. It orders the steps up to each evaluation (synchronous training: one stage,
// or every data-parallel rank, whose reports it sums), evaluates on the first stage at the end of
// each epoch, writes metrics, and ends the job - normally after the last step, or at once with
// the reason when a monitored actor dies.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <map>

#include "actors/actor_failure.hpp"
#include "actors/actors.hpp"
#include "actors/collective.hpp"
#include "actors/metrics_log.hpp"

namespace troupe {

namespace {

using clock_type = std::chrono::steady_clock;

struct coordinator_state {
  coordinator_args args;
  caf::actor stage;                  // the first stage: evaluation and final parameters
  std::vector<caf::actor> stages;    // every stage ordered to run a step
  std::vector<caf::actor> members;
  std::map<int64_t, std::vector<dp_step_report>> rank_reports;  // data parallel, by step
  clock_type::time_point step_start;
  std::deque<clock_type::time_point> recent;  // when the last few steps ended (rate window)
  clock_type::time_point last_progress = clock_type::now();
  std::vector<caf::actor> collectives;  // dumped into a watchdog report
  bool finishing = false;
  static inline const char* name = "coordinator";
};

using self_ptr = caf::stateful_actor<coordinator_state>*;

void stop_members(self_ptr self) {
  auto& s = self->state;
  s.finishing = true;
  for (auto& m : s.members) self->send_exit(m, caf::exit_reason::user_shutdown);
}

void finish(self_ptr self) {
  stop_members(self);
  self->quit();
}

// The first reason the job stopped is the one reported; later ones are consequences.
void fail(self_ptr self, const std::string& why, bool own) {
  auto& f = *self->state.args.failure;
  if (!f.what.empty()) return;
  f.what = why;
  f.own = own;
  spdlog::error("{}", why);
}

// Orders every step up to the next evaluation at once; reports come back one per step.
void order_steps(self_ptr self, int64_t step) {
  auto& s = self->state;
  s.last_progress = clock_type::now();
  s.step_start = clock_type::now();
  s.recent.assign(1, s.step_start);
  const int64_t epoch_end = (step / s.args.steps_per_epoch + 1) * s.args.steps_per_epoch;
  const int64_t until = std::min(epoch_end, s.args.total_steps);
  for (auto& st : s.stages) self->send(st, step_order{step, until});
}

void step_done(self_ptr self, const step_report& r) {
  auto& s = self->state;
  // The stages run on without waiting for us, so a step lasts from the previous report to this one.
  const auto now = clock_type::now();
  s.last_progress = now;
  const double seconds = std::chrono::duration<double>(now - s.step_start).count();
  s.step_start = now;
  const double loss = r.count ? r.loss_sum / static_cast<double>(r.count) : 0.0;
  // Reports of data-parallel ranks can arrive in bursts (a late rank, then the next step at
  // once), so the logged rate is taken over a window of recent steps, not the last gap alone.
  constexpr size_t window = 10;
  s.recent.push_back(now);
  if (s.recent.size() > window + 1) s.recent.pop_front();
  const double span = std::chrono::duration<double>(s.recent.back() - s.recent.front()).count();
  const double rate = static_cast<double>(s.args.samples_per_step * static_cast<int64_t>(s.recent.size() - 1)) /
                      std::max(span, 1e-9);
  const int64_t epoch = r.step / s.args.steps_per_epoch;
  s.args.log->step(r.step, epoch, loss, rate);  // first: a step whose line failed is not counted done
  auto& sum = *s.args.summary;
  sum.losses.push_back(loss);
  sum.train_seconds += seconds;
  sum.compute_seconds += r.compute_seconds;
  sum.samples += s.args.samples_per_step;
  sum.steps = r.step + 1;
  const bool last = r.step + 1 == s.args.total_steps;
  if (last || (r.step + 1) % s.args.steps_per_epoch == 0) self->send(s.stage, eval_order{epoch});
}

using watchdog_atom = caf::atom_constant<caf::atom("watchdog")>;

std::chrono::milliseconds watchdog_period(double seconds) {
  return std::chrono::milliseconds(std::max<int64_t>(10, static_cast<int64_t>(seconds * 250)));
}

// No step finished for watchdog_seconds: stop the job with a report that names the last step
// and what each collective member is doing (its recent operations, the running one's progress),
// instead of hanging.
void report_stall(self_ptr self) {
  auto& s = self->state;
  const double idle = std::chrono::duration<double>(clock_type::now() - s.last_progress).count();
  const std::string head = fmt::format("watchdog: no step finished for {:.1f} s (steps done: {} of {})", idle,
                                       s.args.summary->steps, s.args.total_steps);
  // A stall is a cause in itself: a lost or hung rank is named by the peer timeout, which a
  // sensible watchdog exceeds.
  if (s.collectives.empty()) {
    fail(self, head, true);
    finish(self);
    return;
  }
  auto logs = std::make_shared<std::vector<std::string>>(s.collectives.size());
  auto left = std::make_shared<size_t>(s.collectives.size());
  auto done = [self, head, logs, left] {
    if (--*left > 0) return;
    std::string text = head + "\ncollectives:";
    for (const auto& l : *logs) text += "\n" + l;
    fail(self, text, true);
    finish(self);
  };
  for (size_t i = 0; i < s.collectives.size(); ++i)
    self->request(s.collectives[i], std::chrono::seconds(2), collective_dump_request{})
        .then([logs, i, done](collective_log& l) { (*logs)[i] = to_string(l), done(); },
              [self, logs, i, done](caf::error& e) {
                (*logs)[i] = "rank " + std::to_string(i) + ": no answer (" + self->system().render(e) + ")";
                done();
              });
}

void watch(self_ptr self) {
  auto& s = self->state;
  if (s.finishing) return;
  const double idle = std::chrono::duration<double>(clock_type::now() - s.last_progress).count();
  if (idle > s.args.watchdog_seconds) return report_stall(self);
  self->delayed_send(self, watchdog_period(s.args.watchdog_seconds), watchdog_atom::value);
}

void start(self_ptr self, std::vector<caf::actor> stages, std::vector<caf::actor> members) {
  auto& s = self->state;
  s.stage = stages.at(0);
  s.stages = std::move(stages);
  s.members = std::move(members);
  s.args.summary->rank_step_seconds.assign(s.stages.size(), {});
  for (auto& m : s.members) self->monitor(m);
  order_steps(self, 0);
  if (s.args.watchdog_seconds > 0)
    self->delayed_send(self, watchdog_period(s.args.watchdog_seconds), watchdog_atom::value);
}

caf::behavior coordinator(self_ptr self, coordinator_args args) {
  self->state.args = std::move(args);
  self->set_down_handler([self](caf::down_msg& dm) {
    auto& s = self->state;
    if (s.finishing) return;
    fail(self, "an actor of the job stopped: " + describe_exit(self->system(), dm.reason), false);
    finish(self);
  });
  // Its own error (a metrics line that cannot be written) ends the job like a member's death:
  // the members are told to stop, or they (and, in data parallelism, the watchdog that lived
  // here) would wait for orders that never come.
  self->set_exception_handler([self](caf::scheduled_actor*, std::exception_ptr& e) -> caf::error {
    const std::string why = describe_failure(e, "coordinator", -1);
    fail(self, why, true);
    stop_members(self);
    return failure_error(why);
  });
  return {
      [self](start_atom, caf::actor stage, std::vector<caf::actor> members) {
        start(self, {stage}, std::move(members));
      },
      [self](start_atom, std::vector<caf::actor> stages, std::vector<caf::actor> members) {
        start(self, std::move(stages), std::move(members));
      },
      [self](const step_report& r) { step_done(self, r); },
      [self](watch_atom, std::vector<caf::actor> group) { self->state.collectives = std::move(group); },
      [self](watchdog_atom) { watch(self); },
      [self](const dp_step_report& r) {
        auto& s = self->state;
        s.args.summary->rank_step_seconds.at(static_cast<size_t>(r.rank)).push_back(r.step_seconds);
        auto& got = s.rank_reports[r.step];
        got.push_back(r);
        if (got.size() < s.stages.size()) return;
        step_report sum{r.step, 0.0, 0, 0, 0.0};
        // Rank order, so the loss sum is the same on every run.
        std::sort(got.begin(), got.end(), [](const auto& a, const auto& b) { return a.rank < b.rank; });
        for (const auto& x : got) {
          sum.loss_sum += x.loss_sum;
          sum.count += x.count;
          sum.correct += x.correct;
          sum.compute_seconds = std::max(sum.compute_seconds, x.compute_seconds);
        }
        s.rank_reports.erase(r.step);
        step_done(self, sum);
      },
      [self](dp_trace_msg& m) {
        auto& trace = self->state.args.trace;
        if (trace) trace->insert(trace->end(), m.events.begin(), m.events.end());
      },
      [self](const eval_report& r) {
        auto& s = self->state;
        auto& sum = *s.args.summary;
        const double acc = r.count ? static_cast<double>(r.correct) / static_cast<double>(r.count) : 0.0;
        const double loss = r.count ? r.loss_sum / static_cast<double>(r.count) : 0.0;
        s.last_progress = clock_type::now();
        sum.test_accuracy.push_back(acc);
        sum.test_loss.push_back(loss);
        s.args.log->eval(r.epoch, sum.steps, loss, acc);
        if (sum.steps < s.args.total_steps) {
          order_steps(self, sum.steps);
          return;
        }
        self->request(s.stage, caf::infinite, params_request{0}).then([self](params_msg& m) {
          self->state.args.summary->final_params = std::move(m.params);
          finish(self);
        });
      },
  };
}

}  // namespace

caf::actor spawn_coordinator(caf::actor_system& sys, coordinator_args args) {
  return sys.spawn(coordinator, std::move(args));
}

}  // namespace troupe
