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

// What data-parallel groups of ranks on accelerators may reduce through, in order of preference.
using device_engines = std::vector<std::shared_ptr<net::device_group_engine>>;
// The build's: the local engine for replicas that share one GPU (actors/collective/
// local_device_group.hpp), then NCCL where troupe is built with CUDA for replicas with a GPU each.
device_engines gpu_group_engines();

// Whether a job's settings let its data-parallel groups reduce on their devices: plain data
// parallelism, and ZeRO 1 and 2 without offload (their shards then live on the devices too). An
// offloaded shard and ZeRO-3's gathered units live on the host, so their buckets meet there.
bool device_groups_allowed(const train_config& cfg);

// Where each data-parallel group of the mesh reduces, by group index (mesh.group_index): through
// the first of `engines` that takes its members' devices, when every member is on an accelerator
// and the group lies in this process; else on the host, and `why` says what the engines refused
// when they did. An engine whose devices serve one group at most (NCCL) is passed over for a group
// on a GPU an earlier group of that kind engaged. The one rule the job's links and its memory plan
// both follow.
struct device_group_choice {
  bool on_devices = false;
  std::shared_ptr<net::device_group_engine> engine;  // the one chosen
  std::string why;
};
std::vector<device_group_choice> choose_device_groups(const device_engines& engines, const sched::mesh& mesh,
                                                      const std::function<device(int rank)>& device_of);

// The GPUs --device can name, for `troupe info`: "2 (cuda:0 NVIDIA H200, 140 GiB; cuda:1 ...)",
// or "none (" and why: no device or driver, or a build without CUDA.
std::string describe_accelerators();

}  // namespace troupe
