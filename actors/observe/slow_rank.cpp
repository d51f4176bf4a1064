// The slow-rank detector (slow_rank.hpp).
#include "actors/observe/slow_rank.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace troupe {

std::string slow_rank_finding::describe() const {
  if (rank < 0) return "slow rank: none any more (no rank is the last to hand in its gradients in most recent steps)";
  const bool device = device_slower();
  return fmt::format("slow rank: rank {} hands in its gradients last in {} of the last {} steps, {:.1f} ms after the "
                     "rest of its data-parallel group (a step takes {:.1f} ms): the others wait for it; its compute takes {:.1f} ms "
                     "against its peers' {:.1f} ms ({})",
                     rank, last_in, steps, late_ms, step_ms, compute_ms, peers_compute_ms,
                     device ? "its device is slower" : "its compute is not: it starts late, held up before its backward");
}

std::string slow_rank_detector::add(const std::vector<stage_step_record>& ranks) {
  if (o_.window <= 0 || mesh_.replicas() < 2 || seen_++ < o_.warmup) return "";
  sample s;
  std::vector<double> steps;
  std::map<int, double> handed;  // rank -> its last bucket's hand-in
  for (const auto& r : ranks) {
    steps.push_back(r.step_end - r.step_start);
    s.compute[r.rank] = r.compute_seconds;
    if (!r.bucket_sent.empty()) handed[r.rank] = *std::max_element(r.bucket_sent.begin(), r.bucket_sent.end());
  }
  s.step = median(steps);
  std::vector<bool> seen(static_cast<size_t>(mesh_.ranks()), false);
  for (const auto& [rank, at] : handed) {
    if (seen[static_cast<size_t>(rank)]) continue;
    int last = rank, members = 0;
    for (int q : mesh_.group(sched::axis::dp, rank)) {
      seen[static_cast<size_t>(q)] = true;
      const auto it = handed.find(q);
      if (it == handed.end()) continue;
      ++members;
      if (it->second > handed.at(last)) last = q;
    }
    std::vector<double> others;
    for (int q : mesh_.group(sched::axis::dp, rank))
      if (q != last && handed.count(q)) others.push_back(handed.at(q));
    if (members >= 2) s.late[last] = handed.at(last) - median(others);
  }
  window_.push_back(std::move(s));
  if (static_cast<int>(window_.size()) > o_.window) window_.pop_front();
  if (static_cast<int>(window_.size()) < o_.window) return "";
  const slow_rank_finding f = judge();
  if (f.rank == current_.rank) {
    current_ = f;
    return "";
  }
  current_ = f;
  return f.describe();
}

slow_rank_finding slow_rank_detector::judge() const {
  std::map<int, std::vector<double>> late;
  std::vector<double> steps;
  for (const auto& s : window_) {
    steps.push_back(s.step);
    for (const auto& [rank, by] : s.late) late[rank].push_back(by);
  }
  slow_rank_finding f;
  f.steps = static_cast<int>(window_.size());
  f.step_ms = 1e3 * median(steps);
  for (const auto& [rank, by] : late) {
    const int n = static_cast<int>(by.size());
    const double m = median(by);
    if (n < o_.share * f.steps || 1e3 * m < o_.threshold * f.step_ms || 1e3 * m < o_.min_late_ms || n <= f.last_in)
      continue;
    f.rank = rank;
    f.last_in = n;
    f.late_ms = 1e3 * m;
  }
  if (f.rank < 0) return f;
  std::vector<double> own, peers;
  for (const auto& s : window_)
    for (const auto& [rank, c] : s.compute) {
      if (rank == f.rank) own.push_back(c);
      else {
        const auto g = mesh_.group(sched::axis::dp, f.rank);
        if (std::find(g.begin(), g.end(), rank) != g.end()) peers.push_back(c);
      }
    }
  f.compute_ms = 1e3 * median(own);
  f.peers_compute_ms = 1e3 * median(peers);
  return f;
}

}  // namespace troupe
