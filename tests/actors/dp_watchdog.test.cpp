// A data-parallel step that makes no progress is reported and stopped instead of hanging: the
// coordinator's watchdog names the steps done and dumps each collective member's recent
// operations, which show the all-reduce waiting on the rank that never arrived.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <unistd.h>

#include "actors/run/training_job.hpp"

using namespace troupe;

TEST(DataParallelWatchdog, StalledStepIsReportedWithTheCollectivesStateAndTheJobStops) {
  if (!std::filesystem::exists("/usr/share/datasets/fashion-mnist")) GTEST_SKIP() << "no Fashion-MNIST";
  train_config cfg;
  cfg.model.hidden = {32};
  cfg.batch_size = 64;
  cfg.max_steps = 4;
  cfg.eval_max_batches = 1;
  cfg.progress = false;
  cfg.mesh.dp = 2;
  cfg.bucket_mb = 0.01;
  cfg.stragglers = {straggler_spec{1, 3000, delay_kind::fixed}};  // rank 1 stalls 3 s before each step
  cfg.watchdog_seconds = 0.5;
  cfg.out_dir = (std::filesystem::temp_directory_path() / ("troupe-watchdog-" + std::to_string(::getpid()))).string();
  const auto t0 = std::chrono::steady_clock::now();
  std::string report;
  try {
    run_training(cfg);
  } catch (const std::runtime_error& e) {
    report = e.what();
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(report.find("watchdog: no progress for"), std::string::npos) << report;
  EXPECT_NE(report.find("steps done: 0 of 4"), std::string::npos) << report;
  // Rank 0 handed in its first bucket and waits in the all-reduce for rank 1's chunks.
  EXPECT_NE(report.find("collectives:"), std::string::npos) << report;
  EXPECT_NE(report.find("all_reduce"), std::string::npos) << report;
  // Stopped once the straggler's sleep ended, not after four stalled steps (12 s).
  EXPECT_LT(seconds, 8.0);
}
