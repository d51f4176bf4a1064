// caching_allocator over a fake backend that counts its raw calls: freed blocks are reused,
// sizes are rounded, a block more than twice a request is not handed out, empty_cache gives
// the cache back, a backend out of memory gets the cache back before the request fails, the
// stats add up, two threads can share one allocator, a freed block goes back only to
// allocations on the stream that allocated it, and a block another stream used (record_stream)
// waits for that stream's event, recorded after the free and never inside it.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "kernels/allocator.hpp"

using namespace troupe;

namespace {

constexpr size_t MiB = size_t{1} << 20;

// The calling thread's stream, as a GPU backend reports its current one.
thread_local const void* fake_stream = nullptr;

struct fake_counts {
  std::atomic<int> allocs{0}, frees{0};
  std::atomic<int64_t> held{0};
  int64_t limit = 0;  // 0: no limit; else raw_alloc past it returns null
  // Events: one per record_event, reached once the test says its stream got there.
  std::atomic<int> events_recorded{0}, events_destroyed{0}, waits{0};
  std::mutex mu;
  std::set<const void*> streams_done;  // streams that have run everything given to them so far
};

struct fake_event {
  const void* stream;
};

class fake_backend final : public raw_backend {
 public:
  explicit fake_backend(std::shared_ptr<fake_counts> c) : c_(std::move(c)) {}
  void* raw_alloc(size_t bytes) override {
    if (c_->limit > 0 && c_->held + static_cast<int64_t>(bytes) > c_->limit) return nullptr;
    ++c_->allocs;
    c_->held += static_cast<int64_t>(bytes);
    return std::malloc(bytes);
  }
  void raw_free(void* p, size_t bytes) noexcept override {
    ++c_->frees;
    c_->held -= static_cast<int64_t>(bytes);
    std::free(p);
  }
  void zero(void* p, size_t bytes) override { std::memset(p, 0, bytes); }
  device where() const override { return {device_type::cuda, 3}; }
  const void* stream() const override { return fake_stream; }
  void* record_event(const void* stream) override {
    ++c_->events_recorded;
    return new fake_event{stream};
  }
  bool event_reached(void* e) override {
    std::lock_guard<std::mutex> lock(c_->mu);
    return c_->streams_done.count(static_cast<fake_event*>(e)->stream) > 0;
  }
  void wait_event(void* e) override {
    ++c_->waits;
    std::lock_guard<std::mutex> lock(c_->mu);
    c_->streams_done.insert(static_cast<fake_event*>(e)->stream);  // waiting lets the stream finish
  }
  void destroy_event(void* e) noexcept override {
    ++c_->events_destroyed;
    delete static_cast<fake_event*>(e);
  }

 private:
  std::shared_ptr<fake_counts> c_;
};

struct CachingAllocator : ::testing::Test {
  std::shared_ptr<fake_counts> raw = std::make_shared<fake_counts>();
  caching_allocator a{std::make_unique<fake_backend>(raw)};
};

}  // namespace

TEST(CachingAllocatorRounding, SmallTo512BytesLargeTo2MiB) {
  EXPECT_EQ(caching_allocator::round_size(0), 512u);
  EXPECT_EQ(caching_allocator::round_size(1), 512u);
  EXPECT_EQ(caching_allocator::round_size(512), 512u);
  EXPECT_EQ(caching_allocator::round_size(513), 1024u);
  EXPECT_EQ(caching_allocator::round_size(MiB - 1), MiB);  // still small: 512-byte granules
  EXPECT_EQ(caching_allocator::round_size(MiB), 2 * MiB);
  EXPECT_EQ(caching_allocator::round_size(2 * MiB), 2 * MiB);
  EXPECT_EQ(caching_allocator::round_size(2 * MiB + 1), 4 * MiB);
}

TEST_F(CachingAllocator, AFreedBlockIsReusedWithoutABackendCall) {
  void* p = a.allocate(1000);
  EXPECT_EQ(raw->allocs, 1);
  a.deallocate(p, 1000);
  EXPECT_EQ(raw->frees, 0);  // cached, not freed
  void* q = a.allocate(700);  // rounds to 1024 as well
  EXPECT_EQ(q, p);
  EXPECT_EQ(raw->allocs, 1);
  const allocator_stats s = a.stats();
  EXPECT_EQ(s.cache_hits, 1);
  EXPECT_EQ(s.cache_misses, 1);
  EXPECT_EQ(s.raw_allocs, 1);
  a.deallocate(q, 700);
}

TEST_F(CachingAllocator, BestFitTakesTheSmallestBlockThatFits) {
  void* big = a.allocate(8 * MiB);
  void* mid = a.allocate(4 * MiB);
  a.deallocate(big, 8 * MiB);
  a.deallocate(mid, 4 * MiB);
  EXPECT_EQ(a.allocate(3 * MiB + 5), mid);  // rounds to 4 MiB: the 4 MiB block, not the 8
  EXPECT_EQ(a.allocate(7 * MiB), big);      // rounds to 8 MiB
  EXPECT_EQ(raw->allocs, 2);
  a.deallocate(mid, 3 * MiB + 5);
  a.deallocate(big, 7 * MiB);
}

TEST_F(CachingAllocator, ABlockMoreThanTwiceTheRequestIsNotHandedOut) {
  void* big = a.allocate(10 * MiB);
  a.deallocate(big, 10 * MiB);
  void* p = a.allocate(4 * MiB);  // 10 MiB > 2 × 4 MiB: a fresh block
  EXPECT_NE(p, big);
  EXPECT_EQ(raw->allocs, 2);
  void* q = a.allocate(5 * MiB + 1);  // rounds to 6 MiB; 10 <= 12: the cached block
  EXPECT_EQ(q, big);
  EXPECT_EQ(raw->allocs, 2);
  // The same holds for small blocks: a 512 B request does not take a 2 KiB block.
  void* s = a.allocate(2048);
  a.deallocate(s, 2048);
  void* t = a.allocate(100);
  EXPECT_NE(t, s);
  a.deallocate(p, 4 * MiB);
  a.deallocate(q, 5 * MiB + 1);
  a.deallocate(t, 100);
}

TEST_F(CachingAllocator, SmallAndLargeRequestsDoNotShareBlocks) {
  // 1 MiB is the largest small block and half the smallest large one: the two-times rule would
  // let it take a large block.
  void* large = a.allocate(MiB);  // a 2 MiB block
  a.deallocate(large, MiB);
  void* small = a.allocate(MiB - 1);  // a 1 MiB block
  EXPECT_NE(small, large);
  a.deallocate(small, MiB - 1);
  void* large2 = a.allocate(2 * MiB);
  EXPECT_EQ(large2, large);
  EXPECT_EQ(raw->allocs, 2);
  a.deallocate(large2, 2 * MiB);
}

TEST_F(CachingAllocator, EmptyCacheGivesCachedBlocksBackAndKeepsLiveOnes) {
  void* p = a.allocate(3 * MiB);
  void* q = a.allocate(100);
  a.deallocate(p, 3 * MiB);
  EXPECT_EQ(a.stats().reserved, static_cast<int64_t>(4 * MiB + 512));
  a.empty_cache();
  EXPECT_EQ(raw->frees, 1);
  EXPECT_EQ(raw->held, 512);
  const allocator_stats s = a.stats();
  EXPECT_EQ(s.reserved, 512);
  EXPECT_EQ(s.allocated, 512);
  EXPECT_EQ(s.raw_frees, 1);
  a.deallocate(q, 100);
  a.empty_cache();
  EXPECT_EQ(raw->held, 0);
}

TEST_F(CachingAllocator, StatsCountAllocatedRequestedReservedAndPeaks) {
  void* p = a.allocate(1000);      // a 1024 block
  void* q = a.allocate(3 * MiB);   // a 4 MiB block
  allocator_stats s = a.stats();
  EXPECT_EQ(s.allocated, static_cast<int64_t>(1024 + 4 * MiB));
  EXPECT_EQ(s.requested, static_cast<int64_t>(1000 + 3 * MiB));
  EXPECT_EQ(s.reserved, s.allocated);
  a.deallocate(q, 3 * MiB);
  s = a.stats();
  EXPECT_EQ(s.allocated, 1024);
  EXPECT_EQ(s.requested, 1000);
  EXPECT_EQ(s.reserved, static_cast<int64_t>(1024 + 4 * MiB));  // the 4 MiB block is cached
  EXPECT_EQ(s.peak_allocated, static_cast<int64_t>(1024 + 4 * MiB));
  EXPECT_EQ(s.peak_reserved, static_cast<int64_t>(1024 + 4 * MiB));
  a.deallocate(p, 1000);
}

TEST_F(CachingAllocator, OutOfMemoryEmptiesTheCacheAndRetriesThenNamesTheDevice) {
  raw->limit = static_cast<int64_t>(6 * MiB);
  void* p = a.allocate(4 * MiB);
  a.deallocate(p, 4 * MiB);
  void* q = a.allocate(6 * MiB);  // 10 MiB would be held: the cached 4 MiB goes first
  EXPECT_EQ(raw->frees, 1);
  EXPECT_EQ(a.stats().raw_allocs, 3);
  try {
    a.allocate(2 * MiB);
    FAIL() << "no out_of_memory";
  } catch (const out_of_memory& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:3"), std::string::npos) << e.what();
  }
  EXPECT_EQ(a.stats().allocated, static_cast<int64_t>(6 * MiB));  // the failure changed nothing
  a.deallocate(q, 6 * MiB);
}

TEST_F(CachingAllocator, TensorsComeFromItAndGoBackToItsCache) {
  auto shared = std::make_shared<caching_allocator>(std::make_unique<fake_backend>(raw));
  const void* first = nullptr;
  {
    tensor t = tensor::uninitialized({256}, dtype::bf16, shared);
    EXPECT_EQ(t.where(), (device{device_type::cuda, 3}));
    EXPECT_THROW(t.data(), std::logic_error);  // not a CPU f32 tensor
    first = std::as_const(t).raw();
    EXPECT_EQ(shared->stats().requested, 512);
  }
  EXPECT_EQ(shared->stats().allocated, 0);
  tensor u = tensor::uninitialized({128}, dtype::f32, shared);
  EXPECT_EQ(std::as_const(u).raw(), first);
  EXPECT_EQ(raw->allocs, 1);
}

TEST_F(CachingAllocator, TwoThreadsShareItSafely) {
  constexpr int rounds = 20000;
  auto work = [this](int seed) {
    std::vector<std::pair<void*, size_t>> held;
    unsigned x = static_cast<unsigned>(seed);
    for (int i = 0; i < rounds; ++i) {
      x = x * 1103515245u + 12345u;
      const size_t bytes = (x >> 8) % 4 == 0 ? MiB + (x >> 12) % (3 * MiB) : (x >> 12) % 4096;
      void* p = a.allocate(bytes);
      static_cast<unsigned char*>(p)[0] = static_cast<unsigned char>(seed);  // the block is ours
      held.emplace_back(p, bytes);
      if (held.size() > 8 || (x & 1)) {
        EXPECT_EQ(static_cast<unsigned char*>(held.front().first)[0], static_cast<unsigned char>(seed));
        a.deallocate(held.front().first, held.front().second);
        held.erase(held.begin());
      }
    }
    for (auto& [p, n] : held) a.deallocate(p, n);
  };
  std::thread t1(work, 1), t2(work, 2);
  t1.join();
  t2.join();
  const allocator_stats s = a.stats();
  EXPECT_EQ(s.allocated, 0);
  EXPECT_EQ(s.requested, 0);
  EXPECT_EQ(s.cache_hits + s.cache_misses, 2 * rounds);
  EXPECT_GT(s.cache_hits, s.cache_misses);
  EXPECT_EQ(s.reserved, raw->held);
  a.empty_cache();
  EXPECT_EQ(raw->held, 0);
  EXPECT_EQ(raw->allocs, raw->frees);
}

// Two ranks on one GPU, each on its own stream: a block rank A freed (from any thread) may still
// be read by A's queued kernels, so B never gets it; A's next allocation does, ordered after them.
TEST_F(CachingAllocator, AFreedBlockIsHandedOutAgainOnlyOnTheStreamThatAllocatedIt) {
  int stream_a = 0, stream_b = 0;
  fake_stream = &stream_a;
  void* p = a.allocate(1000);
  fake_stream = &stream_b;  // freed by another thread, whose stream is B
  a.deallocate(p, 1000);
  void* q = a.allocate(1000);
  EXPECT_NE(q, p) << "stream B got a block stream A may still be using";
  EXPECT_EQ(raw->allocs, 2);
  fake_stream = nullptr;
  void* r = a.allocate(1000);
  EXPECT_NE(r, p) << "the null stream is a stream of its own";
  fake_stream = &stream_a;
  void* s = a.allocate(1000);
  EXPECT_EQ(s, p) << "stream A reuses its own block without a backend call";
  EXPECT_EQ(raw->allocs, 3);
  for (void* x : {q, r, s}) a.deallocate(x, 1000);
  fake_stream = nullptr;
}

TEST_F(CachingAllocator, EmptyCacheAndOutOfMemoryGiveBackTheBlocksOfEveryStream) {
  int stream_a = 0, stream_b = 0;
  for (const void* s : {static_cast<const void*>(&stream_a), static_cast<const void*>(&stream_b)}) {
    fake_stream = s;
    a.deallocate(a.allocate(3 * MiB), 3 * MiB);
  }
  EXPECT_EQ(a.stats().reserved, static_cast<int64_t>(8 * MiB));
  a.empty_cache();
  EXPECT_EQ(raw->frees, 2);
  EXPECT_EQ(a.stats().reserved, 0);

  for (const void* s : {static_cast<const void*>(&stream_a), static_cast<const void*>(&stream_b)}) {
    fake_stream = s;
    a.deallocate(a.allocate(3 * MiB), 3 * MiB);
  }
  raw->limit = static_cast<int64_t>(10 * MiB);  // 8 MiB cached: a third stream's 4 MiB needs them back
  fake_stream = nullptr;
  void* p = a.allocate(3 * MiB);
  EXPECT_EQ(raw->frees, 4);
  a.deallocate(p, 3 * MiB);
}

// Seen on an H200: a pinned staging block (allocated with no stream) copied on the legacy stream
// was handed out again, and overwritten by the host, before the copy had read it.
TEST_F(CachingAllocator, ABlockOfNoStreamUsedOnTheLegacyStreamWaitsForItsEventBeforeReuse) {
  fake_stream = nullptr;
  void* p = a.allocate(1000);
  EXPECT_TRUE(a.record_stream(p, nullptr));
  EXPECT_EQ(raw->events_recorded, 1) << "the legacy stream's use went unrecorded";
  a.deallocate(p, 1000);
  void* q = a.allocate(1000);
  EXPECT_NE(q, p) << "handed out again before the legacy stream got past its use";
  {
    std::lock_guard<std::mutex> lock(raw->mu);
    raw->streams_done.insert(nullptr);
  }
  void* r = a.allocate(1000);
  EXPECT_EQ(r, p);
  a.deallocate(q, 1000);
  a.deallocate(r, 1000);
}

TEST_F(CachingAllocator, ABlockAnotherStreamUsedIsReusedOnlyOnceThatStreamReachedTheEventRecordedAtItsUse) {
  int a_stream = 0, b_stream = 0;
  fake_stream = &a_stream;
  void* p = a.allocate(1000);
  EXPECT_TRUE(a.record_stream(p, &b_stream));  // the event is recorded now, after the use
  EXPECT_TRUE(a.record_stream(p, &a_stream));  // its own stream: nothing to wait for
  EXPECT_EQ(raw->events_recorded, 1);
  a.deallocate(p, 1000);
  // The free calls nothing (it may run anywhere); it only sets p aside.
  EXPECT_EQ(raw->events_recorded, 1);
  EXPECT_EQ(a.blocks_awaiting_streams(), 1u);
  void* q = a.allocate(1000);  // B has not reached its event: p is not handed out
  EXPECT_NE(q, p);
  {
    std::lock_guard<std::mutex> lock(raw->mu);
    raw->streams_done.insert(&b_stream);
  }
  void* r = a.allocate(1000);  // B reached it: p is back in A's cache
  EXPECT_EQ(r, p);
  EXPECT_EQ(raw->events_destroyed, 1);
  EXPECT_EQ(a.blocks_awaiting_streams(), 0u);
  EXPECT_FALSE(a.record_stream(static_cast<char*>(p) + 1, &b_stream)) << "not a block it handed out";
  a.deallocate(q, 1000);
  a.deallocate(r, 1000);
  fake_stream = nullptr;
}

TEST_F(CachingAllocator, ASecondUseOnTheSameStreamReplacesItsEvent) {
  int a_stream = 0, b_stream = 0;
  fake_stream = &a_stream;
  void* p = a.allocate(1000);
  a.record_stream(p, &b_stream);
  a.record_stream(p, &b_stream);
  EXPECT_EQ(raw->events_recorded, 2);
  EXPECT_EQ(raw->events_destroyed, 1) << "the older event, covered by the newer";
  a.deallocate(p, 1000);
  fake_stream = nullptr;
}

TEST_F(CachingAllocator, EmptyCacheWaitsForTheStreamsOfFreedBlocksThenGivesThemBack) {
  int a_stream = 0, b_stream = 0;
  fake_stream = &a_stream;
  void* p = a.allocate(4 * MiB);
  a.record_stream(p, &b_stream);
  a.deallocate(p, 4 * MiB);
  a.empty_cache();
  EXPECT_EQ(raw->waits, 1);
  EXPECT_EQ(raw->frees, 1);
  EXPECT_EQ(a.stats().reserved, 0);
  fake_stream = nullptr;
}
