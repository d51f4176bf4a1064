// Data parallelism changes no number beyond float rounding: N = 2 and 4 ranks, each on its shard
// of the same global batch, give the single-device losses (relative difference <= 1e-5 at every
// step) and parameters (<= 1e-4) after 20 steps, for the MLP and the GPT, with SGD and AdamW.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <tuple>

#include "actors/run/training_job.hpp"
#include "tests/scratch_dir.hpp"

using namespace troupe;

namespace {

const char* kFashion = "/usr/share/datasets/fashion-mnist";
const char* kCorpus = "/usr/share/games/fortunes";

train_config config(const std::string& model, const std::string& optimizer, int dp) {
  train_config cfg;
  cfg.model.kind = *parse_model_kind(model);
  cfg.optim.kind = *parse_optimizer_kind(optimizer);
  if (model == "mlp") {
    cfg.model.hidden = {64, 32};
    cfg.batch_size = 64;
    cfg.optim.lr = optimizer == "sgd" ? 0.05f : 1e-3f;
  } else {
    cfg.model.context = 16;
    cfg.model.channels = 32;
    cfg.model.heads = 2;
    cfg.model.blocks = 2;
    cfg.batch_size = 8;
    cfg.optim.lr = optimizer == "sgd" ? 0.1f : 3e-3f;
  }
  cfg.max_steps = 20;
  cfg.eval_max_batches = 1;
  cfg.eval_batch_size = 64;
  cfg.progress = false;
  cfg.mesh.dp = dp;
  cfg.bucket_mb = 0.005;  // several buckets even for these small models
  cfg.out_dir = test_support::scratch_dir("dp-" + model + optimizer + std::to_string(dp)).string();
  return cfg;
}

// Single-device references, computed once per (model, optimizer).
const train_summary& reference(const std::string& model, const std::string& optimizer) {
  static std::map<std::pair<std::string, std::string>, train_summary> cache;
  auto key = std::make_pair(model, optimizer);
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, run_training(config(model, optimizer, 1))).first;
  return it->second;
}

}  // namespace

class DataParallelMatchesSingleDevice
    : public ::testing::TestWithParam<std::tuple<std::string, std::string, int>> {};

TEST_P(DataParallelMatchesSingleDevice, TwentyStepsGiveSameLossesAndParameters) {
  const auto& [model, optimizer, dp] = GetParam();
  if (!std::filesystem::exists(model == "mlp" ? kFashion : kCorpus)) GTEST_SKIP() << "dataset not installed";
  const train_summary& single = reference(model, optimizer);
  train_summary multi = run_training(config(model, optimizer, dp));
  ASSERT_EQ(single.losses.size(), 20u);
  ASSERT_EQ(multi.losses.size(), 20u);
  EXPECT_GE(multi.buckets, 2);
  for (size_t i = 0; i < 20; ++i)
    EXPECT_LE(std::abs(multi.losses[i] - single.losses[i]), 1e-5 * std::abs(single.losses[i])) << "step " << i;
  ASSERT_EQ(multi.final_params.numel(), single.final_params.numel());
  double worst = 0;
  for (int64_t i = 0; i < single.final_params.numel(); ++i)
    worst = std::max(worst, static_cast<double>(std::abs(multi.final_params[i] - single.final_params[i])));
  EXPECT_LE(worst, 1e-4);
  EXPECT_LT(single.losses.back(), single.losses.front());  // it did train
  ASSERT_EQ(multi.rank_step_seconds.size(), static_cast<size_t>(dp));
  for (const auto& r : multi.rank_step_seconds) EXPECT_EQ(r.size(), 20u);
}

INSTANTIATE_TEST_SUITE_P(
    ModelsOptimizersRanks, DataParallelMatchesSingleDevice,
    ::testing::Combine(::testing::Values("mlp", "gpt"), ::testing::Values("sgd", "adamw"), ::testing::Values(2, 4)),
    [](const auto& info) {
      return std::get<0>(info.param) + "_" + std::get<1>(info.param) + "_dp" + std::to_string(std::get<2>(info.param));
    });
