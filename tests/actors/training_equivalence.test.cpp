// The actor runtime adds no numerical change: training through data_loader, stage,
// optimizer_shard and coordinator gives bit-identical losses and parameters to a plain loop over
// the same kernels, batches and seed.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "actors/run/training_job.hpp"
#include "kernels/layer_stack.hpp"
#include "kernels/train_step.hpp"
#include "storage/dataset.hpp"
#include "storage/sampler.hpp"

using namespace troupe;

namespace {

const char* kFashion = "/usr/share/datasets/fashion-mnist";

struct plain_result {
  std::vector<double> losses;
  tensor params;
};

// The reference: the same batches, in the same order, through train_step.
plain_result train_plain(const train_config& cfg, const storage::dataset& train) {
  layer_stack stack(build_layers(cfg.model), 0, cfg.seed);
  auto opt = make_optimizer(cfg.optim, stack.num_params());
  storage::sampler s(train.size(), cfg.batch_size, cfg.seed);
  plain_result r;
  for (int64_t step = 0; step < cfg.max_steps; ++step) {
    const int64_t per_epoch = s.batches_per_epoch();
    batch b = train.gather(s.indices(step / per_epoch, step % per_epoch));
    r.losses.push_back(train_step(stack, *opt, b).mean_loss());
  }
  r.params = stack.params().clone();
  return r;
}

train_config small_config(const std::string& optimizer) {
  train_config cfg;
  cfg.model.hidden = {64, 32};
  cfg.optim.kind = *parse_optimizer_kind(optimizer);
  cfg.optim.lr = optimizer == "sgd" ? 0.05f : 1e-3f;
  cfg.batch_size = 64;
  cfg.max_steps = 50;
  cfg.eval_max_batches = 1;
  cfg.progress = false;
  // One folder per test process: ctest runs these cases in parallel.
  cfg.out_dir = (std::filesystem::temp_directory_path() /
                 ("troupe-equiv-" + optimizer + "-" + std::to_string(::getpid())))
                    .string();
  return cfg;
}

}  // namespace

class ActorsMatchPlainLoop : public ::testing::TestWithParam<std::string> {};

TEST_P(ActorsMatchPlainLoop, FiftyStepsGiveIdenticalLossesAndParameters) {
  if (!std::filesystem::exists(kFashion)) GTEST_SKIP() << "dataset-fashion-mnist not installed";
  train_config cfg = small_config(GetParam());
  train_summary actors = run_training(cfg);
  auto data = storage::load_fashion_mnist(kFashion);
  plain_result plain = train_plain(cfg, *data.train);

  ASSERT_EQ(actors.losses.size(), 50u);
  for (size_t i = 0; i < plain.losses.size(); ++i) EXPECT_EQ(actors.losses[i], plain.losses[i]) << "step " << i;
  ASSERT_EQ(actors.final_params.numel(), plain.params.numel());
  for (int64_t i = 0; i < plain.params.numel(); ++i)
    ASSERT_EQ(actors.final_params[i], plain.params[i]) << "parameter " << i;
  EXPECT_LT(plain.losses.back(), plain.losses.front());  // it did train

  // metrics.jsonl has one line per step and one per evaluation, with the documented names.
  std::ifstream in(actors.metrics_path);
  std::string line;
  int steps = 0, evals = 0;
  while (std::getline(in, line)) {
    if (line.find("\"test_accuracy\"") != std::string::npos) ++evals;
    else if (line.find("\"loss\"") != std::string::npos && line.find("\"samples_per_s\"") != std::string::npos) ++steps;
  }
  EXPECT_EQ(steps, 50);
  EXPECT_EQ(evals, 1);
}

INSTANTIATE_TEST_SUITE_P(Optimizers, ActorsMatchPlainLoop, ::testing::Values("sgd", "adamw"));

TEST(TrainingJob, SameSeedGivesSameLossesAndOtherSeedDoesNot) {
  if (!std::filesystem::exists(kFashion)) GTEST_SKIP() << "dataset-fashion-mnist not installed";
  train_config cfg = small_config("adamw");
  cfg.max_steps = 10;
  auto a = run_training(cfg);
  auto b = run_training(cfg);
  cfg.seed = 7;
  auto c = run_training(cfg);
  EXPECT_EQ(a.losses, b.losses);
  EXPECT_NE(a.losses, c.losses);
}

TEST(TrainingJob, MissingDatasetStopsWithTheFileNamed) {
  train_config cfg = small_config("adamw");
  cfg.fashion_mnist_dir = "/nonexistent/fashion";
  try {
    run_training(cfg);
    FAIL() << "expected an error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/fashion/train-images-idx3-ubyte.gz"), std::string::npos)
        << e.what();
  }
}

TEST(TrainingJob, BatchLargerThanDatasetIsRefused) {
  if (!std::filesystem::exists(kFashion)) GTEST_SKIP() << "dataset-fashion-mnist not installed";
  train_config cfg = small_config("adamw");
  cfg.batch_size = 100000;
  EXPECT_THROW(run_training(cfg), std::invalid_argument);
}
