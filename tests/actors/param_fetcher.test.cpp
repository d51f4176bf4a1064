// actors/stage/param_fetcher: ZeRO-3's parameter stream, with the segments in memory and kept in
// a segment file (ZeRO-Infinity's parameter offload). Two members of a group gather three units
// in the schedule's order: every unit taken is the two ranks' segments put together; from a file,
// the values come from its reads (the store counts them) and a step after keep() sees the new
// segments, never the previous step's; a unit asked for out of order is refused by name.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "actors/stage/param_fetcher.hpp"
#include "comm/tp_groups.hpp"

using namespace troupe;

namespace {

constexpr int kRanks = 2;
const std::vector<int64_t> kUnits = {5, 4096 + 3, 1};  // floats of each unit; one smaller than the group

// Rank r's segments of every unit, end to end: unit u's element i is 1000 * u + i + offset.
struct layout {
  std::vector<int64_t> at;  // where unit u's segment starts in the rank's flat segments
  int64_t floats = 0;
};
layout layout_of(int rank) {
  layout l;
  for (int64_t count : kUnits) {
    l.at.push_back(l.floats);
    l.floats += shard_of(count, kRanks, rank).count;
  }
  return l;
}
tensor segments_of(int rank, float offset) {
  const layout l = layout_of(rank);
  tensor t({l.floats});
  for (size_t u = 0; u < kUnits.size(); ++u) {
    const shard_range mine = shard_of(kUnits[u], kRanks, rank);
    for (int64_t i = 0; i < mine.count; ++i)
      t.data()[l.at[u] + i] = 1000.0f * static_cast<float>(u) + static_cast<float>(mine.begin + i) + offset;
  }
  t.freeze();
  return t;
}
std::vector<param_fetcher::request> order_of(int rank, const tensor& source) {
  const layout l = layout_of(rank);
  std::vector<param_fetcher::request> out;
  for (size_t u : {size_t{0}, size_t{1}, size_t{2}, size_t{2}, size_t{1}, size_t{0}})  // a forward, then a backward
    out.push_back({0, u, kUnits[u], source, l.at[u]});
  return out;
}
std::shared_ptr<storage::segment_file> file_of(int rank) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path = (std::filesystem::path(dir ? dir : std::filesystem::temp_directory_path().string()) /
                            ("troupe-param-fetcher-" + std::to_string(::getpid()) + "-" + std::to_string(rank)))
                               .string();
  const layout l = layout_of(rank);
  std::vector<storage::segment_file::piece> pieces;
  for (size_t u = 0; u < kUnits.size(); ++u) pieces.push_back({l.at[u], shard_of(kUnits[u], kRanks, rank).count});
  storage::uring_options io;
  io.block_size = 4096;
  io.queue_depth = 2;
  return std::make_shared<storage::segment_file>(path, pieces, io);
}

// Takes every unit of one step on each rank (in threads: the gathers meet) and checks its values.
void run_step(std::vector<std::unique_ptr<param_fetcher>>& fetchers, float offset, bool from_file) {
  std::vector<std::future<void>> ranks;
  for (int r = 0; r < kRanks; ++r)
    ranks.push_back(std::async(std::launch::async, [&, r] {
      param_fetcher& f = *fetchers[static_cast<size_t>(r)];
      tensor mine = segments_of(r, offset);
      if (from_file) f.keep(mine);
      f.begin_step(order_of(r, from_file ? tensor() : mine));
      for (const auto& q : order_of(r, tensor())) {
        const tensor unit = f.take(q.chunk, q.unit);
        ASSERT_EQ(unit.numel(), kUnits[q.unit]);
        for (int64_t i = 0; i < unit.numel(); ++i)
          ASSERT_EQ(std::as_const(unit).data()[i], 1000.0f * static_cast<float>(q.unit) + static_cast<float>(i) + offset)
              << "rank " << r << " unit " << q.unit << " element " << i;
      }
    }));
  for (auto& r : ranks) r.get();
}

TEST(ParamFetcher, UnitsGatheredFromSegmentsInMemoryAreTheRanksSegmentsPutTogether) {
  auto group = net::make_local_tp_group(kRanks);
  std::vector<std::unique_ptr<param_fetcher>> fetchers;
  for (int r = 0; r < kRanks; ++r) fetchers.push_back(std::make_unique<param_fetcher>(group[static_cast<size_t>(r)], 1));
  run_step(fetchers, 0.0f, false);
  run_step(fetchers, 0.5f, false);
}

TEST(ParamFetcher, UnitsReadFromASegmentFileAreTheSegmentsKeptLastAndEveryOneIsRead) {
  auto group = net::make_local_tp_group(kRanks);
  std::vector<std::shared_ptr<storage::segment_file>> files;
  std::vector<std::unique_ptr<param_fetcher>> fetchers;
  for (int r = 0; r < kRanks; ++r) {
    files.push_back(file_of(r));
    fetchers.push_back(std::make_unique<param_fetcher>(group[static_cast<size_t>(r)], 2, files.back()));
  }
  run_step(fetchers, 0.0f, true);
  run_step(fetchers, 0.5f, true);  // the second step's values, not the first's
  for (int r = 0; r < kRanks; ++r) {
    const int64_t segment_bytes = layout_of(r).floats * static_cast<int64_t>(sizeof(float));
    // Each step: the segments written once, each unit's piece read once per use (each used twice).
    EXPECT_EQ(files[static_cast<size_t>(r)]->store().bytes_written(), 2 * segment_bytes) << "rank " << r;
    EXPECT_EQ(files[static_cast<size_t>(r)]->store().bytes_read(), 2 * 2 * segment_bytes) << "rank " << r;
  }
}

TEST(ParamFetcher, AUnitAskedForOutOfTheSchedulesOrderIsRefusedByName) {
  auto group = net::make_local_tp_group(1);
  param_fetcher f(group[0], 1);
  tensor seg({5});
  seg.freeze();
  f.begin_step({{0, 0, 5, seg, 0}});
  try {
    f.take(0, 1);
    FAIL() << "an out-of-order unit was handed out";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("unit 1 of chunk 0 asked for out of the schedule's order (expected unit 0 of chunk 0)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(f.take(0, 0).numel(), 5);
}

}  // namespace
