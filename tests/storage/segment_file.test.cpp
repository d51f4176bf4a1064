// storage/segment_file: a rank's parameter segments, cut into pieces of any length (some empty),
// read back piece by piece bitwise after a write of the whole, and again after a rewrite; each
// piece sits at a 4096-aligned place of the file, so a piece's read never sees a neighbour's
// bytes; a wrong length or start is refused by name; the file goes with the object.
#include <gtest/gtest.h>

#include <filesystem>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "storage/segment_file.hpp"

namespace fs = std::filesystem;
using troupe::storage::segment_file;
using troupe::storage::uring_options;

namespace {

std::string temp_path(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return (fs::path(dir ? dir : fs::temp_directory_path().string()) / ("troupe-segment-file-" + name)).string();
}

std::vector<segment_file::piece> pieces() {
  // Out of order, with empty pieces and lengths that are not a multiple of a page.
  return {{1500, 7}, {0, 1000}, {1000, 0}, {1000, 500}, {1507, 3000}, {4507, 0}};
}

TEST(SegmentFile, EveryPieceReadsBackBitwiseAfterAWriteAndAfterARewrite) {
  uring_options io;
  io.block_size = 4096;
  io.queue_depth = 2;
  const std::string path = temp_path("rw");
  {
    segment_file f(path, pieces(), io);
    ASSERT_EQ(f.floats(), 4507);
    EXPECT_EQ(f.file_bytes(), 4096 * 6);  // 1000, 500 and 7 floats a page each, 3000 floats three
    for (int round = 0; round < 2; ++round) {
      std::vector<float> segments(4507);
      std::iota(segments.begin(), segments.end(), static_cast<float>(round * 10000));
      f.write_all(segments.data(), static_cast<int64_t>(segments.size()));
      for (const auto& p : pieces()) {
        std::vector<float> got(static_cast<size_t>(p.floats) + 1, -1.0f);
        f.read(p.at, got.data(), p.floats);
        for (int64_t i = 0; i < p.floats; ++i) ASSERT_EQ(got[static_cast<size_t>(i)], segments[static_cast<size_t>(p.at + i)]);
        EXPECT_EQ(got.back(), -1.0f);  // nothing past the piece is written
      }
    }
    // A scratch file: gone from its folder once open, so no way of ending leaves it behind.
    EXPECT_FALSE(fs::exists(path));
  }
  EXPECT_FALSE(fs::exists(path));
}

TEST(SegmentFile, AWrongStartLengthOrOverlapIsRefusedByName) {
  uring_options io;
  io.block_size = 4096;
  segment_file f(temp_path("bad"), pieces(), io);
  std::vector<float> buf(5000);
  EXPECT_THROW(f.read(3, buf.data(), 1), std::out_of_range);
  try {
    f.read(1500, buf.data(), 8);
    FAIL() << "a wrong length was read";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("has 7 floats, 8 asked for"), std::string::npos) << e.what();
  }
  EXPECT_THROW(f.write_all(buf.data(), 4506), std::invalid_argument);
  try {
    segment_file overlap(temp_path("overlap"), {{0, 10}, {5, 10}}, io);
    FAIL() << "overlapping pieces were taken";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("piece at 5 of 10 floats overlaps"), std::string::npos) << e.what();
  }
}

}  // namespace
