// What a job produces besides its actors' work, shared by the runner in one process and by
// process 0 of a multi-process job: the summary, the metrics log, the first failure, the
// measured record of its steps; and what is made of them once the job has ended (the trace and
// timeline files, the bubble against the simulation). No CAF.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "actors/plan/job_plan.hpp"
#include "actors/observe/prometheus_file.hpp"
#include "actors/observe/step_trace.hpp"
#include "actors/config/train_config.hpp"

namespace troupe {

class metrics_log;

struct job_failure {
  std::string what;   // empty while the job runs, and after it ended well
  bool own = false;   // the coordinator's own error: a cause, not a symptom of a lost rank
};

// What the coordinator keeps of the measured steps.
struct job_record {
  std::vector<stage_step_record> traced;               // every rank's record of the traced step
  std::vector<std::vector<stage_step_record>> recent;  // the first replica's records of recent steps
  std::vector<int> peak_live;                          // per rank, over every step
};

struct job_outputs {
  job_outputs(const train_config& cfg, const prepared_job& data);  // opens <out>/metrics.jsonl
  std::shared_ptr<train_summary> summary;
  std::shared_ptr<metrics_log> log;
  std::shared_ptr<prometheus_file> prom;  // --metrics-prom (null: not asked for)
  std::shared_ptr<job_failure> failure;
  std::shared_ptr<job_record> record;
};

// One log line: model, mesh, schedule, cut and buckets.
void log_plan(const train_config& cfg, const prepared_job& data, const job_plan& plan);

// After a job that ended well: writes <out>/curves.svg (run_curves.hpp; whether or not a step
// was traced), <out>/trace.json (the traced step, every rank) and
// <out>/timeline.svg (the first replica's median recent step), logs the measured bubble beside
// the simulated one for a pipeline, and returns the summary with rates and shares filled in.
train_summary finish_summary(const train_config& cfg, const job_plan& plan, job_outputs& out);

}  // namespace troupe
