// Must-show 3 of the planning issue, its timing half (label perf: wall-clock): the machine is
// calibrated once per model (actors/job/machine_calibration.hpp: its ops, then short runs of
// the model), and the forecast then predicts the step time of every GPT job in
// job_forecast_cases.hpp (9 meshes and schedules) within 15% of the median step the job measures
// (the median of three runs). It prints the table
// bench/README.md keeps. One test, so the calibration runs once, not once per case.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <vector>
#include <map>

#include "actors/job/job_forecast.hpp"
#include "actors/job/machine_calibration.hpp"
#include "actors/job/prepared_job.hpp"
#include "actors/job/training_job.hpp"
#include "job_forecast_cases.hpp"

namespace troupe {
namespace {

TEST(forecast_time, every_gpt_jobs_predicted_step_time_is_within_15_percent_of_its_measured_median_step) {
  std::map<std::string, machine_costs> calibrated;
  for (const char* model : {"gpt", "mlp"}) {
    test::forecast_case base;
    base.model = model;
    const machine_costs m = calibrate_machine(test::forecast_config(base));
    calibrated[model] = m;
    std::printf("%s: GEMM %.1f GFLOP/s + %.1f GB/s, elementwise %.2f GB/s, attention %.3f / %.3f ns per unit, "
                "all-reduce %.2f GB/s + %.1f us, %d cores %.2fx, ops x %.3f + %.3f ms per action\n",
                model, m.gemm_flops_per_s / 1e9, m.gemm_bytes_per_s / 1e9, m.elementwise_bytes_per_s / 1e9,
                m.attention_forward_s * 1e9, m.attention_backward_s * 1e9, m.all_reduce_bytes_per_s / 1e9,
                m.all_reduce_latency_s * 1e6, m.cores, m.concurrent_slowdown, m.op_scale, m.action_overhead_s * 1e3);
  }
  std::printf("| job | predicted (ms) | measured (ms), median of 3 (range) | error |\n|---|---:|---:|---:|\n");
  for (const test::forecast_case& c : test::forecast_cases()) {
    train_config cfg = test::forecast_config(c, 22);
    const prepared_job data = prepare_job(cfg);
    const job_forecast f = forecast_job(cfg, plan_job(cfg, data), data.model, calibrated.at(c.model));
    // Three runs, their median: one run's median step moves by up to 15% on this shared 2-vCPU
    // machine (the same job measured 72 and 86 ms a minute apart).
    std::vector<double> runs;
    for (int i = 0; i < 3; ++i) runs.push_back(measured_step_seconds(run_training(cfg)));
    std::sort(runs.begin(), runs.end());
    const double measured = runs[1];
    std::printf("| %s | %.2f | %.2f (%.2f-%.2f) | %+.1f%% |\n", c.name.c_str(), 1e3 * f.step_seconds, 1e3 * measured,
                1e3 * runs[0], 1e3 * runs[2], 100 * (f.step_seconds / measured - 1));
    // The GPT's jobs are held to 15%. The MLP's steps are 3-4 ms, where the same job measures
    // 2.8 ms in one run and 3.6 ms in the next of the same process: its rows are printed, not
    // held to a bound its own measurement does not keep.
    if (c.model == "gpt") {
      EXPECT_NEAR(f.step_seconds / measured, 1.0, 0.15)
          << c.name << ": predicted " << f.step_seconds << " s, measured " << measured << " s";
    }
  }
}

}  // namespace
}  // namespace troupe
