// Tensor-parallel layers against the unsplit ones: each of tp ranks runs on its own thread as a
// member of one in-process group (comm/tp_groups), and the ranks' outputs, input gradients and
// merged parameter gradients must equal the single-device layer's; the init of every shard is
// the single-device init, bit for bit. The new backwards (f's all-reduce, the row-parallel
// partial sums, the vocabulary-split embedding and cross-entropy) also get finite differences
// taken through the whole group.
#include <gtest/gtest.h>

#include <exception>
#include <mutex>
#include <thread>

#include "comm/tp_groups.hpp"
#include "kernels/layers_parallel.hpp"
#include "kernels/layers_transformer.hpp"
#include "kernels/loss.hpp"
#include "kernels/model.hpp"
#include "tests/kernels/grad_check.hpp"

namespace troupe {
namespace {

using test::random_tensor;
using make_fn = std::function<layer_list(tp_group*)>;
// The columns of the last dimension rank r of tp sees (empty: the whole tensor, replicated).
using cols_fn = std::function<std::vector<shard_range>(int r, int tp)>;

tensor last_dim_columns(const tensor& t, const std::vector<shard_range>& cols) {
  if (cols.empty()) return t.clone();
  const int64_t D = t.size(-1), rows = t.numel() / D;
  int64_t w = 0;
  for (auto c : cols) w += c.count;
  shape_t shape = t.shape();
  shape.back() = w;
  tensor out(shape);
  for (int64_t i = 0; i < rows; ++i) {
    float* o = out.data() + i * w;
    for (auto c : cols) o = std::copy(t.data() + i * D + c.begin, t.data() + i * D + c.end(), o);
  }
  return out;
}

// max |a - b| over max(|b|, 1e-3): the ranks sum partials in another order than one device.
double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0, scale = 1e-3;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    worst = std::max(worst, static_cast<double>(std::abs(a[i] - b[i])));
    scale = std::max(scale, static_cast<double>(std::abs(b[i])));
  }
  return worst / scale;
}

// tp ranks of one model piece, each a layer_stack built with its member of one local group.
class tp_replica {
 public:
  tp_replica(int tp, const make_fn& make, uint64_t seed) : group_(net::make_local_tp_group(tp, {20000})) {
    for (int r = 0; r < tp; ++r) stacks_.push_back(std::make_unique<layer_stack>(make(group_[r].get()), 0, seed));
  }
  int tp() const { return static_cast<int>(stacks_.size()); }
  layer_stack& stack(int r) { return *stacks_[static_cast<size_t>(r)]; }

  // fn(rank, stack) on one thread per rank; the first failure is rethrown here.
  void each(const std::function<void(int, layer_stack&)>& fn) {
    std::vector<std::exception_ptr> errors(stacks_.size());
    std::vector<std::thread> threads;
    for (int r = 0; r < tp(); ++r)
      threads.emplace_back([&, r] {
        try {
          fn(r, stack(r));
        } catch (...) {
          errors[static_cast<size_t>(r)] = std::current_exception();
          net::abort_local_tp_group(group_[static_cast<size_t>(r)], "a peer failed");
        }
      });
    for (auto& t : threads) t.join();
    for (auto& e : errors)
      if (e) std::rethrow_exception(e);
  }

  // Where rank r's parameters sit in the unsplit stack's flat vector.
  std::vector<param_run> runs(int r, const layer_stack& full) {
    std::vector<param_run> out;
    for (size_t l = 0; l < stack(r).num_layers(); ++l)
      for (param_run p : stack(r).at(l).full_runs()) out.push_back({full.param_offset(l) + p.offset, p.count});
    return out;
  }
  void load(const std::vector<float>& full_values, const layer_stack& full) {
    for (int r = 0; r < tp(); ++r) gather_runs(stack(r).params().data(), full_values.data(), runs(r, full));
  }
  std::vector<float> merged_grads(const layer_stack& full) {
    std::vector<float> g(static_cast<size_t>(full.num_params()), 0.0f);
    for (int r = 0; r < tp(); ++r) scatter_runs(g.data(), stack(r).grads().data(), runs(r, full));
    return g;
  }

 private:
  std::vector<std::shared_ptr<tp_group>> group_;
  std::vector<std::unique_ptr<layer_stack>> stacks_;
};

struct piece {
  make_fn make;
  tensor x;
  cols_fn in_cols = [](int, int) { return std::vector<shard_range>{}; };
  cols_fn out_cols = [](int, int) { return std::vector<shard_range>{}; };
  bool input_has_grad = true;
  // Sequence parallelism: rank r sees only sequences shard_of(B, tp, r) of the input / output.
  bool in_rows = false, out_rows = false;
};

tensor batch_rows(const tensor& t, bool split, int r, int tp) {
  if (!split) return t;
  const shard_range b = shard_of(t.size(0), tp, r);
  const int64_t per = t.numel() / t.size(0);
  shape_t shape = t.shape();
  shape[0] = b.count;
  return tensor(shape, std::vector<float>(t.data() + b.begin * per, t.data() + b.end() * per));
}
tensor input_of(const piece& p, const tensor& x, int r, int tp) {
  return batch_rows(last_dim_columns(x, p.in_cols(r, tp)), p.in_rows, r, tp);
}
tensor output_of(const piece& p, const tensor& y, int r, int tp) {
  return batch_rows(last_dim_columns(y, p.out_cols(r, tp)), p.out_rows, r, tp);
}

layer_list one(std::unique_ptr<layer> l) {
  layer_list v;
  v.push_back(std::move(l));
  return v;
}

// Forward with dy = r and the whole backward, tp ranks against one device.
void expect_matches_unsplit(const piece& p, int tp) {
  SCOPED_TRACE("tp " + std::to_string(tp));
  layer_stack full(p.make(nullptr), 0, 5);
  std::vector<float> init = full.params().to_vector();
  tp_replica ranks(tp, p.make, 5);
  for (int r = 0; r < tp; ++r) {  // every shard starts from the single-device init
    std::vector<float> want(static_cast<size_t>(ranks.stack(r).num_params()));
    gather_runs(want.data(), init.data(), ranks.runs(r, full));
    EXPECT_EQ(ranks.stack(r).params().to_vector(), want) << "init of rank " << r;
  }
  test::randomize_params(full, 11);
  ranks.load(full.params().to_vector(), full);
  stack_context ctx;
  const tensor y = full.forward(p.x, ctx);
  const tensor r = random_tensor(y.shape(), 13);
  full.zero_grads();
  const tensor dx = full.backward(r, ctx, p.input_has_grad);
  std::mutex mu;
  ranks.each([&](int rank, layer_stack& s) {
    stack_context c;
    const tensor yr = s.forward(input_of(p, p.x, rank, tp), c);
    s.zero_grads();
    const tensor dxr = s.backward(output_of(p, r, rank, tp), c, p.input_has_grad);
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_LT(rel_diff(yr.to_vector(), output_of(p, y, rank, tp).to_vector()), 1e-5) << "rank " << rank;
    if (p.input_has_grad) {
      EXPECT_LT(rel_diff(dxr.to_vector(), input_of(p, dx, rank, tp).to_vector()), 1e-5) << "input gradient, rank " << rank;
    }
  });
  EXPECT_LT(rel_diff(ranks.merged_grads(full), full.grads().to_vector()), 1e-5) << "parameter gradients";
}

// Finite differences of sum(y * r) over the whole group with respect to the unsplit parameters
// (and the input when it has a gradient), against the merged analytic gradients at tp 2.
void expect_grads_match_finite_differences(const piece& p, float h) {
  const int tp = 2;
  layer_stack full(p.make(nullptr), 0, 5);
  test::randomize_params(full, 11);
  std::vector<float> values = full.params().to_vector();
  tp_replica ranks(tp, p.make, 5);
  stack_context probe;
  const tensor r = random_tensor(full.forward(p.x, probe).shape(), 13);
  tensor x = p.x.clone();
  auto loss = [&] {
    ranks.load(values, full);
    std::vector<double> part(tp);
    ranks.each([&](int rank, layer_stack& s) {
      stack_context c;
      const bool split = !p.out_cols(rank, tp).empty() || p.out_rows;
      const tensor y = s.forward(input_of(p, x, rank, tp), c);
      // A split output adds up over the ranks; a replicated one counts once.
      part[static_cast<size_t>(rank)] = !split && rank > 0 ? 0 : test::project(y, output_of(p, r, rank, tp));
    });
    return part[0] + part[1];
  };
  ranks.load(values, full);
  std::vector<tensor> dxs(tp);
  ranks.each([&](int rank, layer_stack& s) {
    stack_context c;
    s.forward(input_of(p, x, rank, tp), c);
    s.zero_grads();
    dxs[static_cast<size_t>(rank)] = s.backward(output_of(p, r, rank, tp), c, p.input_has_grad);
  });
  const std::vector<float> analytic = ranks.merged_grads(full);
  EXPECT_TRUE(test::grads_close("parameters", analytic.data(), test::numeric_grad(values.data(), full.num_params(), loss, h)));
  if (p.input_has_grad && p.in_cols(0, tp).empty() && !p.in_rows) {  // replicated input: each rank's dx is the whole gradient
    EXPECT_TRUE(test::grads_close("input", dxs[0].data(), test::numeric_grad(x.data(), x.numel(), loss, h)));
  }
}

std::vector<shard_range> split(int64_t n, int r, int tp) { return {shard_of(n, tp, r)}; }

piece column_piece() {
  piece p;
  p.make = [](tp_group* g) {
    return one(std::make_unique<column_parallel_linear>(6, 10, split(10, tp_rank(g), tp_size(g)), g));
  };
  p.x = random_tensor({2, 3, 6}, 1);
  p.out_cols = [](int r, int tp) { return split(10, r, tp); };
  return p;
}

piece row_piece() {
  piece p;
  p.make = [](tp_group* g) { return one(std::make_unique<row_parallel_linear>(10, 7, shard_of(10, tp_size(g), tp_rank(g)), g)); };
  p.x = random_tensor({2, 3, 10}, 2);
  p.in_cols = [](int r, int tp) { return split(10, r, tp); };
  return p;
}

tensor tokens(int64_t B, int64_t T, int64_t V, uint64_t seed) {
  tensor t({B, T});
  std::mt19937_64 rng(seed);
  for (int64_t i = 0; i < t.numel(); ++i) t.data()[i] = static_cast<float>(rng() % static_cast<uint64_t>(V));
  return t;
}

piece embedding_piece() {
  piece p;
  p.make = [](tp_group* g) { return one(std::make_unique<embedding>(11, 5, 4, g)); };
  p.x = tokens(3, 5, 11, 3);
  p.input_has_grad = false;
  return p;
}

piece block_piece() {
  piece p;
  p.make = [](tp_group* g) { return one(std::make_unique<transformer_block>(8, 4, 0.01f, g)); };
  p.x = random_tensor({2, 5, 8}, 4);
  return p;
}

piece sequence_parallel_block() {
  piece p;
  p.make = [](tp_group* g) { return one(std::make_unique<transformer_block>(8, 4, 0.01f, g, true)); };
  p.x = random_tensor({4, 5, 8}, 4);  // 4 sequences: 2 or 1 per rank
  p.in_rows = p.out_rows = true;
  return p;
}

piece sequence_parallel_embedding() {
  piece p;
  p.make = [](tp_group* g) { return one(std::make_unique<embedding>(11, 5, 4, g, true)); };
  p.x = tokens(4, 5, 11, 3);
  p.input_has_grad = false;
  p.out_rows = true;
  return p;
}

TEST(SequenceParallelBlock, EqualsTheUnsplitBlockAtTp2And4OnEachRanksShareOfTheSequences) {
  for (int tp : {2, 4}) expect_matches_unsplit(sequence_parallel_block(), tp);
}

TEST(SequenceParallelEmbedding, EqualsTheUnsplitEmbeddingAtTp2And4) {
  for (int tp : {2, 4}) expect_matches_unsplit(sequence_parallel_embedding(), tp);
}

TEST(SequenceParallelBlockBackward, MatchesFiniteDifferencesThroughTheGroup) {
  expect_grads_match_finite_differences(sequence_parallel_block(), 1e-2f);
}

TEST(SequenceParallelEmbeddingBackward, MatchesFiniteDifferencesThroughTheGroup) {
  expect_grads_match_finite_differences(sequence_parallel_embedding(), 1e-2f);
}

TEST(ColumnParallelLinear, EqualsTheUnsplitLinearAtTp2And4) {
  for (int tp : {2, 4}) expect_matches_unsplit(column_piece(), tp);
}

TEST(RowParallelLinear, EqualsTheUnsplitLinearAtTp2And4) {
  for (int tp : {2, 4}) expect_matches_unsplit(row_piece(), tp);
}

TEST(VocabParallelEmbedding, EqualsTheUnsplitEmbeddingAtTp2And4WithAnUnevenVocabulary) {
  for (int tp : {2, 4}) expect_matches_unsplit(embedding_piece(), tp);
}

TEST(TensorParallelBlock, EqualsTheUnsplitBlockAtTp2And4) {
  for (int tp : {2, 4}) expect_matches_unsplit(block_piece(), tp);
}

TEST(TensorParallelBlock, RefusesHeadsThatDoNotSplit) {
  auto group = net::make_local_tp_group(3);
  EXPECT_THROW(transformer_block(8, 4, 0.01f, group[0].get()), std::invalid_argument);
}

TEST(ColumnParallelLinearBackward, MatchesFiniteDifferencesThroughTheGroup) {
  expect_grads_match_finite_differences(column_piece(), 1e-2f);
}

TEST(RowParallelLinearBackward, MatchesFiniteDifferencesThroughTheGroup) {
  expect_grads_match_finite_differences(row_piece(), 1e-2f);
}

TEST(VocabParallelEmbeddingBackward, MatchesFiniteDifferencesThroughTheGroup) {
  expect_grads_match_finite_differences(embedding_piece(), 1e-2f);
}

TEST(TensorParallelBlockBackward, MatchesFiniteDifferencesThroughTheGroup) {
  expect_grads_match_finite_differences(block_piece(), 1e-2f);
}

// The loss over logits split by columns equals cross_entropy over the whole logits: value,
// correct count and dlogits; and its gradient is the finite difference of the split loss.
TEST(VocabParallelCrossEntropy, EqualsCrossEntropyOnTheWholeLogits) {
  const int64_t N = 6, V = 11;
  const tensor logits = random_tensor({N, V}, 7, -3.0f, 3.0f);
  std::vector<int32_t> targets;
  for (int64_t n = 0; n < N; ++n) targets.push_back(static_cast<int32_t>((n * 5) % V));
  const loss_result want = cross_entropy(logits, targets, 0.25f);
  for (int tp : {2, 3, 4}) {
    auto group = net::make_local_tp_group(tp, {20000});
    std::vector<loss_result> got(static_cast<size_t>(tp));
    std::vector<std::thread> threads;
    for (int r = 0; r < tp; ++r)
      threads.emplace_back([&, r] {
        got[static_cast<size_t>(r)] = vocab_parallel_cross_entropy(last_dim_columns(logits, split(V, r, tp)), targets,
                                                                   0.25f, V, *group[static_cast<size_t>(r)]);
      });
    for (auto& t : threads) t.join();
    for (int r = 0; r < tp; ++r) {
      const loss_result& g = got[static_cast<size_t>(r)];
      EXPECT_NEAR(g.loss_sum, want.loss_sum, 1e-5 * std::abs(want.loss_sum)) << "tp " << tp << " rank " << r;
      EXPECT_EQ(g.correct, want.correct);
      EXPECT_EQ(g.count, N);
      EXPECT_LT(rel_diff(g.dlogits.to_vector(), last_dim_columns(want.dlogits, split(V, r, tp)).to_vector()), 1e-5);
    }
  }
}

TEST(VocabParallelCrossEntropyBackward, MatchesFiniteDifferencesOfTheSplitLoss) {
  const int64_t N = 4, V = 9;
  tensor logits = random_tensor({N, V}, 8, -2.0f, 2.0f);
  const std::vector<int32_t> targets{0, 4, 8, 5};
  auto group = net::make_local_tp_group(2, {20000});
  auto run = [&](float scale, std::vector<loss_result>& out) {
    std::thread a([&] { out[0] = vocab_parallel_cross_entropy(last_dim_columns(logits, split(V, 0, 2)), targets, scale, V, *group[0]); });
    out[1] = vocab_parallel_cross_entropy(last_dim_columns(logits, split(V, 1, 2)), targets, scale, V, *group[1]);
    a.join();
  };
  std::vector<loss_result> res(2);
  run(1.0f, res);
  std::vector<float> analytic(static_cast<size_t>(N * V));
  for (int r = 0; r < 2; ++r) {
    const shard_range c = shard_of(V, 2, r);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t v = 0; v < c.count; ++v)
        analytic[static_cast<size_t>(n * V + c.begin + v)] = res[static_cast<size_t>(r)].dlogits[n * c.count + v];
  }
  auto loss = [&] {
    std::vector<loss_result> l(2);
    run(0.0f, l);
    return l[0].loss_sum;
  };
  EXPECT_TRUE(test::grads_close("logits", analytic.data(), test::numeric_grad(logits.data(), logits.numel(), loss, 1e-2f)));
}

TEST(VocabParallelCrossEntropy, RefusesATargetOutsideTheVocabulary) {
  auto group = net::make_local_tp_group(1);
  EXPECT_THROW(vocab_parallel_cross_entropy(tensor({1, 4}), {4}, 1.0f, 4, *group[0]), std::out_of_range);
}

// Whole models: the MLP (both ends of the alternation) and the GPT, through the loss.
void expect_model_matches_unsplit(const model_spec& spec, const tensor& x, const std::vector<int32_t>& targets, int tp,
                                  bool sequence_parallel = false) {
  SCOPED_TRACE(describe(spec) + " at tp " + std::to_string(tp) + (sequence_parallel ? " with sequence parallelism" : ""));
  layer_stack full(build_layers(spec), 0, 9);
  stack_context ctx;
  const loss_result want = cross_entropy(full.forward(x, ctx), targets, 0.5f);
  full.backward(want.dlogits, ctx, false);
  tp_replica ranks(tp, [&](tp_group* g) { return build_layers(spec, g, sequence_parallel); }, 9);
  std::vector<loss_result> got(static_cast<size_t>(tp));
  auto groups = net::make_local_tp_group(tp, {20000});  // the loss's own group: same ranks, same order
  ranks.each([&](int r, layer_stack& s) {
    stack_context c;
    const tensor y = s.forward(x, c);
    loss_result l = splits_logits(spec, tp)
                        ? vocab_parallel_cross_entropy(y, targets, 0.5f, spec.kind == model_kind::gpt ? spec.vocab : spec.classes,
                                                       *groups[static_cast<size_t>(r)])
                        : cross_entropy(y, targets, 0.5f);
    s.backward(l.dlogits, c, false);
    got[static_cast<size_t>(r)] = std::move(l);
  });
  for (const auto& g : got) {
    EXPECT_NEAR(g.loss_sum, want.loss_sum, 1e-5 * std::abs(want.loss_sum));
    EXPECT_EQ(g.correct, want.correct);
  }
  EXPECT_LT(rel_diff(ranks.merged_grads(full), full.grads().to_vector()), 1e-4) << "parameter gradients";
}

TEST(TensorParallelModels, MlpAndGptEqualTheUnsplitModelAtTp2And4) {
  model_spec mlp3;
  mlp3.inputs = 12;
  mlp3.hidden = {16, 8};  // column, row, column: the classes end split
  mlp3.classes = 10;
  model_spec mlp2 = mlp3;
  mlp2.hidden = {16};  // column, row: the logits end whole
  model_spec gpt;
  gpt.kind = model_kind::gpt;
  gpt.vocab = 13;
  gpt.context = 6;
  gpt.channels = 16;
  gpt.heads = 4;
  gpt.blocks = 2;
  const tensor xm = random_tensor({5, 12}, 21);
  const std::vector<int32_t> tm{1, 9, 0, 4, 7};
  const tensor xg = tokens(2, 6, 13, 22);
  std::vector<int32_t> tg;
  for (int64_t i = 0; i < 12; ++i) tg.push_back(static_cast<int32_t>((i * 7 + 3) % 13));
  const tensor xg4 = tokens(4, 6, 13, 23);  // 4 sequences split over tp 2 or 4
  std::vector<int32_t> tg4;
  for (int64_t i = 0; i < 24; ++i) tg4.push_back(static_cast<int32_t>((i * 5 + 2) % 13));
  for (int tp : {2, 4}) {
    expect_model_matches_unsplit(mlp3, xm, tm, tp);
    expect_model_matches_unsplit(mlp2, xm, tm, tp);
    expect_model_matches_unsplit(gpt, xg, tg, tp);
    expect_model_matches_unsplit(gpt, xg4, tg4, tp, true);
  }
}

TEST(TensorParallelModels, RefuseAModelThatDoesNotSplit) {
  model_spec gpt;
  gpt.kind = model_kind::gpt;
  gpt.vocab = 13;
  gpt.heads = 4;
  EXPECT_THROW(validate(gpt, 3), std::invalid_argument);  // 4 heads over 3 ranks
  model_spec mlp;
  mlp.classes = 2;
  EXPECT_THROW(validate(mlp, 4), std::invalid_argument);  // 2 classes over 4 ranks
  EXPECT_NO_THROW(validate(gpt, 4));
}

}  // namespace
}  // namespace troupe
