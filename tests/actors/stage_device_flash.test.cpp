// A GPT job whose stages run on devices with the GPU's flash attention (the fake GPU running the
// CUDA kernels' blocks on the host, tests/kernels/flash_host.hpp): dp 1 x pp 2, 1F1B over four
// microbatches. It trains as the CPU job does to float rounding (the attention sums in another
// order), and each rank's reported peak activation bytes are the CPU job's less exactly the
// probabilities it no longer keeps: per live microbatch, per block of its stage, rows x heads x
// (T^2 - T) floats (a log-sum-exp per row and head stays). Selective recomputation then drops
// the log-sum-exps too, and changes no bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "schedules/named.hpp"
#include "schedules/validate.hpp"
#include "tests/actors/stage_device_support.hpp"
#include "tests/actors/tiny_jobs.hpp"

namespace troupe::test {
namespace {

train_config flash_job(const std::string& tag, recompute_mode m) {
  train_config cfg = tiny_mesh_config("gpt", "adamw", 1, 2, 1, 4);
  cfg.cuts = {4};  // stage 0: embedding + 3 blocks; stage 1: 3 blocks, layernorm, head
  cfg.recompute = m;
  cfg.out_dir = out_dir("flash-" + tag);
  return cfg;
}

// Clears the fake GPU's flash mode however the test ends: the device is the binary's.
struct flash_attention_on {
  flash_attention_on() { fake_ops().use_flash_attention(true); }
  ~flash_attention_on() { fake_ops().use_flash_attention(false); }
};

TEST(StageWithFlashAttention, TrainsAsTheCpuToRoundingAndEachRankKeepsOneFloatPerRowAndHeadInsteadOfT) {
  const train_summary cpu = run_training(flash_job("cpu", recompute_mode::none));
  train_summary flash, selective;
  {
    const flash_attention_on on;
    const train_config cfg = flash_job("gpu", recompute_mode::none);
    flash = run_training(cfg, on_devices(accelerators_for(cfg)));
    const train_config sel = flash_job("gpu-selective", recompute_mode::selective);
    selective = run_training(sel, on_devices(accelerators_for(sel)));
  }
  ASSERT_EQ(cpu.losses.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(flash.losses.size(), cpu.losses.size());
  for (size_t i = 0; i < cpu.losses.size(); ++i) EXPECT_NEAR(flash.losses[i], cpu.losses[i], 1e-5 * cpu.losses[i]) << i;
  ASSERT_EQ(flash.final_params.numel(), cpu.final_params.numel());
  const tensor &a = flash.final_params, &b = cpu.final_params;  // frozen: read only
  float worst = 0;
  for (int64_t i = 0; i < b.numel(); ++i) worst = std::max(worst, std::fabs(a.data()[i] - b.data()[i]));
  EXPECT_LT(worst, 1e-4f) << "AdamW's lr is 1e-2: the parameters moved by rounding alone";
  EXPECT_TRUE(same_bits(selective.final_params, flash.final_params));

  const auto live = sched::validate(sched::make_named_schedule("1f1b", 2, 4, 1)).peak_live_activations;
  const int64_t rows = 16 / 4, T = 6, heads = 4, blocks_per_stage = 3;
  ASSERT_EQ(cpu.peak_activation_bytes.size(), 2u);
  ASSERT_EQ(flash.peak_activation_bytes.size(), 2u);
  ASSERT_EQ(selective.peak_activation_bytes.size(), 2u);
  for (size_t r = 0; r < 2; ++r) {
    const int64_t per_block = live[r] * blocks_per_stage * rows * heads * 4;
    EXPECT_EQ(cpu.peak_activation_bytes[r] - flash.peak_activation_bytes[r], per_block * (T * T - T)) << "rank " << r;
    EXPECT_EQ(flash.peak_activation_bytes[r] - selective.peak_activation_bytes[r], per_block * T) << "rank " << r;
  }
}

}  // namespace
}  // namespace troupe::test
