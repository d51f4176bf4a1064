// What a C++ composition adds to a job besides its train_config: actors of its own in the flow
// of messages. Separate from train_config, which stays free of CAF for the CLI and the tests.
#pragma once

#include <caf/fwd.hpp>

#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include "comm/device_group.hpp"
#include "kernels/device_queue.hpp"

namespace troupe {

struct job_extras {
  // Each is spawned once per job. Every rank sends each of them an observed_gradients message
  // (actors/messages.hpp) every step, after its gradients are reduced and before its optimizer
  // step. An observer only reads: the step does not wait for it. Jobs in one process only.
  std::vector<std::function<caf::actor(caf::actor_system&)>> gradient_observers;
  // Each rank's device (null, or no function: the CPU, in line on the stage's own thread). A
  // rank with an asynchronous one has its stage scheduled on CAF's threads (stage.hpp).
  std::function<std::shared_ptr<device_queue>(int rank)> device_of;
  // What a data-parallel group of ranks on accelerators reduces through, in place of the build's
  // own (accelerators.hpp's gpu_group_engines): a composition's engine, or a test's fake one.
  std::shared_ptr<net::device_group_engine> device_collectives;
  // The job's scheduler threads (0: runtime_config.cpp's). Stages on asynchronous devices need
  // none of their own, so a job of them runs on as few as one.
  size_t scheduler_threads = 0;
  // Called once every rank's actors exist, before the first step is ordered, with the job's
  // actor system and its stages by rank: a composition's own actors can join (and watch) them.
  std::function<void(caf::actor_system&, const std::vector<caf::actor>& stages)> on_spawned;
};

}  // namespace troupe
