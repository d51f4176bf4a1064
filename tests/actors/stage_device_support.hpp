// What the stage-on-a-device tests share (stage_device.test.cpp, stage_device_parallel.test.cpp):
// a job's ranks on fake devices (fake_device.hpp) on one scheduler thread, the fake GPU
// (tests/kernels/fake_gpu.hpp) for each rank, and bitwise comparison of parameters.
#pragma once

#include <cstddef>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "actors/run/training_job.hpp"
#include "tests/actors/fake_device.hpp"
#include "tests/actors/fake_device_group.hpp"
#include "tests/kernels/fake_gpu.hpp"
#include "tests/scratch_dir.hpp"

namespace troupe::test {

inline std::string out_dir(const std::string& name) {
  return test_support::scratch_dir("stage-device-" + name).string();
}

// Rank r's queue is devices[r]; the whole job on one scheduler thread, so a stage that held it
// would stall every other actor.
inline job_extras on_devices(const std::vector<std::shared_ptr<fake_device>>& devices) {
  job_extras extras;
  extras.device_of = [devices](int rank) -> std::shared_ptr<device_queue> { return devices.at(static_cast<size_t>(rank)); };
  extras.scheduler_threads = 1;
  return extras;
}

inline bool same_bits(const tensor& a, const tensor& b) {
  return a.numel() == b.numel() && std::memcmp(a.data(), b.data(), static_cast<size_t>(a.numel()) * sizeof(float)) == 0;
}

// A job on fake GPUs against the CPU's: the final parameters bit for bit, the losses to float
// rounding (a device's loss reaches the host as one float per row, the CPU sums doubles).
inline void expect_cpu_training(const train_summary& gpu, const train_summary& cpu) {
  EXPECT_TRUE(same_bits(cpu.final_params, gpu.final_params));
  ASSERT_EQ(gpu.losses.size(), cpu.losses.size());
  for (size_t i = 0; i < cpu.losses.size(); ++i) EXPECT_NEAR(gpu.losses[i], cpu.losses[i], 1e-6 * cpu.losses[i]) << i;
}

// An engine that refuses every group: the buckets meet on the host, as through a GPU that NCCL
// cannot take.
inline std::shared_ptr<fake_device_group_engine> host_only() {
  return std::make_shared<fake_device_group_engine>("the test keeps its buckets on the host");
}

// A fake GPU's queue per rank; launches_in_caller: the work runs in the stage's own calls, as
// cuda_queue's does.
inline std::vector<std::shared_ptr<fake_device>> accelerators_for(const train_config& cfg,
                                                                  bool launches_in_caller = false) {
  fake_ops();  // the device's allocator and ops
  std::vector<std::shared_ptr<fake_device>> out;
  for (int r = 0; r < cfg.mesh.ranks(); ++r) out.push_back(std::make_shared<fake_device>(fake_gpu, launches_in_caller));
  return out;
}

// cfg with every rank on a fake GPU, its groups through `engine`.
inline train_summary run_with_engine(const train_config& cfg, const std::shared_ptr<fake_device_group_engine>& engine) {
  const auto devices = accelerators_for(cfg);
  job_extras extras = on_devices(devices);
  extras.device_collectives = engine;
  return run_training(cfg, extras);
}

}  // namespace troupe::test
