// coordinator: the job's clock, for every job shape. It orders the steps up to each evaluation to
// every stage of the mesh (step_clock.cpp), sums each step's loss over the ranks (in rank order,
// so it is the same on every run), commits checkpoints (checkpoint_commit.cpp), gathers the first
// replica's parameters for the evaluator at the end of each epoch (evaluation_gather.cpp), writes
// metrics, and ends the job - normally after the last step, or at once with the reason when a
// monitored actor dies or the watchdog (watchdog.cpp) finds the job stuck.
#include <spdlog/spdlog.h>

#include <utility>

#include "actors/actor_failure.hpp"
#include "actors/coordinator/coordinator_state.hpp"
#include "actors/observe/metrics_log.hpp"

namespace troupe {

namespace coordinator_detail {

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

}  // namespace coordinator_detail

namespace {

using namespace coordinator_detail;

void start(self_ptr self, std::vector<caf::actor> stages, caf::actor evaluator, std::vector<caf::actor> members) {
  auto& s = self->state;
  s.stages = std::move(stages);
  s.evaluator = std::move(evaluator);
  s.members = std::move(members);
  for (auto& m : s.members) self->monitor(m);
  // An elastic job loses a replica by its stages: those in other processes too.
  if (s.args.elastic.on)
    for (auto& st : s.stages) self->monitor(st);
  auto& sum = *s.args.summary;
  if (sum.losses.empty()) sum.first_step = s.args.first_step;  // else a regroup's
  if (sum.regroup_began > 0) {  // the membership change's time counts as training time: it was lost to it
    sum.train_seconds += std::chrono::duration<double>(clock_type::now().time_since_epoch()).count() - sum.regroup_began;
    sum.regroup_began = 0;
  }
  s.args.summary->steps = s.args.first_step;
  if (s.args.elastic.on) s.stop_at = next_change(s.args.elastic.events, s.args.first_step);
  s.committed = s.args.first_step;
  order_steps(self, s.args.first_step);
  if (std::exchange(s.admit_pending, false)) admit_replica(self);
  if (s.args.watchdog_seconds > 0)
    self->delayed_send(self, watchdog_period(s.args.watchdog_seconds), watchdog_atom::value);
}

caf::behavior coordinator(self_ptr self, coordinator_args args) {
  self->state.args = std::move(args);
  if (self->state.args.dispensed) self->state.rounds = std::make_unique<push_rounds>(self->state.args.mesh);
  self->set_down_handler([self](caf::down_msg& dm) {
    auto& s = self->state;
    if (lose_replica(self, dm)) return;  // an elastic job goes on without it
    if (s.finishing) return;
    const std::string why = "an actor of the job stopped: " + describe_exit(self->system(), dm.reason);
    if (dm.reason == caf::sec::request_receiver_down) {
      // A symptom: the member asked an actor that was already gone (a killed parameter server,
      // say), and the gone actor's own down message, which names the cause, may come just after
      // it. It is reported only if no cause arrives within the grace.
      if (s.symptom.empty()) self->delayed_send(self, std::chrono::milliseconds(500), settle_atom::value);
      if (s.symptom.empty()) s.symptom = why;
      return;
    }
    fail(self, why, false);
    finish(self);
  });
  // Its own error (a metrics line that cannot be written) ends the job like a member's death:
  // the members are told to stop, or they would wait for orders that never come.
  self->set_exception_handler([self](caf::scheduled_actor*, std::exception_ptr& e) -> caf::error {
    const std::string why = describe_failure(e, "coordinator", -1);
    fail(self, why, true);
    stop_members(self);
    return failure_error(why);
  });
  return {
      [self](start_atom, std::vector<caf::actor> stages, caf::actor evaluator, std::vector<caf::actor> members) {
        start(self, std::move(stages), std::move(evaluator), std::move(members));
      },
      [self](stage_step_record& r) {
        if (self->state.args.dispensed) replica_reported(self, r);
        else stage_reported(self, r);
      },
      [self](const pipeline_failure& f) {
        if (self->state.finishing) return;
        fail(self, f.what, false);
        finish(self);
      },
      [self](const step_failed& f) { step_failed_on(self, f); },
      [self](admit_atom) { admit_replica(self); },
      [self](watch_atom, const std::vector<caf::actor>& group) {  // once per process of the job
        auto& c = self->state.collectives;
        c.insert(c.end(), group.begin(), group.end());
      },
      [self](const update_ready& r) { ready_to_update(self, r); },
      [self](watchdog_atom) { watch(self); },
      [self](settle_atom) {  // no cause came after a symptom: the symptom is all there is to report
        if (self->state.finishing || self->state.regrouping) return;
        fail(self, self->state.symptom, false);
        finish(self);
      },
      [self](const eval_report& r) {
        auto& s = self->state;
        auto& sum = *s.args.summary;
        const double acc = r.count ? static_cast<double>(r.correct) / static_cast<double>(r.count) : 0.0;
        const double loss = r.count ? r.loss_sum / static_cast<double>(r.count) : 0.0;
        s.last_progress = clock_type::now();
        sum.test_accuracy.push_back(acc);
        sum.test_loss.push_back(loss);
        sum.test_steps.push_back(sum.steps);
        s.args.log->eval(r.epoch, sum.steps, loss, acc);
        if (s.args.prom) s.args.prom->evaluated(loss, acc);
        if (sum.steps < s.args.total_steps) order_steps(self, sum.steps);
        else finish_when_saved(self);
      },
  };
}

}  // namespace

caf::actor spawn_coordinator(caf::actor_system& sys, coordinator_args args) {
  return sys.spawn(coordinator, std::move(args));
}

}  // namespace troupe
