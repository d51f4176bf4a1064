// cuda_stream: the stream a thread's GPU work launches on now. cuda_queue makes its own current
// while its work runs; elsewhere it is null, the legacy default stream. Apart from the ops
// (cuda_device_ops.hpp) so the host-side parts (the allocator, the queue) link without kernels,
// as the strict fake device's tests do (tests/kernels/strict_cuda.hpp).
#pragma once

#include <cuda_runtime_api.h>

namespace troupe::cuda {

// The stream this thread's ops launch on.
cudaStream_t current_stream();

// Makes `s` this thread's current stream for its scope, then puts the previous one back.
class stream_guard {
 public:
  explicit stream_guard(cudaStream_t s);
  ~stream_guard();
  stream_guard(const stream_guard&) = delete;
  stream_guard& operator=(const stream_guard&) = delete;

 private:
  cudaStream_t previous_;
};

}  // namespace troupe::cuda
