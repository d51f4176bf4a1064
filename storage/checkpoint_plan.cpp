// plan_reads: the saved runs are first made disjoint (each global float kept by the first file
// that has it), then every wanted run walks the sorted pieces it overlaps.
#include "storage/checkpoint_plan.hpp"

#include <algorithm>
#include <iterator>
#include <map>
#include <stdexcept>

namespace troupe::storage {

namespace {

struct piece {
  int64_t end = 0;  // global, exclusive (the map's key is the begin)
  size_t file = 0;
  int64_t local = 0;  // of the piece's begin
};

void check(const value_run& r, const char* what) {
  if (r.count < 0 || r.local < 0 || r.global < 0)
    throw std::invalid_argument(std::string("checkpoint plan: ") + what + " run (local " + std::to_string(r.local) +
                                ", global " + std::to_string(r.global) + ", count " + std::to_string(r.count) +
                                ") has a negative field");
}

// Adds [b, e) of file f (local offset of b: local) where no piece is yet.
void add_uncovered(std::map<int64_t, piece>& pieces, int64_t b, int64_t e, size_t f, int64_t local) {
  int64_t at = b;
  auto it = pieces.upper_bound(at);
  if (it != pieces.begin() && std::prev(it)->second.end > at) at = std::prev(it)->second.end;
  while (at < e) {
    it = pieces.lower_bound(at);
    const int64_t gap_end = it == pieces.end() ? e : std::min(e, it->first);
    if (gap_end > at) pieces.emplace(at, piece{gap_end, f, local + (at - b)});
    if (it == pieces.end() || it->first >= e) break;
    at = std::max(at, it->second.end);
  }
}

}  // namespace

std::vector<read_item> plan_reads(const std::vector<std::vector<value_run>>& saved, const std::vector<value_run>& wanted) {
  std::map<int64_t, piece> pieces;
  for (size_t f = 0; f < saved.size(); ++f)
    for (const value_run& r : saved[f]) {
      check(r, "a saved");
      if (r.count > 0) add_uncovered(pieces, r.global, r.global + r.count, f, r.local);
    }
  std::vector<read_item> items;
  for (const value_run& w : wanted) {
    check(w, "a wanted");
    int64_t at = w.global;
    const int64_t end = w.global + w.count;
    auto it = pieces.upper_bound(at);
    if (it != pieces.begin()) --it;
    while (at < end) {
      if (it == pieces.end() || it->first > at || it->second.end <= at) {
        const auto next = pieces.upper_bound(at);
        const int64_t gap_end = next == pieces.end() ? end : std::min(end, next->first);
        throw std::invalid_argument("checkpoint plan: no shard file holds global floats [" + std::to_string(at) + ", " +
                                    std::to_string(gap_end) + ")");
      }
      const int64_t stop = std::min(end, it->second.end);
      read_item item{it->second.file, it->second.local + (at - it->first), w.local + (at - w.global), stop - at};
      if (!items.empty()) {
        read_item& last = items.back();
        if (last.file == item.file && last.from + last.count == item.from && last.to + last.count == item.to) {
          last.count += item.count;
          item.count = 0;
        }
      }
      if (item.count > 0) items.push_back(item);
      at = stop;
      if (at < end && it->second.end <= at) ++it;
    }
  }
  return items;
}

std::vector<value_run> merge_runs(std::vector<value_run> runs) {
  std::sort(runs.begin(), runs.end(), [](const value_run& a, const value_run& b) { return a.local < b.local; });
  std::vector<value_run> out;
  for (const value_run& r : runs) {
    if (r.count == 0) continue;
    if (!out.empty() && out.back().local + out.back().count == r.local && out.back().global + out.back().count == r.global)
      out.back().count += r.count;
    else
      out.push_back(r);
  }
  return out;
}

std::vector<value_run> compose_runs(const std::vector<value_run>& a, std::vector<value_run> b) {
  std::sort(b.begin(), b.end(), [](const value_run& x, const value_run& y) { return x.local < y.local; });
  std::vector<value_run> out;
  for (const value_run& r : a) {
    const int64_t end = r.global + r.count;
    // The first run of b that ends after r's start in Y.
    auto it = std::upper_bound(b.begin(), b.end(), r.global,
                               [](int64_t y, const value_run& x) { return y < x.local + x.count; });
    for (; it != b.end() && it->local < end; ++it) {
      const int64_t lo = std::max(r.global, it->local), hi = std::min(end, it->local + it->count);
      if (hi > lo) out.push_back({r.local + (lo - r.global), it->global + (lo - it->local), hi - lo});
    }
  }
  return merge_runs(std::move(out));
}

int64_t covered_floats(std::vector<value_run> runs) {
  std::sort(runs.begin(), runs.end(), [](const value_run& a, const value_run& b) { return a.global < b.global; });
  int64_t total = 0, reach = 0;
  for (const value_run& r : runs) {
    const int64_t b = std::max(r.global, reach), e = r.global + r.count;
    if (e > b) total += e - b, reach = e;
  }
  return total;
}

}  // namespace troupe::storage
