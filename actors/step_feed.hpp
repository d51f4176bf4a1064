// step_feed: the bookkeeping a whole-model stage does around its steps, shared by the
// single-device and data-parallel stages: which batches to request ahead (prefetch), which
// have arrived, which steps the coordinator ordered, and which step is due to run next.
// Plain data: it sends nothing itself and knows no actor.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "kernels/batch.hpp"

namespace troupe {

class step_feed {
 public:
  step_feed(int64_t total_steps, int prefetch) : total_(total_steps), prefetch_(prefetch) {}

  // Steps whose batches should be requested now: those not yet requested up to `prefetch`
  // ahead of `next_step` (and before the last step).
  std::vector<int64_t> requests(int64_t next_step) {
    std::vector<int64_t> out;
    for (; requested_ < std::min(next_step + prefetch_, total_); ++requested_) out.push_back(requested_);
    return out;
  }
  // The coordinator ordered steps [step, until). Returns the step to run now, if its batch is here.
  std::optional<int64_t> order(int64_t step, int64_t until) {
    ordered_ = step;
    until_ = until;
    return due();
  }
  // A batch arrived. Returns the step to run now, if it is the one ordered.
  std::optional<int64_t> arrive(int64_t step, batch b) {
    ready_.emplace(step, std::move(b));
    return due();
  }
  // Step `step` finished (its parameters are back). Returns the next ordered step, if due now.
  std::optional<int64_t> finished(int64_t step) {
    if (step + 1 >= until_) return std::nullopt;
    ordered_ = step + 1;
    return due();
  }
  // Hands out the batch of the due step and marks nothing as due until the next order/finish.
  batch take(int64_t step) {
    auto it = ready_.find(step);
    batch b = std::move(it->second);
    ready_.erase(it);
    ordered_ = -1;
    return b;
  }

 private:
  std::optional<int64_t> due() const {
    if (ordered_ >= 0 && ready_.count(ordered_)) return ordered_;
    return std::nullopt;
  }
  int64_t total_, prefetch_;
  int64_t requested_ = 0;
  int64_t ordered_ = -1, until_ = 0;
  std::map<int64_t, batch> ready_;
};

}  // namespace troupe
