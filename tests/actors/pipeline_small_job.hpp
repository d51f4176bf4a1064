// Test support: a pipeline job small enough to build in milliseconds (an MLP 6-8-8-3 on 16
// synthetic rows, watchdog 0.3 s) for the tests of what a pipeline refuses or reports
// (pipeline_watchdog.test.cpp) and how soon (pipeline_watchdog_timing.test.cpp).
#pragma once

#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "actors/pipeline_job.hpp"
#include "storage/dataset.hpp"

namespace troupe::test {

inline pipeline_job_args small_job(const sched::schedule& plan) {
  pipeline_job_args a;
  a.model.kind = "mlp";
  a.model.inputs = 6;
  a.model.hidden = {8, 8};
  a.model.classes = 3;
  a.optim.kind = "sgd";
  a.optim.lr = 0.1f;
  a.batch_size = 8;
  a.total_steps = 2;
  std::mt19937_64 rng(1);
  std::normal_distribution<float> px;
  std::vector<float> pixels(16 * 6);
  for (auto& p : pixels) p = px(rng);
  std::vector<int32_t> labels(16, 1);
  a.train = std::make_shared<storage::image_dataset>("synthetic", 6, std::move(pixels), std::move(labels));
  a.plan = plan;
  a.watchdog_seconds = 0.3;
  return a;
}

// The text of what f throws, or "no error".
inline std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace troupe::test
