// run_training: loads the data, plans the job over its mesh (job_plan) and runs it (run_job) with
// every rank's actors (mesh_job), the coordinator and the evaluator in this process, restarting
// from the last checkpoint when asked. The training loop itself is the message flow:
// step_clock.cpp orders steps, stage.cpp interprets each rank's schedule row. A mesh over several
// processes goes to process_job, whose placements spawn each process's ranks the same way.
#include "actors/run/training_job.hpp"

#include <spdlog/spdlog.h>

#include <filesystem>

#include "storage/checkpoint.hpp"

#include "actors/actors.hpp"
#include "actors/observe/job_outputs.hpp"
#include "actors/run/membership_plan.hpp"
#include "actors/compose/mesh_job.hpp"
#include "actors/observe/metrics_log.hpp"
#include "actors/observe/server_report.hpp"
#include "actors/run/process_job.hpp"
#include "actors/run/runtime_config.hpp"
#include "actors/run/run_job.hpp"
#include "actors/plan/accelerators.hpp"
#include "kernels/device_ops.hpp"

namespace troupe {

coordinator_args coordinator_args_for(const train_config& cfg, const prepared_job& data, const job_plan& plan,
                                      const job_outputs& out) {
  coordinator_args a;
  a.steps_per_epoch = data.steps_per_epoch;
  a.epochs = cfg.epochs;
  a.total_steps = data.total_steps;
  a.samples_per_step = cfg.batch_size;
  a.mesh = plan.mesh;
  a.plan = plan.schedule;
  a.model = data.model;
  a.chunks = plan.chunks;
  a.sharded_params = cfg.zero >= 3 && plan.mesh.replicas() > 1;
  a.trace_step = cfg.trace_step;
  a.log = out.log;
  a.prom = out.prom;
  a.slow_ranks.window = cfg.slow_rank_window;
  a.slow_ranks.threshold = cfg.slow_rank_threshold;
  a.summary = out.summary;
  a.failure = out.failure;
  a.record = out.record;
  a.watchdog_seconds = cfg.watchdog_seconds;
  a.first_step = plan.resume ? plan.resume->manifest.step : 0;
  a.checkpoint_dir = cfg.checkpoint_dir;
  a.checkpoint_every = cfg.checkpoint_every;
  a.keep = cfg.keep;
  a.dispensed = dispenses_batches(cfg);
  // An elastic job's image is a checkpoint's arrays in memory: the same manifest fields.
  if (!cfg.checkpoint_dir.empty() || cfg.elastic)
    a.checkpoint_base = checkpoint_base(cfg, data.model, data.steps_per_epoch, data.vocabulary);
  a.elastic.on = cfg.elastic;
  a.elastic.min_replicas = cfg.min_replicas;
  a.elastic.events = cfg.membership_events;
  a.elastic.replicas_hold_all = cfg.zero == 0;
  return a;
}

train_summary run_training(const train_config& cfg) { return run_training(cfg, job_extras{}); }

namespace {

train_summary run_once(const train_config& cfg, const job_extras& extras);

// A restart is this process's to make when it holds the whole job, or started the others itself
// (--nodes); under a launcher every process exits and the launcher starts them again.
bool restarts_here(const train_config& cfg) { return cfg.mesh.processes == 1 || cfg.process.on_restart; }

}  // namespace

train_summary run_training(const train_config& cfg, const job_extras& extras) {
  train_config c = cfg;
  for (int restarts = 0;; ++restarts) {
    try {
      train_summary s = run_once(c, extras);
      s.restarts = restarts;
      return s;
    } catch (const std::invalid_argument&) {
      throw;  // refused before it started: a restart would be refused again
    } catch (const std::runtime_error& e) {
      if (restarts >= c.max_restarts || !restarts_here(c)) throw;
      std::error_code ec;
      const std::vector<std::string> saved = std::filesystem::is_directory(c.checkpoint_dir, ec)
                                                 ? storage::committed_checkpoints(c.checkpoint_dir)
                                                 : std::vector<std::string>{};
      c.resume = saved.empty() ? std::string() : saved.back();
      const int64_t from = saved.empty() ? 0 : storage::read_manifest(saved.back()).step;
      if (saved.empty())
        spdlog::warn("restart {} of {}: the job failed ({}); no checkpoint was committed yet, so every rank starts again "
                     "from the beginning and every step it did is replayed",
                     restarts + 1, c.max_restarts, e.what());
      else
        spdlog::warn("restart {} of {}: the job failed ({}); every rank starts again from the checkpoint {}, so the "
                     "steps it did after step {} are replayed",
                     restarts + 1, c.max_restarts, e.what(), saved.back(), from);
      if (c.process.on_restart) c.process.on_restart(c.resume);
    }
  }
}

namespace {

// The ranks' devices (a composition's device_of, else --device), each opened once and checked
// before any actor exists: a stage on an accelerator needs that device's ops, and a
// tensor-parallel group on devices an engine that sums there.
job_extras with_checked_devices(const train_config& cfg, const job_plan& plan, job_extras extras) {
  extras.device_of = open_rank_devices(cfg, plan.mesh.ranks_of_process(0), extras.device_of);
  if (!extras.device_of) return extras;
  check_tp_groups_on_devices(engines_of(extras), plan.mesh, [&extras](int rank) {
    const std::shared_ptr<device_queue> q = extras.device_of(rank);
    return q ? q->where() : device{};
  });
  return extras;
}

// The whole job in this process: every rank's actors, the coordinator and the evaluator.
class whole_job final : public placement {
 public:
  whole_job(const train_config& cfg, const prepared_job& data, const job_plan& plan, const job_extras& given,
            const job_extras& extras)
      : cfg_(cfg), data_(data), plan_(plan), given_(given), extras_(extras), out_(cfg, data) {}

  void configure(caf::actor_system_config& sys_cfg) override {
    configure_runtime(sys_cfg);
    if (extras_.scheduler_threads > 0)
      sys_cfg.set("scheduler.max-threads", static_cast<int>(extras_.scheduler_threads));
  }

  void start(caf::actor_system& sys) override {
    coordinator_ = spawn_coordinator(sys, coordinator_args_for(cfg_, data_, plan_, out_));
    ranks_ = spawn_mesh(sys, cfg_, data_, plan_, coordinator_, extras_);
    auto evaluator = spawn_evaluator(sys, data_.model, cfg_.seed, ranks_.loaders.at(0), coordinator_);
    ranks_.members.push_back(evaluator);
    if (extras_.on_spawned) extras_.on_spawned(sys, ranks_.stages);
    caf::anon_send(coordinator_, watch_atom::value, ranks_.collectives);
    caf::anon_send(coordinator_, start_atom::value, ranks_.stages, evaluator, ranks_.members);
  }

  std::string wait(caf::actor_system& sys) override {
    caf::scoped_actor self{sys};
    self->wait_for(coordinator_);
    return out_.failure->what;
  }

  // An elastic job's membership change: the job planned again over the replicas the change
  // leaves, from the image the coordinator took.
  bool next_membership() override {
    auto& sum = *out_.summary;
    if (!sum.regroup) return false;
    const std::shared_ptr<const resume_point> image = std::exchange(sum.regroup, nullptr);
    const std::vector<membership_event> at = events_at(sum.membership, image->manifest.step);
    const train_config before = cfg_;
    cfg_ = plan_membership(cfg_, at).cfg;
    log_membership(out_.log.get(), image->manifest.step, at, before, cfg_);
    plan_ = plan_job(cfg_, data_);
    plan_.resume = image;
    extras_ = with_checked_devices(cfg_, plan_, given_);
    *out_.record = job_record{};  // the steps measured over the last membership's ranks
    return true;
  }

  void abort_waits(const std::string& why) override { abort_group_waits(ranks_, "the job failed: " + why); }

  void stop(caf::actor_system& sys) override {
    std::vector<caf::actor> all = ranks_.members;
    all.push_back(coordinator_);
    stop_all(sys, all);
    server_updates_ = ranks_.server_updates;
    dispensed_ = ranks_.dispensed;
    ranks_ = {};
    coordinator_ = nullptr;
  }

  train_summary summary() override {
    train_summary s = finish_summary(cfg_, plan_, out_);
    for (const auto& u : server_updates_) s.server_updates.insert(s.server_updates.end(), u->begin(), u->end());
    if (dispensed_) s.dispensed = *dispensed_;
    if (const std::string servers = summarize_servers(cfg_, s); !servers.empty()) spdlog::info("{}", servers);
    return s;
  }

 private:
  train_config cfg_;  // an elastic job's: its mesh changes with its membership
  const prepared_job& data_;
  job_plan plan_;
  const job_extras& given_;
  job_extras extras_;
  job_outputs out_;
  caf::actor coordinator_;
  rank_actors ranks_;
  std::vector<std::shared_ptr<std::vector<train_summary::server_update>>> server_updates_;
  std::shared_ptr<std::vector<train_summary::dispensed_batch>> dispensed_;
};

train_summary run_once(const train_config& cfg, const job_extras& extras) {
  if (cfg.zero >= 1 && cfg.mesh.replicas() > 1 && !extras.gradient_observers.empty())
    throw std::invalid_argument("gradient observers see a rank's whole gradients, which ZeRO (zero " +
                                std::to_string(cfg.zero) + ") hands to its optimizer shard only in part; use zero 0");
  if (cfg.mesh.processes > 1 && !extras.gradient_observers.empty())
    throw std::invalid_argument("gradient observers run in the job's one process; this job spans " +
                                std::to_string(cfg.mesh.processes));
  if (cfg.mesh.processes > 1 && (extras.on_spawned || extras.scheduler_threads > 0))
    throw std::invalid_argument("scheduler threads and spawn hooks of job_extras apply to a job in one process; this "
                                "job spans " + std::to_string(cfg.mesh.processes));
  if (cfg.mesh.processes + cfg.server_processes > 1)
    return run_process_training(cfg, extras.device_of, engines_of(extras));
  validate(cfg);
  const prepared_job data = prepare_job(cfg);
  const job_plan plan = plan_job(cfg, data);
  const job_extras on_devices = with_checked_devices(cfg, plan, extras);
  log_plan(cfg, data, plan);
  whole_job where(cfg, data, plan, extras, on_devices);
  return run_job(where);
}

}  // namespace

}  // namespace troupe
