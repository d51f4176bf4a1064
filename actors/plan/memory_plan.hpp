// What each rank's model states take on its device, predicted from the job's plan by the rules
// the runtime follows, in the kinds its device ledger counts (kernels/device_memory.hpp), so a
// run's measured peaks can be checked against them and a job that cannot fit its cap is refused
// before it starts. Ψ is the rank's parameter count (its share after pp and tp), S its ZeRO
// shard (its segment of every bucket, about Ψ/dp), k the optimizer's state floats per parameter
// (AdamW 2, SGD with momentum 1, without 0), 4 bytes each:
//   zero 0: parameters 2·4Ψ (the update is out of place: the stage still runs on the old copy),
//           gradients 2·4Ψ (O hands the buffer over and backward goes on in a fresh one),
//           optimizer state 4kΨ;
//   zero 1: parameters 4Ψ, gradients 4Ψ, optimizer state 4S (its master copy) + 4kS;
//   zero 2: parameters 4Ψ, gradients 4S plus the bucket backward is filling (at most the largest;
//           counted here as the largest), optimizer state as zero 1.
//   zero 3: parameters 4S (the segments, updated in place once the step's gathers are done)
//           plus the units gathered (the one in use and `prefetch` ahead: counted as that many of the largest),
//           gradients as zero 2, optimizer state 4kS (its master copy is the stage's segments).
// Offloaded (host or nvme), the optimizer state is off the device: 0 there. With zero 3's
// parameters offloaded too (params or both), the segments are off the device as well: its
// parameters are only the units gathered. A rank --device puts on a GPU whose data-parallel
// group reduces through the host keeps its zero 1 or 2 shard there (its master copy and state: 0
// on the GPU), and with zero 2 the segments of its gradients too (the GPU holds the bucket
// backward is filling, counted as the largest); one whose group reduces on the GPUs (NCCL, one
// GPU per replica) keeps them on the GPU, as a CPU rank does.
// Activations and communication buffers depend on the schedule and timing: not predicted here.
#pragma once

#include <optional>
#include <string>

#include "actors/plan/job_plan.hpp"
#include "actors/config/train_config.hpp"
#include "actors/plan/accelerators.hpp"
#include "kernels/device_memory.hpp"

namespace troupe {

// The optimizer's state floats per parameter: AdamW 2, SGD 1 with momentum, 0 without.
int64_t optimizer_state_floats(const optimizer_config& o);
// Floats of each section (master, each state) of one offload tile: a slot of its sections fills
// the store's queue (block size x queue depth), in whole 4 KiB pages, at least one page.
int64_t offload_tile_floats(const train_config& cfg);

// With the build's engines for groups on GPUs (gpu_group_engines), or with `engines` (a
// composition's).
memory_figures predicted_model_states(const train_config& cfg, const job_plan& plan, int rank);
memory_figures predicted_model_states(const train_config& cfg, const job_plan& plan, int rank, const device_engines& engines);
// Whether rank's data-parallel group reduces on its devices through one of `engines`
// (accelerators.hpp's rule, with --device's placement), which puts a ZeRO 1 or 2 shard on the
// GPU with it.
bool reduces_on_devices(const train_config& cfg, const sched::mesh& mesh, int rank, const device_engines& engines);
// The largest gradient bucket of the rank's stage, in bytes (0 without data parallelism).
int64_t largest_bucket_bytes(const job_plan& plan, int rank);
// The first rank whose predicted model states exceed cfg.device_memory, with its figures; none
// when every rank fits (or there is no cap).
struct over_cap {
  int rank = -1;
  memory_figures need;
};
std::optional<over_cap> first_over_device_memory(const train_config& cfg, const job_plan& plan);
// Throws std::invalid_argument naming the first rank over cfg.device_memory, with the figures by
// kind and what would fit: a higher ZeRO stage, more dp, or `also` (the caller's own remedy).
void check_device_memory(const train_config& cfg, const job_plan& plan, const std::string& also = "");
// Throws std::invalid_argument when a rank of this process on the CPU needs more for its model
// states alone than `host_bytes` (this machine's memory): a model this job cannot train here,
// refused as bad input before anything is allocated (it used to end as "out of memory in the
// stage").
void check_host_memory(const train_config& cfg, const job_plan& plan, int64_t host_bytes);
// This machine's physical memory in bytes.
int64_t host_memory_bytes();

}  // namespace troupe
