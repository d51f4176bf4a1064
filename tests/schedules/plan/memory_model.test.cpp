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

// Llama 2 70B's layer (s 4096, h 8192, 64 heads over 8 kv heads, SwiGLU 28672) at t = 8: of the
// 24 the paper splits over tp, k and v keep 1/8 (4 + 4/8) and the MLP 6f/h = 21 (gate and up
// outputs, their product), and fused attention keeps no scores.
TEST(schedules_plan_memory, gqa_swiglu_and_fused_attention_change_the_terms_they_hold) {
  layer_shape s{4096, 1, 8192, 64};
  const double sbh = 4096.0 * 8192.0;
  s.kv_share = 8.0 / 64;
  s.ffn = 28672;
  s.swiglu = true;
  const double scores = 5 * 64 * 4096 / (8192.0 * 8);
  EXPECT_DOUBLE_EQ(activation_bytes_per_layer(s, 8, false, recompute_mode::none), sbh * (10 + 25.5 / 8 + scores));
  EXPECT_DOUBLE_EQ(activation_bytes_per_layer(s, 8, true, recompute_mode::none), sbh * (35.5 / 8 + scores));
  s.fused_attention = true;
  EXPECT_DOUBLE_EQ(activation_bytes_per_layer(s, 8, false, recompute_mode::none), sbh * (10 + 25.5 / 8));
  EXPECT_DOUBLE_EQ(activation_bytes_per_layer(s, 8, false, recompute_mode::none),
                   activation_bytes_per_layer(s, 8, false, recompute_mode::selective));
  EXPECT_DOUBLE_EQ(activation_bytes_per_layer(s, 8, false, recompute_mode::full), 2 * sbh);
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


// --accounting: each framework's own documented byte counts, for three model sizes.
constexpr double sizes[] = {1.7e9, 18.4e9, 174.6e9};

TEST(schedules_plan_memory, megatron_accounting_is_its_distributed_optimizer_table) {
  // Megatron-LM's distributed-optimizer guide, "bf16 param, fp32 grads": 18 bytes per parameter
  // without the distributed optimizer, 6 + 12/d with it (d data-parallel ranks).
  for (double p : sizes)
    for (int d : {8, 64}) {
      EXPECT_DOUBLE_EQ(model_states(p, d, 0, accounted_bytes(accounting::megatron, optimizer::adam, 0)).total(), 18 * p);
      EXPECT_NEAR(model_states(p, d, 1, accounted_bytes(accounting::megatron, optimizer::adam, 1)).total(),
                  (6 + 12.0 / d) * p, 1e-6 * p);
    }
  try {
    accounted_bytes(accounting::megatron, optimizer::adam, 3);
    FAIL() << "Megatron has no ZeRO-3";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("accounting megatron has no ZeRO stage 3"), std::string::npos) << e.what();
  }
}

TEST(schedules_plan_memory, deepspeed_accounting_is_its_estimators_formulas) {
  // estimate_zero2_model_states_mem_needs: 4P + 16P/N (stage 1 holds the same: the whole 16-bit
  // gradients, the fp32 partition); estimate_zero3_model_states_mem_needs: 4L + 18P/N, L the
  // largest layer's parameters. Without offload, per GPU.
  for (double p : sizes)
    for (int n : {8, 16}) {
      const double layer = p / 100;
      for (int z : {1, 2})
        EXPECT_NEAR(model_states(p, n, z, accounted_bytes(accounting::deepspeed, optimizer::adam, z)).total(),
                    4 * p + 16 * p / n, 1e-6 * p)
            << "stage " << z;
      EXPECT_NEAR(model_states(p, n, 3, accounted_bytes(accounting::deepspeed, optimizer::adam, 3), {}, layer).total(),
                  4 * layer + 18 * p / n, 1e-6 * p);
    }
  // And the published example through the same path troupe plan takes.
  auto ds = [](int z, offload w) {
    return model_states(t0_3b_params, 8, z, accounted_bytes(accounting::deepspeed, optimizer::adam, z), w,
                        t0_3b_largest_layer)
               .total() /
           gib;
  };
  EXPECT_EQ(printed(ds(2, {}), 2), 15.93);
  EXPECT_EQ(printed(ds(3, {}), 2), 6.10);
  EXPECT_EQ(printed(ds(3, {true, false}), 2), 0.79);
  EXPECT_THROW(accounted_bytes(accounting::deepspeed, optimizer::adam, 0), std::invalid_argument);
}

TEST(schedules_plan_memory, fsdp_accounting_is_full_sharding_of_fp32_state_with_a_16_bit_gathered_layer) {
  // FSDP2 with bf16 compute and fp32 reduction: the sharded fp32 parameter is the master copy,
  // fp32 gradients, Adam's two fp32 moments: 16P/N; the gathered layer at 16 bits and its
  // gradients: 4L. SGD with momentum: 12P/N.
  for (double p : sizes) {
    const double layer = p / 100;
    EXPECT_NEAR(model_states(p, 8, 3, accounted_bytes(accounting::fsdp, optimizer::adam, 3), {}, layer).total(),
                16 * p / 8 + 4 * layer, 1e-6 * p);
    EXPECT_NEAR(model_states(p, 8, 3, accounted_bytes(accounting::fsdp, optimizer::sgd, 3), {}, layer).total(),
                12 * p / 8 + 4 * layer, 1e-6 * p);
  }
  for (int z : {0, 1, 2}) EXPECT_THROW(accounted_bytes(accounting::fsdp, optimizer::adam, z), std::invalid_argument);
}

TEST(schedules_plan_memory, accounting_names_round_trip_and_a_wrong_one_is_named) {
  for (accounting a : {accounting::zero_paper, accounting::deepspeed, accounting::megatron, accounting::fsdp})
    EXPECT_EQ(parse_accounting(to_string(a)), a);
  try {
    parse_accounting("torch");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("\"torch\": expected zero-paper, deepspeed, megatron or fsdp"), std::string::npos);
  }
  // The default is the ZeRO paper's count, unchanged.
  const state_bytes z = accounted_bytes(accounting::zero_paper, optimizer::adam, 2);
  EXPECT_EQ(z.parameters + z.gradients + z.optimizer_state, 16);
}

}  // namespace
}  // namespace troupe::sched::plan
