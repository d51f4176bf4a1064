// metrics.jsonl and the progress bar: what the coordinator tells the user about a run.
// One JSON object per line; step lines carry step/epoch/loss/samples_per_s, evaluation lines
// epoch/test_loss/test_accuracy. Later tools read these names: keep them stable.
// Each line goes to the file whole, by one write(2) on an O_APPEND descriptor, as soon as its
// step is reported: a killed run leaves only whole lines and loses no finished step. A failed
// write (a full disk) throws, naming the file, the step and the system's reason, and leaves the
// file cut back to its last whole line.
#pragma once

#include "kernels/layers_moe_block.hpp"

#include <chrono>
#include <cstdint>
#include <string>

namespace troupe {

class metrics_log {
 public:
  // Creates out_dir if needed; throws std::runtime_error naming the path if it cannot.
  metrics_log(const std::string& out_dir, int64_t steps_per_epoch, int64_t epochs, bool progress);
  ~metrics_log();
  metrics_log(const metrics_log&) = delete;
  metrics_log& operator=(const metrics_log&) = delete;

  // With a mixture of experts (experts not empty) the line also holds, per MoE block (by model
  // layer index), the assignments routed to each expert ("expert_tokens") and those dropped for
  // capacity ("tokens_dropped"), and the load-balancing loss's mean over the blocks' forwards.
  void step(int64_t step, int64_t epoch, double loss, double samples_per_s, const expert_tally& experts = {});
  void eval(int64_t epoch, int64_t step, double test_loss, double test_accuracy);
  // An elastic job's membership change after `step` steps (membership.hpp): the event and the
  // replicas the job goes on with.
  void membership(int64_t step, const std::string& event, int replicas);
  const std::string& path() const { return path_; }

 private:
  void draw(int64_t step, int64_t epoch, double loss, double samples_per_s, bool final);
  void append(const std::string& line, int64_t step);
  std::string path_;
  int fd_ = -1;
  int64_t size_ = 0;  // bytes of whole lines written
  int64_t steps_per_epoch_, epochs_;
  bool progress_, tty_;
  double smoothed_loss_ = 0.0;
  double smoothed_rate_ = 0.0;
  bool bar_open_ = false;
  std::chrono::steady_clock::time_point last_draw_{};
};

// Writes `text` as the whole file at `path` (trace.json, timeline.svg, ...); throws naming the
// file and the system's reason when it cannot, and removes what it could not finish.
void write_text_file(const std::string& path, const std::string& text);

}  // namespace troupe
