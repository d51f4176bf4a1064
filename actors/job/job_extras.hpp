// What a C++ composition adds to a job besides its train_config: actors of its own in the flow
// of messages. Separate from train_config, which stays free of CAF for the CLI and the tests.
#pragma once

#include <caf/fwd.hpp>

#include <functional>
#include <vector>

namespace troupe {

struct job_extras {
  // Each is spawned once per job. Every rank sends each of them an observed_gradients message
  // (actors/messages.hpp) every step, after its gradients are reduced and before its optimizer
  // step. An observer only reads: the step does not wait for it. Jobs in one process only.
  std::vector<std::function<caf::actor(caf::actor_system&)>> gradient_observers;
};

}  // namespace troupe
