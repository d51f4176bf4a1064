// run_training: loads the data, sizes the job, spawns its actors and waits for the coordinator.
// The training loop itself is the message flow between them; coordinator.cpp is where it starts.
#include "actors/training_job.hpp"

#include <spdlog/spdlog.h>

#include <cmath>
#include <fstream>

#include "actors/actors.hpp"
#include "actors/dp_actors.hpp"
#include "schedules/render.hpp"
#include "actors/metrics_log.hpp"
#include "actors/runtime_config.hpp"
#include "actors/pipeline_job.hpp"
#include "actors/prepared_job.hpp"
#include "actors/process_job.hpp"
#include "actors/teardown_guard.hpp"
#include "comm/tls_files.hpp"
#include "kernels/blas_runtime.hpp"

namespace troupe {

void validate(const train_config& c) {
  auto bad = [](const std::string& what) { throw std::invalid_argument(what); };
  validate(c.optim);
  if (c.epochs <= 0) bad("epochs must be positive, got " + std::to_string(c.epochs));
  if (c.batch_size <= 0) bad("batch_size must be positive, got " + std::to_string(c.batch_size));
  if (c.threads <= 0) bad("threads must be positive, got " + std::to_string(c.threads));
  if (c.threads > blas_max_threads())  // more hangs inside OpenBLAS
    bad("threads " + std::to_string(c.threads) + " exceeds the " + std::to_string(blas_max_threads()) +
        " this OpenBLAS was built for");
  if (c.max_steps < 0) bad("max_steps must be >= 0");
  if (c.eval_batch_size <= 0) bad("eval_batch_size must be positive");
  if (c.out_dir.empty()) bad("out must name a folder");
  if (c.model.kind != "mlp" && c.model.kind != "gpt") validate(c.model);
  if (const std::string m = sched::check(c.mesh); !m.empty()) bad("mesh " + sched::to_string(c.mesh) + ": " + m);
  if (c.mesh.dp > c.batch_size)
    bad("dp " + std::to_string(c.mesh.dp) + " exceeds batch_size " + std::to_string(c.batch_size) +
        ": a rank would get no rows");
  if (c.mesh.dp > 1 && c.mesh.pp > 1) bad("dp and pp together are not supported yet");
  if (c.mesh.processes > 1 && (c.mesh.pp > 1 || c.mesh.ranks_per_process() != 1))
    bad("mesh " + sched::to_string(c.mesh) + ": a job of several processes holds one data-parallel rank per process "
        "for now (dp = processes, pp = 1)");
  if (c.process.index < 0 || c.process.index >= c.mesh.processes)
    bad("process " + std::to_string(c.process.index) + " is not in 0.." + std::to_string(c.mesh.processes - 1));
  // Not finite would be nonsense once converted to bytes or milliseconds (the CLI's table of
  // tunables gives the user-facing ranges; these guard the C++ API).
  if (!std::isfinite(c.bucket_mb) || c.bucket_mb < 0) bad("bucket_mb must be a finite number >= 0 (0: one bucket per layer)");
  if (!std::isfinite(c.watchdog_seconds) || c.watchdog_seconds < 0) bad("watchdog_seconds must be a finite number >= 0");
  const double peer = c.process.peer_timeout_seconds;
  if (!std::isfinite(peer) || peer < 0.001 || peer > 1e6)  // milliseconds in an int, never 0
    bad("process.peer_timeout_seconds must be a finite number in [0.001, 1e6]");
  net::check_tls_files(c.process.tls_cert, c.process.tls_key, c.process.tls_ca);
  for (const auto& st : c.stragglers)
    if (st.rank >= c.mesh.dp)
      bad("straggler rank " + std::to_string(st.rank) + " but dp is " + std::to_string(c.mesh.dp));
}

eval_plan plan_evaluation(const train_config& c, int64_t held_out, int64_t rows_per_sample) {
  eval_plan p;
  p.samples = c.eval_max_batches > 0 ? std::min(held_out, c.eval_max_batches * c.eval_batch_size) : held_out;
  const int64_t rows = std::max<int64_t>(c.batch_size * rows_per_sample, 1000);
  p.piece = std::max<int64_t>(1, std::min(c.eval_batch_size, rows / std::max<int64_t>(rows_per_sample, 1)));
  return p;
}

namespace {

// The traced data-parallel step as Chrome trace JSON (opens in Perfetto), and its overlap share.
void write_dp_trace(const train_config& cfg, const std::vector<dp_trace_event>& events, train_summary& summary) {
  const sched::timeline t = to_timeline(events, cfg.mesh.dp, "data parallel step");
  summary.overlap_share = overlap_share(t);
  summary.trace_path = cfg.out_dir + "/trace.json";
  write_text_file(summary.trace_path, sched::render_chrome_trace(t));
  spdlog::info("trace of one step: {} (lanes 2r: rank r compute, 2r+1: its all-reduces); all-reduce time hidden "
               "behind backward: {:.0f}%", summary.trace_path, 100.0 * summary.overlap_share);
}

}  // namespace

train_summary run_training(const train_config& cfg) {
  if (cfg.mesh.processes > 1) return run_process_training(cfg);
  if (cfg.mesh.pp > 1) return run_pipeline_training(cfg);
  validate(cfg);
  const prepared_job data = prepare_job(cfg);
  const int64_t steps_per_epoch = data.steps_per_epoch, total_steps = data.total_steps;
  const int64_t rows_per_sample = data.rows_per_sample, num_params = data.num_params;
  spdlog::info("model {} ({} parameters), {} steps of {} samples, optimizer {} lr {}", describe(data.model),
               num_params, total_steps, cfg.batch_size, cfg.optim.kind, cfg.optim.lr);

  auto summary = std::make_shared<train_summary>();
  auto failure = std::make_shared<job_failure>();
  auto trace = std::make_shared<std::vector<dp_trace_event>>();
  auto log = std::make_shared<metrics_log>(cfg.out_dir, steps_per_epoch, cfg.epochs, cfg.progress);
  summary->metrics_path = log->path();
  teardown_guard guard;  // declared before the actor system: it outlives the system's destructor
  {
    caf::actor_system_config sys_cfg;
    configure_runtime(sys_cfg);
    caf::actor_system sys{sys_cfg};
    auto coordinator = spawn_coordinator(sys, {steps_per_epoch, cfg.epochs, total_steps, cfg.batch_size, log, summary,
                                               failure, trace, cfg.watchdog_seconds});
    if (cfg.mesh.dp > 1) {
      dp_job_parts dp = spawn_dp_job(sys, {data.model, data.train, data.eval, &cfg, cfg.batch_size * rows_per_sample,
                                           total_steps, num_params, coordinator});
      summary->buckets = static_cast<int>(dp.buckets.size());
      spdlog::info("data parallel: {} ranks, {} gradient buckets of up to {} MiB", cfg.mesh.dp, dp.buckets.size(),
                   cfg.bucket_mb);
      caf::anon_send(coordinator, watch_atom::value, dp.collectives);
      caf::anon_send(coordinator, start_atom::value, dp.stages, dp.members);
      caf::scoped_actor self{sys};
      self->wait_for(coordinator);
    } else {
      auto optimizer = spawn_optimizer_shard(sys, cfg.optim, 0, num_params);
      auto loader = spawn_data_loader(sys, {data.train, data.eval, cfg.batch_size,
                                            plan_evaluation(cfg, data.eval->size(), rows_per_sample), cfg.seed, 0, 1});
      stage_args sa;
      sa.model = data.model;
      sa.seed = cfg.seed;
      sa.global_rows = cfg.batch_size * rows_per_sample;
      sa.total_steps = total_steps;
      sa.loader = loader;
      sa.optimizer = optimizer;
      sa.coordinator = coordinator;
      auto stage = spawn_stage(sys, sa);
      caf::anon_send(coordinator, start_atom::value, stage, std::vector<caf::actor>{stage, optimizer, loader});
      caf::scoped_actor self{sys};
      self->wait_for(coordinator);
    }
    // The actor system's destructor waits for every stage; one wedged in a computation (what the
    // watchdog reported) would hold the process forever.
    if (!failure->what.empty()) guard.arm(failure->what, failed_job_grace);
  }
  if (!failure->what.empty()) throw std::runtime_error(failure->what);
  if (cfg.mesh.dp > 1 && !trace->empty()) write_dp_trace(cfg, *trace, *summary);
  summary->samples_per_s =
      summary->train_seconds > 0 ? static_cast<double>(summary->samples) / summary->train_seconds : 0.0;
  return std::move(*summary);
}

}  // namespace troupe
