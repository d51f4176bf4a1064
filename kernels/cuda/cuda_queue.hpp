// cuda_queue: a device_queue over one CUDA stream of GPU N. Enqueued work runs on the caller's
// thread with GPU N current and only launches (kernels, cuBLAS, copies) on stream(); it returns
// before the GPU has run them. A completion runs on the completion thread once everything
// launched before has run (completions.hpp): an ordinary thread, so what `done` captured may be
// freed there; `done` still only signals (the stage sends itself a message). A fault of the
// stream ends the process naming the GPU and what waited for it.
// Inputs from the host come in, and values bound for the host go out, on streams of their own
// (stage_in, stage_out), one per direction, overlapping the compute and each other (a GPU has a
// copy engine per direction; on one stream an upload would wait behind a download). The header
// names the streams by their opaque struct, so its users need no CUDA headers.
#pragma once

#include "kernels/device_queue.hpp"

struct CUstream_st;  // what cudaStream_t points to

namespace troupe::cuda {

class cuda_queue final : public device_queue {
 public:
  // Creates a non-blocking stream on GPU `gpu` (throws troupe::cuda::error when CUDA refuses).
  explicit cuda_queue(int gpu);
  // Waits for what is still in flight (the completions it holds would outlive the queue
  // otherwise), then destroys the stream.
  ~cuda_queue() override;
  cuda_queue(const cuda_queue&) = delete;
  cuda_queue& operator=(const cuda_queue&) = delete;

  void enqueue(std::function<void()> work) override;
  void when_done(std::function<void()> done) override;
  // Launches are enqueued work already: both run now, with this queue's stream current.
  void launch(const std::function<void()>& launch) override;
  // On the queue's upload stream, from a pinned copy of x; the queue's stream waits for it (an
  // event) before what comes after. The result's block is the upload stream's in the caching
  // allocator, so it is written again only once every holder has let go of it, and a holder keeps
  // it until its last reader's completion. From any thread (a ZeRO-3 stage's fetcher calls it).
  tensor stage_in(const tensor& x) override;
  // On the download stream, after an event on the queue's stream, into pinned memory; `done` runs
  // as a host function there once the copy is there, and x is held until then.
  void stage_out(const tensor& x, std::function<void(tensor)> done) override;
  bool asynchronous() const override { return true; }
  device where() const override { return {device_type::cuda, gpu_}; }
  // The stream enqueued work launches on (cudaStream_t).
  CUstream_st* stream() const { return stream_; }

 private:
  int gpu_;
  CUstream_st* stream_ = nullptr;
  CUstream_st* in_stream_ = nullptr;   // host to device (stage_in)
  CUstream_st* out_stream_ = nullptr;  // device to host (stage_out)
};

}  // namespace troupe::cuda
