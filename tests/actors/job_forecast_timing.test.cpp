// Must-show 3 of the planning issue, its timing half (label perf: wall-clock): the machine is
// calibrated once (actors/job/machine_calibration.hpp: its ops, then two single-device runs of
// the GPT), and the forecast then predicts the step time of every job in job_forecast_cases.hpp
// within 15% of what the job measures. Each case prints both, for bench/README.md.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>

#include "actors/job/job_forecast.hpp"
#include "actors/job/machine_calibration.hpp"
#include "actors/job/prepared_job.hpp"
#include "actors/job/training_job.hpp"
#include "job_forecast_cases.hpp"

namespace troupe {
namespace {

using test::forecast_case;

const machine_costs& calibrated(const std::string& model) {
  static std::map<std::string, machine_costs> by_model;
  auto it = by_model.find(model);
  if (it == by_model.end()) {
    forecast_case base;
    base.model = model;
    it = by_model.emplace(model, calibrate_machine(test::forecast_config(base))).first;
  }
  return it->second;
}

class forecast_time : public ::testing::TestWithParam<forecast_case> {};

TEST_P(forecast_time, predicted_step_time_is_within_15_percent_of_the_measured_median_step) {
  const machine_costs& m = calibrated(GetParam().model);
  train_config cfg = test::forecast_config(GetParam(), 22);
  const prepared_job data = prepare_job(cfg);
  const job_plan plan = plan_job(cfg, data);
  const job_forecast f = forecast_job(cfg, plan, data.model, m);
  const double measured = measured_step_seconds(run_training(cfg));
  std::printf("| %s | %.2f | %.2f | %+.1f%% |\n", GetParam().name.c_str(), 1e3 * f.step_seconds, 1e3 * measured,
              100 * (f.step_seconds / measured - 1));
  EXPECT_NEAR(f.step_seconds / measured, 1.0, 0.15) << "predicted " << f.step_seconds << " s, measured " << measured;
}

INSTANTIATE_TEST_SUITE_P(troupe_jobs, forecast_time, ::testing::ValuesIn(test::forecast_cases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace troupe
