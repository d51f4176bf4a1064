// run_training: builds the actor system for a train_config (data_loader, stage,
// optimizer_shard, coordinator), runs it to the end and returns the summary. This header names
// CAF types only by declaration (caf/fwd.hpp, for job_extras), so callers compile fast; the
// actors themselves live in actors/*.cpp.
#pragma once

#include "actors/compose/job_extras.hpp"
#include "actors/config/train_config.hpp"

namespace troupe {

// Throws std::runtime_error when the job fails (a bad dataset, an actor that died), with the
// reason; metrics already written stay on disk.
train_summary run_training(const train_config& cfg);
// The same job with actors of the caller's in its flow (job_extras.hpp). Throws
// std::invalid_argument for extras on a job over several processes.
train_summary run_training(const train_config& cfg, const job_extras& extras);

}  // namespace troupe
