// accelerators: the device queue of a rank that --device puts on a GPU. The one place the
// actors reach kernels/cuda, so the rest of the job stays the same in a build without CUDA.
#pragma once

#include <memory>

#include "kernels/device_queue.hpp"

namespace troupe {

// A queue of its own (a CUDA stream) on `d`, with d's ops and allocator set up; null for a CPU.
// Throws std::runtime_error naming the device when it is not there, or when troupe was built
// without CUDA.
std::shared_ptr<device_queue> open_accelerator(const device& d);

}  // namespace troupe
