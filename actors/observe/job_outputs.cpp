// job_outputs: the metrics log, the plan's log line, and the trace files of a finished job.
#include "actors/observe/job_outputs.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <thread>

#include "actors/observe/metrics_log.hpp"
#include "actors/observe/run_curves.hpp"
#include "actors/observe/server_report.hpp"
#include "actors/observe/pipeline_timing.hpp"
#include "schedules/render.hpp"
#include "schedules/simulate.hpp"

namespace troupe {

job_outputs::job_outputs(const train_config& cfg, const prepared_job& data)
    : summary(std::make_shared<train_summary>()),
      log(std::make_shared<metrics_log>(cfg.out_dir, data.steps_per_epoch, cfg.epochs, cfg.progress)),
      failure(std::make_shared<job_failure>()),
      record(std::make_shared<job_record>()) {
  summary->metrics_path = log->path();
  if (!cfg.metrics_prom.empty()) prom = std::make_shared<prometheus_file>(cfg.metrics_prom);
}

namespace {

// Marks the actions of a lane that ran away from their place in the row (ready dispatch); returns
// how many did.
int64_t mark_out_of_order(std::vector<sched::timed_action>& lane, const std::vector<sched::action>& row) {
  int64_t moved = 0;
  for (size_t i = 0; i < lane.size(); ++i) {
    lane[i].out_of_order = i >= row.size() || !(lane[i].what == row[i]);
    moved += lane[i].out_of_order ? 1 : 0;
  }
  return moved;
}

}  // namespace

void log_plan(const train_config& cfg, const prepared_job& data, const job_plan& plan) {
  // Each rank's stage computes on its own thread with cfg.threads BLAS threads: more than the
  // cores run slower, not wrong, so it is said rather than refused.
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const int busy = plan.mesh.ranks_per_process() * cfg.threads;
  if (busy > static_cast<int>(cores))
    spdlog::warn("{} ranks x {} BLAS thread(s) in this process on {} cores: the job is oversubscribed and each step "
                 "slower than the simulator predicts for one device per rank",
                 plan.mesh.ranks_per_process(), cfg.threads, cores);
  std::string cut;
  for (const auto& r : plan.chunks) cut += fmt::format(" [{},{})", r.begin, r.end);
  const auto& s = plan.schedule;
  spdlog::info("model {} ({} parameters), {} steps of {} samples, optimizer {} lr {}{}", describe(data.model),
               data.num_params, data.total_steps, cfg.batch_size, to_string(cfg.optim.kind), cfg.optim.lr,
               cfg.matmul == matmul_precision::f32 ? "" : ", matmuls on bf16 operands");
  spdlog::info("mesh {} ({} ranks: dp {}{} x pp {} x tp {}{}{}), schedule {} P={} M={} v={}, layer chunks{}{}",
               sched::to_string(plan.mesh), plan.mesh.ranks(), plan.mesh.dp,
               plan.mesh.cp > 1 ? fmt::format(" x cp {} (each sequence split over cp ranks)", plan.mesh.cp) : std::string(),
               plan.mesh.pp, plan.mesh.tp,
               plan.mesh.tp > 1 ? ", tp innermost: each tensor-parallel group on consecutive ranks" : "",
               plan.mesh.ep > 1 ? fmt::format("; ep {}: each {} consecutive replicas share out the experts", plan.mesh.ep,
                                              plan.mesh.ep)
                                : std::string(),
               s.name, s.num_stages,
               s.num_microbatches, s.virtual_stages, cut,
               plan.mesh.replicas() > 1 && cfg.consistency == consistency_model::none
                   ? fmt::format(", {} gradient buckets per replica of up to {} MiB",
                                              [&] {
                                                int n = 0;
                                                for (int p = 0; p < plan.mesh.pp; ++p) n += plan.buckets_of_stage(p);
                                                return n;
                                              }(),
                                              cfg.bucket_mb)
                   : std::string());
  if (cfg.consistency != consistency_model::none) spdlog::info("{}", describe_servers(cfg));
}

train_summary finish_summary(const train_config& cfg, const job_plan& plan, job_outputs& out) {
  train_summary& sum = *out.summary;
  const job_record& rec = *out.record;
  sum.samples_per_s = sum.train_seconds > 0 ? static_cast<double>(sum.samples) / sum.train_seconds : 0.0;
  sum.buckets = plan.buckets_of_stage(0);
  sum.peak_live_activations = rec.peak_live;
  if (plan.mesh.tp > 1 && !sum.rank_tp_seconds.empty()) {
    // They run inside F and B on the stage's own thread: nothing hides them, so their share is
    // what tensor parallelism costs a step (waiting for the slowest peer included).
    double tp = 0, compute = 0;
    for (size_t r = 0; r < sum.rank_tp_seconds.size(); ++r) tp += sum.rank_tp_seconds[r], compute += sum.rank_compute_seconds[r];
    spdlog::info("tensor-parallel collectives: {:.1f}% of the ranks' compute time ({:.3f} s of {:.3f} s, all ranks)",
                 compute > 0 ? 100.0 * tp / compute : 0.0, tp, compute);
  }
  if (!sum.peak_activation_bytes.empty()) {
    const auto most = *std::max_element(sum.peak_activation_bytes.begin(), sum.peak_activation_bytes.end());
    spdlog::info("peak activation bytes of a rank: {:.2f} MiB (recompute {})", static_cast<double>(most) / (1 << 20),
                 to_string(cfg.recompute));
  }
  if (!sum.peak_memory_total.empty()) {
    const auto most = std::max_element(sum.peak_memory_total.begin(), sum.peak_memory_total.end());
    const auto r = static_cast<size_t>(most - sum.peak_memory_total.begin());
    spdlog::info("peak device memory of a rank (rank {}, zero {}): {} ({})", r, cfg.zero, format_bytes(*most),
                 sum.peak_memory[r].to_string());
  }
  // Before the traced step's files: a run that traced no step still gets its curves.
  sum.curves_path = cfg.out_dir + "/curves.svg";
  write_text_file(sum.curves_path, render_run_curves(sum.first_step, sum.losses, sum.step_samples_per_s,
                                                     sum.test_steps, sum.test_loss));
  if (rec.traced.empty()) return std::move(sum);
  std::filesystem::create_directories(cfg.out_dir);
  const int64_t traced = rec.traced.front().step;
  sum.measured = to_timeline(rec.traced, plan.mesh.pp * plan.mesh.tp,
                             fmt::format("step {}, mesh {}, schedule {}", traced, sched::to_string(plan.mesh), plan.schedule.name));
  if (cfg.dispatch == sched::dispatch_policy::ready)  // lane 2r: rank r's actions, of its stage's row
    for (size_t r = 0; r < rec.traced.size(); ++r)
      mark_out_of_order(sum.measured.stages[2 * r], plan.schedule.stages.at(static_cast<size_t>(
                                                        plan.mesh.coords_of(rec.traced[r].rank).pp)));
  sum.overlap_share = overlap_share(sum.measured);
  sum.trace_path = cfg.out_dir + "/trace.json";
  write_text_file(sum.trace_path, sched::render_chrome_trace(sum.measured));
  for (const auto& r : rec.recent)
    sum.recent.push_back(schedule_timeline(r, plan.schedule.name));
  int64_t moved = 0, actions = 0;  // ready dispatch: actions run away from their place in the row
  if (cfg.dispatch == sched::dispatch_policy::ready)
    for (auto& t : sum.recent)
      for (size_t d = 0; d < t.stages.size() && d < plan.schedule.stages.size(); ++d) {
        actions += static_cast<int64_t>(t.stages[d].size());
        moved += mark_out_of_order(t.stages[d], plan.schedule.stages[d]);
      }
  const sched::timeline& median = sum.recent[median_step(sum.recent)];
  sum.timeline_path = cfg.out_dir + "/timeline.svg";
  write_text_file(sum.timeline_path, sched::render_svg(median));
  spdlog::info("trace of step {}: {} (one Perfetto process per rank: its compute, its all-reduces){}; measured timeline of the "
               "median of the last {} steps: {}",
               traced, sum.trace_path,
               plan.mesh.replicas() > 1 && cfg.consistency == consistency_model::none
                   ? fmt::format("; all-reduce time hidden behind backward: {:.0f}%", 100.0 * sum.overlap_share)
                   : std::string(),
               sum.recent.size(), sum.timeline_path);
  if (cfg.dispatch == sched::dispatch_policy::ready)
    spdlog::info("ready dispatch: {} of {} actions ran out of their row's order over the last {} steps (stash headroom {})",
                 moved, actions, sum.recent.size(), cfg.ready_stash);
  if (plan.mesh.pp > 1) {
    const auto simulated = sched::simulate(plan.schedule, calibrate_costs(plan.schedule, sum.recent));
    spdlog::info("{}", compare_bubbles(measure_bubble(median), simulated));
  }
  return std::move(sum);
}

}  // namespace troupe
