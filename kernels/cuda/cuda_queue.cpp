// cuda_queue (cuda_queue.hpp): a stream of its own per queue, completions as host functions.
#include "kernels/cuda/cuda_queue.hpp"

#include <cuda_runtime_api.h>

#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "kernels/cuda/check.hpp"
#include "kernels/cuda/completions.hpp"
#include "kernels/cuda/cuda_stream.hpp"
#include "kernels/cuda/device_alloc.hpp"

namespace troupe::cuda {

namespace {

// What `waits` runs from now on comes after what `first` was given so far (an event between them).
void wait_for(cudaStream_t waits, cudaStream_t first) {
  cudaEvent_t reached = nullptr;
  TROUPE_CUDA_CHECK(cudaEventCreateWithFlags(&reached, cudaEventDisableTiming));
  const cudaError_t recorded = cudaEventRecord(reached, first);
  const cudaError_t waited = recorded == cudaSuccess ? cudaStreamWaitEvent(waits, reached, 0) : recorded;
  (void)cudaEventDestroy(reached);  // the wait keeps what it needs of it
  TROUPE_CUDA_CHECK(waited);
}

}  // namespace

cuda_queue::cuda_queue(int gpu) : gpu_(gpu) {
  TROUPE_CUDA_CHECK(cudaSetDevice(gpu_));
  cudaStream_t made[3] = {nullptr, nullptr, nullptr};
  for (cudaStream_t& s : made) {
    // Non-blocking: the legacy default stream, which other code may use, never serializes with them.
    const cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    if (e == cudaSuccess) continue;
    for (cudaStream_t m : made)
      if (m) (void)cudaStreamDestroy(m);
    TROUPE_CUDA_CHECK(e);
  }
  stream_ = made[0];
  in_stream_ = made[1];
  out_stream_ = made[2];
}

cuda_queue::~cuda_queue() {
  // Errors are ignored here: a destructor cannot report them, and the streams go either way.
  if (cudaSetDevice(gpu_) == cudaSuccess) {
    for (cudaStream_t s : {out_stream_, in_stream_, stream_}) (void)cudaStreamSynchronize(s);
    for (cudaStream_t s : {out_stream_, in_stream_, stream_}) (void)cudaStreamDestroy(s);
  }
}

tensor cuda_queue::stage_in(const tensor& x) {
  if (!x.where().is_cpu() || !x.raw()) return x;
  TROUPE_CUDA_CHECK(cudaSetDevice(gpu_));
  // Pageable memory would make the copy wait for the driver's own staging on this thread.
  tensor pinned = tensor::uninitialized(x.shape(), x.type(), pinned_host_allocator());
  if (x.nbytes() > 0) std::memcpy(pinned.raw(), x.raw(), static_cast<size_t>(x.nbytes()));
  tensor out;
  {
    stream_guard on(in_stream_);  // the result's block: the upload stream's
    out = to_device(pinned, where(), in_stream_);  // holds the pinned copy until it is done
  }
  wait_for(stream_, in_stream_);
  record_stream(out, stream_);  // freed early, the block still waits for the compute that reads it
  out.freeze();
  return out;
}

void cuda_queue::stage_out(const tensor& x, std::function<void(tensor)> done) {
  TROUPE_CUDA_CHECK(cudaSetDevice(gpu_));
  wait_for(out_stream_, stream_);
  tensor host;
  {
    stream_guard on(out_stream_);
    host = to_device(x, device{}, out_stream_);  // pinned; holds x until the copy is done
  }
  after(out_stream_, "a copy to the host from cuda:" + std::to_string(gpu_),
        [host, done = std::move(done)]() mutable { done(host); });
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
  TROUPE_CUDA_CHECK(cudaSetDevice(gpu_));
  after(stream_, "the work enqueued on cuda:" + std::to_string(gpu_), std::move(done));
}

}  // namespace troupe::cuda
