// accelerators: the device queue of a rank that --device puts on a GPU. The one place the
// actors reach kernels/cuda, so the rest of the job stays the same in a build without CUDA.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "actors/job/train_config.hpp"
#include "comm/device_group.hpp"
#include "schedules/mesh.hpp"
#include "kernels/device_queue.hpp"

namespace troupe {

// A queue of its own (a CUDA stream) on `d`, with d's ops and allocator set up; null for a CPU.
// Throws std::runtime_error naming the device when it is not there, or when troupe was built
// without CUDA.
std::shared_ptr<device_queue> open_accelerator(const device& d);

// What data-parallel groups of ranks on GPUs reduce through: NCCL, or null in a build without
// CUDA (their buckets then meet on the host).
std::shared_ptr<net::device_group_engine> gpu_group_engine();

// Whether a job's settings let its data-parallel groups reduce on their devices: plain data
// parallelism, and ZeRO 1 and 2 without offload (their shards then live on the devices too). An
// offloaded shard and ZeRO-3's gathered units live on the host, so their buckets meet there.
bool device_groups_allowed(const train_config& cfg);

// Where one data-parallel group (its members' devices, in member order) reduces: on them through
// `engine` when every member is on an accelerator and the engine takes those devices, else on
// the host; `why` says what the engine refused, when it did. The one rule the job's links and
// its memory plan both follow.
struct device_group_choice {
  bool on_devices = false;
  std::string why;
};
device_group_choice choose_device_group(const net::device_group_engine* engine, const std::vector<device>& members);
// The same for every data-parallel group of the mesh, by group index (mesh.group_index), in
// order, with one more rule for an engine whose devices serve one group at most (NCCL): a later
// group on an engaged GPU meets on the host. A group that spans processes meets on the host too.
std::vector<device_group_choice> choose_device_groups(const net::device_group_engine* engine, const sched::mesh& mesh,
                                                      const std::function<device(int rank)>& device_of);

// The GPUs --device can name, for `troupe info`: "2 (cuda:0 NVIDIA H200, 140 GiB; cuda:1 ...)",
// or "none (" and why: no device or driver, or a build without CUDA.
std::string describe_accelerators();

}  // namespace troupe
