// accelerators: the device queue of a rank that --device puts on a GPU. The one place the
// actors reach kernels/cuda, so the rest of the job stays the same in a build without CUDA.
#pragma once

#include <memory>
#include <string>

#include "comm/device_group.hpp"
#include "kernels/device_queue.hpp"

namespace troupe {

// A queue of its own (a CUDA stream) on `d`, with d's ops and allocator set up; null for a CPU.
// Throws std::runtime_error naming the device when it is not there, or when troupe was built
// without CUDA.
std::shared_ptr<device_queue> open_accelerator(const device& d);

// What data-parallel groups of ranks on GPUs reduce through: NCCL, or null in a build without
// CUDA (their buckets then meet on the host).
std::shared_ptr<net::device_group_engine> gpu_group_engine();

// The GPUs --device can name, for `troupe info`: "2 (cuda:0 NVIDIA H200, 140 GiB; cuda:1 ...)",
// or "none (" and why: no device or driver, or a build without CUDA.
std::string describe_accelerators();

}  // namespace troupe
