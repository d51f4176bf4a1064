// push_rounds: replica steps and rounds of a job with dispensed batches (push_rounds.hpp).
#include "actors/coordinator/push_rounds.hpp"

namespace troupe {

std::vector<stage_step_record> push_rounds::add(stage_step_record r) {
  const auto key = std::make_pair(replica_of(r), r.step);
  auto& got = partial_[key];
  got.push_back(std::move(r));
  if (static_cast<int>(got.size()) < mesh_.pp * mesh_.tp) return {};
  std::vector<stage_step_record> done = std::move(got);
  partial_.erase(key);
  return done;
}

std::vector<stage_step_record> push_rounds::count(std::vector<stage_step_record> replica_step) {
  for (auto& r : replica_step) round_.push_back(std::move(r));
  if (++in_round_ < mesh_.dp) return {};
  in_round_ = 0;
  return std::exchange(round_, {});
}

}  // namespace troupe
