// A running job's figures in Prometheus's text exposition format, in one file rewritten whole
// after every step (`--metrics-prom FILE`), for node_exporter's textfile collector: a cluster's
// existing Prometheus and Grafana see a troupe job with no service of troupe's own. The file is
// replaced by rename, so a scrape never reads half of it.
#pragma once

#include <string>
#include <vector>

#include "actors/observe/step_trace.hpp"

namespace troupe {

// What one step leaves: the job's figures and every rank's record of the step.
struct prometheus_step {
  int64_t step = 0, epoch = 0;
  double loss = 0, samples_per_s = 0;
  double test_loss = -1, test_accuracy = -1;  // the last evaluation's (< 0: none yet)
  std::vector<stage_step_record> ranks;
};

// The exposition text: troupe_steps_total, troupe_epoch, troupe_loss, troupe_samples_per_second,
// troupe_test_loss and troupe_test_accuracy once evaluated, and per rank ({rank="R"})
// troupe_rank_step_seconds, troupe_rank_compute_seconds, troupe_rank_wait_seconds (the step's
// time not computing: waiting for peers, messages and the runtime) and
// troupe_rank_memory_peak_bytes{kind=...} from its device ledger. Each with # HELP and # TYPE.
std::string prometheus_text(const prometheus_step& s);

class prometheus_file {
 public:
  explicit prometheus_file(std::string path) : path_(std::move(path)) {}
  // Rewrites the file (a temporary beside it, renamed over it). Throws std::runtime_error naming
  // the file. From the coordinator only.
  void write(const prometheus_step& s);
  // An evaluation after the last step written: the same step's figures with its test figures.
  void evaluated(double test_loss, double test_accuracy);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  prometheus_step last_;
};

}  // namespace troupe
