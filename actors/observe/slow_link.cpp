// The slow-link detector (slow_link.hpp).
#include "actors/observe/slow_link.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace troupe {

std::string slow_link_finding::describe() const {
  if (to < 0) return "slow link: none any more (every data-parallel link delivers at its group's rate)";
  return fmt::format("slow link: rank {}'s ring sends to rank {} arrive at {:.1f} MB/s against {:.1f} MB/s on its "
                     "data-parallel group's other links, in {} of the last {} steps: the group's all-reduces wait on it",
                     from, to, rate / 1e6, others_rate / 1e6, slow_in, steps);
}

std::string slow_link_detector::add(const std::vector<stage_step_record>& ranks) {
  if (o_.window <= 0 || mesh_.replicas() < 2 || seen_++ < o_.warmup) return "";
  std::map<int, double> rate;  // rank -> the median rate of its left link over its buckets
  for (const auto& r : ranks)
    if (const double x = r.left_link_rate(); x > 0) rate[r.rank] = x;
  std::map<int, slow> step;
  std::vector<bool> seen(static_cast<size_t>(mesh_.ranks()), false);
  for (const auto& [rank, x] : rate) {
    if (seen[static_cast<size_t>(rank)]) continue;
    const std::vector<int> group = mesh_.group(sched::axis::dp, rank);
    int slowest = -1;
    for (int q : group) {
      seen[static_cast<size_t>(q)] = true;
      if (rate.count(q) && (slowest < 0 || rate.at(q) < rate.at(slowest))) slowest = q;
    }
    std::vector<double> others;
    for (int q : group)
      if (q != slowest && rate.count(q)) others.push_back(rate.at(q));
    if (others.empty() || rate.at(slowest) >= ratio_ * median(others)) continue;
    // The group's ring runs in group order: member i receives from member i - 1.
    const auto at = std::find(group.begin(), group.end(), slowest) - group.begin();
    const int n = static_cast<int>(group.size());
    step[slowest] = slow{group[static_cast<size_t>((at + n - 1) % n)], rate.at(slowest), median(others)};
  }
  window_.push_back(std::move(step));
  if (static_cast<int>(window_.size()) > o_.window) window_.pop_front();
  if (static_cast<int>(window_.size()) < o_.window) return "";
  const slow_link_finding f = judge();
  const bool changed = f.to != current_.to || f.from != current_.from;
  current_ = f;
  return changed ? f.describe() : "";
}

slow_link_finding slow_link_detector::judge() const {
  std::map<int, std::vector<slow>> seen;
  for (const auto& step : window_)
    for (const auto& [to, s] : step) seen[to].push_back(s);
  slow_link_finding f;
  f.steps = static_cast<int>(window_.size());
  for (const auto& [to, list] : seen) {
    const int n = static_cast<int>(list.size());
    if (n < o_.share * f.steps || n <= f.slow_in) continue;
    std::vector<double> rates, others;
    for (const slow& s : list) rates.push_back(s.rate), others.push_back(s.others);
    f.to = to;
    f.from = list.back().from;
    f.slow_in = n;
    f.rate = median(rates);
    f.others_rate = median(others);
  }
  return f;
}

}  // namespace troupe
