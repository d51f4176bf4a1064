// A data-parallel job with one process per rank: run_training calls run_process_training when
// cfg.mesh.processes > 1, or when --servers gives the parameter servers processes of their own
// (cfg.server_processes, indices after the mesh's). Every rank derives the same data and sizes from the same config
// (prepare_job, shared with every other path). No CAF in this header.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "actors/plan/accelerators.hpp"
#include "actors/config/train_config.hpp"
#include "actors/plan/prepared_job.hpp"
#include "kernels/device_queue.hpp"

namespace troupe {

// What must be equal on every rank for the ranks to train one model: compared at join.
std::string describe_for_join(const train_config& cfg, const prepared_job& job);

// Rank 0 hosts the coordinator and writes metrics.jsonl; the other ranks write no metrics and
// return a summary without losses. Throws std::runtime_error with a report naming the lost rank
// and the step when the job stops early.
// device_of: this process's ranks' queues (a composition's); else --device's are opened for them
// (a rank's device is --device's entry rank % its length, so the list names one node's GPUs).
// engines: what a data-parallel group of GPU ranks reduces through (gpu_group_engines() when
// empty: in one process the local engine or NCCL, across processes NCCL).
train_summary run_process_training(const train_config& cfg,
                                   const std::function<std::shared_ptr<device_queue>(int rank)>& device_of = {},
                                   const device_engines& engines = {});

}  // namespace troupe
