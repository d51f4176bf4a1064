// accelerators (accelerators.hpp): kernels/cuda where troupe is built with it.
#include "actors/plan/accelerators.hpp"

#include "comm/local_device_group.hpp"
#include "kernels/device_ops.hpp"

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
  out.push_back(net::nccl_engine([] { return cuda::current_stream(); }));
#endif
  return out;
}

rank_devices open_rank_devices(const train_config& cfg, const std::vector<int>& ranks, const rank_devices& given) {
  rank_devices open = given;
  if (!open) {
    bool any = false;
    for (const device& d : cfg.devices) any = any || !d.is_cpu();
    if (!any) return {};
    open = [&cfg](int rank) { return open_accelerator(device_of_rank(cfg, rank)); };
  }
  auto queues = std::make_shared<std::map<int, std::shared_ptr<device_queue>>>();
  for (int r : ranks) {
    std::shared_ptr<device_queue> q = open(r);
    if (q && !q->where().is_cpu()) ops_for(q->where());  // throws naming the device when nobody set up its ops
    (*queues)[r] = std::move(q);
  }
  return [queues](int rank) {
    const auto it = queues->find(rank);
    return it == queues->end() ? nullptr : it->second;
  };
}

namespace {

// A GPU an exclusive engine's group engaged: the group's axis and index, for the reason given to
// a later group.
struct engagement {
  sched::axis axis;
  int group;
};
// A GPU of the job: its process and index. Processes may be on different machines, each with
// its cuda:0, so a GPU is known only within its process; processes on one machine are told
// apart by --device naming different GPUs for them (NCCL refuses a GPU twice when they join).
using gpu_key = std::pair<int, int>;

// Why `engine` cannot take the group whose members are on `gpus`, or "".
std::string refusal(const net::device_group_engine& engine, bool spans, const std::vector<gpu_key>& gpus,
                    const std::map<gpu_key, engagement>& engaged) {
  if (spans && !engine.spans_processes())
    return engine.name() + " joins the members of one process, and this group spans processes";
  std::map<int, std::vector<int>> by_process;  // the engine judges each process's GPUs
  for (const gpu_key& k : gpus) by_process[k.first].push_back(k.second);
  for (const auto& [process, indices] : by_process)
    if (std::string why = engine.refuses(indices); !why.empty()) return why;
  if (engine.one_group_per_device())
    for (const gpu_key& k : gpus)
      if (auto it = engaged.find(k); it != engaged.end())
        return engine.name() + " serves one group per device, and cuda:" + std::to_string(k.second) + " serves " +
               (it->second.axis == sched::axis::tp ? "tensor" : "data") + "-parallel group " +
               std::to_string(it->second.group);
  return {};
}

std::vector<device_group_choice> choose_on_axis(sched::axis axis, const device_engines& engines,
                                                const sched::mesh& mesh,
                                                const std::function<device(int rank)>& device_of,
                                                std::map<gpu_key, engagement>& engaged, bool across_processes) {
  std::vector<device_group_choice> out(static_cast<size_t>(mesh.groups(axis)));
  std::vector<bool> seen(out.size(), false);
  const int size = mesh.size(axis);
  for (int r = 0; r < mesh.ranks(); ++r) {
    const auto g = static_cast<size_t>(mesh.group_index(axis, r));
    if (seen[g]) continue;
    seen[g] = true;
    const bool spans = mesh.group_spans_processes(axis, r);
    if (size == 1 || (spans && !across_processes)) continue;
    std::vector<gpu_key> gpus;
    bool on_host = false;
    for (int m : mesh.group(axis, r)) {
      const device d = device_of(m);
      on_host = on_host || d.is_cpu();  // a group with a member on the host meets there
      gpus.emplace_back(mesh.process_of(m), d.index);
    }
    if (on_host) continue;
    device_group_choice& c = out[g];
    for (const auto& engine : engines) {
      if (std::string why = refusal(*engine, spans, gpus, engaged); !why.empty()) {
        c.why += (c.why.empty() ? "" : "; ") + why;
        continue;
      }
      c = {true, engine, ""};
      if (engine->one_group_per_device())
        for (const gpu_key& k : gpus) engaged.emplace(k, engagement{axis, static_cast<int>(g)});
      break;
    }
  }
  return out;
}

}  // namespace

std::vector<device_group_choice> choose_device_groups(const device_engines& engines, const sched::mesh& mesh,
                                                      const std::function<device(int rank)>& device_of,
                                                      sched::axis axis, bool across_processes) {
  if (axis != sched::axis::dp && axis != sched::axis::tp)
    throw std::invalid_argument("choose_device_groups: data- or tensor-parallel groups only");
  std::map<gpu_key, engagement> engaged;  // GPU -> the group whose exclusive engine (NCCL) it serves
  std::vector<device_group_choice> tp =
      choose_on_axis(sched::axis::tp, engines, mesh, device_of, engaged, across_processes);
  if (axis == sched::axis::tp) return tp;
  return choose_on_axis(sched::axis::dp, engines, mesh, device_of, engaged, across_processes);
}

void check_tp_groups_on_devices(const device_engines& engines, const sched::mesh& mesh,
                                const std::function<device(int rank)>& device_of, bool across_processes) {
  if (mesh.tp == 1) return;
  std::vector<device_group_choice> choices;
  for (int g = 0; g < mesh.groups(sched::axis::tp); ++g) {
    int first = 0;
    while (mesh.group_index(sched::axis::tp, first) != g) ++first;
    if (mesh.group_spans_processes(sched::axis::tp, first) && !across_processes) continue;
    std::string names;
    bool on_host = false, on_devices = false;
    for (int r : mesh.group(sched::axis::tp, first)) {
      const device d = device_of(r);
      (d.is_cpu() ? on_host : on_devices) = true;
      names += (names.empty() ? "" : ",") + d.to_string();
    }
    if (!on_devices) continue;
    const std::string which = "tensor-parallel group " + std::to_string(g) + " (" + names + ")";
    if (on_host)
      throw std::invalid_argument(which + " has ranks on the host and on accelerators: its layers sum their partial "
                                  "results where their values are, so give all of its ranks a GPU or none");
    if (choices.empty()) choices = choose_device_groups(engines, mesh, device_of, sched::axis::tp, across_processes);
    const device_group_choice& c = choices.at(static_cast<size_t>(g));
    if (!c.on_devices)
      throw std::invalid_argument(which + ": no engine sums its layers' partial results on those devices (" +
                                  (c.why.empty() ? std::string("none was given") : c.why) +
                                  "); put its ranks on one GPU or on a GPU each");
  }
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
