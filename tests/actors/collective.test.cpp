// The collective actor group: for every N in 1..8 and sizes from 1 element to 64 MiB (including
// sizes no N divides), every op gives each rank exactly what the serial ring replay gives, equal
// on every rank; integer-valued sums equal a plain serial sum exactly. Also: chunks that arrive
// before the local request, several collectives in flight, by-reference results, and a refusal.
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "actors/collective/collective.hpp"
#include "actors/messages.hpp"

using namespace troupe;
using ring::op_kind;

namespace {

struct CollectiveGroup : ::testing::Test {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  void SetUp() override {
    add_message_types(cfg);
    cfg.set("scheduler.max-threads", 2);
    sys = std::make_unique<caf::actor_system>(cfg);
  }
  void TearDown() override { sys.reset(); }
  static void stop(const std::vector<caf::actor>& g) {
    for (auto& a : g) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  }
};

std::vector<std::vector<float>> random_inputs(int ranks, int64_t n, bool integers, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> real(-1.0f, 1.0f);
  std::vector<std::vector<float>> in(static_cast<size_t>(ranks), std::vector<float>(static_cast<size_t>(n)));
  for (auto& v : in)
    for (auto& x : v) x = integers ? static_cast<float>(static_cast<int>(rng() % 2001) - 1000) : real(rng);
  return in;
}

std::vector<tensor> as_tensors(const std::vector<std::vector<float>>& in) {
  std::vector<tensor> t;
  for (const auto& v : in) t.emplace_back(shape_t{static_cast<int64_t>(v.size())}, v);
  return t;
}

// Inputs of an op as the actors take them (all_gather: each rank's segment only).
std::vector<std::vector<float>> op_inputs(op_kind op, const std::vector<std::vector<float>>& full, int64_t n) {
  if (op != op_kind::all_gather) return full;
  std::vector<std::vector<float>> pieces;
  const int ranks = static_cast<int>(full.size());
  for (int r = 0; r < ranks; ++r) {
    const ring::range seg = ring::segment(n, ranks, r);
    pieces.emplace_back(full[r].begin() + seg.offset, full[r].begin() + seg.offset + seg.count);
  }
  return pieces;
}

void expect_bitwise(const std::vector<tensor>& got, const std::vector<std::vector<float>>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t r = 0; r < got.size(); ++r) {
    ASSERT_EQ(got[r].numel(), static_cast<int64_t>(want[r].size())) << what << " rank " << r;
    for (int64_t i = 0; i < got[r].numel(); ++i) ASSERT_EQ(got[r][i], want[r][i]) << what << " rank " << r << " at " << i;
  }
}

}  // namespace

TEST_F(CollectiveGroup, EveryOpMatchesSerialRingForEveryRankCountAndOddSizes) {
  const op_kind ops[] = {op_kind::all_reduce_sum, op_kind::all_reduce_average, op_kind::reduce_scatter_sum,
                         op_kind::reduce_scatter_average, op_kind::all_gather, op_kind::broadcast};
  int64_t seq = 0;
  for (int ranks = 1; ranks <= 8; ++ranks) {
    auto group = spawn_collective_group(*sys, ranks, {/*chunk_bytes=*/4096});
    for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{1000}, int64_t{1000003}}) {
      auto full = random_inputs(ranks, n, false, static_cast<uint64_t>(ranks * 100 + n));
      for (op_kind op : ops) {
        if (n == 1000003 && op != op_kind::all_reduce_sum && op != op_kind::all_gather) continue;  // keep it fast
        const int root = ranks - 1;
        auto in = op_inputs(op, full, n);
        auto got = run_collective(*sys, group, seq++, op, as_tensors(in), n, root);
        const std::string what = std::string(ring::to_string(op)) + " N=" + std::to_string(ranks) + " n=" + std::to_string(n);
        expect_bitwise(got, ring::serial_ring(op, in, n, root), what);
        if (ring::gathers(op) || op == op_kind::broadcast) {
          for (int r = 1; r < ranks; ++r) ASSERT_EQ(got[r].to_vector(), got[0].to_vector()) << what;
        }
      }
    }
    stop(group);
  }
}

TEST_F(CollectiveGroup, SixtyFourMiBIntegerSumEqualsSerialSumExactly) {
  const int64_t n = (int64_t{64} << 20) / 4 + 3;  // 64 MiB of floats, plus 3 so no N divides it
  for (int ranks : {2, 3}) {
    auto group = spawn_collective_group(*sys, ranks);
    auto in = random_inputs(ranks, n, true, 5);
    auto got = run_collective(*sys, group, 0, op_kind::all_reduce_sum, as_tensors(in), n);
    for (int64_t i = 0; i < n; ++i) {
      float want = 0;
      for (int r = 0; r < ranks; ++r) want += in[r][i];  // exact: small integers
      for (int r = 0; r < ranks; ++r) ASSERT_EQ(got[r][i], want) << "rank " << r << " at " << i;
    }
    stop(group);
  }
}

TEST_F(CollectiveGroup, SameInputsGiveSameBitsOnEveryRunAndEveryRank) {
  auto group = spawn_collective_group(*sys, 5, {256});
  auto in = as_tensors(random_inputs(5, 10007, false, 9));
  auto a = run_collective(*sys, group, 1, op_kind::all_reduce_average, in, 10007);
  auto b = run_collective(*sys, group, 2, op_kind::all_reduce_average, in, 10007);
  for (int r = 0; r < 5; ++r) {
    EXPECT_EQ(a[r].to_vector(), b[r].to_vector());
    EXPECT_EQ(a[r].to_vector(), a[0].to_vector());
  }
  stop(group);
}

TEST_F(CollectiveGroup, ChunksArrivingBeforeTheLocalRequestAndInterleavedOpsAreHandled) {
  const int ranks = 4;
  const int64_t n = 5003;
  auto group = spawn_collective_group(*sys, ranks, {512});
  auto in = random_inputs(ranks, n, false, 21);
  auto ts = as_tensors(in);
  auto want = ring::serial_ring(op_kind::all_reduce_sum, in, n);
  caf::scoped_actor self{*sys};
  using handle = decltype(self->request(group[0], caf::infinite, collective_request{}));
  std::vector<handle> pending;
  std::vector<int> rank_of;
  // Three collectives in flight; each rank issues them in a different order, and rank 0 only
  // after the others' chunks have reached it.
  for (int r = ranks - 1; r >= 0; --r) {
    if (r == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    for (int k = 0; k < 3; ++k) {
      pending.push_back(self->request(group[r], caf::infinite, collective_request{(k + r) % 3, 0, 0, n, ts[r]}));
      rank_of.push_back(r);
    }
  }
  int results = 0;
  for (size_t i = 0; i < pending.size(); ++i)
    pending[i].receive(
        [&](collective_result& res) {
          ++results;
          ASSERT_EQ(res.data.to_vector(), want[rank_of[i]]) << "seq " << res.seq;
        },
        [&](caf::error& e) { FAIL() << sys->render(e); });
  EXPECT_EQ(results, 12);
  stop(group);
}

TEST_F(CollectiveGroup, OneRankAndTheBroadcastRootGetTheirInputByReference) {
  auto one = spawn_collective_group(*sys, 1);
  tensor x({3}, {1, 2, 3});
  auto r1 = run_collective(*sys, one, 0, op_kind::all_reduce_sum, {x}, 3);
  EXPECT_TRUE(r1[0].shares_storage_with(x));
  auto three = spawn_collective_group(*sys, 3);
  auto rb = run_collective(*sys, three, 0, op_kind::broadcast, {tensor(), x, tensor()}, 3, 1);
  EXPECT_TRUE(rb[1].shares_storage_with(x));
  EXPECT_EQ(rb[0].to_vector(), x.to_vector());
  EXPECT_EQ(rb[2].to_vector(), x.to_vector());
  stop(one);
  stop(three);
}

TEST_F(CollectiveGroup, WrongInputSizeIsRefusedWithTheRankAndSeqNamed) {
  auto group = spawn_collective_group(*sys, 1);
  EXPECT_THROW(run_collective(*sys, group, 7, op_kind::all_reduce_sum, {tensor({2})}, 3), std::runtime_error);
}

TEST_F(CollectiveGroup, ResultsShareOneFrozenBufferThatIsReusedOnceEveryResultIsDropped) {
  auto group = spawn_collective_group(*sys, 3, {/*chunk_bytes=*/1024});
  auto in = as_tensors(random_inputs(3, 1000, false, 4));
  auto a = run_collective(*sys, group, 1, op_kind::all_reduce_sum, in, 1000);
  for (int r = 0; r < 3; ++r) {
    EXPECT_TRUE(a[r].frozen());
    EXPECT_TRUE(a[r].shares_storage_with(a[0])) << "rank " << r;
  }
  const float* first = std::as_const(a[0]).data();
  auto held = run_collective(*sys, group, 2, op_kind::all_reduce_sum, in, 1000);  // a still held
  EXPECT_NE(std::as_const(held[0]).data(), first);
  a.clear();
  auto b = run_collective(*sys, group, 3, op_kind::all_reduce_sum, in, 1000);
  EXPECT_EQ(std::as_const(b[0]).data(), first) << "the released buffer is reused";
  EXPECT_EQ(b[0].to_vector(), held[0].to_vector());
  stop(group);
}

TEST_F(CollectiveGroup, DumpListsRecentCollectivesWithSeqOpSizePeersAndWhereAStuckOneWaits) {
  const int ranks = 3;
  auto group = spawn_collective_group(*sys, ranks, {/*chunk_bytes=*/64});
  auto in = random_inputs(ranks, 100, false, 8);
  run_collective(*sys, group, 10, op_kind::all_reduce_sum, as_tensors(in), 100);
  run_collective(*sys, group, 11, op_kind::all_gather, as_tensors(op_inputs(op_kind::all_gather, in, 100)), 100);
  // seq 12: rank 2 is never asked, so it only collects early chunks and the others wait on it.
  caf::scoped_actor self{*sys};
  for (int r = 0; r < 2; ++r) self->send(group[r], collective_request{12, 0, 0, 100, as_tensors(in)[r]});
  std::vector<collective_log> logs;
  for (int tries = 0; tries < 200; ++tries) {  // until rank 2 has seen seq 12's first chunks
    logs = dump_collective_group(*sys, group);
    if (logs.size() == 3 && logs[2].entries.size() == 3 && logs[2].entries[2].received > 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(logs.size(), 3u);
  for (int r = 0; r < ranks; ++r) {
    const auto& log = logs[r];
    EXPECT_EQ(log.rank, r);
    EXPECT_EQ(log.ranks, ranks);
    ASSERT_EQ(log.entries.size(), 3u) << to_string(log);
    EXPECT_EQ(log.entries[0].seq, 10);
    EXPECT_EQ(log.entries[0].op, "all_reduce_sum");
    EXPECT_EQ(log.entries[0].total, 100);
    EXPECT_EQ(log.entries[0].left, (r + 2) % 3);
    EXPECT_EQ(log.entries[0].right, (r + 1) % 3);
    EXPECT_EQ(log.entries[0].state, "done");
    // 100 elements over 3 ranks are segments of 34, 33, 33; a rank receives every segment but
    // the one it starts the reduce with (r - 1) and, gathering, every one but its own (r).
    const int64_t want = (r == 0 ? 67 + 66 : r == 1 ? 66 + 67 : 67 + 67);
    EXPECT_EQ(log.entries[0].expected, want);
    EXPECT_EQ(log.entries[0].received, want);
    EXPECT_GT(log.entries[0].finished_at, log.entries[0].started_at);
    EXPECT_EQ(log.entries[1].seq, 11);
    EXPECT_EQ(log.entries[1].op, "all_gather");
    EXPECT_EQ(log.entries[1].state, "done");
    EXPECT_EQ(log.entries[2].seq, 12);
  }
  EXPECT_EQ(logs[0].entries[2].state, "running");
  EXPECT_LT(logs[0].entries[2].received, logs[0].entries[2].expected);
  EXPECT_EQ(logs[2].entries[2].state, "chunks_before_request");
  EXPECT_GT(logs[2].entries[2].received, 0);
  EXPECT_NE(to_string(logs[0]).find("seq 12 all_reduce_sum of 100 (left 2, right 1): running"), std::string::npos)
      << to_string(logs[0]);
  stop(group);
}

TEST_F(CollectiveGroup, TheLogKeepsOnlyTheLastEntries) {
  auto group = spawn_collective_group(*sys, 2);
  auto in = as_tensors(random_inputs(2, 10, false, 3));
  for (int64_t seq = 0; seq < kLogEntries + 4; ++seq) run_collective(*sys, group, seq, op_kind::all_reduce_sum, in, 10);
  auto logs = dump_collective_group(*sys, group);
  ASSERT_EQ(logs.size(), 2u);
  ASSERT_EQ(logs[1].entries.size(), static_cast<size_t>(kLogEntries));
  EXPECT_EQ(logs[1].entries.front().seq, 4);
  EXPECT_EQ(logs[1].entries.back().seq, kLogEntries + 3);
  stop(group);
}
