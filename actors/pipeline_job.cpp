// pipeline_job: the driver side of a pipeline. It validates the plan, cuts the model, spawns
// the data loader, one optimizer shard and one pipeline_stage per device, then orders steps and
// collects their reports. Its watchdog polls every stage when reports stop coming and, when no
// stage moved between two polls, stops the job with where each stage is blocked. It does not
// evaluate or log: run_pipeline_training (pipeline_training.cpp) does.
#include "actors/runtime_config.hpp"
#include "actors/pipeline_job.hpp"
#include "actors/teardown_guard.hpp"

#include <chrono>
#include <cstdio>

#include "actors/actor_failure.hpp"
#include "actors/actors.hpp"
#include "actors/pipeline_actors.hpp"
#include "schedules/render.hpp"
#include "schedules/validate.hpp"

namespace troupe {

using clock_type = std::chrono::steady_clock;

struct pipeline_job::impl {
  pipeline_job_args args;
  std::vector<layer_range> chunks;
  std::vector<int> peak_live;
  teardown_guard guard;          // outlives sys, whose destructor may wait forever after a failure
  std::string failure;           // what stop() reported
  caf::actor_system_config cfg;  // the system keeps a reference to it: it must outlive sys
  std::unique_ptr<caf::actor_system> sys;
  std::unique_ptr<caf::scoped_actor> self;
  std::vector<caf::actor> stages, members, stopped;  // stopped: members after a failure

  ~impl() {
    if (!failure.empty()) guard.arm(failure, failed_job_grace);
    for (auto& m : members) caf::anon_send_exit(m, caf::exit_reason::user_shutdown);
    for (auto& m : stopped) members.push_back(m);
    if (self && !members.empty()) (*self)->wait_for(members);
    // A detached actor's thread ends only once no handle to it is left, and it must have
    // terminated before its last handle goes: hence wait, then drop the handles, then the system.
    members.clear();
    stopped.clear();
    stages.clear();
    self.reset();
    sys.reset();  // waits for every actor to finish
  }

  // One line per stage, and each blocked stage's row marked in the schedule grid.
  std::string watchdog_report(int64_t step, const std::vector<pipeline_status>& st) const {
    const auto& plan = args.plan;
    char seconds[32];
    std::snprintf(seconds, sizeof seconds, "%.1f", args.watchdog_seconds);
    std::string out = "pipeline watchdog: no progress for " + std::string(seconds) + " s in step " +
                      std::to_string(step) + " of schedule " + plan.name + " (P=" + std::to_string(plan.num_stages) +
                      ", M=" + std::to_string(plan.num_microbatches) + ")\n";
    for (const auto& s : st) {
      out += "stage " + std::to_string(s.stage) + ": ";
      if (s.step < 0 && s.action.empty()) {
        out += s.waiting_for.empty() ? "no answer\n" : s.waiting_for + "\n";
        continue;
      }
      out += "action " + std::to_string(s.cursor) + " of " + std::to_string(s.actions) + " (" + s.action +
             "): waits for " + s.waiting_for + "\n";
    }
    for (const auto& s : st)
      if (!s.action.empty())
        out += "stage " + std::to_string(s.stage) + " is blocked here:\n" + sched::render_text(plan, s.stage, s.cursor);
    return out;
  }

  std::vector<pipeline_status> poll() {
    std::vector<pipeline_status> out;
    for (size_t d = 0; d < stages.size(); ++d) {
      pipeline_status answer;
      answer.stage = static_cast<int32_t>(d);
      answer.completed = -1;
      answer.waiting_for = "no answer within 1 s (busy in a long action, or gone)";
      (*self)->request(stages[d], std::chrono::seconds(1), pipeline_status_request{}).receive(
          [&](pipeline_status& s) { answer = std::move(s); }, [](caf::error&) {});
      out.push_back(std::move(answer));
    }
    return out;
  }

  [[noreturn]] void stop(const std::string& why) {
    failure = why;
    for (auto& m : members) caf::anon_send_exit(m, caf::exit_reason::user_shutdown);
    stopped = std::move(members);
    members.clear();
    throw std::runtime_error(why);
  }
};

pipeline_job::pipeline_job(pipeline_job_args args) : impl_(std::make_unique<impl>()) {
  auto& im = *impl_;
  im.args = std::move(args);
  const auto& plan = im.args.plan;
  const sched::validation check = sched::validate(plan);
  if (!check.ok()) throw std::invalid_argument("pipeline: the schedule is refused before it runs: " + check.error);
  const int M = plan.num_microbatches;
  if (im.args.batch_size <= 0 || im.args.batch_size % M != 0)
    throw std::invalid_argument("pipeline: the global batch (" + std::to_string(im.args.batch_size) +
                                ") must be a positive multiple of the microbatches (" + std::to_string(M) + ")");
  if (!im.args.train) throw std::invalid_argument("pipeline: no training dataset");
  const int K = sched::num_model_chunks(plan);
  const auto sizes = params_per_layer(build_layers(im.args.model));
  im.chunks = im.args.cuts.empty() ? balanced_partition(sizes, K)
                                   : partition_at(static_cast<int64_t>(sizes.size()), im.args.cuts, K);
  im.peak_live.assign(static_cast<size_t>(plan.num_stages), 0);

  configure_runtime(im.cfg);
  im.sys = std::make_unique<caf::actor_system>(im.cfg);
  im.self = std::make_unique<caf::scoped_actor>(*im.sys);
  auto& sys = *im.sys;
  const caf::actor_addr driver = (*im.self)->address();
  auto loader = spawn_data_loader(sys, {im.args.train, im.args.train, im.args.batch_size, eval_plan{1, 1}, im.args.seed, 0, 1});
  im.members.push_back(loader);
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  for (int d = 0; d < plan.num_stages; ++d) {
    int64_t n = 0;
    for (int c = 0; c < plan.virtual_stages; ++c) {
      const layer_range r = im.chunks[static_cast<size_t>(sched::model_chunk(plan, d, c))];
      for (int64_t i = r.begin; i < r.end; ++i) n += sizes[static_cast<size_t>(i)];
    }
    pipeline_stage_args a;
    a.stage = d;
    a.plan = plan;
    a.model = im.args.model;
    a.model_chunks = im.chunks;
    a.seed = im.args.seed;
    a.global_rows = im.args.batch_size * im.args.rows_per_sample;
    a.batch_size = im.args.batch_size;
    a.total_steps = im.args.total_steps;
    a.pin_cpu = im.args.pin_threads ? static_cast<int>(static_cast<unsigned>(d) % cores) : -1;
    a.drop_send = im.args.drop_send;
    a.loader = loader;
    a.driver = driver;
    if (n > 0) {  // a stage of ReLUs alone has nothing to optimize
      a.optimizer = spawn_optimizer_shard(sys, im.args.optim, 0, n);
      im.members.push_back(a.optimizer);
    }
    im.stages.push_back(spawn_pipeline_stage(sys, std::move(a)));
    im.members.push_back(im.stages.back());
  }
  for (auto& s : im.stages) {
    (*im.self)->send(s, peers_atom::value, im.stages);
    (*im.self)->monitor(s);
  }
}

pipeline_job::~pipeline_job() = default;

pipeline_step_result pipeline_job::run_step(int64_t step) {
  auto& im = *impl_;
  auto& self = *im.self;
  const auto P = static_cast<size_t>(im.args.plan.num_stages);
  if (im.members.empty()) throw std::runtime_error("pipeline: the job was stopped by an earlier failure");
  const auto origin = clock_type::now();
  const int64_t origin_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(origin.time_since_epoch()).count();
  for (auto& s : im.stages) self->send(s, pipeline_step_order{step, origin_ns});

  pipeline_step_result out;
  out.measured.name = im.args.plan.name;
  out.measured.stages.resize(P);
  size_t reports = 0;
  std::vector<int64_t> last_progress;  // completed counts at the previous watchdog poll
  const auto period = std::chrono::milliseconds(static_cast<int64_t>(im.args.watchdog_seconds * 1000));
  while (reports < P) {
    std::string failure;
    bool quiet = false;
    self->receive(
        [&](pipeline_step_report& r) {
          auto& lane = out.measured.stages.at(static_cast<size_t>(r.stage));
          for (size_t i = 0; i < r.actions.size(); ++i)
            lane.push_back({sched::parse_action(r.actions[i]), r.start_seconds[i], r.end_seconds[i]});
          out.loss_sum += r.loss_sum;
          out.count += r.count;
          out.correct += r.correct;
          auto& peak = im.peak_live[static_cast<size_t>(r.stage)];
          peak = std::max(peak, static_cast<int>(r.peak_live));
          ++reports;
          last_progress.clear();
        },
        [&](pipeline_failure& f) { failure = "pipeline: " + f.what; },
        [&](caf::down_msg& dm) { failure = "pipeline: a stage stopped: " + describe_exit(*im.sys, dm.reason); },
        caf::after(period) >> [&] { quiet = true; });
    if (!failure.empty()) im.stop(failure);
    if (!quiet) continue;
    const auto st = im.poll();
    std::vector<int64_t> progress;
    bool all_answered = true;
    for (const auto& s : st) {
      progress.push_back(s.completed);
      all_answered = all_answered && s.completed >= 0;
    }
    if (all_answered && progress == last_progress) im.stop(im.watchdog_report(step, st));
    last_progress = std::move(progress);
  }
  out.seconds = std::chrono::duration<double>(clock_type::now() - origin).count();
  return out;
}

tensor pipeline_job::params() {
  auto& im = *impl_;
  std::vector<tensor> by_chunk(im.chunks.size());
  for (auto& s : im.stages) {
    (*im.self)->request(s, std::chrono::seconds(30), pipeline_params_request{}).receive(
        [&](pipeline_params_msg& m) {
          for (size_t i = 0; i < m.params.size(); ++i) by_chunk.at(static_cast<size_t>(m.model_chunks[i])) = m.params[i];
        },
        [&](caf::error& e) { im.stop("pipeline: parameters not delivered: " + im.sys->render(e)); });
  }
  int64_t n = 0;
  for (const auto& t : by_chunk) n += t.numel();
  tensor out({n});
  int64_t at = 0;
  for (const auto& t : by_chunk) {
    std::copy(t.data(), t.data() + t.numel(), out.data() + at);
    at += t.numel();
  }
  return out;
}

const std::vector<layer_range>& pipeline_job::chunks() const { return impl_->chunks; }
const std::vector<int>& pipeline_job::peak_live_activations() const { return impl_->peak_live; }
const sched::schedule& pipeline_job::plan() const { return impl_->args.plan; }

}  // namespace troupe
