// coordinator: the job's clock, for every job shape. It orders the steps up to each evaluation to
// every stage of the mesh, sums each step's loss over the ranks (in rank order, so it is the same
// on every run), gathers the first replica's parameters for the evaluator at the end of each
// epoch, writes metrics, and ends the job - normally after the last step, or at once with the
// reason when a monitored actor dies or the watchdog finds the job stuck.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <map>

#include "actors/actor_failure.hpp"
#include "actors/actors.hpp"
#include "actors/collective/collective.hpp"
#include "actors/coordinator/push_rounds.hpp"
#include "actors/job/metrics_log.hpp"
#include "kernels/tp_shards.hpp"
#include "schedules/render.hpp"

namespace troupe {

namespace {

using clock_type = std::chrono::steady_clock;

struct coordinator_state {
  coordinator_args args;
  std::vector<caf::actor> stages;  // by mesh rank
  caf::actor evaluator;
  std::vector<caf::actor> members;
  std::map<int64_t, std::vector<stage_step_record>> reports;  // by step: the ranks reported so far
  clock_type::time_point step_start;
  std::deque<clock_type::time_point> recent;  // when the last few steps ended (rate window)
  clock_type::time_point last_progress = clock_type::now();
  int64_t polled = -1;  // actions completed over all stages at the watchdog's last poll (-1: none since a step)
  bool polling = false;
  std::vector<caf::actor> collectives;  // dumped into a watchdog report
  bool finishing = false;
  int64_t until = 0;            // the end of the run of steps last ordered
  int checkpoints_writing = 0;  // ordered, not yet committed
  bool finish_when_saved = false;
  std::unique_ptr<push_rounds> rounds;  // dispensed batches: replica steps counted into rounds
  std::vector<stage_step_record> latest;  // dispensed batches: each rank's traced step, by rank
  std::string symptom;  // a member that died of asking a dead actor: reported unless the cause comes soon
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

// Orders every step up to the next evaluation at once; each rank reports each step.
void order_steps(self_ptr self, int64_t step) {
  auto& s = self->state;
  s.last_progress = clock_type::now();
  s.step_start = clock_type::now();
  s.recent.assign(1, s.step_start);
  const int64_t epoch_end = (step / s.args.steps_per_epoch + 1) * s.args.steps_per_epoch;
  int64_t until = std::min(epoch_end, s.args.total_steps);
  // A checkpoint is of the state between two steps, so a run of steps ends at each one.
  if (!s.args.checkpoint_dir.empty() && s.args.checkpoint_every > 0)
    until = std::min(until, (step / s.args.checkpoint_every + 1) * s.args.checkpoint_every);
  s.until = until;
  for (auto& st : s.stages) self->send(st, step_order{step, until});
}

bool saves_after(const coordinator_state& s, int64_t steps_done) {
  if (s.args.checkpoint_dir.empty()) return false;
  return steps_done == s.args.total_steps || (s.args.checkpoint_every > 0 && steps_done % s.args.checkpoint_every == 0);
}

void finish_when_saved(self_ptr self) {
  auto& s = self->state;
  if (s.checkpoints_writing > 0) s.finish_when_saved = true;
  else finish(self);
}

// Every part is in: the manifest, the commit record, goes last.
void commit(self_ptr self, int64_t step, const std::vector<checkpoint_part>& parts, double began) {
  auto& s = self->state;
  storage::checkpoint_manifest m = s.args.checkpoint_base;
  m.step = step;
  int64_t bytes = 0;
  double slowest = 0;
  for (const checkpoint_part& p : parts) {
    if (p.file.empty()) continue;
    storage::checkpoint_file f;
    f.name = p.file;
    f.bytes = p.bytes;
    f.writer = p.writer;
    for (size_t j = 0; j < p.arrays.size(); ++j)
      f.sections.push_back({p.arrays[j], p.sections.at(3 * j), p.sections.at(3 * j + 1),
                            static_cast<uint32_t>(p.sections.at(3 * j + 2))});
    f.runs = unflatten(p.runs);
    m.optimizer_steps = p.optimizer_steps;
    m.files.push_back(std::move(f));
    bytes += p.bytes;
    slowest = std::max(slowest, p.seconds);
  }
  std::string dir;
  try {
    dir = storage::commit_checkpoint(s.args.checkpoint_dir, m, s.args.keep);
  } catch (const std::exception& e) {
    fail(self, "checkpoint after step " + std::to_string(step) + " not committed: " + e.what() +
                   " (the checkpoints committed before are intact)",
         true);
    finish(self);
    return;
  }
  const double seconds = std::chrono::duration<double>(clock_type::now().time_since_epoch()).count() - began;
  spdlog::info("checkpoint after step {}: {} ({} files, {:.1f} MB; slowest writer {:.3f} s, committed after {:.3f} s)",
               step, dir, m.files.size(), static_cast<double>(bytes) / 1e6, slowest, seconds);
  s.args.summary->checkpoints.push_back(dir);
  if (--s.checkpoints_writing == 0 && s.finish_when_saved) finish(self);
}

// Orders checkpoint `step` (the state after `step` steps): every stage's shard writes its part.
// The stages go on with the next steps meanwhile; each shard takes its snapshot before it takes
// its next gradients (so its part is the state between the two steps), and its writer writes it.
void checkpoint(self_ptr self, int64_t step) {
  auto& s = self->state;
  const std::string dir = storage::begin_checkpoint(s.args.checkpoint_dir, step);
  ++s.checkpoints_writing;
  const double began = std::chrono::duration<double>(clock_type::now().time_since_epoch()).count();
  auto parts = std::make_shared<std::vector<checkpoint_part>>(s.stages.size());
  auto left = std::make_shared<size_t>(s.stages.size());
  for (size_t r = 0; r < s.stages.size(); ++r)
    self->request(s.stages[r], caf::infinite, checkpoint_order{step, dir})
        .then(
            [self, parts, left, r, step, began](checkpoint_part& p) {
              (*parts)[r] = std::move(p);
              if (--*left == 0) commit(self, step, *parts, began);
            },
            [self, step](caf::error& e) {
              // A refusal's own words (a shard's "...: No space left on device"), not CAF's wrapping.
              const caf::message& why = e.context();
              const std::string text = why.match_elements<std::string>() ? why.get_as<std::string>(0) : self->system().render(e);
              fail(self, "checkpoint after step " + std::to_string(step) + " not written: " + text +
                             " (the checkpoints committed before are intact)",
                   true);
              finish(self);
            });
}

int first_replica_rank(const sched::mesh& m, int stage, int tp = 0) { return m.rank_of({0, stage, tp}); }

// The first replica's parameters, model chunk by model chunk, as one flat tensor in layer order;
// under tensor parallelism each chunk's tp shares merged into the unsplit chunk.
template <class Done>
void gather_params(self_ptr self, Done done) {
  auto& s = self->state;
  const int P = s.args.mesh.pp, T = s.args.mesh.tp;
  const auto K = static_cast<size_t>(sched::num_model_chunks(s.args.plan));
  auto parts = std::make_shared<std::vector<std::vector<tensor>>>(K, std::vector<tensor>(static_cast<size_t>(T)));
  // ZeRO-3: no replica holds all of a chunk; each gives its runs and they are put together.
  const int D = s.args.sharded_params ? s.args.mesh.dp : 1;
  auto left = std::make_shared<int>(P * T * D);
  for (int d = 0; d < D; ++d)
  for (int p = 0; p < P; ++p)
    for (int t = 0; t < T; ++t)
      self->request(s.stages.at(static_cast<size_t>(s.args.mesh.rank_of({d, p, t}))), caf::infinite,
                    pipeline_params_request{p})
          .then(
              [self, parts, left, done, t](pipeline_params_msg& m) {
                for (size_t i = 0; i < m.params.size(); ++i) {
                  tensor& slot = parts->at(static_cast<size_t>(m.model_chunks[i])).at(static_cast<size_t>(t));
                  if (m.owned.empty()) {
                    slot = std::move(m.params[i]);
                    continue;
                  }
                  if (slot.empty()) slot = tensor({m.params[i].numel()});
                  const auto& runs = m.owned.at(i);
                  for (size_t r = 0; r + 1 < runs.size(); r += 2)
                    std::copy(std::as_const(m.params[i]).data() + runs[r],
                              std::as_const(m.params[i]).data() + runs[r] + runs[r + 1], slot.data() + runs[r]);
                }
                if (--*left > 0) return;
                auto& s = self->state;
                std::vector<float> flat;
                for (size_t k = 0; k < parts->size(); ++k) {
                  const std::vector<float> chunk = merge_tp_shards(s.args.model, s.args.chunks.at(k), parts->at(k));
                  flat.insert(flat.end(), chunk.begin(), chunk.end());
                }
                tensor out({static_cast<int64_t>(flat.size())}, flat);
                out.freeze();
                done(std::move(out));
              },
            [self](caf::error& e) {
              fail(self, "parameters not delivered for evaluation: " + self->system().render(e), true);
              finish(self);
            });
}

void evaluate(self_ptr self, int64_t epoch) {
  gather_params(self, [self, epoch](tensor flat) {
    auto& s = self->state;
    s.args.summary->final_params = flat;
    self->send(s.evaluator, params_msg{-1, 0, std::move(flat)});
    self->send(s.evaluator, eval_order{epoch});
  });
}

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
  s.args.log->step(step, epoch, loss, rate);  // first: a step whose line failed is not counted done
  sum.losses.push_back(loss);
  sum.train_seconds += seconds;
  sum.step_ends.push_back(sum.train_seconds);
  sum.compute_seconds += compute;
  sum.samples += s.args.samples_per_step;
  sum.steps = step + 1;
  if (saves_after(s, step + 1)) checkpoint(self, step + 1);
  if (step + 1 == s.args.total_steps || (step + 1) % s.args.steps_per_epoch == 0) evaluate(self, epoch);
  else if (step + 1 == s.until) order_steps(self, step + 1);  // a run cut at a checkpoint goes on
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

using watchdog_atom = caf::atom_constant<caf::atom("watchdog")>;
using settle_atom = caf::atom_constant<caf::atom("settle")>;  // the grace after a symptom is over

std::chrono::milliseconds watchdog_period(double seconds) {
  return std::chrono::milliseconds(std::max<int64_t>(10, static_cast<int64_t>(seconds * 250)));
}

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
    else text += fmt::format("action {} of {} ({}): waits for {}\n", x.cursor, x.actions, x.action, x.waiting_for);
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
    for (const auto& l : *logs) all += "\n" + l;
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
    if (s.polled >= 0 && completed != s.polled) s.last_progress = clock_type::now();
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

void watch(self_ptr self) {
  auto& s = self->state;
  if (s.finishing) return;
  const double idle = std::chrono::duration<double>(clock_type::now() - s.last_progress).count();
  if (idle > s.args.watchdog_seconds / 2 && !s.polling) poll(self);
  self->delayed_send(self, watchdog_period(s.args.watchdog_seconds), watchdog_atom::value);
}

void start(self_ptr self, std::vector<caf::actor> stages, caf::actor evaluator, std::vector<caf::actor> members) {
  auto& s = self->state;
  s.stages = std::move(stages);
  s.evaluator = std::move(evaluator);
  s.members = std::move(members);
  for (auto& m : s.members) self->monitor(m);
  s.args.summary->first_step = s.args.first_step;
  s.args.summary->steps = s.args.first_step;
  order_steps(self, s.args.first_step);
  if (s.args.watchdog_seconds > 0)
    self->delayed_send(self, watchdog_period(s.args.watchdog_seconds), watchdog_atom::value);
}

caf::behavior coordinator(self_ptr self, coordinator_args args) {
  self->state.args = std::move(args);
  if (self->state.args.dispensed) self->state.rounds = std::make_unique<push_rounds>(self->state.args.mesh);
  self->set_down_handler([self](caf::down_msg& dm) {
    auto& s = self->state;
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
      [self](watch_atom, std::vector<caf::actor> group) { self->state.collectives = std::move(group); },
      [self](watchdog_atom) { watch(self); },
      [self](settle_atom) {  // no cause came after a symptom: the symptom is all there is to report
        if (self->state.finishing) return;
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
        s.args.log->eval(r.epoch, sum.steps, loss, acc);
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
