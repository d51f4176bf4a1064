// run_pipeline_training: `troupe train --pp P`: the training loop over a pipeline_job, with
// metrics per step, evaluation at each epoch end (on the gathered parameters, on this thread),
// and the measured timeline of the median recent step drawn by the schedules/ renderers next
// to the simulation calibrated from it. The pipeline itself is in pipeline_job/pipeline_stage.
#include <spdlog/spdlog.h>

#include <filesystem>

#include "actors/metrics_log.hpp"
#include "actors/pipeline_job.hpp"
#include "actors/prepared_job.hpp"
#include "actors/pipeline_timing.hpp"
#include "kernels/train_step.hpp"
#include "schedules/named.hpp"
#include "schedules/passes.hpp"
#include "schedules/render.hpp"
#include "storage/dataset.hpp"

namespace troupe {

namespace {

step_stats evaluate_params(const train_config& cfg, const prepared_job& d, const tensor& params) {
  layer_stack stack(build_layers(d.model), 0, cfg.seed);
  stack.load_params(params);
  step_stats total;
  const eval_plan plan = plan_evaluation(cfg, d.eval->size(), d.rows_per_sample);
  for (int64_t b = 0; b < plan.pieces(); ++b) {
    std::vector<int64_t> idx;
    for (int64_t i = b * plan.piece; i < std::min(plan.samples, (b + 1) * plan.piece); ++i) idx.push_back(i);
    total.add(evaluate(stack, d.eval->gather(idx)));
  }
  return total;
}

}  // namespace

train_summary run_pipeline_training(const train_config& cfg) {
  validate(cfg);
  const prepared_job data = prepare_job(cfg);
  const sched::schedule plan = sched::make_named_schedule(cfg.schedule, cfg.mesh.pp, cfg.micro_batches, cfg.virtual_stages);
  const int64_t steps_per_epoch = data.steps_per_epoch, total_steps = data.total_steps;

  pipeline_job_args a;
  a.model = data.model;
  a.optim = cfg.optim;
  a.seed = cfg.seed;
  a.batch_size = cfg.batch_size;
  a.rows_per_sample = data.rows_per_sample;
  a.total_steps = total_steps;
  a.train = data.train;
  a.plan = plan;
  a.cuts = cfg.cuts;
  a.watchdog_seconds = cfg.watchdog_seconds;
  pipeline_job job(a);
  std::string cut_text;
  for (const auto& r : job.chunks()) cut_text += " [" + std::to_string(r.begin) + "," + std::to_string(r.end) + ")";
  spdlog::info("pipeline {} P={} M={} v={}: model {} cut into layer chunks{}", plan.name, plan.num_stages,
               plan.num_microbatches, plan.virtual_stages, describe(data.model), cut_text);

  train_summary sum;
  metrics_log log(cfg.out_dir, steps_per_epoch, cfg.epochs, cfg.progress);
  sum.metrics_path = log.path();
  std::vector<sched::timeline> recent;  // the last few steps, for the measured timeline
  for (int64_t step = 0; step < total_steps; ++step) {
    pipeline_step_result r = job.run_step(step);
    sum.losses.push_back(r.mean_loss());
    sum.train_seconds += r.seconds;
    sum.samples += cfg.batch_size;
    sum.steps = step + 1;
    const int64_t epoch = step / steps_per_epoch;
    log.step(step, epoch, r.mean_loss(), static_cast<double>(cfg.batch_size) / r.seconds);
    recent.push_back(std::move(r.measured));
    if (recent.size() > 9) recent.erase(recent.begin());
    if (step + 1 == total_steps || (step + 1) % steps_per_epoch == 0) {
      const step_stats e = evaluate_params(cfg, data, job.params());
      const double acc = e.count ? static_cast<double>(e.correct) / static_cast<double>(e.count) : 0.0;
      sum.test_accuracy.push_back(acc);
      sum.test_loss.push_back(e.mean_loss());
      log.eval(epoch, sum.steps, e.mean_loss(), acc);
    }
  }
  sum.final_params = job.params();
  sum.samples_per_s = sum.train_seconds > 0 ? static_cast<double>(sum.samples) / sum.train_seconds : 0.0;

  if (!recent.empty()) {
    const sched::timeline& t = recent[median_step(recent)];
    std::filesystem::create_directories(cfg.out_dir);
    write_text_file(cfg.out_dir + "/timeline.svg", sched::render_svg(t));
    write_text_file(cfg.out_dir + "/timeline.json", sched::render_chrome_trace(t));
    const auto simulated = sched::simulate(plan, calibrate_costs(plan, recent));
    spdlog::info("measured timeline of the median of the last {} steps: {}/timeline.svg, timeline.json\n{}",
                 recent.size(), cfg.out_dir, compare_bubbles(measure_bubble(t), simulated));
  }
  return sum;
}

}  // namespace troupe
