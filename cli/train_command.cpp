// `troupe train`. Precedence: built-in defaults, then --config FILE, then flags.
#include "cli/train_command.hpp"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <limits>
#include <memory>

#include "actors/pipeline_job.hpp"
#include "actors/training_job.hpp"
#include "cli/config_file.hpp"
#include "cli/worker_command.hpp"

namespace troupe::cli {

namespace {

struct train_flags {
  std::string config, model, hidden, optimizer, out, fashion, corpus;
  std::string schedule, cuts;  // pipeline
  int pp = 0, micro_batches = 0, virtual_stages = 0;
  double watchdog = 0;
  int dp = 0;  // data parallelism
  double bucket_mb = 0;
  std::vector<std::string> stragglers;
  int64_t trace_step = 0;
  int64_t epochs = 0, batch = 0, max_steps = 0, context = 0, channels = 0, heads = 0, blocks = 0, eval_batches = 0;
  uint64_t seed = 0;
  int threads = 0;
  float lr = 0, weight_decay = 0, momentum = 0;
  bool no_progress = false;
  process_flags process;  // multi-process (worker_command.hpp)
  bool worker = false;
};

std::vector<int64_t> parse_cuts(const std::string& text) {
  try {
    return parse_widths(text);  // the same grammar: positive integers, comma separated
  } catch (const std::invalid_argument&) {
    throw std::invalid_argument("--cuts: \"" + text + "\" is not a list of positive layer indices (e.g. 3,5)");
  }
}

// Refuses a pipeline the model or batch cannot carry before any data is loaded.
void check_pipeline_flags(const train_config& c) {
  const sched::schedule s = make_pipeline_schedule(c.schedule, c.pp, c.micro_batches, c.virtual_stages);
  const int chunks = c.pp * s.virtual_stages;
  const int64_t layers = c.model.kind == "mlp" ? 2 * static_cast<int64_t>(c.model.hidden.size()) + 1
                                               : c.model.blocks + 3;
  if (c.cuts.empty() && layers < chunks)
    throw std::invalid_argument("--pp " + std::to_string(c.pp) + (s.virtual_stages > 1 ? " x --virtual-stages " +
                                std::to_string(s.virtual_stages) : std::string()) + " needs " +
                                std::to_string(chunks) + " model chunks, but the " + c.model.kind + " has only " +
                                std::to_string(layers) + " layers (" +
                                (c.model.kind == "mlp" ? "add hidden layers, e.g. --hidden 256,256,256"
                                                       : "add --blocks") + ")");
  if (c.batch_size % c.micro_batches != 0)
    throw std::invalid_argument("--batch-size " + std::to_string(c.batch_size) + " is not divisible by --micro-batches " +
                                std::to_string(c.micro_batches));
}

bool spawn_local_ = false;  // set by resolve: --nodes N without a launcher

train_config resolve(const CLI::App& cmd, const train_flags& f) {
  train_config c;
  if (!f.config.empty()) c = load_config_file(f.config, c);
  auto given = [&](const char* name) { return cmd.count(name) > 0; };
  if (given("--model")) c.model.kind = f.model;
  if (given("--hidden")) c.model.hidden = parse_widths(f.hidden);
  if (given("--context")) c.model.context = f.context;
  if (given("--channels")) c.model.channels = f.channels;
  if (given("--heads")) c.model.heads = f.heads;
  if (given("--blocks")) c.model.blocks = f.blocks;
  if (given("--optimizer")) c.optim.kind = f.optimizer;
  if (given("--lr")) c.optim.lr = f.lr;
  if (given("--weight-decay")) c.optim.weight_decay = f.weight_decay;
  if (given("--momentum")) c.optim.momentum = f.momentum;
  if (given("--epochs")) c.epochs = f.epochs;
  if (given("--batch-size")) c.batch_size = f.batch;
  if (given("--seed")) c.seed = f.seed;
  if (given("--threads")) c.threads = f.threads;
  if (given("--out")) c.out_dir = f.out;
  if (given("--max-steps")) c.max_steps = f.max_steps;
  if (given("--eval-batches")) c.eval_max_batches = f.eval_batches;
  if (given("--fashion-mnist")) c.fashion_mnist_dir = f.fashion;
  if (given("--corpus")) c.corpus_path = f.corpus;
  if (f.no_progress) c.progress = false;
  if (given("--pp")) c.pp = f.pp;
  if (given("--schedule")) c.schedule = f.schedule;
  if (given("--micro-batches")) c.micro_batches = f.micro_batches;
  if (given("--virtual-stages")) c.virtual_stages = f.virtual_stages;
  if (given("--cuts")) c.cuts = parse_cuts(f.cuts);
  if (given("--watchdog-seconds")) c.watchdog_seconds = f.watchdog;
  if (given("--dp")) c.dp = f.dp;
  if (given("--bucket-mb")) c.bucket_mb = f.bucket_mb;
  if (given("--straggler")) {
    c.stragglers.clear();
    for (const auto& s : f.stragglers) c.stragglers.push_back(parse_straggler(s));
  }
  if (given("--trace-step")) c.trace_step = f.trace_step;
  if (c.model.kind == "gpt" && !given("--lr") && f.config.empty()) c.optim.lr = 3e-3f;
  spawn_local_ = resolve_process(cmd, f.process, c, f.worker);
  if (c.process.world > 1) {
    if (given("--dp") && c.dp != c.process.world)
      throw std::invalid_argument("--dp " + std::to_string(c.dp) + " with " + std::to_string(c.process.world) +
                                  " processes: a multi-process job has one rank per process");
    c.dp = c.process.world;
  }
  validate(c);
  if (c.pp > 1) check_pipeline_flags(c);
  return c;
}

int run(const CLI::App& cmd, const train_flags& f) {
  train_config cfg;
  try {
    cfg = resolve(cmd, f);
  } catch (const std::exception& e) {
    spdlog::error("{}: {}", f.worker ? "troupe worker" : "troupe train", e.what());
    return 2;
  }
  if (cfg.threads > static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)))
    spdlog::warn("--threads {} exceeds the {} cores of this machine: the run will be oversubscribed", cfg.threads,
                 sysconf(_SC_NPROCESSORS_ONLN));
  std::unique_ptr<local_workers> workers;
  if (spawn_local_) {
    workers = std::make_unique<local_workers>(cfg);
    cfg.process.on_listening = [w = workers.get()](uint16_t port) { w->start(port); };
  }
  const char* who = f.worker ? "troupe worker" : "troupe train";
  try {
    train_summary s = run_training(cfg);
    if (workers && workers->wait(30000) > 0) {
      spdlog::error("{}: a worker process failed (see its log above)", who);
      return 1;
    }
    if (cfg.process.rank != 0) {
      spdlog::info("rank {}: done", cfg.process.rank);
      return 0;
    }
    const double acc = s.test_accuracy.empty() ? 0.0 : s.test_accuracy.back();
    spdlog::info("done: {} steps, {:.0f} samples/s, {:.1f} s training, final loss {:.4f}, test accuracy {:.4f}",
                 s.steps, s.samples_per_s, s.train_seconds, s.losses.empty() ? 0.0 : s.losses.back(), acc);
    if (s.train_seconds > 0)
      spdlog::info("the compute device was busy {:.0f}% of the training time", 100.0 * s.compute_seconds / s.train_seconds);
    spdlog::info("metrics: {}", s.metrics_path);
    return 0;
  } catch (const std::exception& e) {
    spdlog::error("{}: {}", who, e.what());
    if (workers) workers->wait(10000);
    return 1;
  }
}

}  // namespace

void add_train_command(CLI::App& app, int& exit_code, const char* name, bool worker) {
  auto f = std::make_shared<train_flags>();
  f->worker = worker;
  auto* cmd = app.add_subcommand(name, worker ? "Join a multi-process job as rank >= 1 (the same flags as train)"
                                              : "Train a model (default: MLP 784-256-256-10 on Fashion-MNIST, AdamW)");
  cmd->add_option("--config", f->config, "TOML config file; flags given here override it")->check(CLI::ExistingFile);
  cmd->add_option("--model", f->model, "Model: mlp (Fashion-MNIST) or gpt (character-level, text corpus) [mlp]")
      ->check(CLI::IsMember({"mlp", "gpt"}));
  cmd->add_option("--hidden", f->hidden, "MLP hidden layer widths, comma separated [256,256]");
  cmd->add_option("--context", f->context, "GPT: tokens per sequence [64]")->check(CLI::PositiveNumber);
  cmd->add_option("--channels", f->channels, "GPT: embedding width [128]")->check(CLI::PositiveNumber);
  cmd->add_option("--heads", f->heads, "GPT: attention heads [4]")->check(CLI::PositiveNumber);
  cmd->add_option("--blocks", f->blocks, "GPT: transformer blocks [4]")->check(CLI::PositiveNumber);
  cmd->add_option("--optimizer", f->optimizer, "Optimizer: adamw or sgd (with momentum) [adamw]")
      ->check(CLI::IsMember({"adamw", "sgd"}));
  cmd->add_option("--lr", f->lr, "Learning rate [1e-3; 3e-3 for gpt]")->check(CLI::PositiveNumber);
  cmd->add_option("--weight-decay", f->weight_decay, "Weight decay (decoupled for AdamW) [0.01]")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--momentum", f->momentum, "SGD momentum [0.9]")->check(CLI::Range(0.0, 0.999999));
  cmd->add_option("--epochs", f->epochs, "Passes over the training set [5]")->check(CLI::PositiveNumber);
  cmd->add_option("--batch-size", f->batch, "Global batch size in samples [128]")->check(CLI::PositiveNumber);
  cmd->add_option("--seed", f->seed, "Seed of initialization and shuffling; same seed, same losses [42]");
  cmd->add_option("--threads", f->threads, "BLAS threads of the compute device [1]")->check(CLI::PositiveNumber);
  cmd->add_option("--out", f->out, "Output folder for metrics.jsonl [runs/latest]");
  cmd->add_option("--max-steps", f->max_steps, "Stop after this many steps (0: all epochs) [0]")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--eval-batches", f->eval_batches, "Evaluate on at most this many held-out batches (0: all) [0]")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--fashion-mnist", f->fashion, "Fashion-MNIST folder [/usr/share/datasets/fashion-mnist]");
  cmd->add_option("--corpus", f->corpus, "Text corpus file or folder for gpt [/usr/share/games/fortunes]");
  cmd->add_flag("--no-progress", f->no_progress, "No progress bar (log lines only)");
  cmd->add_option("--pp", f->pp, "Pipeline stages P (one device thread each); 1: no pipeline [1]")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--schedule", f->schedule, "Pipeline schedule: gpipe, 1f1b, interleaved, zb-h1 [1f1b]")
      ->check(CLI::IsMember({"gpipe", "1f1b", "interleaved", "zb-h1"}));
  cmd->add_option("--micro-batches", f->micro_batches, "Microbatches M per global batch (pipeline) [1]")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--virtual-stages", f->virtual_stages, "Chunks per stage v for --schedule interleaved [2]")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--cuts", f->cuts, "Pipeline cut points: first layer index of each chunk after the first, "
                                     "comma separated [balanced by parameter count]");
  cmd->add_option("--watchdog-seconds", f->watchdog, "Report and stop a job whose step makes no progress this long, in seconds [60]")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--dp", f->dp, "Data-parallel ranks N in this process, each on 1/N of every batch [1]")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--bucket-mb", f->bucket_mb, "Gradient bucket cap in MiB for the DP all-reduce (0: per layer) [25]")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--straggler", f->stragglers, "Delay a DP rank before each step: rank:ms or rank:ms:random "
                                                 "(uniform in [0, 2 ms)); repeatable");
  cmd->add_option("--trace-step", f->trace_step, "DP step written to <out>/trace.json (-1: the last) [-1]")
      ->check(CLI::Range(int64_t{-1}, std::numeric_limits<int64_t>::max()));
  add_process_options(cmd, f->process);
  cmd->callback([cmd, f, &exit_code] { exit_code = run(*cmd, *f); });
}

}  // namespace troupe::cli
