// segment_file: a rank's parameter segments kept on NVMe (ZeRO-Infinity's parameter offload).
// Each segment (a piece of the rank's flat segments: where it starts there, and its length) gets
// its own 4096-aligned place in one uring_store file, so any one of them reads back in a single
// request without touching its neighbours, and the whole set is rewritten after every optimizer
// step. Single-threaded, like the store under it: one owner thread drives it. No CAF.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "storage/uring_store.hpp"

namespace troupe::storage {

class segment_file {
 public:
  struct piece {
    int64_t at = 0;      // floats from the start of the flat segments
    int64_t floats = 0;  // may be 0 (a bucket smaller than the group has nothing for some ranks)
  };
  // Creates `path` sized for `pieces` (each at a 4096-aligned offset), removed on destruction.
  // Pieces must not overlap and must lie in [0, total floats); throws std::invalid_argument
  // naming the first that does not, and what the uring_store constructor throws (a missing
  // folder, a full disk).
  segment_file(std::string path, std::vector<piece> pieces, uring_options io);

  // Writes every piece from `segments` (the whole flat segments, floats() of them), waiting for
  // all of it. Throws std::invalid_argument on a wrong length, std::runtime_error naming the
  // path on a failed write.
  void write_all(const float* segments, int64_t count);
  // Reads the piece that starts at `at`, `floats` long, into dst. Throws std::out_of_range when
  // no piece starts there, std::invalid_argument when it is not that long.
  void read(int64_t at, float* dst, int64_t floats);

  int64_t floats() const { return floats_; }  // of the flat segments: the pieces' sum
  int64_t file_bytes() const { return store_.size(); }
  const uring_store& store() const { return store_; }

 private:
  struct placed {
    piece p;
    int64_t offset = 0;  // bytes into the file
  };
  static std::vector<placed> place(std::vector<piece> pieces);
  static int64_t bytes_of(const std::vector<placed>& layout);
  const placed& find(int64_t at) const;

  std::vector<placed> layout_;  // by `at`
  int64_t floats_ = 0;
  uring_store store_;
};

}  // namespace troupe::storage
