// device_alloc: where GPU tensors' bytes come from, and copies between devices. A caching
// allocator over cudaMalloc per GPU, one over cudaHostAlloc for pinned host memory (host tensors
// a GPU can copy from and to asynchronously), and to_device, which enqueues the copy of a tensor
// on a stream. CAF-free; the only CUDA header is the runtime's, for cudaStream_t. Built where
// CUDA is (TROUPE_HAVE_CUDA); a CPU-only troupe says so when asked for a GPU tensor
// (kernels/allocator.hpp's allocator_for).
#pragma once

#include <cuda_runtime_api.h>

#include <memory>

#include "kernels/allocator.hpp"
#include "kernels/tensor.hpp"

namespace troupe::cuda {

// The allocator of GPU `index`, one per device and process, made on the first call and installed
// as allocator_for(cuda:index), so tensor(shape, dtype, cuda:index) works from then on. Throws
// std::runtime_error naming the device when there is no such GPU (or no driver).
std::shared_ptr<caching_allocator> cuda_device_allocator(int index);

// Page-locked host memory (device cpu:0, so data() works on its f32 tensors), cached too:
// cudaHostAlloc is slower than malloc by orders of magnitude.
std::shared_ptr<caching_allocator> pinned_host_allocator();

// A copy of src on `to`, enqueued on `stream` (cudaMemcpyAsync): the result's bytes are there
// once the stream has reached this point. Both blocks are recorded on `stream`
// (record_stream), so either may be freed at once and is reused only after the copy. The result comes from cuda_device_allocator(to.index) for a GPU, and from
// pinned_host_allocator() for the CPU, so a copy back to the host is asynchronous too; read it
// only after synchronizing the stream. Same dtype and shape; unfrozen. Throws
// std::runtime_error for a device that is not there.
tensor to_device(const tensor& src, const device& to, cudaStream_t stream);

// Work enqueued on `stream` so far uses t: its block (from a device's or the pinned caching
// allocator; other memory is ignored) is handed out again only once the stream got past that
// work, whenever t is freed (PyTorch's recordStream).
void record_stream(const tensor& t, cudaStream_t stream);

// True for host memory CUDA did not allocate or register (malloc's, the CPU allocator's): a copy
// from it may make cudaMemcpyAsync wait for the stream.
bool pageable(const void* p);
// bytes from pageable host memory at src to dst (device or pinned memory), enqueued on `stream`
// through a pinned staging buffer the bytes are copied into now, on the calling thread: src may
// change or go once this returns, and the call never waits for the stream. The buffer is
// recorded on the stream, so it is handed out again only once the stream has passed the copy.
void copy_from_pageable(void* dst, const void* src, size_t bytes, cudaStream_t stream);

}  // namespace troupe::cuda
