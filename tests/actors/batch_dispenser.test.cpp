// Batches dispensed on demand (actors/data/batch_dispenser.cpp) under parameter servers' ssp and
// asp: with a straggler the fast replicas take more batches than the slow one, the job still
// does exactly its configured number of batches (pushes), each epoch's samples go out once each
// (none lost, none twice), and a pipelined replica's stages all compute the batch it was given.
// Values only; what this does to throughput is checked under the perf label
// (ps_straggler_timing.test.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include "actors/run/training_job.hpp"
#include "storage/sampler.hpp"
#include "tests/actors/tiny_jobs.hpp"
#include "tests/scratch_dir.hpp"

using namespace troupe;
using namespace troupe::test;

namespace {

constexpr int kReplicas = 3;
constexpr int64_t kEpochs = 2;

train_config straggling_job(consistency_model mode, int staleness, const std::string& tag, int pp = 1) {
  train_config cfg = tiny_mesh_config("mlp", "adamw", kReplicas, pp, 1, pp);
  cfg.consistency = mode;
  cfg.staleness = staleness;
  cfg.max_steps = 0;
  cfg.epochs = kEpochs;  // the tiny data is one epoch of kSteps steps: two of them
  cfg.stragglers = {straggler_spec{0, 15}};  // replica 0 sleeps 15 ms before each of its steps
  cfg.out_dir = test_support::scratch_dir("dispense-" + tag).string();
  return cfg;
}

std::map<int32_t, int64_t> batches_by_replica(const train_summary& s) {
  std::map<int32_t, int64_t> n;
  for (const auto& d : s.dispensed) ++n[d.replica];
  return n;
}

void expect_dispensed_on_demand(const train_summary& got, const std::string& mode) {
  const int64_t units = kReplicas * kSteps * kEpochs;
  ASSERT_EQ(got.dispensed.size(), static_cast<size_t>(units)) << mode;
  // The job's length is its batches, not the slowest replica's steps.
  EXPECT_EQ(got.losses.size(), static_cast<size_t>(kSteps * kEpochs)) << mode;
  EXPECT_EQ(got.samples, mlp_setup().batch * kSteps * kEpochs) << mode;
  // Each once; a replica's first unit of an epoch is its own in the epoch's first round, the rest
  // go in order; each replica's steps are its own count, 0, 1, 2, ...
  std::map<int32_t, int64_t> next_step;
  std::set<int64_t> seen;
  std::map<std::pair<int32_t, int64_t>, bool> started;  // (replica, epoch)
  int64_t last_rest = -1;
  for (const auto& d : got.dispensed) {
    EXPECT_TRUE(seen.insert(d.unit).second) << mode << ": unit " << d.unit << " twice";
    const int64_t epoch = d.unit / (kReplicas * kSteps);
    bool& first = started[{d.replica, epoch}];
    if (!first) {
      first = true;
      EXPECT_EQ(d.unit, epoch * kReplicas * kSteps + d.replica) << mode << ": replica " << d.replica << "'s first unit";
    } else {
      EXPECT_GT(d.unit, last_rest) << mode << ": unit " << d.unit << " out of order";
      last_rest = d.unit;
    }
    EXPECT_EQ(d.step, next_step[d.replica]++) << mode << ": replica " << d.replica;
  }
  // Every sample of an epoch in exactly one batch of it.
  const setup data = mlp_setup();
  const storage::sampler sampler(data.data->size(), data.batch, 42);
  for (int64_t epoch = 0; epoch < kEpochs; ++epoch) {
    std::multiset<int64_t> samples;
    for (const auto& d : got.dispensed) {
      if (d.unit / (kReplicas * kSteps) != epoch) continue;
      const int64_t global = d.unit / kReplicas;
      for (int64_t i : sampler.indices(epoch, global % kSteps, static_cast<int>(d.unit % kReplicas), kReplicas))
        samples.insert(i);
    }
    EXPECT_EQ(samples.size(), static_cast<size_t>(data.batch * kSteps)) << mode << ": epoch " << epoch;
    EXPECT_EQ(std::set<int64_t>(samples.begin(), samples.end()).size(), samples.size())
        << mode << ": a sample of epoch " << epoch << " went out twice";
  }
  // The 15 ms straggler against steps of about a millisecond: the fast replicas take the most.
  const auto n = batches_by_replica(got);
  for (int r = 1; r < kReplicas; ++r)
    EXPECT_GT(n.at(r), 2 * n.at(0)) << mode << ": replica " << r << " took " << n.at(r) << " batches, the straggler "
                                    << n.at(0);
  // Every push applied once: each server's records are the dispensed units, once each.
  std::map<int32_t, std::set<int64_t>> applied;
  for (const auto& u : got.server_updates) EXPECT_TRUE(applied[u.server].insert(u.unit).second) << mode << ": unit " << u.unit;
  for (const auto& [server, set] : applied) EXPECT_EQ(set.size(), static_cast<size_t>(units)) << mode << ": server " << server;
}

TEST(DispensedBatches, UnderAspTheFastReplicasTakeMoreBatchesAndEachEpochsSamplesGoOutOnce) {
  const train_summary got = run_training(straggling_job(consistency_model::asp, 0, "asp"));
  expect_dispensed_on_demand(got, "asp");
  int64_t lead = 0;
  for (const auto& u : got.server_updates) lead = std::max(lead, u.step - u.slowest);
  EXPECT_GT(lead, 3) << "under asp nothing holds a fast replica back";
}

TEST(DispensedBatches, UnderSspTheFastReplicasTakeMoreBatchesWithinTheBound) {
  const int s = 3;
  const train_summary got = run_training(straggling_job(consistency_model::ssp, s, "ssp"));
  expect_dispensed_on_demand(got, "ssp");
  int64_t lead = 0;
  for (const auto& u : got.server_updates) {
    EXPECT_LE(u.step - u.slowest, s) << "replica " << u.replica << " unit " << u.unit;
    lead = std::max(lead, u.step - u.slowest);
  }
  EXPECT_EQ(lead, s);
}

// Both stages of a replica ask for their step's batch; they must get the same one, or stage 1
// would compute the loss of targets stage 0 never saw. Each server's records say which replica
// pushed which unit: the two stages' servers must agree on every unit.
TEST(DispensedBatches, APipelinedReplicasStagesComputeTheSameBatch) {
  const train_summary got = run_training(straggling_job(consistency_model::asp, 0, "asp-pp2", 2));
  ASSERT_EQ(got.dispensed.size(), static_cast<size_t>(kReplicas * kSteps * kEpochs));
  std::map<int32_t, std::map<int64_t, int32_t>> pusher;  // by server: unit -> replica
  for (const auto& u : got.server_updates) pusher[u.server][u.unit] = u.replica;
  ASSERT_EQ(pusher.size(), 2u);
  EXPECT_EQ(pusher.begin()->second, pusher.rbegin()->second);
  for (const auto& d : got.dispensed) EXPECT_EQ(pusher.begin()->second.at(d.unit), d.replica) << "unit " << d.unit;
  const auto n = batches_by_replica(got);
  EXPECT_GT(n.at(1), n.at(0));
}

}  // namespace
