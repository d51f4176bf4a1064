// checkpoint_commit: a checkpoint is ordered after the step that ends a run (the state between
// two steps); every stage's shard writes its part while the stages go on, and the manifest,
// the commit record, is written once every part is in.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <utility>

#include "actors/coordinator/coordinator_state.hpp"
#include "storage/checkpoint.hpp"

namespace troupe::coordinator_detail {

bool saves_after(const coordinator_state& s, int64_t steps_done) {
  if (s.args.checkpoint_dir.empty()) return false;
  return steps_done == s.args.total_steps || (s.args.checkpoint_every > 0 && steps_done % s.args.checkpoint_every == 0);
}

void finish_when_saved(self_ptr self) {
  auto& s = self->state;
  if (s.checkpoints_writing > 0) s.finish_when_saved = true;
  else finish(self);
}

// Every part is in: the manifest, the commit record, goes last.
void commit(self_ptr self, int64_t step, const std::vector<checkpoint_part>& parts, double began) {
  auto& s = self->state;
  storage::checkpoint_manifest m = s.args.checkpoint_base;
  m.step = step;
  int64_t bytes = 0;
  double slowest = 0;
  for (const checkpoint_part& p : parts) {
    if (p.file.empty()) continue;
    storage::checkpoint_file f;
    f.name = p.file;
    f.bytes = p.bytes;
    f.writer = p.writer;
    for (size_t j = 0; j < p.arrays.size(); ++j)
      f.sections.push_back({p.arrays[j], p.sections.at(3 * j), p.sections.at(3 * j + 1),
                            static_cast<uint32_t>(p.sections.at(3 * j + 2))});
    f.runs = unflatten(p.runs);
    m.optimizer_steps = p.optimizer_steps;
    m.files.push_back(std::move(f));
    bytes += p.bytes;
    slowest = std::max(slowest, p.seconds);
  }
  std::string dir;
  try {
    dir = storage::commit_checkpoint(s.args.checkpoint_dir, m, s.args.keep);
  } catch (const std::exception& e) {
    fail(self, "checkpoint after step " + std::to_string(step) + " not committed: " + e.what() +
                   " (the checkpoints committed before are intact)",
         true);
    finish(self);
    return;
  }
  const double seconds = std::chrono::duration<double>(clock_type::now().time_since_epoch()).count() - began;
  spdlog::info("checkpoint after step {}: {} ({} files, {:.1f} MB; slowest writer {:.3f} s, committed after {:.3f} s)",
               step, dir, m.files.size(), static_cast<double>(bytes) / 1e6, slowest, seconds);
  s.args.summary->checkpoints.push_back(dir);
  if (--s.checkpoints_writing > 0) return;
  if (auto next = std::exchange(s.after_commit, nullptr)) next();
  else if (s.finish_when_saved) finish(self);
}

// Orders checkpoint `step` (the state after `step` steps): every stage's shard writes its part.
// The stages go on with the next steps meanwhile; each shard takes its snapshot before it takes
// its next gradients (so its part is the state between the two steps), and its writer writes it.
void checkpoint(self_ptr self, int64_t step) {
  auto& s = self->state;
  const std::string dir = storage::begin_checkpoint(s.args.checkpoint_dir, step);
  ++s.checkpoints_writing;
  const double began = std::chrono::duration<double>(clock_type::now().time_since_epoch()).count();
  auto parts = std::make_shared<std::vector<checkpoint_part>>(s.stages.size());
  auto left = std::make_shared<size_t>(s.stages.size());
  for (size_t r = 0; r < s.stages.size(); ++r)
    self->request(s.stages[r], caf::infinite, checkpoint_order{step, dir})
        .then(
            [self, parts, left, r, step, began](checkpoint_part& p) {
              (*parts)[r] = std::move(p);
              if (--*left == 0) commit(self, step, *parts, began);
            },
            [self, step](caf::error& e) {
              // A refusal's own words (a shard's "...: No space left on device"), not CAF's wrapping.
              const caf::message& why = e.context();
              const std::string text = why.match_elements<std::string>() ? why.get_as<std::string>(0) : self->system().render(e);
              fail(self, "checkpoint after step " + std::to_string(step) + " not written: " + text +
                             " (the checkpoints committed before are intact)",
                   true);
              finish(self);
            });
}

}  // namespace troupe::coordinator_detail

