// segment_file: pieces of a rank's parameter segments at aligned places of one file.
#include "storage/segment_file.hpp"

#include <algorithm>
#include <stdexcept>

namespace troupe::storage {

namespace {
constexpr int64_t kAlign = 4096;
int64_t align_up(int64_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }
}  // namespace

std::vector<segment_file::placed> segment_file::place(std::vector<piece> pieces) {
  std::sort(pieces.begin(), pieces.end(), [](const piece& a, const piece& b) { return a.at != b.at ? a.at < b.at : a.floats < b.floats; });
  std::vector<placed> out;
  int64_t offset = 0, end = 0;
  for (const piece& p : pieces) {
    if (p.at < 0 || p.floats < 0 || p.at < end)
      throw std::invalid_argument("segment_file: piece at " + std::to_string(p.at) + " of " + std::to_string(p.floats) +
                                  " floats overlaps the one before it (which ends at " + std::to_string(end) +
                                  ") or is negative");
    out.push_back({p, offset});
    offset += align_up(p.floats * static_cast<int64_t>(sizeof(float)));
    end = p.at + p.floats;
  }
  return out;
}

int64_t segment_file::bytes_of(const std::vector<placed>& layout) {
  if (layout.empty()) return kAlign;
  const placed& last = layout.back();
  return std::max(kAlign, last.offset + align_up(last.p.floats * static_cast<int64_t>(sizeof(float))));
}

// layout_ is declared before store_, so the file is sized from the layout.
segment_file::segment_file(std::string path, std::vector<piece> pieces, uring_options io)
    : layout_(place(std::move(pieces))), store_(std::move(path), bytes_of(layout_), [&io] {
        io.remove_on_close = true;
        return io;
      }()) {
  for (const placed& p : layout_) floats_ = std::max(floats_, p.p.at + p.p.floats);
}

void segment_file::write_all(const float* segments, int64_t count) {
  if (count != floats_)
    throw std::invalid_argument("segment_file " + store_.path() + ": " + std::to_string(count) +
                                " floats written to segments of " + std::to_string(floats_));
  for (const placed& p : layout_)
    if (p.p.floats > 0) store_.submit_write(p.offset, segments + p.p.at, p.p.floats * static_cast<int64_t>(sizeof(float)));
  store_.wait_all();
}

// The piece with floats that starts at `at` (an empty piece may start there too).
const segment_file::placed& segment_file::find(int64_t at) const {
  auto it = std::lower_bound(layout_.begin(), layout_.end(), at, [](const placed& p, int64_t a) { return p.p.at < a; });
  while (it != layout_.end() && it->p.at == at && it->p.floats == 0) ++it;
  if (it == layout_.end() || it->p.at != at)
    throw std::out_of_range("segment_file " + store_.path() + ": no piece starts at float " + std::to_string(at));
  return *it;
}

void segment_file::read(int64_t at, float* dst, int64_t floats) {
  if (floats == 0) return;  // an empty piece: nothing of this unit is the rank's
  const placed& p = find(at);
  if (p.p.floats != floats)
    throw std::invalid_argument("segment_file " + store_.path() + ": the piece at float " + std::to_string(at) + " has " +
                                std::to_string(p.p.floats) + " floats, " + std::to_string(floats) + " asked for");
  store_.read(p.offset, dst, floats * static_cast<int64_t>(sizeof(float)));
}

}  // namespace troupe::storage
