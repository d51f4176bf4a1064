// accelerators: the device queue of a rank that --device puts on a GPU. The one place the
// actors reach kernels/cuda, so the rest of the job stays the same in a build without CUDA.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "actors/config/train_config.hpp"
#include "comm/device_group.hpp"
#include "schedules/mesh.hpp"
#include "kernels/device_queue.hpp"

namespace troupe {

// A queue of its own (a CUDA stream) on `d`, with d's ops and allocator set up; null for a CPU.
// Throws std::runtime_error naming the device when it is not there, or when troupe was built
// without CUDA.
std::shared_ptr<device_queue> open_accelerator(const device& d);

// Each rank's queue: null on the host.
using rank_devices = std::function<std::shared_ptr<device_queue>(int rank)>;
// The queues of `ranks` (this process's): `given`'s (a composition's), else one opened per rank
// that --device puts on an accelerator; each rank's queue asked for once and its device checked
// to have its ops (throws naming the device). Empty when no rank has an accelerator.
rank_devices open_rank_devices(const train_config& cfg, const std::vector<int>& ranks, const rank_devices& given);

// What groups of ranks on accelerators may reduce through, in order of preference.
using device_engines = std::vector<std::shared_ptr<net::device_group_engine>>;
// The build's: the local engine for members that share one GPU (actors/collective/
// local_device_group.hpp), then NCCL where troupe is built with CUDA for members with a GPU each
// (its join_in_stream enqueues on the stage's stream: kernels/cuda's current_stream).
device_engines gpu_group_engines();

// Where each group of the mesh along `axis` (data- or tensor-parallel) reduces, by group index
// (mesh.group_index): through the first of `engines` that takes its members' devices, when every
// member is on an accelerator (a group that spans processes only when across_processes,
// --backend nccl, and through an engine that spans them); else on the host, and `why`
// says what the engines refused when they did. An engine whose devices serve one group at most
// (NCCL) is passed over for a group on a GPU an earlier group of that kind engaged; the
// tensor-parallel groups choose first, since their collectives sit inside every layer's compute
// and have no host path on a GPU (a data-parallel group then reduces through the host). The one
// rule the job's links and its memory plan both follow.
struct device_group_choice {
  bool on_devices = false;
  std::shared_ptr<net::device_group_engine> engine;  // the one chosen
  std::string why;
};
std::vector<device_group_choice> choose_device_groups(const device_engines& engines, const sched::mesh& mesh,
                                                      const std::function<device(int rank)>& device_of,
                                                      sched::axis axis = sched::axis::dp,
                                                      bool across_processes = false);

// Throws std::invalid_argument naming the first tensor-parallel group of the mesh whose ranks are
// on accelerators that no engine takes (its layers' collectives have no host path there: some
// members on one GPU and some on another, with no engine for that), or that has ranks both on
// the host and on accelerators. Groups all on the host pass, and so do groups across processes
// unless across_processes (--backend nccl; without it train_config's validate refuses them on
// accelerators).
void check_tp_groups_on_devices(const device_engines& engines, const sched::mesh& mesh,
                                const std::function<device(int rank)>& device_of, bool across_processes = false);

// The GPUs --device can name, for `troupe info`: "2 (cuda:0 NVIDIA H200, 140 GiB; cuda:1 ...)",
// or "none (" and why: no device or driver, or a build without CUDA.
std::string describe_accelerators();

}  // namespace troupe
