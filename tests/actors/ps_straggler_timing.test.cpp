// Throughput with one straggler (perf label: wall-clock figures, run alone): with batches
// dispensed on demand, PS-ASP and PS-SSP (s = 3) do the same job's samples faster than collective
// sync DP, whose every step waits for the straggler. The same runs' values are checked too: the
// job did exactly its samples, and the fast replicas took more batches than the slow one.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "actors/run/training_job.hpp"
#include "tests/actors/tiny_jobs.hpp"
#include "tests/scratch_dir.hpp"

using namespace troupe;
using namespace troupe::test;

namespace {

train_summary run_with_straggler(consistency_model mode, int staleness, const std::string& tag) {
  train_config cfg = tiny_mesh_config("mlp", "adamw", 3, 1, 1, 1);
  cfg.consistency = mode;
  cfg.staleness = staleness;
  // Steps of the tiny job take about a millisecond: a 20 ms sleep is the whole step time of
  // replica 0, many times the others'.
  cfg.stragglers = {straggler_spec{0, 20}};
  cfg.out_dir = test_support::scratch_dir("ps-timing-" + tag).string();
  return run_training(cfg);
}

TEST(StragglerThroughput, AspAndSspThreeBeatSyncDataParallelOnTheSameSamples) {
  const train_summary sync = run_with_straggler(consistency_model::none, 0, "sync");
  for (auto [mode, s, least] : {std::tuple{consistency_model::asp, 0, 2.0}, std::tuple{consistency_model::ssp, 3, 1.5}}) {
    const train_summary got = run_with_straggler(mode, s, std::string(to_string(mode)) + std::to_string(s));
    EXPECT_EQ(got.samples, sync.samples) << to_string(mode);
    std::map<int32_t, int64_t> n;
    for (const auto& d : got.dispensed) ++n[d.replica];
    EXPECT_GT(n[1], n[0]) << to_string(mode);
    EXPECT_GT(n[2], n[0]) << to_string(mode);
    EXPECT_GT(got.samples_per_s, least * sync.samples_per_s)
        << to_string(mode) << " s=" << s << ": " << got.samples_per_s << " samples/s against sync DP's " << sync.samples_per_s;
  }
}

}  // namespace
