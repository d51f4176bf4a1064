// metrics_log: JSON lines through fmt, a redrawn bar on a terminal, periodic log lines elsewhere.
#include "actors/observe/metrics_log.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "storage/output_file.hpp"

namespace troupe {

metrics_log::metrics_log(const std::string& out_dir, int64_t steps_per_epoch, int64_t epochs, bool progress)
    : steps_per_epoch_(steps_per_epoch), epochs_(epochs), progress_(progress), tty_(::isatty(2) != 0) {
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) throw std::runtime_error(out_dir + ": cannot create output folder (" + ec.message() + ")");
  path_ = (std::filesystem::path(out_dir) / "metrics.jsonl").string();
  // A previous run's metrics are kept, not overwritten: metrics.jsonl.1, .2, ...
  if (std::filesystem::exists(path_)) {
    int n = 1;
    while (std::filesystem::exists(path_ + "." + std::to_string(n))) ++n;
    std::filesystem::rename(path_, path_ + "." + std::to_string(n), ec);
    if (ec) throw std::runtime_error(path_ + ": cannot move the previous run's metrics aside (" + ec.message() + ")");
    spdlog::info("kept the previous run's metrics as {}.{}", path_, n);
  }
  fd_ = storage::open_output_file(path_, O_WRONLY | O_TRUNC | O_APPEND);
}

metrics_log::~metrics_log() {
  if (fd_ >= 0) ::close(fd_);
}

// One write(2) for a line in the normal case. A short write means the disk filled mid-line:
// the rest is tried once more, for the errno, and the file is cut back to its last whole line.
void metrics_log::append(const std::string& line, int64_t step) {
  if (storage::write_all(fd_, line)) {
    size_ += static_cast<int64_t>(line.size());
    return;
  }
  const int err = errno;
  if (::ftruncate(fd_, size_) != 0)
    spdlog::warn("{}: cannot cut the partial last line ({})", path_, std::strerror(errno));
  throw std::runtime_error(fmt::format("{}: cannot write the metrics of step {}: {}", path_, step, std::strerror(err)));
}

void metrics_log::step(int64_t step, int64_t epoch, double loss, double samples_per_s, const expert_tally& experts) {
  std::string moe;
  if (!experts.empty()) {
    std::string tokens, dropped;
    for (const auto& [layer, counts] : experts.routed) {
      tokens += fmt::format("{}\"{}\": [{}]", tokens.empty() ? "" : ", ", layer, fmt::join(counts, ", "));
      const auto d = experts.dropped.find(layer);
      dropped += fmt::format("{}\"{}\": {}", dropped.empty() ? "" : ", ", layer, d == experts.dropped.end() ? 0 : d->second);
    }
    moe = fmt::format(", \"expert_tokens\": {{{}}}, \"tokens_dropped\": {{{}}}, \"aux_loss\": {:.7g}", tokens, dropped,
                      experts.forwards ? experts.aux_loss_sum / static_cast<double>(experts.forwards) : 0.0);
  }
  append(fmt::format("{{\"step\": {}, \"epoch\": {}, \"loss\": {:.7g}, \"samples_per_s\": {:.1f}{}}}\n", step, epoch,
                     loss, samples_per_s, moe),
         step);
  const bool first = step % steps_per_epoch_ == 0;
  smoothed_loss_ = first ? loss : 0.95 * smoothed_loss_ + 0.05 * loss;
  smoothed_rate_ = first ? samples_per_s : 0.95 * smoothed_rate_ + 0.05 * samples_per_s;
  const bool last = (step + 1) % steps_per_epoch_ == 0;
  if (progress_) draw(step, epoch, smoothed_loss_, smoothed_rate_, last);
}

void metrics_log::eval(int64_t epoch, int64_t step, double test_loss, double test_accuracy) {
  if (bar_open_) {  // a run stopped mid-epoch (--max-steps): end the bar's line first
    std::fputc('\n', stderr);
    bar_open_ = false;
  }
  append(fmt::format("{{\"epoch\": {}, \"step\": {}, \"test_loss\": {:.7g}, \"test_accuracy\": {:.6f}}}\n", epoch,
                     step, test_loss, test_accuracy),
         step);
  spdlog::info("epoch {}/{}: test loss {:.4f}, test accuracy {:.4f}", epoch + 1, epochs_, test_loss, test_accuracy);
}

void metrics_log::membership(int64_t step, const std::string& event, int replicas) {
  if (bar_open_) {
    std::fputc('\n', stderr);
    bar_open_ = false;
  }
  append(fmt::format("{{\"step\": {}, \"membership\": \"{}\", \"dp\": {}}}\n", step, event, replicas), step);
}

void metrics_log::draw(int64_t step, int64_t epoch, double loss, double samples_per_s, bool final) {
  const auto now = std::chrono::steady_clock::now();
  const int64_t done = step % steps_per_epoch_ + 1;
  if (tty_) {
    // Redraw at most ~20 times a second; the terminal is slower than the training step.
    if (!final && now - last_draw_ < std::chrono::milliseconds(50)) return;
    constexpr int width = 30;
    const int filled = static_cast<int>(width * done / steps_per_epoch_);
    fmt::print(stderr, "\repoch {}/{} [{}{}] {}/{} loss {:.4f} {:.0f} samples/s{}", epoch + 1, epochs_,
               std::string(static_cast<size_t>(filled), '='), std::string(static_cast<size_t>(width - filled), ' '),
               done, steps_per_epoch_, loss, samples_per_s, final ? "\n" : "");
    bar_open_ = !final;
  } else if (final || done % std::max<int64_t>(1, steps_per_epoch_ / 4) == 0) {
    spdlog::info("epoch {}/{} step {}/{} loss {:.4f} {:.0f} samples/s", epoch + 1, epochs_, done, steps_per_epoch_,
                 loss, samples_per_s);
  }
  last_draw_ = now;
}

void write_text_file(const std::string& path, const std::string& text) { storage::write_output_file(path, text); }

}  // namespace troupe
