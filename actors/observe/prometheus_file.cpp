// The Prometheus text file of a running job (prometheus_file.hpp).
#include "actors/observe/prometheus_file.hpp"

#include <fmt/format.h>

#include "kernels/memory_kind.hpp"
#include "storage/output_file.hpp"

namespace troupe {

namespace {

void family(std::string& out, const char* name, const char* type, const char* help) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

}  // namespace

std::string prometheus_text(const prometheus_step& s) {
  std::string out;
  family(out, "troupe_steps_total", "counter", "Training steps completed.");
  out += fmt::format("troupe_steps_total {}\n", s.step + 1);
  family(out, "troupe_epoch", "gauge", "Epoch of the last step (from 0).");
  out += fmt::format("troupe_epoch {}\n", s.epoch);
  family(out, "troupe_loss", "gauge", "Training loss of the last step (mean over the global batch).");
  out += fmt::format("troupe_loss {:.9g}\n", s.loss);
  family(out, "troupe_samples_per_second", "gauge", "Training throughput over the recent steps.");
  out += fmt::format("troupe_samples_per_second {:.9g}\n", s.samples_per_s);
  if (s.test_loss >= 0) {
    family(out, "troupe_test_loss", "gauge", "Held-out loss of the last evaluation.");
    out += fmt::format("troupe_test_loss {:.9g}\n", s.test_loss);
    family(out, "troupe_test_accuracy", "gauge", "Held-out accuracy of the last evaluation.");
    out += fmt::format("troupe_test_accuracy {:.9g}\n", s.test_accuracy);
  }
  family(out, "troupe_rank_step_seconds", "gauge", "Wall time of the rank's last step.");
  for (const auto& r : s.ranks) out += fmt::format("troupe_rank_step_seconds{{rank=\"{}\"}} {:.9g}\n", r.rank, r.step_end - r.step_start);
  family(out, "troupe_rank_compute_seconds", "gauge", "Of the rank's last step, the time its device computed.");
  for (const auto& r : s.ranks) out += fmt::format("troupe_rank_compute_seconds{{rank=\"{}\"}} {:.9g}\n", r.rank, r.compute_seconds);
  family(out, "troupe_rank_wait_seconds", "gauge",
         "Of the rank's last step, the time it did not compute: waiting for peers, messages and the runtime.");
  for (const auto& r : s.ranks)
    out += fmt::format("troupe_rank_wait_seconds{{rank=\"{}\"}} {:.9g}\n", r.rank,
                       std::max(0.0, r.step_end - r.step_start - r.compute_seconds));
  // The ring links' speeds (slow_link.hpp), where the TCP ring measured them: rank r's is the
  // link from its left rank, the median over the last step's buckets.
  std::vector<std::pair<int, double>> links;
  for (const auto& r : s.ranks)
    if (const double x = r.left_link_rate(); x > 0) links.emplace_back(r.rank, x);
  if (!links.empty()) {
    family(out, "troupe_rank_left_link_bytes_per_second", "gauge",
           "Of the rank's last step, how fast its data-parallel ring's first hop came in from its left rank.");
    for (const auto& [rank, rate] : links)
      out += fmt::format("troupe_rank_left_link_bytes_per_second{{rank=\"{}\"}} {:.9g}\n", rank, rate);
  }
  bool memory = false;
  for (const auto& r : s.ranks) memory = memory || r.peak_memory.size() == kMemoryKinds + 1;
  if (memory) {
    family(out, "troupe_rank_memory_peak_bytes", "gauge", "Peak of the rank's device ledger by kind over the run so far.");
    for (const auto& r : s.ranks) {
      if (r.peak_memory.size() != kMemoryKinds + 1) continue;
      for (size_t k = 0; k < kMemoryKinds; ++k)
        out += fmt::format("troupe_rank_memory_peak_bytes{{rank=\"{}\",kind=\"{}\"}} {}\n", r.rank,
                           to_string(static_cast<memory_kind>(k)), r.peak_memory[k]);
      out += fmt::format("troupe_rank_memory_peak_bytes{{rank=\"{}\",kind=\"total\"}} {}\n", r.rank, r.peak_memory[kMemoryKinds]);
    }
  }
  return out;
}

void prometheus_file::write(const prometheus_step& s) {
  last_ = s;
  storage::write_output_file(path_, prometheus_text(s));
}

void prometheus_file::evaluated(double test_loss, double test_accuracy) {
  last_.test_loss = test_loss;
  last_.test_accuracy = test_accuracy;
  storage::write_output_file(path_, prometheus_text(last_));
}

}  // namespace troupe
