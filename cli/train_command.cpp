// `troupe train`. Precedence: built-in defaults, then --config FILE, then flags.
#include "cli/train_command.hpp"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <memory>

#include "actors/training_job.hpp"
#include "cli/config_file.hpp"

namespace troupe::cli {

namespace {

struct train_flags {
  std::string config, model, hidden, optimizer, out, fashion, corpus;
  int64_t epochs = 0, batch = 0, max_steps = 0, context = 0, channels = 0, heads = 0, blocks = 0, eval_batches = 0;
  uint64_t seed = 0;
  int threads = 0;
  float lr = 0, weight_decay = 0, momentum = 0;
  bool no_progress = false;
};

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
  if (c.model.kind == "gpt" && !given("--lr") && f.config.empty()) c.optim.lr = 3e-3f;
  validate(c);
  return c;
}

int run(const CLI::App& cmd, const train_flags& f) {
  train_config cfg;
  try {
    cfg = resolve(cmd, f);
  } catch (const std::exception& e) {
    spdlog::error("troupe train: {}", e.what());
    return 2;
  }
  if (cfg.threads > static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)))
    spdlog::warn("--threads {} exceeds the {} cores of this machine: the run will be oversubscribed", cfg.threads,
                 sysconf(_SC_NPROCESSORS_ONLN));
  try {
    train_summary s = run_training(cfg);
    const double acc = s.test_accuracy.empty() ? 0.0 : s.test_accuracy.back();
    spdlog::info("done: {} steps, {:.0f} samples/s, {:.1f} s training, final loss {:.4f}, test accuracy {:.4f}",
                 s.steps, s.samples_per_s, s.train_seconds, s.losses.empty() ? 0.0 : s.losses.back(), acc);
    spdlog::info("metrics: {}", s.metrics_path);
    return 0;
  } catch (const std::exception& e) {
    spdlog::error("troupe train: {}", e.what());
    return 1;
  }
}

}  // namespace

void add_train_command(CLI::App& app, int& exit_code) {
  auto f = std::make_shared<train_flags>();
  auto* cmd = app.add_subcommand("train", "Train a model (default: MLP 784-256-256-10 on Fashion-MNIST, AdamW)");
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
  cmd->callback([cmd, f, &exit_code] { exit_code = run(*cmd, *f); });
}

}  // namespace troupe::cli
