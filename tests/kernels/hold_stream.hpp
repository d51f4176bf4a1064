// hold_stream: holds a CUDA stream until the test opens it, with a kernel that waits on a flag in
// mapped host memory. Not a host function (cudaLaunchHostFunc): the driver runs every host
// function of the process on one thread, so holding a stream with one would also hold the
// completion callbacks of every other stream, and a test of "does not wait for what comes after"
// would wait for it.
#pragma once

#include <cuda_runtime_api.h>

namespace troupe::test {

class stream_hold {
 public:
  // Enqueues the hold on `s`; it lasts until open() or the destructor, or `patience_ms` at most
  // (never hang the suite).
  explicit stream_hold(cudaStream_t s, int patience_ms = 30000);
  ~stream_hold();
  stream_hold(const stream_hold&) = delete;
  stream_hold& operator=(const stream_hold&) = delete;
  void open();

 private:
  volatile int* flag_ = nullptr;  // mapped pinned memory: the host writes, the kernel reads
};

}  // namespace troupe::test
