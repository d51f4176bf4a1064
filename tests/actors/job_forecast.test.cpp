// The job forecast (actors/plan/job_forecast.hpp) against troupe's own jobs: each rank's predicted
// peak device memory against its ledger's measurement, for the meshes and schedules below
// (memory is deterministic: no timing in these), and the forecast's arithmetic against the
// simulator with costs a reader can add up by hand.
#include "actors/plan/job_forecast.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "actors/plan/prepared_job.hpp"
#include "actors/run/training_job.hpp"
#include "job_forecast_cases.hpp"

namespace troupe {
namespace {

using test::forecast_case;

class forecast_memory : public ::testing::TestWithParam<forecast_case> {};

TEST_P(forecast_memory, each_ranks_predicted_peak_is_within_5_percent_of_its_ledger_and_its_model_states_are_exact) {
  train_config cfg = test::forecast_config(GetParam());
  cfg.max_steps = 3;
  const prepared_job data = prepare_job(cfg);
  const job_plan plan = plan_job(cfg, data);
  machine_costs unit;  // memory does not depend on the costs
  unit.gemm_flops_per_s = unit.gemm_bytes_per_s = unit.elementwise_bytes_per_s = unit.all_reduce_bytes_per_s = 1e9;
  const job_forecast f = forecast_job(cfg, plan, data.model, unit);
  const train_summary run = run_training(cfg);
  ASSERT_EQ(run.peak_memory_total.size(), f.ranks.size());
  for (const rank_forecast& r : f.ranks) {
    SCOPED_TRACE("rank " + std::to_string(r.rank));
    const memory_figures& measured = run.peak_memory[static_cast<size_t>(r.rank)];
    for (memory_kind k : {memory_kind::parameters, memory_kind::gradients, memory_kind::optimizer_state})
      EXPECT_EQ(r.peak.of(k), measured.of(k)) << to_string(k);
    EXPECT_NEAR(double(r.peak.of(memory_kind::activations)), double(measured.of(memory_kind::activations)),
                0.05 * double(measured.of(memory_kind::activations)))
        << "activations";
    // Where the bucket copies' release races with O (data parallelism), the run lands between
    // the forecast's two figures; elsewhere they are one figure.
    const double total = double(run.peak_memory_total[static_cast<size_t>(r.rank)]);
    EXPECT_GE(total, 0.95 * double(r.peak_total_low)) << "predicted " << r.peak.to_string() << ", measured " << measured.to_string();
    EXPECT_LE(total, 1.05 * double(r.peak_total)) << "predicted " << r.peak.to_string() << ", measured " << measured.to_string();
    if (GetParam().dp * GetParam().cp == 1) {
      EXPECT_EQ(r.peak_total_low, r.peak_total);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(troupe_gpt, forecast_memory, ::testing::ValuesIn(test::forecast_cases()),
                         [](const auto& info) { return info.param.name; });

// Context parallelism's point: each rank's activations fall with cp. The forecast says by how much
// (its T / cp rows, and a log-sum-exp and an output copy per query row in place of the T x T
// scores), the ledger agrees, and the fall is at least 1/cp.
TEST(forecast_context, each_ranks_activations_fall_to_under_1_over_cp_as_forecast_and_the_ledger_agrees) {
  machine_costs unit;
  unit.gemm_flops_per_s = unit.gemm_bytes_per_s = unit.elementwise_bytes_per_s = unit.all_reduce_bytes_per_s = 1e9;
  std::vector<double> forecast, measured;
  for (int cp : {1, 2, 4}) {
    test::forecast_case c = test::forecast_cases().front();
    c.cp = cp;
    c.name = "cp_fall_" + std::to_string(cp);
    train_config cfg = test::forecast_config(c);
    cfg.max_steps = 2;
    const prepared_job data = prepare_job(cfg);
    const job_forecast f = forecast_job(cfg, plan_job(cfg, data), data.model, unit);
    const train_summary run = run_training(cfg);
    forecast.push_back(double(f.ranks.at(0).peak.of(memory_kind::activations)));
    measured.push_back(double(run.peak_memory.at(0).of(memory_kind::activations)));
    std::printf("cp %d: activations of rank 0 forecast %.2f MiB, measured %.2f MiB\n", cp, forecast.back() / (1 << 20),
                measured.back() / (1 << 20));
    EXPECT_NEAR(forecast.back(), measured.back(), 0.05 * measured.back()) << "cp " << cp;
  }
  EXPECT_LE(measured[1], measured[0] / 2);
  EXPECT_LE(measured[2], measured[0] / 4);
  EXPECT_GT(measured[2], measured[0] / 8);  // the rows split, nothing vanished
}

// Round numbers, so a reader can check the arithmetic.
machine_costs made_up_machine() {
  machine_costs m;
  m.gemm_flops_per_s = 50e9;
  m.gemm_bytes_per_s = 20e9;
  m.attention_forward_s = m.attention_backward_s = 1e-10;
  m.blockwise_attention_forward_s = m.blockwise_attention_backward_s = 2e-10;
  m.elementwise_bytes_per_s = 10e9;
  m.optimizer_s_per_param = 2e-9;
  m.all_reduce_bytes_per_s = 5e9;
  return m;
}

TEST(forecast_arithmetic, a_single_device_step_is_its_layers_ops_plus_two_actions_and_the_optimizer) {
  train_config cfg = test::forecast_config(test::forecast_cases().front());
  const prepared_job data = prepare_job(cfg);
  const job_plan plan = plan_job(cfg, data);
  machine_costs m = made_up_machine();
  m.op_scale = 1.5;
  m.action_overhead_s = 1e-3;
  const job_forecast f = forecast_job(cfg, plan, data.model, m);
  ASSERT_EQ(f.chunk_costs.size(), 1u);
  const sched::chunk_cost& c = f.chunk_costs[0];
  EXPECT_NEAR(f.step_seconds, c.forward + c.backward + f.optimizer_seconds, 1e-12);
  EXPECT_NEAR(f.optimizer_seconds, 2e-9 * double(data.num_params), 1e-12);
  EXPECT_EQ(f.reduce_grads_seconds, 0);
  // The head's forward GEMM alone, scaled, is part of the forward: (B*T) x V x C.
  const double head = m.gemm_seconds(dtype::f32, 16.0 * 64, double(data.model.vocab), 128, 1);
  EXPECT_GT(c.forward, 1.5 * head + 1e-3);
  // Doubling every rate halves the scaled part; the overhead stays.
  machine_costs fast = m;
  fast.gemm_flops_per_s *= 2, fast.gemm_bytes_per_s *= 2, fast.elementwise_bytes_per_s *= 2;
  fast.attention_forward_s /= 2, fast.attention_backward_s /= 2;
  const sched::chunk_cost c2 = forecast_job(cfg, plan, data.model, fast).chunk_costs[0];
  EXPECT_NEAR(c2.forward - 1e-3, (c.forward - 1e-3) / 2, 1e-9);
}

TEST(forecast_arithmetic, ranks_computing_side_by_side_take_the_measured_slowdown_and_beyond_the_cores_take_turns) {
  machine_costs m = made_up_machine();
  m.cores = 2;
  auto forward = [&](int dp, double slowdown) {
    test::forecast_case c = test::forecast_cases().front();
    c.dp = dp;
    train_config cfg = test::forecast_config(c);
    cfg.batch_size = 16 * dp;  // every rank runs the one-device micro-batch
    const prepared_job data = prepare_job(cfg);
    machine_costs mm = m;
    mm.concurrent_slowdown = slowdown;
    return forecast_job(cfg, plan_job(cfg, data), data.model, mm).chunk_costs[0].forward;
  };
  const double one = forward(1, 1.4);
  EXPECT_DOUBLE_EQ(one, forward(1, 1.0));  // alone, nothing to share
  EXPECT_NEAR(forward(2, 1.4), 1.4 * one, 1e-12);
  EXPECT_NEAR(forward(4, 1.4), 1.4 * 2 * one, 1e-12);  // 4 ranks on 2 cores
}

TEST(forecast_arithmetic, what_it_does_not_model_is_refused_by_name) {
  train_config cfg = test::forecast_config(test::forecast_cases().front());
  const prepared_job data = prepare_job(cfg);
  machine_costs m;
  cfg.mesh.dp = 2;
  cfg.zero = 2;
  const job_plan plan = plan_job(cfg, data);
  try {
    forecast_job(cfg, plan, data.model, m);
    FAIL() << "zero 2 forecast";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("--zero 2"), std::string::npos) << e.what();
  }
  // A mixture of experts is priced dropless on one rank's experts; capacity and --ep are refused.
  train_config moe = test::forecast_config({"moe", "moe", 2});
  moe.mesh.ep = 2;
  const prepared_job moe_data = prepare_job(moe);
  const job_plan moe_plan = plan_job(moe, moe_data);
  EXPECT_THROW(
      {
        try {
          forecast_job(moe, moe_plan, moe_data.model, m);
        } catch (const std::invalid_argument& e) {
          EXPECT_NE(std::string(e.what()).find("expert parallelism (--ep)"), std::string::npos) << e.what();
          throw;
        }
      },
      std::invalid_argument);
}

}  // namespace
}  // namespace troupe
