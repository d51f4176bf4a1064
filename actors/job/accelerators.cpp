// accelerators (accelerators.hpp): kernels/cuda where troupe is built with it.
#include "actors/job/accelerators.hpp"

#include <stdexcept>

#ifdef TROUPE_HAVE_CUDA
#include "kernels/cuda/cuda_device_ops.hpp"
#include "kernels/cuda/cuda_queue.hpp"
#endif

namespace troupe {

std::shared_ptr<device_queue> open_accelerator(const device& d) {
  if (d.is_cpu()) return nullptr;
#ifdef TROUPE_HAVE_CUDA
  cuda::install_cuda_ops(d.index);  // throws naming the device when there is no such GPU
  return std::make_shared<cuda::cuda_queue>(d.index);
#else
  throw std::runtime_error("device " + d.to_string() + ": troupe was built without CUDA (no nvcc was found)");
#endif
}

}  // namespace troupe
