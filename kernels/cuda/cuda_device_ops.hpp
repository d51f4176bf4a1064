// cuda_device_ops: the device_ops (kernels/device_ops.hpp) of a GPU, so the layers run there
// unchanged: each op launches kernels/cuda/ops.hpp's kernel on the calling thread's current
// stream and returns before the GPU has run it. cuda_queue makes its own stream current while
// its work runs (a stage's compute); elsewhere it is the legacy default stream, which orders
// itself with every other, so a plain caller (a test) needs no stream of its own.
#pragma once

#include <cuda_runtime_api.h>

#include "kernels/cuda/cuda_stream.hpp"
#include "kernels/device_ops.hpp"

namespace troupe::cuda {

// The ops of GPU `index`, made on the first call and installed (with the GPU's allocator,
// device_alloc.hpp) as ops_for(cuda:index). Throws std::runtime_error when there is no such GPU.
const device_ops& install_cuda_ops(int index);

}  // namespace troupe::cuda
