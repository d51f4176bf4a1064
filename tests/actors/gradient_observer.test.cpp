// A gradient observer (job_extras.hpp) in a dp 2 x tp 2 job: it hears every rank every step,
// replicas send the same reduced bits, and the tp shards of step 0, merged, are the gradient of
// the single-device step on the same batch.
#include <gtest/gtest.h>

#include <caf/all.hpp>

#include <filesystem>
#include <map>
#include <mutex>
#include <random>

#include "actors/run/training_job.hpp"
#include "actors/messages.hpp"
#include "kernels/tp_shards.hpp"
#include "kernels/train_step.hpp"
#include "storage/dataset.hpp"
#include "storage/sampler.hpp"
#include "tests/scratch_dir.hpp"

using namespace troupe;

namespace {

struct seen {
  std::mutex mu;
  std::map<std::pair<int64_t, int32_t>, tensor> grads;  // (step, rank)
};

caf::behavior observer(caf::event_based_actor*, std::shared_ptr<seen> out) {
  return {[out](const observed_gradients& g) {
    std::lock_guard<std::mutex> lock(out->mu);
    out->grads[{g.step, g.rank}] = g.grads;
  }};
}

}  // namespace

TEST(GradientObserver, HearsEveryRankEveryStepAndTheMergedShardsAreTheSingleDeviceGradient) {
  train_config cfg;
  cfg.model.inputs = 12;
  cfg.model.hidden = {16, 16};
  cfg.model.classes = 5;
  cfg.optim.kind = optimizer_kind::sgd;
  cfg.batch_size = 8;
  cfg.max_steps = 4;
  cfg.epochs = 1;
  std::mt19937_64 rng(3);
  std::normal_distribution<float> px;
  std::vector<float> pixels(8 * 4 * 12);
  for (auto& p : pixels) p = px(rng);
  std::vector<int32_t> labels(8 * 4);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int32_t>(i % 5);
  auto data = std::make_shared<storage::image_dataset>("synthetic", 12, std::move(pixels), std::move(labels));
  cfg.train_data = data;
  cfg.eval_max_batches = 1;
  cfg.eval_batch_size = 4;
  cfg.progress = false;
  cfg.mesh.dp = 2;
  cfg.mesh.tp = 2;
  cfg.out_dir = test_support::scratch_dir("gradient-observer").string();
  auto out = std::make_shared<seen>();
  job_extras extras;
  extras.gradient_observers.push_back([out](caf::actor_system& sys) { return sys.spawn(observer, out); });
  run_training(cfg, extras);

  ASSERT_EQ(out->grads.size(), 4u * 4u);  // every step, every rank
  for (int64_t step = 0; step < 4; ++step)
    for (int t = 0; t < 2; ++t)  // replica 1's rank t holds replica 0's reduced bits
      EXPECT_EQ(out->grads.at({step, 2 + t}).to_vector(), out->grads.at({step, t}).to_vector()) << "step " << step;

  layer_stack plain(build_layers(cfg.model), 0, cfg.seed);
  storage::sampler sampler(data->size(), cfg.batch_size, cfg.seed);
  compute_gradients(plain, data->gather(sampler.indices(0, 0)), 1.0f / static_cast<float>(cfg.batch_size));
  const std::vector<float> merged =
      merge_tp_shards(cfg.model, {0, static_cast<int64_t>(plain.num_layers())}, {out->grads.at({0, 0}), out->grads.at({0, 1})});
  const std::vector<float> want = plain.grads().to_vector();
  ASSERT_EQ(merged.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(merged[i], want[i], 1e-5 + 1e-4 * std::abs(want[i])) << i;
}
