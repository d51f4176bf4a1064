// membership_change: an elastic job's membership changes (membership.hpp), on the coordinator.
// At a change the live optimizer shards hand their state in memory (a checkpoint order with no
// folder), laid into the global arrays by their runs as a checkpoint's files would be read; the
// image and the change go to the summary, and the coordinator ends this membership's part of the
// job: the runner (run_job's regroup) plans the next membership and starts it from the image.
//   given in advance:  at the step boundary the events name (order_steps)
//   a replica lost:    one of its stages went down; the step in flight is dropped, not applied
//                      anywhere (its gradients never reduced), so the image is of the steps
//                      done and the next membership does that step again
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <utility>

#include "actors/actor_failure.hpp"
#include "actors/coordinator/coordinator_state.hpp"

namespace troupe::coordinator_detail {

namespace {

double now_s() { return std::chrono::duration<double>(clock_type::now().time_since_epoch()).count(); }

// Ranks whose shards make the image: without ZeRO one expert group's replicas (none of them
// lost) hold every value; under ZeRO every rank holds its own segments.
std::vector<int> image_writers(const coordinator_state& s, int lost_replica) {
  const sched::mesh& m = s.args.mesh;
  std::vector<int> out;
  if (!s.args.elastic.replicas_hold_all) {
    for (int r = 0; r < m.ranks(); ++r) out.push_back(r);
    return out;
  }
  for (int first = 0; first + m.ep <= m.replicas(); first += m.ep) {
    if (lost_replica >= first && lost_replica < first + m.ep) continue;
    for (int r = 0; r < m.ranks(); ++r)
      if (m.replica_of(r) >= first && m.replica_of(r) < first + m.ep) out.push_back(r);
    return out;
  }
  return out;
}

// The state from `writers`' shards, after `step` steps (-1: after the steps done once their
// parts are in: every record a stage sent before its part is in by then, and a lost rank's before
// it went down); then the change is the summary's and the coordinator ends (once a checkpoint
// being written is committed).
void take_image(self_ptr self, int64_t when, std::vector<membership_event> events, const std::vector<int>& writers) {
  auto& s = self->state;
  s.regrouping = true;
  auto parts = std::make_shared<std::vector<checkpoint_part>>(writers.size());
  auto left = std::make_shared<size_t>(writers.size());
  const double began = now_s();
  auto assemble = std::make_shared<std::function<void()>>();
  *assemble = [self, parts, when, began, events = std::move(events), again = std::weak_ptr<std::function<void()>>(assemble)]() mutable {
    auto& s = self->state;
    // A lost replica's: the steps committed, which every live shard has applied (the commit
    // reached each before this order did). Each of them has its loss once every record is in.
    const int64_t step = when >= 0 ? when : s.committed;
    if (s.args.summary->steps < step) {
      // A live stage answers between its update and its record: the record is on its way (a lost
      // rank's that never comes leaves the job to its watchdog, naming the step it waits for).
      s.when_steps_done = [whole = again.lock()] { (*whole)(); };
      return;
    }
    for (auto& e : events) e.step = step;
    auto point = std::make_shared<resume_point>();
    point->manifest = s.args.checkpoint_base;
    point->manifest.step = step;
    auto image = std::make_shared<std::vector<std::vector<float>>>(
        point->manifest.arrays.size(), std::vector<float>(static_cast<size_t>(point->manifest.global_floats)));
    int64_t floats = 0;
    for (const checkpoint_part& p : *parts) {
      if (p.values.empty()) continue;
      if (p.arrays != point->manifest.arrays || p.optimizer_steps != parts->front().optimizer_steps) {
        fail(self, "membership change after step " + std::to_string(step) + ": the live shards' states are not of one "
                   "step (" + std::to_string(p.optimizer_steps) + " and " + std::to_string(parts->front().optimizer_steps) +
                   " updates): the job cannot go on from them", true);
        return finish(self);
      }
      const int64_t size = p.values.numel() / static_cast<int64_t>(p.arrays.size());
      const float* from = std::as_const(p.values).data();
      for (size_t j = 0; j < p.arrays.size(); ++j)
        for (const storage::value_run& r : unflatten(p.runs))
          std::copy(from + static_cast<int64_t>(j) * size + r.local, from + static_cast<int64_t>(j) * size + r.local + r.count,
                    (*image)[j].begin() + r.global);
      point->manifest.optimizer_steps = p.optimizer_steps;
      floats += p.values.numel();
    }
    point->image = std::move(image);
    auto& sum = *s.args.summary;
    sum.membership.insert(sum.membership.end(), events.begin(), events.end());
    sum.regroup = std::move(point);
    spdlog::info("membership change after step {}: the state gathered from the live optimizer shards in {:.3f} s "
                 "({:.1f} MB in memory)", step, now_s() - began, static_cast<double>(floats) * 4 / 1e6);
    finish_when_saved(self);
  };
  for (size_t i = 0; i < writers.size(); ++i)
    self->request(s.stages.at(static_cast<size_t>(writers[i])), caf::infinite, checkpoint_order{when, ""})
        .then(
            [parts, left, i, assemble](checkpoint_part& p) mutable {
              (*parts)[i] = std::move(p);
              if (--*left == 0) (*assemble)();
            },
            [self](caf::error& e) {
              if (self->state.finishing) return;
              fail(self, "membership change after step " + std::to_string(self->state.args.summary->steps) +
                             ": the state could not be gathered from the live shards (a second failure during the "
                             "regroup?): " + self->system().render(e),
                   true);
              finish(self);
            });
}

}  // namespace

void ready_to_update(self_ptr self, const update_ready& r) {
  auto& s = self->state;
  if (++s.update_ready[r.step] < static_cast<int>(s.stages.size()) || s.regrouping) return;
  s.update_ready.erase(r.step);
  s.committed = r.step + 1;
  for (const auto& st : s.stages) self->send(st, update_commit{r.step});
}

void change_membership(self_ptr self, int64_t step) {
  auto& s = self->state;
  take_image(self, step, events_at(s.args.elastic.events, step), image_writers(s, -1));
}

bool lose_replica(self_ptr self, const caf::down_msg& dm) {
  auto& s = self->state;
  if (!s.args.elastic.on) return false;
  const auto it = std::find_if(s.stages.begin(), s.stages.end(),
                               [&](const caf::actor& a) { return a && a.address() == dm.source; });
  if (it == s.stages.end()) return false;
  const int rank = static_cast<int>(it - s.stages.begin());
  const int replica = s.args.mesh.replica_of(rank);
  const membership_event lost{-1, membership_change::lose, replica};
  // During a regroup: its replica's other ranks going down too, or a second failure, which ends
  // the job like any lost actor.
  if (s.regrouping) return replica == s.lost_replica;
  if (s.finishing) return true;
  const std::string what = "replica " + std::to_string(replica) + " lost (rank " + std::to_string(rank) + ": " +
                           describe_exit(self->system(), dm.reason) + ")";
  const int left = s.args.mesh.replicas() - 1;
  std::string refused;
  if (left < s.args.elastic.min_replicas)
    refused = std::to_string(left) + " replica" + (left == 1 ? "" : "s") + " would be left, fewer than --min-replicas " +
              std::to_string(s.args.elastic.min_replicas);
  else if (!s.args.elastic.replicas_hold_all)
    refused = "under ZeRO its shards held the only copy of their segments' optimizer state";
  const std::vector<int> writers = image_writers(s, replica);
  if (refused.empty() && writers.empty())
    refused = "no expert group is whole without it: its experts' state has no other copy";
  if (!refused.empty()) {
    fail(self, what + "; the elastic job cannot go on: " + refused, true);
    finish(self);
    return true;
  }
  spdlog::warn("{}; the job goes on without it from the live replicas' state (the step in flight is done again)", what);
  s.lost_replica = replica;
  take_image(self, -1, {lost}, writers);
  return true;
}

}  // namespace troupe::coordinator_detail
