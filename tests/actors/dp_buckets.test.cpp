// Gradient bucket planning and the layer-by-layer backward hook it relies on: buckets tile the
// flat gradient buffer in reverse layer order, close at the cap, and the hook reports each layer
// once, last to first, with gradients equal to the plain backward's. Plus the trace maths.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "actors/plan/dp_buckets.hpp"
#include "actors/observe/step_trace.hpp"
#include "actors/config/train_config.hpp"
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

// Expert parallelism: an MoE layer's experts (the last elements of its buffer) reduce over
// another group, so they are a bucket of their own and no bucket reaches across them; the
// buckets still tile the buffer, ready in order.
TEST(PlanBuckets, AnExpertTailIsABucketOfItsOwnAndTheOthersStopAtIt) {
  // 4 layers of 100/600/200/50 elements; layer 1's last 400 are its experts'.
  const std::vector<int64_t> sizes{100, 600, 200, 50}, tails{0, 400, 0, 0};
  auto b = plan_buckets(sizes, int64_t{1} << 40, tails);  // a cap nothing reaches
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0].offset, 700);  // layers 2 and 3
  EXPECT_EQ(b[0].count, 250);
  EXPECT_EQ(b[0].first_layer, 2);
  EXPECT_FALSE(b[0].experts);
  EXPECT_EQ(b[1].offset, 300);  // layer 1's experts
  EXPECT_EQ(b[1].count, 400);
  EXPECT_EQ(b[1].first_layer, 1);
  EXPECT_EQ(b[1].last_layer, 1);
  EXPECT_TRUE(b[1].experts);
  EXPECT_EQ(b[2].offset, 0);  // layer 1's router and attention with layer 0
  EXPECT_EQ(b[2].count, 300);
  EXPECT_EQ(b[2].first_layer, 0);
  EXPECT_EQ(b[2].last_layer, 1);
  EXPECT_FALSE(b[2].experts);
  // A cap of 200 elements: layers 3 and 2 apart, the experts, then layer 1's other 200 alone.
  auto capped = plan_buckets(sizes, 200 * 4, tails);
  std::vector<std::pair<int64_t, int64_t>> got;
  for (const grad_bucket& g : capped) got.push_back({g.offset, g.count});
  EXPECT_EQ(got, (std::vector<std::pair<int64_t, int64_t>>{{900, 50}, {700, 200}, {300, 400}, {100, 200}, {0, 100}}));
  for (size_t i = 0; i < capped.size(); ++i) EXPECT_EQ(capped[i].experts, i == 2) << i;
  for (size_t i = 1; i < capped.size(); ++i) EXPECT_LE(capped[i].first_layer, capped[i - 1].first_layer) << i;
}

// ZeRO-2 keeps a layer's gradients in one unit: an expert bucket and the bucket below it (the
// rest of its layer) share one, ready when the lower one is, each bucket a slice of it.
TEST(PlanGradUnits, AnExpertBucketSharesTheUnitOfTheRestOfItsLayer) {
  const std::vector<int64_t> sizes{100, 600, 200, 50}, tails{0, 400, 0, 0};
  const std::vector<grad_bucket> b = plan_buckets(sizes, 200 * 4, tails);  // {900,50} {700,200} {300,400} {100,200} {0,100}
  const grad_units u = plan_grad_units(b);
  EXPECT_EQ(u.layers, (std::vector<std::pair<size_t, size_t>>{{3, 3}, {2, 2}, {1, 1}, {0, 0}}));
  EXPECT_EQ(u.unit_of, (std::vector<size_t>{0, 1, 2, 2, 3}));
  EXPECT_EQ(u.at, (std::vector<int64_t>{0, 0, 200, 0, 0}));  // the experts after the layer's other 200
  EXPECT_EQ(u.ready_layer, (std::vector<int64_t>{3, 2, 1, 1, 0}));
  EXPECT_TRUE(u.shared(2));
  EXPECT_TRUE(u.shared(3));
  EXPECT_FALSE(u.shared(4));
  // Without a bucket below holding the rest of its layer, an expert bucket is refused.
  EXPECT_THROW(plan_grad_units({b[0], b[1], b[2]}), std::invalid_argument);
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

TEST(Straggler, ParsesEveryDistributionAndRefusesNonsense) {
  auto a = parse_straggler("1:50");
  EXPECT_EQ(a.rank, 1);
  EXPECT_EQ(a.ms, 50);
  EXPECT_EQ(a.kind, delay_kind::fixed);
  auto b = parse_straggler("3:12.5:random");
  EXPECT_EQ(b.rank, 3);
  EXPECT_EQ(b.ms, 12.5);
  EXPECT_EQ(b.kind, delay_kind::uniform);
  EXPECT_EQ(parse_straggler("0:5:exponential").kind, delay_kind::exponential);
  EXPECT_EQ(parse_straggler("0:5:pareto:2.5").param, 2.5);
  EXPECT_EQ(parse_straggler("0:5:burst:4").param, 4);
  for (const char* bad : {"", "1", ":5", "a:5", "1:x", "1:5:often", "-1:5", "1:-5", "1.5:5", "1:5:pareto:1",
                          "1:5:burst:0", "1:5:burst:2.5", "1:5:fixed:3", "1:5:pareto:2:9"})
    EXPECT_THROW(parse_straggler(bad), std::invalid_argument) << bad;
}

// Each distribution's sample over many steps against its formulas: the mean is ms for all of
// them, and each has its own shape.
TEST(Straggler, DelaysFollowTheirDistributionsAndRepeatForTheSameSeed) {
  const int n = 40000;
  auto sample = [&](const std::string& text) {
    std::vector<double> v;
    const straggler_spec s = parse_straggler(text);
    for (int i = 0; i < n; ++i) v.push_back(straggler_delay_ms(s, 42, i));
    return v;
  };
  auto mean = [](const std::vector<double>& v) {
    double t = 0;
    for (double x : v) t += x;
    return t / static_cast<double>(v.size());
  };
  for (double x : sample("0:7")) EXPECT_EQ(x, 7.0);
  const auto u = sample("0:10:uniform");
  EXPECT_NEAR(mean(u), 10.0, 0.15);
  EXPECT_GE(*std::min_element(u.begin(), u.end()), 0.0);
  EXPECT_LT(*std::max_element(u.begin(), u.end()), 20.0);
  const auto e = sample("0:10:exponential");
  EXPECT_NEAR(mean(e), 10.0, 0.3);
  const double above = static_cast<double>(std::count_if(e.begin(), e.end(), [](double x) { return x > 20.0; })) / n;
  EXPECT_NEAR(above, std::exp(-2.0), 0.01);  // P(X > 2 mean) = e^-2
  const auto p = sample("0:10:pareto:3");
  EXPECT_NEAR(mean(p), 10.0, 0.4);
  EXPECT_GE(*std::min_element(p.begin(), p.end()), 10.0 * 2.0 / 3.0);  // x_m = mean (a - 1) / a
  const double tail = static_cast<double>(std::count_if(p.begin(), p.end(), [](double x) { return x > 40.0; })) / n;
  EXPECT_NEAR(tail, std::pow(20.0 / 3.0 / 40.0, 3.0), 0.002);  // P(X > x) = (x_m / x)^a
  const auto b = sample("0:10:burst:4");
  for (int i = 0; i < 12; ++i) EXPECT_EQ(b[static_cast<size_t>(i)], i % 4 == 0 ? 40.0 : 0.0);
  EXPECT_DOUBLE_EQ(mean(b), 10.0);
  EXPECT_EQ(sample("0:10:exponential"), e);  // the same seed, rank and steps: the same delays
}
