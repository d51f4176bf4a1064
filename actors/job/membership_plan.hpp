// What an elastic job's next membership runs (membership.hpp), planned the same way in every
// process: the config with its data-parallel replicas changed, and, for a job over processes
// (one replica each), the lost replicas' processes gone and the others renumbered in order. The
// runner (run_job's next_membership) plans the job from it and resumes it from the image.
#pragma once

#include <string>
#include <vector>

#include "actors/job/metrics_log.hpp"
#include "actors/job/train_config.hpp"

namespace troupe {

struct membership_plan {
  train_config cfg;
  bool member = true;          // over processes: false when this process's replica was lost
  std::vector<int> processes;  // over processes: each new process's index before the change
};

// The events at one boundary applied to `cfg` (its process's index cfg.process.index).
membership_plan plan_membership(const train_config& cfg, const std::vector<membership_event>& at);

// The change in the log, and in metrics.jsonl when `log` is given (process 0's).
void log_membership(metrics_log* log, int64_t step, const std::vector<membership_event>& at, const train_config& before,
                    const train_config& after);

}  // namespace troupe
