// kernel_faults: data errors a kernel finds (a token outside the vocabulary) reported to the host.
// A kernel cannot throw; the CPU's op would (kernels/ops_transformer.cpp's check_token). So the
// kernel leaves its output poisoned (NaN) and records the first such error in a slot of mapped
// host memory per GPU; the completion thread (completions.hpp) reads the slot before it runs each
// callback of that GPU and turns a recorded error into a fault naming it, so a bad batch stops
// the job with the CPU's message instead of training on NaN.
#pragma once

#include <cstdint>
#include <string>

namespace troupe::cuda {

enum class kernel_fault_op : int32_t { none = 0, embedding = 1, embedding_shard = 2 };

struct kernel_fault {
  int32_t raised;  // 0 until a kernel claims the slot (atomicCAS), then 1
  kernel_fault_op op;
  int64_t b, t;  // where in the (B, T) batch
  float value;   // the token as given
  int64_t limit;  // the vocabulary's size
};

// GPU `device`'s slot: host memory mapped into the device (cudaHostAllocMapped), the pointer the
// kernels write through. Made on the first call, from an ordinary thread; never freed.
kernel_fault* kernel_fault_slot(int device);
// The message of the error recorded on `device` since the last call ("" when none), clearing
// the slot. Call only once the work that may have written it has completed.
std::string take_kernel_fault(int device);

}  // namespace troupe::cuda
