// Test support: a pipeline job small enough to build in milliseconds (an MLP 6-8-8-3 on 16
// synthetic rows in memory, watchdog 0.3 s) for the tests of what a pipeline refuses or reports
// (pipeline_watchdog.test.cpp) and how soon (pipeline_watchdog_timing.test.cpp).
#pragma once

#include <unistd.h>

#include <filesystem>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "actors/config/train_config.hpp"
#include "storage/dataset.hpp"

namespace troupe::test {

inline train_config small_job(const sched::schedule& plan) {
  train_config c;
  c.model.kind = model_kind::mlp;
  c.model.inputs = 6;
  c.model.hidden = {8, 8};
  c.model.classes = 3;
  c.optim.kind = optimizer_kind::sgd;
  c.optim.lr = 0.1f;
  c.batch_size = 8;
  c.epochs = 1;
  c.max_steps = 2;
  c.eval_max_batches = 1;
  c.eval_batch_size = 4;
  c.progress = false;
  std::mt19937_64 rng(1);
  std::normal_distribution<float> px;
  std::vector<float> pixels(16 * 6);
  for (auto& p : pixels) p = px(rng);
  std::vector<int32_t> labels(16, 1);
  c.train_data = std::make_shared<storage::image_dataset>("synthetic", 6, std::move(pixels), std::move(labels));
  c.mesh.pp = plan.num_stages;
  c.user_schedule = plan;
  c.watchdog_seconds = 0.3;
  c.out_dir = (std::filesystem::temp_directory_path() / ("troupe-pp-small-" + std::to_string(::getpid()))).string();
  return c;
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
