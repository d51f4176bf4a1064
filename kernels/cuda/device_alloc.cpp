// device_alloc: the cudaMalloc and cudaHostAlloc backends of caching_allocator, the per-device
// table, and to_device (device_alloc.hpp).
#include "kernels/cuda/device_alloc.hpp"

#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cuda/check.hpp"
#include "kernels/cuda/cuda_stream.hpp"

namespace troupe::cuda {

// The backends' events (defined below, after device_guard).
void* record_event(int device, const void* stream);
bool event_reached(void* e);
void wait_event(void* e);

namespace {

// cudaMalloc and cudaMemset act on the calling thread's current device: make it `index` for
// the scope, and put the caller's back.
class device_guard {
 public:
  explicit device_guard(int index) {
    TROUPE_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != index) TROUPE_CUDA_CHECK(cudaSetDevice(index));
    else previous_ = -1;
  }
  ~device_guard() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  device_guard(const device_guard&) = delete;
  device_guard& operator=(const device_guard&) = delete;

 private:
  int previous_ = -1;
};

// An allocation that failed for want of memory returns null (the cache is then given back and
// the call retried); cudaMalloc's error is not sticky, but it stays the last error until read.
void* null_if_out_of_memory(cudaError_t e, void* p, const char* call) {
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    return nullptr;
  }
  check(e, call, __FILE__, __LINE__);
  return p;
}

class cuda_backend final : public raw_backend {
 public:
  explicit cuda_backend(int index) : index_(index) {}
  void* raw_alloc(size_t bytes) override {
    device_guard on(index_);
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, bytes);  // before p is read: argument order is unspecified
    return null_if_out_of_memory(e, p, "cudaMalloc");
  }
  void raw_free(void* p, size_t) noexcept override {
    // A failure here (a device lost) cannot be reported from a destructor path; the process
    // is about to see it on its next CUDA call anyway.
    int previous = -1;
    if (cudaGetDevice(&previous) == cudaSuccess && previous != index_) cudaSetDevice(index_);
    cudaFree(p);
    if (previous >= 0 && previous != index_) cudaSetDevice(previous);
  }
  void zero(void* p, size_t bytes) override {
    device_guard on(index_);
    // In the order of the calling thread's stream, whose work comes next; without one (a test, a
    // setup step) the legacy stream, which non-blocking streams do not wait for: finished there
    // before this returns. Never the whole device.
    const cudaStream_t s = current_stream();
    TROUPE_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, s));
    if (!s) TROUPE_CUDA_CHECK(cudaStreamSynchronize(nullptr));
  }
  device where() const override { return {device_type::cuda, index_}; }
  // Kernels read and write a device block in their stream's order, so a block is reused in the
  // order of the stream that allocated it. (Pinned host blocks belong to no stream: the host
  // writes them as soon as they are handed out, so every stream that copies one records it.)
  const void* stream() const override { return current_stream(); }
  void* record_event(const void* stream) override { return cuda::record_event(index_, stream); }
  bool event_reached(void* e) override { return cuda::event_reached(e); }
  void wait_event(void* e) override { cuda::wait_event(e); }
  void destroy_event(void* e) noexcept override { cudaEventDestroy(static_cast<cudaEvent_t>(e)); }

 private:
  int index_;
};

class pinned_backend final : public raw_backend {
 public:
  void* raw_alloc(size_t bytes) override {
    void* p = nullptr;
    const cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
    return null_if_out_of_memory(e, p, "cudaHostAlloc");
  }
  void raw_free(void* p, size_t) noexcept override { cudaFreeHost(p); }
  void zero(void* p, size_t bytes) override { std::memset(p, 0, bytes); }
  device where() const override { return {}; }
  void* record_event(const void* stream) override {
    int here = 0;
    TROUPE_CUDA_CHECK(cudaGetDevice(&here));
    return cuda::record_event(here, stream);
  }
  bool event_reached(void* e) override { return cuda::event_reached(e); }
  void wait_event(void* e) override { cuda::wait_event(e); }
  void destroy_event(void* e) noexcept override { cudaEventDestroy(static_cast<cudaEvent_t>(e)); }
};

void require_device(int index) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();
    throw std::runtime_error("no CUDA device cuda:" + std::to_string(index) + ": cudaGetDeviceCount failed: " +
                             cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
  }
  if (index < 0 || index >= count)
    throw std::runtime_error("no CUDA device cuda:" + std::to_string(index) + ": this machine has " +
                             std::to_string(count) + " GPU(s)");
}

// A stream's allocator is the one of its device; a pinned block's is the pinned one.
bool record_on(const std::shared_ptr<caching_allocator>& a, const void* p, cudaStream_t s) {
  return a && a->record_stream(p, s);
}

}  // namespace

void* record_event(int device, const void* stream) {
  device_guard on(device);
  cudaEvent_t e = nullptr;
  TROUPE_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  const cudaError_t r = cudaEventRecord(e, static_cast<cudaStream_t>(const_cast<void*>(stream)));
  if (r != cudaSuccess) {
    cudaEventDestroy(e);
    check(r, "cudaEventRecord", __FILE__, __LINE__);
  }
  return e;
}

bool event_reached(void* e) {
  const cudaError_t r = cudaEventQuery(static_cast<cudaEvent_t>(e));
  if (r == cudaErrorNotReady) return false;
  check(r, "cudaEventQuery (a stream that used a freed block)", __FILE__, __LINE__);
  return true;
}

void wait_event(void* e) {
  TROUPE_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(e)));
}

std::shared_ptr<caching_allocator> cuda_device_allocator(int index) {
  static std::mutex mu;
  // Never destroyed, as PyTorch's allocator is not: at exit the CUDA runtime may be gone before
  // a static destructor could free the cache (a crash there, seen on an H200).
  static auto* made = new std::vector<std::shared_ptr<caching_allocator>>;
  std::lock_guard<std::mutex> lock(mu);
  if (index >= 0 && static_cast<size_t>(index) < made->size() && (*made)[static_cast<size_t>(index)])
    return (*made)[static_cast<size_t>(index)];
  require_device(index);
  auto a = std::make_shared<caching_allocator>(std::make_unique<cuda_backend>(index));
  if (made->size() <= static_cast<size_t>(index)) made->resize(static_cast<size_t>(index) + 1);
  (*made)[static_cast<size_t>(index)] = a;
  install_allocator(a);
  return a;
}

std::shared_ptr<caching_allocator> pinned_host_allocator() {
  // Never destroyed either (cuda_device_allocator says why).
  static const auto* a =
      new std::shared_ptr<caching_allocator>(std::make_shared<caching_allocator>(std::make_unique<pinned_backend>()));
  return *a;
}

tensor to_device(const tensor& src, const device& to, cudaStream_t stream) {
  if (!src.raw()) return {};  // the default tensor has no storage to copy
  tensor out = to.is_cpu() ? tensor::uninitialized(src.shape(), src.type(), pinned_host_allocator())
                           : tensor::uninitialized(src.shape(), src.type(), cuda_device_allocator(to.index));
  if (src.nbytes() == 0) return out;
  // With unified addressing the runtime knows each pointer's device: one call for every
  // direction, including GPU to GPU.
  TROUPE_CUDA_CHECK(cudaMemcpyAsync(out.raw(), src.raw(), static_cast<size_t>(src.nbytes()), cudaMemcpyDefault, stream));
  record_stream(src, stream);
  record_stream(out, stream);
  return out;
}

void record_stream(const tensor& t, cudaStream_t stream) {
  const void* p = t.raw();
  if (!p) return;
  if (t.where().is_cpu()) {
    record_on(pinned_host_allocator(), p, stream);  // pageable memory: the copy took it already
    return;
  }
  record_on(cuda_device_allocator(t.where().index), p, stream);
}

bool pageable(const void* p) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();  // an unknown pointer: host memory CUDA never saw
    return true;
  }
  return a.type == cudaMemoryTypeUnregistered;
}

void copy_from_pageable(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  tensor staging = tensor::uninitialized({static_cast<int64_t>((bytes + 3) / 4)}, dtype::f32, pinned_host_allocator());
  std::memcpy(staging.raw(), src, bytes);
  TROUPE_CUDA_CHECK(cudaMemcpyAsync(dst, staging.raw(), bytes, cudaMemcpyDefault, stream));
  record_stream(staging, stream);
}

}  // namespace troupe::cuda
