// device_alloc: the cudaMalloc and cudaHostAlloc backends of caching_allocator, the per-device
// table, and to_device (device_alloc.hpp).
#include "kernels/cuda/device_alloc.hpp"

#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cuda/check.hpp"
#include "kernels/cuda/cuda_device_ops.hpp"

namespace troupe::cuda {

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
    return null_if_out_of_memory(cudaMalloc(&p, bytes), p, "cudaMalloc");
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
    TROUPE_CUDA_CHECK(cudaMemset(p, 0, bytes));
    TROUPE_CUDA_CHECK(cudaDeviceSynchronize());  // zero "when it returns", whatever stream comes next
  }
  device where() const override { return {device_type::cuda, index_}; }
  // Kernels read and write a device block in their stream's order, so a block is reused in the
  // order of the stream that allocated it. (Pinned host blocks stay unpooled by stream: the host
  // writes them outside any stream's order; their users keep them until their copies complete.)
  const void* stream() const override { return current_stream(); }

 private:
  int index_;
};

class pinned_backend final : public raw_backend {
 public:
  void* raw_alloc(size_t bytes) override {
    void* p = nullptr;
    return null_if_out_of_memory(cudaHostAlloc(&p, bytes, cudaHostAllocPortable), p, "cudaHostAlloc");
  }
  void raw_free(void* p, size_t) noexcept override { cudaFreeHost(p); }
  void zero(void* p, size_t bytes) override { std::memset(p, 0, bytes); }
  device where() const override { return {}; }
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

// Runs on the stream once the copy is done: drops the handle that kept the source alive. No
// CUDA call may happen here, and none does: caching allocators only cache what they are given.
void CUDART_CB release_source(void* handle) { delete static_cast<tensor*>(handle); }

// Keeps t's storage until `stream` has run what was enqueued on it so far.
void hold_until_done(const tensor& t, cudaStream_t stream) {
  auto* keep = new tensor(t);
  const cudaError_t e = cudaLaunchHostFunc(stream, release_source, keep);
  if (e != cudaSuccess) {
    delete keep;
    check(e, "cudaLaunchHostFunc", __FILE__, __LINE__);
  }
}

}  // namespace

std::shared_ptr<caching_allocator> cuda_device_allocator(int index) {
  static std::mutex mu;
  static std::vector<std::shared_ptr<caching_allocator>> made;
  std::lock_guard<std::mutex> lock(mu);
  if (index >= 0 && static_cast<size_t>(index) < made.size() && made[static_cast<size_t>(index)])
    return made[static_cast<size_t>(index)];
  require_device(index);
  auto a = std::make_shared<caching_allocator>(std::make_unique<cuda_backend>(index));
  if (made.size() <= static_cast<size_t>(index)) made.resize(static_cast<size_t>(index) + 1);
  made[static_cast<size_t>(index)] = a;
  install_allocator(a);
  return a;
}

std::shared_ptr<caching_allocator> pinned_host_allocator() {
  static const auto a = std::make_shared<caching_allocator>(std::make_unique<pinned_backend>());
  return a;
}

tensor to_device(const tensor& src, const device& to, cudaStream_t stream) {
  if (!src.raw()) return {};  // the default tensor has no storage to copy
  tensor out = to.is_cpu() ? tensor::uninitialized(src.shape(), src.type(), pinned_host_allocator())
                           : tensor::uninitialized(src.shape(), src.type(), cuda_device_allocator(to.index));
  if (src.nbytes() == 0) return out;
  // With unified addressing the runtime knows each pointer's device: one call for every
  // direction, including GPU to GPU.
  TROUPE_CUDA_CHECK(cudaMemcpyAsync(out.raw(), src.raw(), static_cast<size_t>(src.nbytes()), cudaMemcpyDefault, stream));
  hold_until_done(src, stream);
  return out;
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
  hold_until_done(staging, stream);
}

}  // namespace troupe::cuda
