// membership_change: an elastic job's membership changes (membership.hpp), on the coordinator.
// At a change the live optimizer shards hand their state in memory (a checkpoint order with no
// folder), laid into the global arrays by their runs as a checkpoint's files would be read; the
// image and the change go to the summary, and the coordinator ends this membership's part of the
// job: the runner (run_job, the placement's next_membership) plans the next membership and starts
// it from the image. Every update waits for the coordinator's commit (ready_to_update), so
//   given in advance:  at the step boundary the events name (order_steps)
//   a replica lost:    one of its stages went down; the step in flight is not committed, so no
//                      shard applied it: the image is of the steps committed and the next
//                      membership does that step again
//   a process admitted: as a loss, with nothing lost: commits stop, the image is taken
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <set>
#include <utility>

#include "actors/actor_failure.hpp"
#include "actors/coordinator/coordinator_state.hpp"
#include "storage/checkpoint.hpp"

namespace troupe::coordinator_detail {

namespace {

double now_s() { return std::chrono::duration<double>(clock_type::now().time_since_epoch()).count(); }

// Who hands in what for an image, with `lost` replicas gone. Without ZeRO every replica holds the
// whole state: one expert group's replicas (none of them lost) do. Under ZeRO 1 and 2 every live
// rank's shard hands in its segments, and where replicas are lost one live replica's stages
// their parameters (each rank holds its stage's whole), for the lost shards' segments.
struct image_sources {
  std::vector<int> shards, stage_params;
};
image_sources sources_of(const coordinator_state& s, const std::vector<int>& lost) {
  const sched::mesh& m = s.args.mesh;
  auto gone = [&](int replica) { return std::find(lost.begin(), lost.end(), replica) != lost.end(); };
  image_sources out;
  if (!s.args.elastic.replicas_hold_all) {
    for (int r = 0; r < m.ranks(); ++r)
      if (!gone(m.replica_of(r))) out.shards.push_back(r);
    if (lost.empty()) return out;
    for (int replica = 0; replica < m.replicas(); ++replica) {
      if (gone(replica)) continue;
      for (int r = 0; r < m.ranks(); ++r)
        if (m.replica_of(r) == replica) out.stage_params.push_back(r);
      return out;
    }
    return {};
  }
  // A replica at each place in an expert group (each place holds its own experts; without ep, one).
  for (int place = 0; place < m.ep; ++place)
    for (int replica = place; replica < m.replicas(); replica += m.ep) {
      if (gone(replica)) continue;
      for (int r = 0; r < m.ranks(); ++r)
        if (m.replica_of(r) == replica) out.shards.push_back(r);
      break;
    }
  std::set<int> places;
  for (int r : out.shards) places.insert(m.place_in(sched::axis::ep, r));
  if (static_cast<int>(places.size()) < m.ep) out.shards.clear();  // some experts have no live copy
  return out;
}

// The optimizer state of `missing` (runs of global floats) from the checkpoint at `dir` into the
// image's state arrays, or why not: it is another model's or optimizer's, or it cannot be read
// (damaged, truncated, a FIFO or device as its manifest). The image is written only once every
// slice is read.
std::string state_slice_from(const std::string& dir, const storage::checkpoint_manifest& job,
                             const std::vector<storage::value_run>& missing, float* image) {
  try {
    const storage::checkpoint_manifest from = storage::read_manifest(dir);
    storage::check_compatible(from, dir, job.model, job.optimizer);
    if (from.global_floats != job.global_floats || from.arrays != job.arrays)
      return "its arrays are not this job's (" + std::to_string(from.global_floats) + " floats each, " +
             std::to_string(from.arrays.size()) + " arrays)";
    if (from.vocabulary != job.vocabulary) return "it was trained on another vocabulary";
    int64_t count = 0;
    for (const auto& r : missing) count += r.count;
    std::vector<float> slices(static_cast<size_t>(count) * (job.arrays.size() - 1));
    std::vector<storage::value_run> packed;
    int64_t at = 0;
    for (const auto& r : missing) packed.push_back({at, r.global, r.count}), at += r.count;
    for (size_t j = 1; j < job.arrays.size(); ++j)
      storage::read_values(dir, from, job.arrays[j], packed, slices.data() + static_cast<int64_t>(j - 1) * count);
    for (size_t j = 1; j < job.arrays.size(); ++j)
      for (const auto& r : packed)
        std::copy_n(slices.data() + static_cast<int64_t>(j - 1) * count + r.local, r.count,
                    image + static_cast<int64_t>(j) * job.global_floats + r.global);
    return "";
  } catch (const std::exception& e) {
    return e.what();
  }
}

// The parts laid into the global arrays. Stage parameters first, then the shards (their masters
// must be those parameters: a stage whose last update was not gathered back holds older ones, and
// the image would mix two steps); the state no live shard holds (a lost replica's ZeRO segments)
// comes from the job's last checkpoint when it has one, else starts again from zero, and the log
// says which. "" or why the image cannot be made.
std::string lay_out(const coordinator_state& s, const std::vector<checkpoint_part>& parts, resume_point& point,
                    float* image, int64_t& floats) {
  const storage::checkpoint_manifest& m = point.manifest;
  const auto n = static_cast<size_t>(m.global_floats);
  std::vector<char> has_params(n, 0), has_state(n, 0);
  for (const checkpoint_part& p : parts) {
    if (p.values.empty() || p.arrays.size() != 1) continue;
    const float* from = std::as_const(p.values).data();
    for (const storage::value_run& r : unflatten(p.runs)) {
      std::copy(from + r.local, from + r.local + r.count, image + r.global);
      std::fill(has_params.begin() + r.global, has_params.begin() + r.global + r.count, 1);
    }
  }
  int64_t steps = -1;
  for (const checkpoint_part& p : parts) {
    if (p.values.empty() || p.arrays.size() == 1) continue;
    if (p.arrays != m.arrays) return "an optimizer shard's part holds other arrays than the job's";
    if (steps >= 0 && p.optimizer_steps != steps)
      return "the live shards' states are not of one step (" + std::to_string(p.optimizer_steps) + " and " +
             std::to_string(steps) + " updates)";
    steps = p.optimizer_steps;
    const int64_t size = p.values.numel() / static_cast<int64_t>(p.arrays.size());
    const float* from = std::as_const(p.values).data();
    for (const storage::value_run& r : unflatten(p.runs)) {
      for (int64_t k = 0; k < r.count; ++k)
        if (has_params[static_cast<size_t>(r.global + k)] && image[r.global + k] != from[r.local + k])
          return "a live stage's parameters are not its shard's at float " + std::to_string(r.global + k) +
                 " (its last update was not gathered back everywhere)";
      for (size_t j = 0; j < p.arrays.size(); ++j)
        std::copy(from + static_cast<int64_t>(j) * size + r.local, from + static_cast<int64_t>(j) * size + r.local + r.count,
                  image + static_cast<int64_t>(j) * m.global_floats + r.global);
      std::fill(has_params.begin() + r.global, has_params.begin() + r.global + r.count, 1);
      std::fill(has_state.begin() + r.global, has_state.begin() + r.global + r.count, 1);
    }
    floats += p.values.numel();
  }
  point.manifest.optimizer_steps = std::max<int64_t>(steps, 0);
  if (std::find(has_params.begin(), has_params.end(), 0) != has_params.end())
    return "no live rank holds some of the parameters";
  if (m.arrays.size() == 1 || std::find(has_state.begin(), has_state.end(), 0) == has_state.end()) return "";
  // The lost shards' optimizer state: ZeRO kept it only there.
  std::vector<storage::value_run> missing;
  for (size_t i = 0; i < n;) {
    if (has_state[i]) { ++i; continue; }
    size_t e = i;
    while (e < n && !has_state[e]) ++e;
    missing.push_back({static_cast<int64_t>(i), static_cast<int64_t>(i), static_cast<int64_t>(e - i)});
    i = e;
  }
  int64_t lost = 0;
  for (const auto& r : missing) lost += r.count;
  std::error_code ec;
  const std::string root = s.args.checkpoint_dir;
  const std::vector<std::string> saved = !root.empty() && std::filesystem::is_directory(root, ec)
                                             ? storage::committed_checkpoints(root)
                                             : std::vector<std::string>{};
  // Newest first, each checked: a checkpoint of another model or optimizer (another job's, left in
  // the folder) would hand these parameters moments that are not theirs, and a damaged one must
  // not end a job that can go on without it.
  std::vector<std::string> passed_over;
  for (auto it = saved.rbegin(); it != saved.rend(); ++it) {
    const std::string why = state_slice_from(*it, m, missing, image);
    if (why.empty()) {
      spdlog::warn("membership change: the optimizer state of the lost shards' {} parameters had no other copy (ZeRO "
                   "keeps it on its shard alone): taken from the checkpoint {}, that slice only",
                   lost, *it);
      return "";
    }
    spdlog::warn("membership change: the checkpoint {} cannot give the lost shards' optimizer state: {}", *it, why);
    passed_over.push_back(*it);
  }
  spdlog::warn("membership change: the optimizer state of the lost shards' {} parameters had no other copy (ZeRO "
               "keeps it on its shard alone) and {}: it starts again from zero for them",
               lost, passed_over.empty() ? "the job has no checkpoint" : "no checkpoint of this job's could give it");
  return "";
}

// The state from the live ranks, after `when` steps (-1: the steps committed, once their parts
// are in: every record a stage sent before its part is in by then, and a lost rank's before it
// went down); then the change is the summary's and the coordinator ends (once a checkpoint being
// written is committed).
void take_image(self_ptr self, int64_t when, std::vector<membership_event> events, const image_sources& from) {
  auto& s = self->state;
  s.regrouping = true;
  if (s.args.summary->regroup_began == 0) s.args.summary->regroup_began = now_s();
  std::vector<std::pair<int, bool>> asked;  // rank, its stage's parameters (else its shard's state)
  for (int r : from.stage_params) asked.emplace_back(r, true);
  for (int r : from.shards) asked.emplace_back(r, false);
  auto parts = std::make_shared<std::vector<checkpoint_part>>(asked.size());
  auto left = std::make_shared<size_t>(asked.size());
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
    tensor image({static_cast<int64_t>(point->manifest.arrays.size()) * point->manifest.global_floats});
    int64_t floats = 0;
    std::string why;
    try {
      why = lay_out(s, *parts, *point, image.data(), floats);
    } catch (const std::exception& e) {
      why = e.what();
    }
    if (!why.empty()) {
      fail(self, "membership change after step " + std::to_string(step) + ": " + why + ": the job cannot go on", true);
      return finish(self);
    }
    image.freeze();
    point->image = std::move(image);
    auto& sum = *s.args.summary;
    sum.membership.insert(sum.membership.end(), events.begin(), events.end());
    sum.regroup = std::move(point);
    spdlog::info("membership change after step {}: the state gathered from the live ranks in {:.3f} s ({:.1f} MB in "
                 "memory)", step, now_s() - began, static_cast<double>(floats) * 4 / 1e6);
    finish_when_saved(self);
  };
  if (asked.empty()) {
    fail(self, "membership change: no live rank holds the state the job would go on from", true);
    return finish(self);
  }
  for (size_t i = 0; i < asked.size(); ++i) {
    checkpoint_order order{when, "", asked[i].second};
    self->request(s.stages.at(static_cast<size_t>(asked[i].first)), caf::infinite, order)
        .then(
            [parts, left, i, assemble](checkpoint_part& p) mutable {
              (*parts)[i] = std::move(p);
              if (--*left == 0) (*assemble)();
            },
            [self](caf::error& e) {
              if (self->state.finishing) return;
              fail(self, "membership change after step " + std::to_string(self->state.args.summary->steps) +
                             ": the state could not be gathered from the live ranks (a second failure during the "
                             "regroup?): " + self->system().render(e),
                   true);
              finish(self);
            });
  }
}

// The image once every step committed is reported: the live stages have then gathered their last
// update back (their record follows it), so their parameters are current.
void image_when_reported(self_ptr self, std::vector<membership_event> events, const image_sources& from) {
  auto& s = self->state;
  auto gather = [self, events, from] { take_image(self, -1, events, from); };
  if (s.args.summary->steps >= s.committed) gather();
  else s.when_steps_done = gather;
}

}  // namespace

void ready_to_update(self_ptr self, const update_ready& r) {
  auto& s = self->state;
  s.shares.erase(s.shares.begin(), s.shares.lower_bound(s.args.summary->steps));
  s.shares[r.step][r.rank] = r;
  if (s.shares[r.step].size() < s.stages.size() || s.regrouping) return;
  s.committed = r.step + 1;
  for (const auto& st : s.stages) self->send(st, update_commit{r.step});
}

void step_failed_on(self_ptr self, const step_failed& f) {
  auto& s = self->state;
  if (s.finishing) return;
  if (s.regrouping) {
    // The step in flight never commits: expected. A committed one that cannot finish (under ZeRO
    // the gather of the updated segments, a lost replica's among them) leaves no state to go on from.
    if (f.step >= s.committed) return;
    fail(self, f.what + ": step " + std::to_string(f.step) + " was committed, but the lost replica took its part of it "
                   "along (under ZeRO its updated segments were never gathered); the elastic job cannot go on", true);
    return finish(self);
  }
  // Likely a symptom of a lost replica whose down message is on its way: reported only if no loss
  // turns up within the grace.
  if (s.symptom.empty()) self->delayed_send(self, std::chrono::milliseconds(500), settle_atom::value);
  if (s.symptom.empty()) s.symptom = f.what;
}

void change_membership(self_ptr self, int64_t step) {
  auto& s = self->state;
  if (s.checkpoints_writing > 0 && !s.after_commit) {  // a lost shard's state comes from the newest one
    s.after_commit = [self, step] { change_membership(self, step); };
    return;
  }
  const std::vector<membership_event> at = events_at(s.args.elastic.events, step);
  // A replica the events drop is taken as lost, as a real loss's would be: the runs agree bitwise.
  std::vector<int> lost;
  for (const auto& e : at)
    if (e.change == membership_change::lose) lost.push_back(e.replica);
  take_image(self, step, at, sources_of(s, lost));
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
  const image_sources from = sources_of(s, {replica});
  if (refused.empty() && from.shards.empty())
    refused = "its experts' state has no other live copy";
  if (!refused.empty()) {
    fail(self, what + "; the elastic job cannot go on: " + refused, true);
    finish(self);
    return true;
  }
  spdlog::warn("{}; the job goes on without it from the live replicas' state (the step in flight is done again)", what);
  s.lost_replica = replica;
  s.regrouping = true;
  s.args.summary->regroup_began = now_s();
  // Steps committed but not reported by the lost ranks (gone between their update and their
  // record): their records stand in from the shares they sent with update_ready.
  const sched::mesh& m = s.args.mesh;
  for (int64_t k = s.args.summary->steps; k < s.committed; ++k)
    for (int r = 0; r < m.ranks(); ++r) {
      if (m.replica_of(r) != replica) continue;
      const auto& got = s.reports[k];
      if (static_cast<int>(got.size()) > r && !got[static_cast<size_t>(r)].actions.empty()) continue;
      stage_step_record stand_in;
      stand_in.step = k;
      stand_in.rank = r;
      const update_ready& share = s.shares.at(k).at(r);
      stand_in.loss_sum = share.loss_sum;
      stand_in.count = share.count;
      stand_in.correct = share.correct;
      stand_in.actions = {"(its record lost with it)"};
      stage_reported(self, stand_in);
    }
  image_when_reported(self, {lost}, from);
  return true;
}

void admit_replica(self_ptr self) {
  auto& s = self->state;
  // Events given in advance say when (the process waits, held, for its admit event). A job
  // already changing does not take it in: the hub refuses it at that change's end, and it may ask
  // the next membership.
  if (!s.args.elastic.on || !s.args.elastic.events.empty() || s.regrouping || s.finishing) return;
  if (s.stages.empty()) {  // asked before the job started: taken in once it has
    s.admit_pending = true;
    return;
  }
  spdlog::info("a process asks to join with {} steps done: no step is committed from now on, and the job goes on "
               "with it from the state after the steps committed (the step in flight is done again)",
               s.args.summary->steps);
  s.regrouping = true;
  image_when_reported(self, {{-1, membership_change::admit, -1}}, sources_of(s, {}));
}

}  // namespace troupe::coordinator_detail
