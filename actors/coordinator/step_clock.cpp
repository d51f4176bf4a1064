// step_clock: the job's clock. The coordinator orders a run of steps to every stage at once and
// each rank reports each step; a step is done when every rank's report is in. In outline:
//
//   order_steps(first):                          (at start, after each evaluation)
//     at an elastic job's membership change: change_membership(first)   (membership_change.cpp)
//     until = min(end of the epoch, the next checkpoint, the membership change, the last step)
//     every stage <- step_order{first, until}    the stages run the steps without waiting for us
//   on stage_step_record r:                      (a rank finished step r.step)
//     reports[r.step][r.rank] = r
//     while the lowest step has every rank's report:      steps end in order on every rank
//       loss = sum of loss_sum over ranks in rank order / sum of count    the same bits every run
//       metrics line(step, loss, samples/s over the last 10 steps)
//       if a checkpoint falls after it: checkpoint(step + 1)   (checkpoint_commit.cpp)
//       if it ends an epoch or the job: evaluate(epoch)        (evaluation_gather.cpp)
//                                       the evaluator's report orders the next run
//       else if it ends the run (a checkpoint cut it): order_steps(step + 1)
//       keep the first replica's record for the trace and the timeline
//
// Under parameter servers with dispensed batches the replicas' steps are their own: a replica's
// step is done once its ranks reported it, and every dp of them, of any replicas, make one step
// of the job (push_rounds.hpp). The watchdog (watchdog.cpp) watches last_progress, which every
// report moves.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "actors/coordinator/coordinator_state.hpp"
#include "actors/observe/metrics_log.hpp"

namespace troupe::coordinator_detail {

// Orders every step up to the next evaluation at once; each rank reports each step.
void order_steps(self_ptr self, int64_t step) {
  auto& s = self->state;
  if (step == s.stop_at) return change_membership(self, step);
  s.last_progress = clock_type::now();
  s.step_start = clock_type::now();
  s.recent.assign(1, s.step_start);
  const int64_t epoch_end = (step / s.args.steps_per_epoch + 1) * s.args.steps_per_epoch;
  int64_t until = std::min(epoch_end, s.args.total_steps);
  // A checkpoint is of the state between two steps, so a run of steps ends at each one.
  if (!s.args.checkpoint_dir.empty() && s.args.checkpoint_every > 0)
    until = std::min(until, (step / s.args.checkpoint_every + 1) * s.args.checkpoint_every);
  if (s.stop_at > step) until = std::min(until, s.stop_at);
  s.until = until;
  for (auto& st : s.stages) self->send(st, step_order{step, until});
}

namespace {
int first_replica_rank(const sched::mesh& m, int stage) { return m.rank_of({0, stage, 0}); }
}  // namespace

void keep_record(self_ptr self, std::vector<stage_step_record>& ranks) {
  auto& s = self->state;
  auto& rec = *s.args.record;
  rec.peak_live.resize(s.stages.size(), 0);
  for (const auto& r : ranks) {
    int& peak = rec.peak_live.at(static_cast<size_t>(r.rank));
    peak = std::max(peak, static_cast<int>(r.peak_live));
  }
  const int64_t traced = s.args.trace_step >= 0 ? s.args.trace_step : s.args.total_steps - 1;
  if (s.args.dispensed) {
    // The replicas' steps are their own: each rank's traced step is its step `traced`, or its
    // last one when it never got that far (a slow replica does fewer). `ranks` is one replica step.
    s.latest.resize(s.stages.size());
    for (const auto& r : ranks) {
      auto& l = s.latest.at(static_cast<size_t>(r.rank));
      if (l.actions.empty() || (l.step != traced && r.step <= traced) || s.args.trace_step < 0) l = r;
    }
    if (std::all_of(s.latest.begin(), s.latest.end(), [](const stage_step_record& x) { return !x.actions.empty(); }))
      rec.traced = s.latest;
    if (s.rounds->replica_of(ranks.front()) != 0) return;
  }
  std::vector<stage_step_record> first;  // the first replica's pipeline, tp rank 0
  for (int p = 0; p < s.args.mesh.pp; ++p) {
    const int rank = first_replica_rank(s.args.mesh, p);
    for (const auto& r : ranks)
      if (r.rank == rank) first.push_back(r);
  }
  rec.recent.push_back(std::move(first));
  if (rec.recent.size() > 32) rec.recent.erase(rec.recent.begin());  // enough for medians, bounded
  if (!s.args.dispensed && ranks.front().step == traced) rec.traced = std::move(ranks);
}

// Step `step` is done (every rank's report of it, or with dispensed batches dp replica steps'):
// one metrics line, and an evaluation at an epoch's end.
void step_done(self_ptr self, int64_t step, const std::vector<stage_step_record>& ranks) {
  auto& s = self->state;
  double loss_sum = 0, compute = 0;
  int64_t count = 0;
  expert_tally experts;  // over every replica: the global batch's routing
  auto& sum = *s.args.summary;
  const size_t n = s.stages.size();
  sum.rank_step_seconds.resize(n);
  sum.rank_tp_seconds.resize(n, 0.0);
  sum.rank_compute_seconds.resize(n, 0.0);
  sum.peak_activation_bytes.resize(n, 0);
  sum.peak_memory.resize(n);
  sum.peak_memory_total.resize(n, 0);
  sum.peak_host_memory.resize(n);
  for (const stage_step_record& x : ranks) {  // rank order (arrival order when dispensed): the same sum on every run
    const auto r = static_cast<size_t>(x.rank);
    loss_sum += x.loss_sum;
    count += x.count;
    experts.add(x.experts());
    compute = std::max(compute, x.compute_seconds);  // the busiest device
    sum.rank_step_seconds[r].push_back(x.step_end - x.step_start);
    sum.rank_tp_seconds[r] += x.tp_seconds;
    sum.rank_compute_seconds[r] += x.compute_seconds;
    sum.peak_activation_bytes[r] = std::max(sum.peak_activation_bytes[r], x.peak_activation_bytes);
    const auto& peak = x.peak_memory;  // the ledger's peaks over the run so far
    if (peak.size() == kMemoryKinds + 1) {
      for (size_t k = 0; k < kMemoryKinds; ++k) sum.peak_memory[r].bytes[k] = std::max(sum.peak_memory[r].bytes[k], peak[k]);
      sum.peak_memory_total[r] = std::max(sum.peak_memory_total[r], peak[kMemoryKinds]);
    }
    const auto& host = x.peak_host_memory;
    if (host.size() == kMemoryKinds + 1)
      for (size_t k = 0; k < kMemoryKinds; ++k)
        sum.peak_host_memory[r].bytes[k] = std::max(sum.peak_host_memory[r].bytes[k], host[k]);
  }
  // The stages run on without waiting for us, so a step lasts from the previous step's end to this one.
  const auto now = clock_type::now();
  s.last_progress = now;
  s.polled = -1;
  const double seconds = std::chrono::duration<double>(now - s.step_start).count();
  s.step_start = now;
  const double loss = count ? loss_sum / static_cast<double>(count) : 0.0;
  // Reports can arrive in bursts (a late rank, then the next step at once), so the logged rate
  // is taken over a window of recent steps, not the last gap alone.
  constexpr size_t window = 10;
  s.recent.push_back(now);
  if (s.recent.size() > window + 1) s.recent.pop_front();
  const double span = std::chrono::duration<double>(s.recent.back() - s.recent.front()).count();
  const double rate = static_cast<double>(s.args.samples_per_step * static_cast<int64_t>(s.recent.size() - 1)) /
                      std::max(span, 1e-9);
  const int64_t epoch = step / s.args.steps_per_epoch;
  s.args.log->step(step, epoch, loss, rate, experts);  // first: a step whose line failed is not counted done
  if (!experts.empty()) sum.experts.push_back(std::move(experts));
  if (!s.args.dispensed && s.args.slow_ranks.window > 0) {
    if (!s.slow_link) s.slow_link = std::make_unique<slow_link_detector>(s.args.mesh, s.args.slow_ranks);
    if (const std::string line = s.slow_link->add(ranks); !line.empty()) {
      spdlog::warn("{}", line);
      if (sum.slow_link_to < 0 && s.slow_link->current().to >= 0) {
        sum.slow_link_from = s.slow_link->current().from;
        sum.slow_link_to = s.slow_link->current().to;
        sum.slow_link_step = step;
      }
    }
    if (!s.slow) s.slow = std::make_unique<slow_rank_detector>(s.args.mesh, s.args.slow_ranks);
    if (const std::string line = s.slow->add(ranks); !line.empty()) {
      // The rank a named slow link delivers to starts each step late (the last of the previous
      // step's results reach it through that link); unless its own extra compute explains most
      // of its lateness, it is the link's victim, not a slow rank, and is not named as one.
      const slow_rank_finding& f = s.slow->current();
      const bool own = f.compute_ms - f.peers_compute_ms >= 0.5 * f.late_ms;
      const bool victim = f.rank >= 0 && f.rank == s.slow_link->current().to && !own;
      if (!victim) spdlog::warn("{}", line);
      if (!victim && sum.slow_rank < 0 && f.rank >= 0) {
        sum.slow_rank = f.rank;
        sum.slow_rank_step = step;
      }
    }
  }
  if (s.args.prom) {
    prometheus_step p{step, epoch, loss, rate, -1, -1, ranks};
    if (!sum.test_loss.empty()) p.test_loss = sum.test_loss.back(), p.test_accuracy = sum.test_accuracy.back();
    s.args.prom->write(p);
  }
  sum.losses.push_back(loss);
  sum.step_samples_per_s.push_back(rate);
  sum.train_seconds += seconds;
  sum.step_ends.push_back(sum.train_seconds);
  sum.compute_seconds += compute;
  sum.samples += s.args.samples_per_step;
  sum.steps = step + 1;
  auto go_on = [self, step, epoch] {
    auto& st = self->state;
    if (st.regrouping) {  // a lost replica's step records still coming in: nothing more is ordered
      if (auto image = std::exchange(st.when_steps_done, nullptr)) image();
      return;
    }
    if (saves_after(st, step + 1)) checkpoint(self, step + 1);
    if (step + 1 == st.args.total_steps || (step + 1) % st.args.steps_per_epoch == 0) evaluate(self, epoch);
    else if (step + 1 == st.until) order_steps(self, step + 1);  // a run cut at a checkpoint goes on
  };
  if (saves_after(s, step + 1) && s.checkpoints_writing > 0) {
    spdlog::info("checkpoint after step {} waits for the one before it to be committed", step + 1);
    s.after_commit = std::move(go_on);  // the run of steps ended here: nothing else moves meanwhile
    return;
  }
  go_on();
}

void stage_reported(self_ptr self, stage_step_record& r) {
  auto& s = self->state;
  auto& got = s.reports[r.step];
  got.resize(s.stages.size());
  got.at(static_cast<size_t>(r.rank)) = std::move(r);
  s.last_progress = clock_type::now();
  s.polled = -1;
  // Steps complete in order on every rank, so the lowest step is always the next one to finish.
  while (!s.reports.empty()) {
    auto it = s.reports.begin();
    const bool all = std::all_of(it->second.begin(), it->second.end(),
                                 [](const stage_step_record& x) { return !x.actions.empty(); });
    if (!all) return;
    std::vector<stage_step_record> ranks = std::move(it->second);
    s.reports.erase(it);
    step_done(self, ranks.front().step, ranks);
    keep_record(self, ranks);
  }
}

// Dispensed batches: a replica's step is done once its ranks reported it, and dp of them, of
// any replicas, are a step of the job.
void replica_reported(self_ptr self, stage_step_record& r) {
  auto& s = self->state;
  s.last_progress = clock_type::now();
  s.polled = -1;
  std::vector<stage_step_record> done = s.rounds->add(std::move(r));
  if (done.empty()) return;
  keep_record(self, done);
  const std::vector<stage_step_record> round = s.rounds->count(std::move(done));
  if (!round.empty()) step_done(self, s.args.summary->steps, round);
}

}  // namespace troupe::coordinator_detail
