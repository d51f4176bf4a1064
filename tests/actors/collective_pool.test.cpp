// collective_pool: one accumulator per seq shared by the ranks, forgotten after the last rank's
// call; released buffers reused; a size disagreement refused; the byte cap respected.
#include <gtest/gtest.h>

#include <stdexcept>

#include "actors/collective/collective_pool.hpp"

using namespace troupe;

TEST(CollectivePool, RanksOfOneSeqShareTheAccumulatorAndTheSeqIsForgottenAfterTheLast) {
  collective_pool pool(1 << 20);
  tensor a0 = pool.acquire(5, 100, 2);
  tensor a1 = pool.acquire(5, 100, 2);
  EXPECT_TRUE(a0.shares_storage_with(a1));
  EXPECT_FALSE(a0.frozen());
  tensor b = pool.acquire(5, 100, 2);  // seq 5 forgotten; a0 and a1 still hold the first buffer
  EXPECT_FALSE(b.shares_storage_with(a0));
  EXPECT_EQ(pool.allocations(), 2);
}

TEST(CollectivePool, AReleasedFrozenBufferIsReusedWritable) {
  collective_pool pool(1 << 20);
  tensor a = pool.acquire(1, 64, 1);
  const float* p = std::as_const(a).data();
  a.freeze();
  tensor busy = pool.acquire(2, 64, 1);  // a still held: a second buffer
  EXPECT_NE(std::as_const(busy).data(), p);
  a = tensor();
  tensor again = pool.acquire(3, 64, 1);
  EXPECT_EQ(std::as_const(again).data(), p);
  EXPECT_FALSE(again.frozen());
  EXPECT_NO_THROW(again.data()[0] = 1.0f);
  EXPECT_EQ(pool.allocations(), 2);
}

TEST(CollectivePool, PeersThatDisagreeOnTheSizeAreRefused) {
  collective_pool pool(1 << 20);
  pool.acquire(7, 10, 2);
  EXPECT_THROW(pool.acquire(7, 11, 2), std::invalid_argument);
}

TEST(CollectivePool, KeepsAtMostItsByteCapAndDropsFreeBuffersFirst) {
  collective_pool pool(1000 * sizeof(float));
  tensor big = pool.acquire(1, 2000, 1);  // over the cap: not pooled
  EXPECT_EQ(pool.pooled_bytes(), 0);
  tensor a = pool.acquire(2, 600, 1);
  EXPECT_EQ(pool.pooled_bytes(), 600 * 4);
  tensor b = pool.acquire(3, 300, 1);
  EXPECT_EQ(pool.pooled_bytes(), 900 * 4);
  a = tensor();
  tensor c = pool.acquire(4, 500, 1);  // a is free: dropped to make room
  EXPECT_EQ(pool.pooled_bytes(), 800 * 4);
  EXPECT_EQ(pool.allocations(), 4);
}
