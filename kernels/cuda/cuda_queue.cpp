// cuda_queue (cuda_queue.hpp): a stream of its own per queue, completions as host functions.
#include "kernels/cuda/cuda_queue.hpp"

#include <cuda_runtime_api.h>

#include <memory>
#include <utility>

#include "kernels/cuda/check.hpp"
#include "kernels/cuda/cuda_device_ops.hpp"

namespace troupe::cuda {

namespace {

// The driver's thread runs it; `done` only signals, and nothing here may call CUDA. A throw
// could not cross the driver back to anyone, so it ends the process instead of vanishing.
void CUDART_CB run_done(void* p) noexcept {
  std::unique_ptr<std::function<void()>> done(static_cast<std::function<void()>*>(p));
  (*done)();
}

}  // namespace

cuda_queue::cuda_queue(int gpu) : gpu_(gpu) {
  TROUPE_CUDA_CHECK(cudaSetDevice(gpu_));
  cudaStream_t s = nullptr;
  // Non-blocking: the legacy default stream, which other code may use, never serializes with it.
  TROUPE_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  stream_ = s;
}

cuda_queue::~cuda_queue() {
  // Errors are ignored here: a destructor cannot report them, and the stream goes either way.
  if (cudaSetDevice(gpu_) == cudaSuccess) {
    (void)cudaStreamSynchronize(stream_);
    (void)cudaStreamDestroy(stream_);
  }
}

void cuda_queue::enqueue(std::function<void()> work) { launch(work); }

void cuda_queue::launch(const std::function<void()>& launch) {
  // Work may run on any of the scheduler's threads: each launch must find its GPU current, and
  // the layers' ops (cuda_device_ops.hpp) this queue's stream.
  TROUPE_CUDA_CHECK(cudaSetDevice(gpu_));
  stream_guard on(stream_);
  launch();
}

void cuda_queue::when_done(std::function<void()> done) {
  auto owned = std::make_unique<std::function<void()>>(std::move(done));
  TROUPE_CUDA_CHECK(cudaLaunchHostFunc(stream_, run_done, owned.get()));
  owned.release();  // run_done deletes it
}

}  // namespace troupe::cuda
