// run_training: loads the data, sizes the job, spawns its actors and waits for the coordinator.
// The training loop itself is the message flow between them; coordinator.cpp is where it starts.
#include "actors/training_job.hpp"

#include "kernels/blas_runtime.hpp"
#include <spdlog/spdlog.h>

#include <fstream>

#include "actors/actors.hpp"
#include "actors/dp_actors.hpp"
#include "schedules/render.hpp"
#include "actors/metrics_log.hpp"
#include "actors/pipeline_job.hpp"
#include "actors/process_job.hpp"

namespace troupe {

void validate(const train_config& c) {
  auto bad = [](const std::string& what) { throw std::invalid_argument(what); };
  validate(c.optim);
  if (c.epochs <= 0) bad("epochs must be positive, got " + std::to_string(c.epochs));
  if (c.batch_size <= 0) bad("batch_size must be positive, got " + std::to_string(c.batch_size));
  if (c.threads <= 0) bad("threads must be positive, got " + std::to_string(c.threads));
  if (c.max_steps < 0) bad("max_steps must be >= 0");
  if (c.eval_batch_size <= 0) bad("eval_batch_size must be positive");
  if (c.out_dir.empty()) bad("out must name a folder");
  if (c.model.kind != "mlp" && c.model.kind != "gpt") validate(c.model);
  if (c.dp <= 0) bad("dp must be positive, got " + std::to_string(c.dp));
  if (c.dp > c.batch_size)
    bad("dp " + std::to_string(c.dp) + " exceeds batch_size " + std::to_string(c.batch_size) + ": a rank would get no rows");
  if (c.dp > 1 && c.pp > 1) bad("dp and pp together are not supported yet");
  if (c.bucket_mb < 0) bad("bucket_mb must be >= 0 (0: one bucket per layer)");
  for (const auto& st : c.stragglers)
    if (st.rank >= c.dp) bad("straggler rank " + std::to_string(st.rank) + " but dp is " + std::to_string(c.dp));
}

namespace {

struct job_data {
  std::shared_ptr<const storage::dataset> train, eval;
  model_spec model;
};

job_data load_data(const train_config& cfg) {
  job_data d{nullptr, nullptr, cfg.model};
  if (cfg.model.kind == "mlp") {
    auto fm = storage::load_fashion_mnist(cfg.fashion_mnist_dir);
    if (d.model.inputs != fm.train->features())
      throw std::invalid_argument("model.inputs is " + std::to_string(d.model.inputs) + " but Fashion-MNIST images have " +
                                  std::to_string(fm.train->features()) + " pixels");
    d.train = fm.train;
    d.eval = fm.test;
  } else {
    auto corpus = storage::load_text_corpus(cfg.corpus_path, cfg.model.context);
    const auto vocab = static_cast<int64_t>(corpus.vocab.size());
    if (d.model.vocab != 0 && d.model.vocab != vocab)
      throw std::invalid_argument("model.vocab is " + std::to_string(d.model.vocab) + " but the corpus has " +
                                  std::to_string(vocab) + " distinct characters (leave it 0 to take the corpus's)");
    d.model.vocab = vocab;
    d.train = corpus.train;
    d.eval = corpus.validation;
  }
  validate(d.model);
  return d;
}

int64_t count_params(const model_spec& spec) {
  int64_t n = 0;
  for (const auto& l : build_layers(spec)) n += l->num_params();
  return n;
}

// The traced data-parallel step as Chrome trace JSON (opens in Perfetto), and its overlap share.
void write_dp_trace(const train_config& cfg, const std::vector<dp_trace_event>& events, train_summary& summary) {
  const sched::timeline t = to_timeline(events, cfg.dp, "data parallel step");
  summary.overlap_share = overlap_share(t);
  summary.trace_path = cfg.out_dir + "/trace.json";
  std::ofstream out(summary.trace_path);
  out << sched::render_chrome_trace(t);
  if (!out) throw std::runtime_error("cannot write " + summary.trace_path);
  spdlog::info("trace of one step: {} (lanes 2r: rank r compute, 2r+1: its all-reduces); all-reduce time hidden "
               "behind backward: {:.0f}%", summary.trace_path, 100.0 * summary.overlap_share);
}

}  // namespace

prepared_job prepare_job(const train_config& cfg) {
  job_data data = load_data(cfg);
  prepared_job p{data.train, data.eval, data.model};
  p.steps_per_epoch = data.train->size() / cfg.batch_size;
  if (p.steps_per_epoch == 0)
    throw std::invalid_argument("batch_size " + std::to_string(cfg.batch_size) + " is larger than the " +
                                std::to_string(data.train->size()) + " training samples");
  p.total_steps = p.steps_per_epoch * cfg.epochs;
  if (cfg.max_steps > 0) p.total_steps = std::min(p.total_steps, cfg.max_steps);
  p.rows_per_sample = cfg.model.kind == "gpt" ? data.model.context : 1;
  p.num_params = count_params(data.model);
  return p;
}

train_summary run_training(const train_config& cfg) {
  if (cfg.process.world > 1) return run_process_training(cfg);
  if (cfg.pp > 1) return run_pipeline_training(cfg);
  validate(cfg);
  job_data data = load_data(cfg);
  set_blas_threads(cfg.threads);

  const int64_t steps_per_epoch = data.train->size() / cfg.batch_size;
  if (steps_per_epoch == 0)
    throw std::invalid_argument("batch_size " + std::to_string(cfg.batch_size) + " is larger than the " +
                                std::to_string(data.train->size()) + " training samples");
  int64_t total_steps = steps_per_epoch * cfg.epochs;
  if (cfg.max_steps > 0) total_steps = std::min(total_steps, cfg.max_steps);
  const int64_t rows_per_sample = cfg.model.kind == "gpt" ? data.model.context : 1;
  const int64_t num_params = count_params(data.model);
  spdlog::info("model {} ({} parameters), {} steps of {} samples, optimizer {} lr {}", describe(data.model),
               num_params, total_steps, cfg.batch_size, cfg.optim.kind, cfg.optim.lr);

  auto summary = std::make_shared<train_summary>();
  auto failure = std::make_shared<std::string>();
  auto trace = std::make_shared<std::vector<dp_trace_event>>();
  auto log = std::make_shared<metrics_log>(cfg.out_dir, steps_per_epoch, cfg.epochs, cfg.progress);
  summary->metrics_path = log->path();
  {
    caf::actor_system_config sys_cfg;
    add_message_types(sys_cfg);
    // Scheduler threads only route messages; compute runs on detached actors' own threads.
    sys_cfg.set("scheduler.max-threads", 2);
    caf::actor_system sys{sys_cfg};
    auto coordinator = spawn_coordinator(
        sys, {steps_per_epoch, cfg.epochs, total_steps, cfg.batch_size, log, summary, failure, trace});
    if (cfg.dp > 1) {
      dp_job_parts dp = spawn_dp_job(sys, {data.model, data.train, data.eval, &cfg, cfg.batch_size * rows_per_sample,
                                           total_steps, num_params, coordinator});
      summary->buckets = static_cast<int>(dp.buckets.size());
      spdlog::info("data parallel: {} ranks, {} gradient buckets of up to {} MiB", cfg.dp, dp.buckets.size(),
                   cfg.bucket_mb);
      caf::anon_send(coordinator, start_atom::value, dp.stages, dp.members);
      caf::scoped_actor self{sys};
      self->wait_for(coordinator);
    } else {
      auto optimizer = spawn_optimizer_shard(sys, cfg.optim, 0, num_params);
      auto loader = spawn_data_loader(
          sys, {data.train, data.eval, cfg.batch_size, cfg.eval_batch_size, cfg.eval_max_batches, cfg.seed, 0, 1});
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
  }
  if (!failure->empty()) throw std::runtime_error(*failure);
  if (cfg.dp > 1 && !trace->empty()) write_dp_trace(cfg, *trace, *summary);
  summary->samples_per_s =
      summary->train_seconds > 0 ? static_cast<double>(summary->samples) / summary->train_seconds : 0.0;
  return std::move(*summary);
}

}  // namespace troupe
