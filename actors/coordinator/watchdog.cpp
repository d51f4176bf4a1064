// watchdog: a step that makes no progress for watchdog_seconds stops the job with a report that
// names, per rank, the action it is blocked on and what it waits for, and what each collective
// member is doing, instead of a hang.
#include <fmt/format.h>

#include <algorithm>
#include <memory>

#include "actors/collective/collective.hpp"
#include "actors/coordinator/coordinator_state.hpp"
#include "schedules/render.hpp"

namespace troupe::coordinator_detail {

std::chrono::milliseconds watchdog_period(double seconds) {
  return std::chrono::milliseconds(std::max<int64_t>(10, static_cast<int64_t>(seconds * 250)));
}

namespace {

std::string describe_rank(const sched::mesh& m, int rank) {
  const sched::mesh_coords c = m.coords_of(rank);
  if (m.tp == 1) return fmt::format("rank {} (dp {}, pp {})", rank, c.dp, c.pp);
  return fmt::format("rank {} (dp {}, pp {}, tp {})", rank, c.dp, c.pp, c.tp);
}

// No progress for watchdog_seconds: stop the job with a report that names, per rank, the action
// it is blocked on and what that action waits for, and what each collective member is doing.
void report_stall(self_ptr self, const std::vector<pipeline_status>& st) {
  auto& s = self->state;
  const auto& plan = s.args.plan;
  const double idle = std::chrono::duration<double>(clock_type::now() - s.last_progress).count();
  std::string text = fmt::format(
      "watchdog: no progress for {:.1f} s in step {} (steps done: {} of {}); mesh {}, schedule {} (P={}, M={})\n",
      idle, s.args.summary->steps, s.args.summary->steps, s.args.total_steps, sched::to_string(s.args.mesh), plan.name,
      plan.num_stages, plan.num_microbatches);
  for (const auto& x : st) {
    text += describe_rank(s.args.mesh, x.rank) + ": ";
    if (x.completed < 0 || x.action.empty()) text += (x.waiting_for.empty() ? "no answer" : x.waiting_for) + "\n";
    else if (x.waited_seconds > 0)
      text += fmt::format("action {} of {} ({}): waits for {} ({:.1f} s since its last action)\n", x.cursor, x.actions,
                          x.action, x.waiting_for, x.waited_seconds);
    else text += fmt::format("action {} of {} ({}): waits for {}\n", x.cursor, x.actions, x.action, x.waiting_for);
    for (const auto& l : x.pipeline_log) text += "  pipeline: " + l + "\n";  // its link's ledger, oldest first
  }
  for (const auto& x : st)
    if (x.completed >= 0 && !x.action.empty())
      text += describe_rank(s.args.mesh, x.rank) + " is blocked here:\n" +
              sched::render_text(plan, s.args.mesh.coords_of(x.rank).pp, x.cursor);
  // A stall is a cause in itself: a lost or hung process is named by the peer timeout, which a
  // sensible watchdog exceeds.
  if (s.collectives.empty()) {
    fail(self, text, true);
    finish(self);
    return;
  }
  auto logs = std::make_shared<std::vector<std::string>>(s.collectives.size());
  auto left = std::make_shared<size_t>(s.collectives.size());
  auto done = [self, text, logs, left] {
    if (--*left > 0) return;
    std::string all = text + "collectives:";
    for (const auto& l : *logs) all += "\n" + (!l.empty() && l.back() == '\n' ? l.substr(0, l.size() - 1) : l);
    fail(self, all, true);
    finish(self);
  };
  for (size_t i = 0; i < s.collectives.size(); ++i)
    self->request(s.collectives[i], std::chrono::seconds(2), collective_dump_request{})
        .then([logs, i, done](collective_log& l) { (*logs)[i] = to_string(l), done(); },
              [self, logs, i, done](caf::error& e) {
                (*logs)[i] = "member " + std::to_string(i) + ": no answer (" + self->system().render(e) + ")";
                done();
              });
}

// Asks every stage where it stands. A stage busy in a long action on a synchronous device cannot
// answer (its thread is computing; one on an asynchronous device names the completion it awaits):
// it counts as not moving.
void poll(self_ptr self) {
  auto& s = self->state;
  s.polling = true;
  const size_t n = s.stages.size();
  auto st = std::make_shared<std::vector<pipeline_status>>(n);
  auto left = std::make_shared<size_t>(n);
  auto done = [self, st, left] {
    if (--*left > 0) return;
    auto& s = self->state;
    s.polling = false;
    if (s.finishing) return;
    int64_t completed = 0;
    for (const auto& x : *st) completed += std::max<int64_t>(0, x.completed);
    // The first poll of a step has nothing to compare with: the actions it counts may have
    // completed at any time since last_progress, so it starts the clock (a watchdog that said
    // "no progress for 0.3 s" of stages whose last action was 0.2 s ago, on a busy machine).
    if ((s.polled < 0 && completed > 0) || (s.polled >= 0 && completed != s.polled)) s.last_progress = clock_type::now();
    s.polled = completed;
    const double idle = std::chrono::duration<double>(clock_type::now() - s.last_progress).count();
    if (idle > s.args.watchdog_seconds) report_stall(self, *st);
  };
  for (size_t r = 0; r < n; ++r) {
    (*st)[r].rank = static_cast<int32_t>(r);
    (*st)[r].completed = -1;
    (*st)[r].waiting_for = "no answer within 1 s (busy in a long action, or gone)";
    self->request(s.stages[r], std::chrono::seconds(1), pipeline_status_request{})
        .then([st, r, done](pipeline_status& x) { (*st)[r] = std::move(x), done(); },
              [done](caf::error&) { done(); });
  }
}

}  // namespace

void watch(self_ptr self) {
  auto& s = self->state;
  if (s.finishing) return;
  // Stages idle on purpose while a checkpoint waits for the one before it (after_commit): the
  // writers are at work, and a writer's failure ends the job through the commit.
  if (s.after_commit) s.last_progress = clock_type::now();
  const double idle = std::chrono::duration<double>(clock_type::now() - s.last_progress).count();
  if (idle > s.args.watchdog_seconds / 2 && !s.polling) poll(self);
  self->delayed_send(self, watchdog_period(s.args.watchdog_seconds), watchdog_atom::value);
}

}  // namespace troupe::coordinator_detail
