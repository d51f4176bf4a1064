// A small cluster for the planner's tests: nodes of 8 GPUs at 100 TFLOP/s (bf16) and 1 TB/s,
// 80 GiB each, NVLink at 200 GB/s and a NIC at `inter_bytes_per_second`, no latency.
#pragma once

#include "schedules/plan/time_model.hpp"
#include "schedules/plan/memory_model.hpp"

namespace troupe::sched::plan {

inline cluster_desc test_cluster(int nodes, double inter_bytes_per_second = 20e9) {
  cluster_desc cl;
  cl.name = "test";
  cl.nodes = nodes;
  cl.gpus_per_node = 8;
  cl.device.name = "gpu";
  cl.device.peak(gemm_precision{dtype::bf16, false}) = 100e12;
  cl.device.memory_bandwidth = 1e12;
  cl.device.memory_bytes = 80 * gib;
  cl.device.sms = 100;
  cl.intra_node = {0, 200e9};
  cl.inter_node = {0, inter_bytes_per_second};
  return cl;
}

}  // namespace troupe::sched::plan
