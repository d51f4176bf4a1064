// Gradient bucket planning and the layer-by-layer backward hook it relies on: buckets tile the
// flat gradient buffer in reverse layer order, close at the cap, and the hook reports each layer
// once, last to first, with gradients equal to the plain backward's. Plus the trace maths.
#include <gtest/gtest.h>

#include "actors/stage/dp_buckets.hpp"
#include "actors/job/step_trace.hpp"
#include "actors/job/train_config.hpp"
#include "kernels/layer_stack.hpp"
#include "kernels/loss.hpp"

using namespace troupe;

TEST(PlanBuckets, TileTheBufferInReverseLayerOrderAndCloseAtTheCap) {
  // 5 layers, 1000/0/3000/0/500 params; cap 16 KB = 4096 floats.
  auto b = plan_buckets({1000, 0, 3000, 0, 500}, 16384);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0].first_layer, 2);  // 500 + 0 + 3000 floats fit; adding 1000 more would not
  EXPECT_EQ(b[0].last_layer, 4);
  EXPECT_EQ(b[0].offset, 1000);
  EXPECT_EQ(b[0].count, 3500);
  EXPECT_EQ(b[1].first_layer, 0);
  EXPECT_EQ(b[1].last_layer, 0);
  EXPECT_EQ(b[1].offset, 0);
  EXPECT_EQ(b[1].count, 1000);
  // A layer larger than the cap gets a bucket of its own.
  auto big = plan_buckets({1000, 0, 3000, 0, 500}, 4096);
  ASSERT_EQ(big.size(), 3u);
  EXPECT_EQ(big[1].count, 3000);
  // cap 0: one bucket per layer with parameters; a huge cap: one bucket.
  EXPECT_EQ(plan_buckets({1000, 0, 3000, 0, 500}, 0).size(), 3u);
  auto one = plan_buckets({1000, 0, 3000, 0, 500}, int64_t{1} << 40);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].count, 4500);
}

TEST(LayerStackHook, ReportsEveryLayerLastToFirstWithTheSameGradients) {
  model_spec spec;
  spec.hidden = {16, 8};
  spec.inputs = 12;
  layer_stack a(build_layers(spec), 0, 3), b(build_layers(spec), 0, 3);
  tensor x({4, 12});
  for (int64_t i = 0; i < x.numel(); ++i) x.data()[i] = static_cast<float>(i % 7) * 0.1f - 0.3f;
  std::vector<int32_t> y{1, 2, 3, 4};
  stack_context ca, cb;
  auto la = cross_entropy(a.forward(x, ca), y, 0.25f);
  auto lb = cross_entropy(b.forward(x, cb), y, 0.25f);
  a.backward(la.dlogits, ca, false);
  std::vector<size_t> order;
  b.backward(lb.dlogits, cb, false, [&](size_t layer) { order.push_back(layer); });
  EXPECT_EQ(order, (std::vector<size_t>{4, 3, 2, 1, 0}));
  EXPECT_EQ(a.grads().to_vector(), b.grads().to_vector());
}

TEST(StepTrace, OverlapShareCountsOnlyAllReduceTimeInsideBackward) {
  // rank 0: backward 0..10 s (two microbatches); bucket 0 all-reduce 4..8 (hidden), bucket 1
  // 10..14 (exposed).
  stage_step_record r;
  r.actions = {"0B0", "0B1"};
  r.start_seconds = {100, 105};
  r.end_seconds = {105, 110};
  r.buckets = {0, 1};
  r.bucket_sent = {104, 110};
  r.bucket_done = {108, 114};
  auto t = to_timeline({r}, 1, "t");
  ASSERT_EQ(t.stages.size(), 2u);
  EXPECT_EQ(t.stages[1].size(), 2u);
  EXPECT_DOUBLE_EQ(t.stages[0][0].start_seconds, 0.0);
  EXPECT_DOUBLE_EQ(t.stages[1][1].end_seconds, 14.0);
  EXPECT_NEAR(overlap_share(t), 0.5, 1e-12);
}

TEST(StepTrace, AnAllReduceIsDrawnFromWhenTheLastRankOfItsGroupHandedItIn) {
  // Two replicas of one stage: rank 1 hands bucket 0 in 3 s after rank 0; both get it back at 5.
  stage_step_record a, b;
  a.rank = 0;
  b.rank = 1;
  a.actions = b.actions = {"0F0"};
  a.start_seconds = b.start_seconds = {0};
  a.end_seconds = b.end_seconds = {1};
  a.buckets = b.buckets = {0};
  a.bucket_sent = {1};
  b.bucket_sent = {4};
  a.bucket_done = b.bucket_done = {5};
  const auto t = to_timeline({a, b}, 1, "t");
  ASSERT_EQ(t.stages.size(), 4u);
  EXPECT_DOUBLE_EQ(t.stages[1][0].start_seconds, 4.0);
  EXPECT_DOUBLE_EQ(t.stages[3][0].start_seconds, 4.0);
}

TEST(Straggler, ParsesFixedAndRandomAndRefusesNonsense) {
  auto a = parse_straggler("1:50");
  EXPECT_EQ(a.rank, 1);
  EXPECT_EQ(a.ms, 50);
  EXPECT_FALSE(a.random);
  auto b = parse_straggler("3:12.5:random");
  EXPECT_EQ(b.rank, 3);
  EXPECT_EQ(b.ms, 12.5);
  EXPECT_TRUE(b.random);
  for (const char* bad : {"", "1", ":5", "a:5", "1:x", "1:5:often", "-1:5", "1:-5"})
    EXPECT_THROW(parse_straggler(bad), std::invalid_argument) << bad;
}
