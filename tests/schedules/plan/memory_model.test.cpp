// The memory model against published figures: the ZeRO paper's Figure 1 (7.5B parameters,
// N_d = 64, K = 12) to the printed digit, DeepSpeed's estimator table for a 2851M-parameter model
// (bigscience/T0_3B: 2,851,598,336 parameters, largest layer the 32128 x 1024 embedding) on one
// node of 8 GPUs, and Korthikanti et al. 2022's activation formulas.
#include "schedules/plan/memory_model.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>

namespace troupe::sched::plan {
namespace {

// Rounds as a figure prints: to `digits` after the point.
double printed(double x, int digits) {
  const double scale = std::pow(10.0, digits);
  return std::round(x * scale) / scale;
}

TEST(schedules_plan_memory, zero_paper_figure_1_per_device_gb) {
  const state_bytes adam = mixed_precision(optimizer::adam);
  const double params = 7.5e9;
  // Figure 1: baseline 120 GB, P_os 31.4 GB, P_os+g 16.6 GB, P_os+g+p 1.9 GB.
  EXPECT_EQ(printed(model_states(params, 64, 0, adam).total() / gb, 0), 120);
  EXPECT_EQ(printed(model_states(params, 64, 1, adam).total() / gb, 1), 31.4);
  EXPECT_EQ(printed(model_states(params, 64, 2, adam).total() / gb, 1), 16.6);
  EXPECT_EQ(printed(model_states(params, 64, 3, adam).total() / gb, 1), 1.9);
  // By kind at stage 1: parameters and gradients whole (2 + 2 bytes), optimizer state / 64.
  const memory_by_kind s1 = model_states(params, 64, 1, adam);
  EXPECT_DOUBLE_EQ(s1.parameters, 2 * params);
  EXPECT_DOUBLE_EQ(s1.gradients, 2 * params);
  EXPECT_DOUBLE_EQ(s1.optimizer_state, 12 * params / 64);
  EXPECT_DOUBLE_EQ(s1.activations, 0);
}

constexpr double t0_3b_params = 2851598336.0;
constexpr double t0_3b_largest_layer = 32128.0 * 1024.0;

double deepspeed_gib(int stage, offload where) {
  return model_states(t0_3b_params, 8, stage, deepspeed_estimator(stage), where, t0_3b_largest_layer).total() / gib;
}

TEST(schedules_plan_memory, deepspeed_estimator_example_per_gpu) {
  // DeepSpeed's memory-requirements page, 1 node x 8 GPUs: ZeRO-2 15.93 GB without offload,
  // 5.31 GB offloading the optimizer; ZeRO-3 6.10 GB without offload, 0.79 GB offloading the
  // optimizer, 0.12 GB offloading parameters too.
  EXPECT_EQ(printed(deepspeed_gib(2, {}), 2), 15.93);
  EXPECT_EQ(printed(deepspeed_gib(2, {true, false}), 2), 5.31);
  EXPECT_EQ(printed(deepspeed_gib(3, {}), 2), 6.10);
  EXPECT_EQ(printed(deepspeed_gib(3, {true, false}), 2), 0.79);
  EXPECT_EQ(printed(deepspeed_gib(3, {true, true}), 2), 0.12);
}

TEST(schedules_plan_memory, sgd_keeps_less_state_than_adam_and_stages_are_checked) {
  EXPECT_DOUBLE_EQ(model_states(1e9, 1, 0, mixed_precision(optimizer::sgd)).total(), 12e9);
  EXPECT_THROW(model_states(1e9, 8, 4, mixed_precision(optimizer::adam)), std::invalid_argument);
  EXPECT_THROW(model_states(1e9, 8, 2, mixed_precision(optimizer::adam), {true, true}), std::invalid_argument);
}

TEST(schedules_plan_memory, korthikanti_activations_per_layer) {
  // GPT-3 175B's layer: s = 2048, b = 1, h = 12288, a = 96.
  const layer_shape s{2048, 1, 12288, 96};
  const double sbh = 2048.0 * 12288.0;
  // Eq. 1 without parallelism: sbh(34 + 5as/h).
  EXPECT_DOUBLE_EQ(activation_bytes_per_layer(s, 1, false, recompute_mode::none), sbh * (34 + 5 * 96 * 2048 / 12288.0));
  // Tensor parallel t = 8: sbh(10 + 24/t + 5as/(ht)); with sequence parallelism sbh/t (34 + 5as/h).
  EXPECT_DOUBLE_EQ(activation_bytes_per_layer(s, 8, false, recompute_mode::none), sbh * (10 + 3 + 80 / 8.0));
  EXPECT_DOUBLE_EQ(activation_bytes_per_layer(s, 8, true, recompute_mode::none), sbh / 8 * (34 + 80));
  // Selective recomputation keeps sbh * 34/t (the paper's Table 2), full only the input 2sbh.
  EXPECT_DOUBLE_EQ(activation_bytes_per_layer(s, 8, true, recompute_mode::selective), sbh * 34 / 8);
  EXPECT_DOUBLE_EQ(activation_bytes_per_layer(s, 8, false, recompute_mode::full), 2 * sbh);
  // For this layer 5as/h = 80 against 34: selective recomputation saves 70% of the layer's
  // activations under sequence parallelism, as the paper says for GPT-3.
  const double saved = 1 - activation_bytes_per_layer(s, 8, true, recompute_mode::selective) /
                               activation_bytes_per_layer(s, 8, true, recompute_mode::none);
  EXPECT_NEAR(saved, 0.70, 0.005);
}

}  // namespace
}  // namespace troupe::sched::plan
