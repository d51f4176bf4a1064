// accelerators (accelerators.hpp): kernels/cuda where troupe is built with it.
#include "actors/job/accelerators.hpp"

#include "actors/collective/local_device_group.hpp"

#include <map>
#include <stdexcept>

#ifdef TROUPE_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "comm/nccl_group.hpp"
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

device_engines gpu_group_engines() {
  device_engines out{local_device_engine()};
#ifdef TROUPE_HAVE_CUDA
  out.push_back(net::nccl_engine());
#endif
  return out;
}

bool device_groups_allowed(const train_config& cfg) {
  return cfg.zero <= 2 && optimizer_offload(cfg) == offload_target::none && params_offload(cfg) == offload_target::none;
}

std::vector<device_group_choice> choose_device_groups(const device_engines& engines, const sched::mesh& mesh,
                                                      const std::function<device(int rank)>& device_of) {
  std::vector<device_group_choice> out(static_cast<size_t>(mesh.groups(sched::axis::dp)));
  std::vector<bool> seen(out.size(), false);
  std::map<int, int> engaged;  // GPU -> the group whose exclusive engine (NCCL) it serves
  for (int r = 0; r < mesh.ranks(); ++r) {
    const auto g = static_cast<size_t>(mesh.group_index(sched::axis::dp, r));
    if (seen[g]) continue;
    seen[g] = true;
    if (mesh.dp == 1 || mesh.group_spans_processes(sched::axis::dp, r)) continue;
    std::vector<int> accelerators;
    bool on_host = false;
    for (int m : mesh.group(sched::axis::dp, r)) {
      const device d = device_of(m);
      on_host = on_host || d.is_cpu();  // a group with a member on the host meets there
      accelerators.push_back(d.index);
    }
    if (on_host) continue;
    device_group_choice& c = out[g];
    for (const auto& engine : engines) {
      std::string why = engine->refuses(accelerators);
      if (why.empty() && engine->one_group_per_device())
        for (int a : accelerators)
          if (auto it = engaged.find(a); why.empty() && it != engaged.end())
            why = engine->name() + " serves one group per device, and cuda:" + std::to_string(a) +
                  " serves data-parallel group " + std::to_string(it->second);
      if (!why.empty()) {
        c.why += (c.why.empty() ? "" : "; ") + why;
        continue;
      }
      c = {true, engine, ""};
      if (engine->one_group_per_device())
        for (int a : accelerators) engaged.emplace(a, static_cast<int>(g));
      break;
    }
  }
  return out;
}

std::string describe_accelerators() {
#ifdef TROUPE_HAVE_CUDA
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return std::string("none (") + cudaGetErrorString(e) + ")";
  }
  if (count == 0) return "none (no CUDA device)";
  std::string out = std::to_string(count) + " (";
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    out += (i ? "; cuda:" : "cuda:") + std::to_string(i) + " " + p.name + ", " +
           std::to_string(p.totalGlobalMem >> 30) + " GiB";
  }
  return out + ")";
#else
  return "none (troupe was built without CUDA)";
#endif
}

}  // namespace troupe
