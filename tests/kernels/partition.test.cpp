// Cutting a model into pipeline chunks: the balanced partition minimizes the largest chunk,
// user cuts are honoured or refused by name, and a pipeline_chunk's split backward (I then W)
// gives exactly the gradients of the full backward while its stash count follows F/B/W.
#include <gtest/gtest.h>

#include <random>

#include "kernels/layers_dense.hpp"
#include "kernels/model.hpp"
#include "kernels/partition.hpp"
#include "kernels/pipeline_chunk.hpp"
#include "tests/kernels/gpt_spec.hpp"

using namespace troupe;

namespace {

int64_t largest(const std::vector<int64_t>& p, const std::vector<layer_range>& r) {
  int64_t worst = 0;
  for (const auto& c : r) {
    int64_t s = 0;
    for (int64_t i = c.begin; i < c.end; ++i) s += p[static_cast<size_t>(i)];
    worst = std::max(worst, s);
  }
  return worst;
}

tensor random_tensor(shape_t shape, uint64_t seed) {
  tensor t(shape);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n;
  for (int64_t i = 0; i < t.numel(); ++i) t.data()[i] = n(rng);
  return t;
}

model_spec small_gpt() { return test::gpt_spec(7, 4, 8, 2, 2); }

}  // namespace

TEST(BalancedPartition, MinimizesTheLargestChunkAndCoversEveryLayerOnce) {
  const std::vector<int64_t> p{10, 0, 40, 0, 30, 0, 20, 5};
  const auto r = balanced_partition(p, 3);
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r.front().begin, 0);
  EXPECT_EQ(r.back().end, 8);
  for (size_t i = 1; i < r.size(); ++i) EXPECT_EQ(r[i].begin, r[i - 1].end);
  // 40 cannot be alone (then 30+20+5 = 55 share a chunk) and 30 with 20 is already 50: 50 is best.
  EXPECT_EQ(largest(p, r), 50);
}

TEST(BalancedPartition, SingleChunkTakesAllAndTooManyChunksAreRefused) {
  const std::vector<int64_t> p{3, 4, 5};
  const auto one = balanced_partition(p, 1);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].end, 3);
  const auto three = balanced_partition(p, 3);
  EXPECT_EQ(three[1].begin, 1);
  EXPECT_EQ(three[2].begin, 2);
  try {
    balanced_partition(p, 4);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("3 layers, too few for 4 pipeline chunks"), std::string::npos);
  }
}

TEST(PartitionAt, HonoursCutsAndNamesABadOne) {
  const auto r = partition_at(5, {1, 3}, 3);
  EXPECT_EQ(r[0].end, 1);
  EXPECT_EQ(r[1].end, 3);
  EXPECT_EQ(r[2].end, 5);
  EXPECT_THROW(partition_at(5, {3, 3}, 3), std::invalid_argument);
  EXPECT_THROW(partition_at(5, {2}, 3), std::invalid_argument);
  try {
    partition_at(5, {0}, 2);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("cut point 0 must lie in (0, 5)"), std::string::npos);
  }
}

TEST(PipelineChunk, SplitBackwardGivesTheFullBackwardsGradientsBitForBit) {
  for (bool first_chunk : {true, false}) {
    const model_spec spec = small_gpt();
    // The model's layers 1..3 (two blocks and the final layernorm) or its whole list.
    layer_list a_layers = build_layers(spec), b_layers = build_layers(spec);
    const layer_range r = first_chunk ? layer_range{0, 5} : layer_range{1, 4};
    pipeline_chunk full(take_layers(a_layers, r), r.begin, 9), split(take_layers(b_layers, r), r.begin, 9);
    const tensor x = first_chunk ? tensor({2, 4}, {1, 2, 3, 4, 0, 6, 5, 1}) : random_tensor({2, 4, 8}, 1);
    const tensor y = full.forward(0, x);
    const tensor y2 = split.forward(0, x);
    ASSERT_EQ(y.to_vector(), y2.to_vector());
    const tensor dy = random_tensor(y.shape(), 2);
    const tensor dx = full.backward(0, dy, !first_chunk);
    const tensor dx2 = split.backward_input(0, dy, !first_chunk);
    EXPECT_EQ(dx.to_vector(), dx2.to_vector());
    EXPECT_EQ(split.live(), 1);  // the stash stays for W
    split.backward_weight(0);
    EXPECT_EQ(split.live(), 0);
    EXPECT_EQ(full.stack().grads().to_vector(), split.stack().grads().to_vector());
  }
}

// Data parallelism sends a bucket the moment its lowest layer is done: the hook must see every
// layer once, last to first, and at that moment the layer's gradients must already be final
// (what the hook copies is what the walk leaves), for the full and for the split backward.
TEST(PipelineChunk, LayerDoneHookSeesEachLayerLastToFirstWithItsGradientsFinal) {
  for (bool split : {false, true}) {
    const model_spec spec = small_gpt();
    layer_list all = build_layers(spec);
    const layer_range r{1, 4};
    pipeline_chunk c(take_layers(all, r), r.begin, 9);
    const tensor x = random_tensor({2, 4, 8}, 1);
    const tensor y = c.forward(0, x);
    const tensor dy = random_tensor(y.shape(), 2);
    const auto grads_of = [&](size_t layer) {
      const layer_stack& st = c.stack();
      const int64_t from = st.param_offset(layer);
      const int64_t to = layer + 1 < st.num_layers() ? st.param_offset(layer + 1) : st.num_params();
      return std::vector<float>(st.grads().data() + from, st.grads().data() + to);
    };
    std::vector<size_t> order;
    std::vector<std::vector<float>> at_hook;  // each layer's gradients when the hook ran
    const auto hook = [&](size_t layer) {
      order.push_back(layer);
      at_hook.push_back(grads_of(layer));
    };
    if (split) {
      c.backward_input(0, dy, true);
      c.backward_weight(0, hook);
    } else {
      c.backward(0, dy, true, hook);
    }
    EXPECT_EQ(order, (std::vector<size_t>{2, 1, 0})) << (split ? "split" : "full");
    for (size_t i = 0; i < order.size(); ++i) {
      EXPECT_EQ(at_hook[i], grads_of(order[i])) << "layer " << order[i] << (split ? " (split)" : " (full)");
    }
  }
}

TEST(PipelineChunk, CountsLiveStashesAndRefusesOutOfOrderUse) {
  layer_list layers;
  layers.push_back(std::make_unique<linear>(3, 2));
  pipeline_chunk c(std::move(layers), 0, 1);
  const tensor x = random_tensor({4, 3}, 3);
  c.forward(0, x);
  c.forward(1, x);
  EXPECT_EQ(c.live(), 2);
  EXPECT_EQ(c.peak_live(), 2);
  EXPECT_THROW(c.forward(1, x), std::logic_error);          // microbatch 1 is still live
  EXPECT_THROW(c.backward_weight(0), std::logic_error);     // W before I
  c.backward(0, random_tensor({4, 2}, 4), true);
  EXPECT_EQ(c.live(), 1);
  EXPECT_THROW(c.backward(0, random_tensor({4, 2}, 4), true), std::logic_error);  // no stash left
  EXPECT_EQ(c.peak_live(), 2);
}
