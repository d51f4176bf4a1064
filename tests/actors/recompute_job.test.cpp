// --recompute in a whole job: a GPT over dp 1 x pp 2 x tp 2 (1F1B, 4 microbatches) gives bitwise
// the same losses and parameters with none, selective and full, and selective lowers each rank's
// reported peak activation bytes by exactly the attention scores it no longer keeps: per live
// microbatch, per block of its stage, rows x (heads / tp) x T x T floats.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "actors/run/training_job.hpp"
#include "schedules/named.hpp"
#include "schedules/validate.hpp"
#include "storage/dataset.hpp"
#include "tests/scratch_dir.hpp"

using namespace troupe;

namespace {

train_config job(recompute_mode m) {
  train_config c;
  c.model.kind = model_kind::gpt;
  c.model.vocab = 11;
  c.model.context = 6;
  c.model.channels = 8;
  c.model.heads = 4;
  c.model.blocks = 6;
  c.batch_size = 16;
  c.max_steps = 8;
  c.epochs = 1;
  std::mt19937_64 rng(5);
  std::vector<int32_t> toks(16 * 8 * 7 + 1);
  for (auto& t : toks) t = static_cast<int32_t>(rng() % 11);
  c.train_data = std::make_shared<storage::text_dataset>("synthetic", std::move(toks), 6);
  c.eval_max_batches = 1;
  c.eval_batch_size = 4;
  c.progress = false;
  c.mesh.pp = 2;
  c.mesh.tp = 2;
  c.micro_batches = 4;
  c.cuts = {4};  // stage 0: embedding + 3 blocks; stage 1: 3 blocks, layernorm, head
  c.recompute = m;
  c.watchdog_seconds = 20;
  c.out_dir = test_support::scratch_dir(std::string("recompute-") + to_string(m)).string();
  return c;
}

}  // namespace

TEST(RecomputeJob, SameBitsForEveryModeAndSelectiveSavesExactlyTheScoresOnEveryRank) {
  const train_summary none = run_training(job(recompute_mode::none));
  const train_summary sel = run_training(job(recompute_mode::selective));
  const train_summary full = run_training(job(recompute_mode::full));
  EXPECT_EQ(sel.losses, none.losses);
  EXPECT_EQ(full.losses, none.losses);
  EXPECT_EQ(sel.final_params.to_vector(), none.final_params.to_vector());
  EXPECT_EQ(full.final_params.to_vector(), none.final_params.to_vector());
  const auto live = sched::validate(sched::make_named_schedule("1f1b", 2, 4, 1)).peak_live_activations;
  const int64_t rows = 16 / 4, T = 6, local_heads = 4 / 2, blocks_per_stage = 3;
  ASSERT_EQ(none.peak_activation_bytes.size(), 4u);
  for (int r = 0; r < 4; ++r) {
    const int stage = r / 2;  // tp innermost
    const int64_t scores = live[static_cast<size_t>(stage)] * blocks_per_stage * rows * local_heads * T * T * 4;
    EXPECT_EQ(none.peak_activation_bytes[r] - sel.peak_activation_bytes[r], scores) << "rank " << r;
    EXPECT_LT(full.peak_activation_bytes[r], sel.peak_activation_bytes[r]) << "rank " << r;
  }
}
