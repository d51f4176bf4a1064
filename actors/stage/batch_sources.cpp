// batch_sources: which batch each of a stage's steps computes, and when its steps begin. A fixed
// share: the replica's part of the step's global batch, the steps in runs the coordinator orders.
// Dispensed (parameter servers under ssp and asp): each step's batch is the unit the job's
// dispenser grants, asked for when the previous step's gradients are ready (so a fast replica
// takes more), and a run of steps lasts until it grants none; the steps are the replica's own.
#include <algorithm>
#include <limits>
#include <utility>

#include "actors/stage/dispensed_steps.hpp"
#include "actors/stage/stage_state.hpp"

namespace troupe::stage_detail {

namespace {

// The replica's share of a step's batch, cut into the schedule's M microbatches (the first
// rows % M one row longer, so any share of at least M rows works).
std::vector<std::shared_ptr<const batch>> microbatches(const stage_state& s, batch b) {
  const int64_t M = s.args.plan.num_microbatches;
  const int64_t rows = b.samples();
  if (rows < M) refuse(s, "the batch share has " + std::to_string(rows) + " samples, fewer than the " +
                              std::to_string(M) + " microbatches");
  std::vector<std::shared_ptr<const batch>> out;
  if (M == 1) {  // the whole share is the one microbatch: no copy
    out.push_back(std::make_shared<const batch>(std::move(b)));
    return out;
  }
  int64_t at = 0;
  for (int64_t m = 0; m < M; ++m) {
    const int64_t n = rows / M + (m < rows % M ? 1 : 0);
    out.push_back(std::make_shared<const batch>(slice(b, at, at + n)));
    at += n;
  }
  return out;
}

class fixed : public batch_source {
 public:
  void request(self_ptr self, int64_t up_to) override {
    auto& s = self->state;
    if (!needs_batch(s)) return;
    for (; s.next_request < std::min(up_to, s.args.run.total_steps); ++s.next_request)
      self->send(s.args.partners.loader, batch_request{s.next_request});
  }
  void ordered(self_ptr self, const step_order& o) override {
    auto& s = self->state;
    s.until = o.until;
    if (s.step < 0) begin_step(self, o.step);
    advance_after_message(self);
  }
  bool begins_next(self_ptr self, int64_t next) override { return next < self->state.until; }
};

// An elastic job: a step's update waits for the coordinator's commit, which comes once every
// rank has its gradients of the step; a rank lost before that leaves every shard unchanged.
class commit_gated : public fixed {
 public:
  bool ready_to_update(self_ptr self, bool) override {
    auto& s = self->state;
    if (committed_ == s.step) return true;
    if (asked_ != s.step)
      self->send(s.args.partners.coordinator, update_ready{s.step, s.args.rank, s.record.loss_sum, s.record.count, s.record.correct});
    asked_ = s.step;
    s.waiting_for = "the coordinator's commit of step " + std::to_string(s.step) +
                    " (an elastic job updates once every rank has its gradients)";
    return false;
  }
  void committed(self_ptr self, const update_commit& c) override {
    committed_ = c.step;
    advance_after_message(self);
  }
  // The step never commits (a rank could not reduce): the shard keeps the steps before it, which
  // the coordinator's image takes; it is told, in case no replica was lost.
  void reduction_failed(self_ptr self, const std::string& why) override {
    auto& s = self->state;
    s.waiting_for = "the coordinator, after step " + std::to_string(s.step) + "'s collective failed (" + why + ")";
    self->send(s.args.partners.coordinator, step_failed{s.step, s.args.rank, "rank " + std::to_string(s.args.rank) + ": step " +
                                                                        std::to_string(s.step) + "'s collective failed: " + why});
  }

 private:
  int64_t asked_ = -1, committed_ = -1;
};

class dispensed : public batch_source {
 public:
  void request(self_ptr, int64_t) override {}  // each is asked for as it is granted
  void ordered(self_ptr self, const step_order& o) override {
    units_.begin_run(o.step, o.until);
    self->state.until = std::numeric_limits<int64_t>::max();
    ask(self, next_step_);
  }
  void granted(self_ptr self, const unit_grant& g) override {
    auto& s = self->state;
    if (!units_.grant(g.run, g.step, g.unit)) return;
    if (g.unit >= 0 && needs_batch(s)) self->send(s.args.partners.loader, batch_request{g.step, g.unit});
    if (s.step < 0 && g.step == next_step_) {
      if (g.unit < 0) {
        s.waiting_for = "the next run of steps (this run's batches are all taken)";
        return;
      }
      begin_step(self, g.step);
    }
    advance_after_message(self);
  }
  // The server needs the next batch's round to know how long to hold its answer.
  bool ready_to_update(self_ptr self, bool has_params) override {
    if (!has_params) return true;
    auto& s = self->state;
    ask(self, s.step + 1);
    if (units_.answered(s.step + 1)) return true;
    s.waiting_for = "the batch dispenser's answer: which batch step " + std::to_string(s.step + 1) + " computes";
    return false;
  }
  void label(const stage_state& s, gradients_msg& push) const override {
    const int64_t next = units_.unit(s.step + 1);
    push.unit = units_.unit(s.step);
    push.next_round = next >= 0 ? next / s.args.run.replicas : units_.until();
    push.fresh = next < 0;
  }
  bool begins_next(self_ptr self, int64_t next) override {
    auto& s = self->state;
    units_.done(next - 1);
    next_step_ = next;
    ask(self, next);  // a stage without parameters has not asked yet: it pushes nothing
    if (!units_.answered(next)) {
      s.waiting_for = "the batch dispenser's answer: which batch step " + std::to_string(next) + " computes";
      return false;
    }
    if (units_.unit(next) < 0) {
      s.waiting_for = "the next run of steps (this run's batches are all taken)";
      return false;
    }
    return true;
  }

 private:
  // Asks which batch the replica's step `step` computes (once per step and run).
  void ask(self_ptr self, int64_t step) {
    auto& s = self->state;
    if (!units_.ask(step)) return;
    self->send(s.args.updates.dispenser, unit_request{units_.run(), units_.until(), s.args.run.replica, step});
  }
  dispensed_steps units_;  // this run's grants
  int64_t next_step_ = 0;  // the replica's next step (its own count, over runs)
};

}  // namespace

void batch_source::reduction_failed(self_ptr self, const std::string& why) {
  fail(self, at_cursor(self->state) + why);
}

std::unique_ptr<batch_source> fixed_share() { return std::make_unique<fixed>(); }
std::unique_ptr<batch_source> committed_share() { return std::make_unique<commit_gated>(); }
std::unique_ptr<batch_source> dispensed_batches() { return std::make_unique<dispensed>(); }

void batch_source::keep(const stage_state& s, int64_t step, batch b) {
  if (!input_queue_) {
    batches_.emplace(step, std::move(b));
    return;
  }
  std::vector<std::shared_ptr<const batch>> micro = microbatches(s, std::move(b));
  for (auto& mb : micro) mb = std::make_shared<const batch>(batch{input_queue_->stage_in(mb->inputs), mb->targets});
  staged_.emplace(step, std::move(micro));
}

bool batch_source::take(stage_state& s) {
  if (!s.micro.empty()) return true;
  if (auto staged = staged_.find(s.step); staged != staged_.end()) {
    s.micro = std::move(staged->second);
    staged_.erase(staged);
    return true;
  }
  auto it = batches_.find(s.step);
  if (it == batches_.end()) {
    s.waiting_for = "the batch of step " + std::to_string(s.step) + " from the data loader";
    return false;
  }
  s.micro = microbatches(s, std::move(it->second));
  batches_.erase(it);
  return true;
}

}  // namespace troupe::stage_detail
