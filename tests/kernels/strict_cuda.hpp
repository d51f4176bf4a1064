// strict_cuda: a strict fake of the CUDA runtime for host-side tests of the GPU's host code
// (kernels/cuda's allocator, queue and completions, linked as they ship, without a GPU). It
// defines the runtime functions that code calls (strict_cuda.cpp) over host memory and one
// device thread, and is stricter than a GPU where a GPU forgives by luck:
// - Each stream's work is deferred and runs in the stream's order, but across streams in the
//   worst order the recorded events allow: of the runnable heads, the one enqueued last runs
//   first. A missing cross-stream wait then reads what was not written yet.
// - Device and pinned memory start poisoned (0xFF bytes: NaN floats), and the destination of a
//   copy into host memory is poisoned when the copy is enqueued, so a value read before its
//   completion is NaN, not yesterday's value.
// - A runtime call from a host function (cudaLaunchHostFunc), where CUDA forbids them, fails
//   with cudaErrorNotPermitted and is recorded; so is a free through a checking allocator
//   (checking_device_allocator) there, and any use of a destroyed stream or event.
// The device thread starts work once the host has enqueued nothing for a while (a batch), or at
// once when the host waits for it; after a host function it runs nothing for 20 ms, so what the
// function signalled reads the device's results before anything enqueued later could land.
#pragma once

#include <cuda_runtime_api.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/allocator.hpp"

namespace troupe::test::strict_cuda {

// What the host code did that CUDA forbids or that a GPU would not survive, in order.
std::vector<std::string> violations();
void clear_violations();
// True on the device thread while it runs a host function.
bool in_host_function();
// A "kernel": fn runs on the device thread in `stream`'s order, as a launch would.
void launch(cudaStream_t stream, std::function<void()> fn);
// Blocks until every stream has run all it was given.
void synchronize_all();

// An allocator for cuda:0 over the production one (cuda_device_allocator(0)) that records a
// free made inside a host function.
std::shared_ptr<allocator> checking_device_allocator();

}  // namespace troupe::test::strict_cuda
