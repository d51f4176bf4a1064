// What an elastic job's next membership runs (membership.hpp), planned the same way in every
// process: the config with its data-parallel replicas changed, and, for a job over processes
// (one replica each), the lost replicas' processes gone and the others renumbered in order. The
// runner (run_job's next_membership) plans the job from it and resumes it from the image.
#pragma once

#include <string>
#include <vector>

#include "actors/observe/metrics_log.hpp"
#include "actors/config/train_config.hpp"

namespace troupe {

struct membership_plan {
  train_config cfg;
  bool member = true;          // over processes: false when this process's replica was lost
  std::vector<int> processes;  // over processes: each new process's index before the change
};

// The events at one boundary applied to `cfg` (its process's index cfg.process.index).
membership_plan plan_membership(const train_config& cfg, const std::vector<membership_event>& at);

// An elastic job over `processes` processes (one replica each) that made the changes `events`,
// in order: the processes, by their index when the job started, whose replica left it (lost, or
// told to leave). A newcomer admitted since and dropped again is none of them.
std::vector<int> processes_left(const std::vector<membership_event>& events, int processes);

// The change in the log, and in metrics.jsonl when `log` is given (process 0's).
void log_membership(metrics_log* log, int64_t step, const std::vector<membership_event>& at, const train_config& before,
                    const train_config& after);

}  // namespace troupe
