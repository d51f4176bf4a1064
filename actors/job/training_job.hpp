// run_training: builds the actor system for a train_config (data_loader, stage,
// optimizer_shard, coordinator), runs it to the end and returns the summary. This header holds
// no CAF type, so callers compile fast; the actors themselves live in actors/*.cpp.
#pragma once

#include "actors/job/train_config.hpp"

namespace troupe {

// Throws std::runtime_error when the job fails (a bad dataset, an actor that died), with the
// reason; metrics already written stay on disk.
train_summary run_training(const train_config& cfg);

}  // namespace troupe
