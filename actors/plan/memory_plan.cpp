// Predicted model states per rank (memory_plan.hpp).
#include "actors/plan/memory_plan.hpp"

#include <unistd.h>

#include "actors/plan/accelerators.hpp"

#include <algorithm>
#include <stdexcept>

namespace troupe {

int64_t optimizer_state_floats(const optimizer_config& o) {
  return make_optimizer(o, 0, state_storage::external)->state_floats();  // the rule lives in one place
}

int64_t offload_tile_floats(const train_config& cfg) {
  constexpr int64_t page = 4096 / sizeof(float);
  const int64_t queue = cfg.aio_block_size * cfg.aio_queue_depth / static_cast<int64_t>(sizeof(float));
  // A slot holds the master tile and, when the optimizer is offloaded too, its state tiles.
  const int64_t sections = 1 + (optimizer_offload(cfg) == offload_target::none ? 0 : optimizer_state_floats(cfg.optim));
  return std::max(page, queue / sections / page * page);
}

int64_t largest_bucket_bytes(const job_plan& plan, int rank) {
  const sched::mesh_coords at = plan.mesh.coords_of(rank);
  int64_t most = 0;
  for (const auto& chunk : plan.buckets.at(plan.slot(at.pp, at.tp)))
    for (const grad_bucket& b : chunk) most = std::max(most, b.count);
  return most * static_cast<int64_t>(sizeof(float));
}

memory_figures predicted_model_states(const train_config& cfg, const job_plan& plan, int rank) {
  static const device_engines build = gpu_group_engines();
  return predicted_model_states(cfg, plan, rank, build);
}

bool reduces_on_devices(const train_config& cfg, const sched::mesh& mesh, int rank, const device_engines& engines) {
  if (!device_groups_allowed(cfg)) return false;
  const auto groups = choose_device_groups(engines, mesh, [&cfg](int r) { return device_of_rank(cfg, r); },
                                           sched::axis::dp, cfg.backend == net::backend_kind::nccl);
  return groups.at(static_cast<size_t>(mesh.group_index(sched::axis::dp, rank))).on_devices;
}

memory_figures predicted_model_states(const train_config& cfg, const job_plan& plan, int rank, const device_engines& engines) {
  const sched::mesh_coords at = plan.mesh.coords_of(rank);
  const auto& buckets = plan.buckets.at(plan.slot(at.pp, at.tp));
  const int64_t f = sizeof(float);
  const int64_t psi = plan.stage_params.at(plan.slot(at.pp, at.tp)) * f;
  const int64_t k = optimizer_state_floats(cfg.optim);
  bool any_bucket = false;
  for (const auto& c : buckets) any_bucket = any_bucket || !c.empty();
  memory_figures m;
  auto set = [&](memory_kind kind, int64_t bytes) { m.bytes[static_cast<size_t>(kind)] = bytes; };
  if (cfg.zero == 0 || !any_bucket) {
    set(memory_kind::parameters, 2 * psi);
    set(memory_kind::gradients, 2 * psi);
    set(memory_kind::optimizer_state, k * psi);
    return m;
  }
  const int64_t shard = shard_size(plan.shard_of(rank)) * f;
  // ZeRO 2 and 3's buckets in flight: one microbatch's backward sends each as it completes it;
  // over several, each accumulates until the last one's backward, so all of them are there then.
  const int64_t in_flight = cfg.micro_batches > 1 ? psi : largest_bucket_bytes(plan, rank);
  if (cfg.zero >= 3) {  // its segments (updated in place; off the device when offloaded), and the units gathered at most
    // A GPU rank's group gathers on the host, which keeps its segments and its shard: on the GPU
    // are only the unit in use and those prefetched (copied in as they are gathered), and the
    // buckets in flight.
    const bool on_gpu = !device_of_rank(cfg, rank).is_cpu();
    const int64_t segments = params_offload(cfg) == offload_target::none && !on_gpu ? shard : 0;
    const int64_t units = cfg.prefetch + 1;
    set(memory_kind::parameters, segments + units * largest_bucket_bytes(plan, rank));
    set(memory_kind::gradients, (on_gpu ? 0 : shard) + in_flight);
    set(memory_kind::optimizer_state, optimizer_offload(cfg) == offload_target::none && !on_gpu ? k * shard : 0);
    return m;
  }
  // A GPU rank whose group reduces through the host keeps its shard there.
  const bool shard_on_host = !device_of_rank(cfg, rank).is_cpu() && !reduces_on_devices(cfg, plan.mesh, rank, engines);
  set(memory_kind::parameters, psi);
  set(memory_kind::gradients, cfg.zero >= 2 ? (shard_on_host ? 0 : shard) + in_flight : psi);
  set(memory_kind::optimizer_state, optimizer_offload(cfg) == offload_target::none && !shard_on_host ? shard + k * shard : 0);
  return m;
}

void check_host_memory(const train_config& cfg, const job_plan& plan, int64_t host_bytes) {
  // A parameter server process (--servers) holds no rank of the mesh.
  if (host_bytes <= 0 || cfg.process.index >= plan.mesh.processes) return;
  // This process's ranks: the others may run on other machines.
  for (int r : plan.mesh.ranks_of_process(cfg.process.index)) {
    if (!device_of_rank(cfg, r).is_cpu()) continue;
    const memory_figures need = predicted_model_states(cfg, plan, r);
    if (need.total() <= host_bytes) continue;
    throw std::invalid_argument("the model cannot fit this machine: rank " + std::to_string(r) + " needs " +
                                format_bytes(need.total()) + " for its model states alone at zero " +
                                std::to_string(cfg.zero) + " (" + need.to_string() + "), and the machine has " +
                                format_bytes(host_bytes) +
                                " of memory; split it over more ranks (--pp, --tp, --zero 3 with --dp), offload "
                                "(--offload both --offload-to nvme) or shrink the model");
  }
}

int64_t host_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : 0;
}

std::optional<over_cap> first_over_device_memory(const train_config& cfg, const job_plan& plan) {
  if (cfg.device_memory <= 0) return std::nullopt;
  for (int r = 0; r < plan.mesh.ranks(); ++r) {
    const memory_figures need = predicted_model_states(cfg, plan, r);
    if (need.total() > cfg.device_memory) return over_cap{r, need};
  }
  return std::nullopt;
}

void check_device_memory(const train_config& cfg, const job_plan& plan, const std::string& also) {
  const std::optional<over_cap> over = first_over_device_memory(cfg, plan);
  if (!over) return;
  std::string hint = also;
  if (cfg.zero < 2 && plan.mesh.replicas() > 1)
    hint += "; a higher --zero partitions more of it over the " + std::to_string(plan.mesh.replicas()) + " data-parallel ranks";
  else if (plan.mesh.replicas() == 1)
    hint += "; ZeRO partitions model states over data-parallel ranks (--dp 2 or more with --zero)";
  throw std::invalid_argument("the job does not fit --device-memory " + format_bytes(cfg.device_memory) + ": rank " +
                              std::to_string(over->rank) + " needs " + format_bytes(over->need.total()) +
                              " for its model states alone at zero " + std::to_string(cfg.zero) + " (" +
                              over->need.to_string() + "), before any activation" + hint);
}

}  // namespace troupe
