// kernel_faults (kernel_faults.hpp): one mapped slot per GPU.
#include "kernels/cuda/kernel_faults.hpp"

#include <cuda_runtime_api.h>

#include <atomic>
#include <mutex>
#include <sstream>
#include <vector>

#include "kernels/cuda/check.hpp"

namespace troupe::cuda {

namespace {

std::mutex slots_mu;
std::vector<kernel_fault*>& slots() {
  static auto* s = new std::vector<kernel_fault*>;  // never destroyed: the memory is never freed
  return *s;
}

kernel_fault* existing_slot(int device) {
  std::lock_guard<std::mutex> lock(slots_mu);
  const auto& s = slots();
  return device >= 0 && static_cast<size_t>(device) < s.size() ? s[static_cast<size_t>(device)] : nullptr;
}

}  // namespace

kernel_fault* kernel_fault_slot(int device) {
  if (kernel_fault* slot = existing_slot(device)) return slot;
  std::lock_guard<std::mutex> lock(slots_mu);
  auto& s = slots();
  if (s.size() <= static_cast<size_t>(device)) s.resize(static_cast<size_t>(device) + 1, nullptr);
  kernel_fault*& slot = s[static_cast<size_t>(device)];
  if (!slot) {
    void* p = nullptr;
    TROUPE_CUDA_CHECK(cudaHostAlloc(&p, sizeof(kernel_fault), cudaHostAllocMapped | cudaHostAllocPortable));
    slot = static_cast<kernel_fault*>(p);
    *slot = kernel_fault{};
  }
  return slot;
}

std::string take_kernel_fault(int device) {
  kernel_fault* slot = existing_slot(device);
  if (!slot) return {};
  // The GPU wrote it before the work completed; the completion orders those writes before this.
  std::atomic_thread_fence(std::memory_order_acquire);
  if (*static_cast<volatile int32_t*>(&slot->raised) == 0) return {};
  const kernel_fault f = *slot;
  slot->raised = 0;
  std::ostringstream msg;
  switch (f.op) {
    case kernel_fault_op::embedding:
    case kernel_fault_op::embedding_shard:
      msg << "embedding: token " << f.value << " at (" << f.b << ", " << f.t << ") is outside [0, " << f.limit << ")";
      break;
    case kernel_fault_op::none:
      msg << "a kernel recorded an error without naming it";
      break;
  }
  return msg.str();
}

}  // namespace troupe::cuda
