// Context parallelism in the GPT's layers against the unsplit model: cp ranks (times tp ranks,
// each pair a thread with its members of two in-process groups) each take their
// balanced_positions of every sequence; their logits must equal the whole model's rows at those
// positions, their losses must add up to its loss, and their parameter gradients (summed over the
// context ranks, as the data-parallel reduction sums them) must equal its gradients; in each of
// the three modes (all-gather, ring, all-to-all). Finite differences through the group check each
// mode's attention backward on its own terms.
#include <gtest/gtest.h>

#include <exception>
#include <thread>

#include "comm/tp_groups.hpp"
#include "kernels/context_attention.hpp"
#include "kernels/layer_stack.hpp"
#include "kernels/layers_parallel.hpp"
#include "kernels/loss.hpp"
#include "kernels/model.hpp"
#include "kernels/ring_attention.hpp"
#include "tests/kernels/token_batch.hpp"

namespace troupe {
namespace {

model_spec small_gpt() {
  model_spec s;
  s.kind = model_kind::gpt;
  s.vocab = 11;
  s.context = 16;
  s.channels = 16;
  s.heads = 4;
  s.blocks = 2;
  return s;
}

// The columns `at` of each of the B rows of (B, T) tokens, or of (B*T) targets.
tensor take_columns(const tensor& x, const std::vector<int64_t>& at) {
  const int64_t B = x.size(0), T = x.size(1), n = static_cast<int64_t>(at.size());
  tensor out({B, n});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < n; ++i) out.data()[b * n + i] = x.data()[b * T + at[static_cast<size_t>(i)]];
  return out;
}
std::vector<int32_t> take_targets(const std::vector<int32_t>& t, int64_t B, int64_t T, const std::vector<int64_t>& at) {
  std::vector<int32_t> out;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t p : at) out.push_back(t[static_cast<size_t>(b * T + p)]);
  return out;
}

double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0, scale = 1e-3;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    worst = std::max(worst, static_cast<double>(std::abs(a[i] - b[i])));
    scale = std::max(scale, static_cast<double>(std::abs(b[i])));
  }
  return worst / scale;
}

// One thread per (context rank c, tensor rank t); the first failure is rethrown.
void on_threads(int cp, int tp, const std::function<void(int c, int t)>& fn) {
  std::vector<std::exception_ptr> errors(static_cast<size_t>(cp * tp));
  std::vector<std::thread> threads;
  for (int c = 0; c < cp; ++c)
    for (int t = 0; t < tp; ++t)
      threads.emplace_back([&, c, t] {
        try {
          fn(c, t);
        } catch (...) {
          errors[static_cast<size_t>(c * tp + t)] = std::current_exception();
        }
      });
  for (auto& th : threads) th.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

void expect_gpt_matches_unsplit(int cp, int tp, context::cp_mode mode) {
  SCOPED_TRACE("cp " + std::to_string(cp) + " x tp " + std::to_string(tp) + " " + context::to_string(mode));
  const model_spec spec = small_gpt();
  const int64_t B = 3, T = spec.context, V = spec.vocab;
  const batch data = test::token_batch(spec, B);
  layer_stack full(build_layers(spec), 0, 9);
  stack_context ctx;
  const tensor logits = full.forward(data.inputs, ctx);
  const loss_result want = cross_entropy(logits, data.targets, 0.5f);
  full.backward(want.dlogits, ctx, false);

  // Groups: context group t holds ranks (0..cp-1, t); tensor group c holds (c, 0..tp-1).
  std::vector<std::vector<std::shared_ptr<tp_group>>> context_groups, tensor_groups, loss_groups;
  for (int t = 0; t < tp; ++t) context_groups.push_back(net::make_local_tp_group(cp, {20000}));
  for (int c = 0; c < cp; ++c) tensor_groups.push_back(net::make_local_tp_group(tp, {20000}));
  for (int c = 0; c < cp; ++c) loss_groups.push_back(net::make_local_tp_group(tp, {20000}));
  std::vector<std::unique_ptr<layer_stack>> stacks(static_cast<size_t>(cp * tp));
  std::vector<loss_result> losses(static_cast<size_t>(cp * tp));
  std::vector<double> logit_diff(static_cast<size_t>(cp * tp));
  on_threads(cp, tp, [&](int c, int t) {
    tp_group* tg = tp > 1 ? tensor_groups[static_cast<size_t>(c)][static_cast<size_t>(t)].get() : nullptr;
    tp_group& cg = *context_groups[static_cast<size_t>(t)][static_cast<size_t>(c)];
    auto& s = stacks[static_cast<size_t>(c * tp + t)];
    s = std::make_unique<layer_stack>(build_layers(spec, tg, false, {&cg, mode}), 0, 9);
    const std::vector<int64_t> at = context::positions(cg, T / cp);
    stack_context c_ctx;
    const tensor y = s->forward(take_columns(data.inputs, at), c_ctx);
    const std::vector<int32_t> targets = take_targets(data.targets, B, T, at);
    loss_result l = tp > 1 ? vocab_parallel_cross_entropy(y, targets, 0.5f, V, *loss_groups[static_cast<size_t>(c)][static_cast<size_t>(t)])
                           : cross_entropy(y, targets, 0.5f);
    s->backward(l.dlogits, c_ctx, false);
    if (tp == 1) {  // the logits are whole here: compare them row by row
      std::vector<float> mine = y.to_vector(), wanted;
      for (int64_t b = 0; b < B; ++b)
        for (int64_t p : at) wanted.insert(wanted.end(), logits.data() + (b * T + p) * V, logits.data() + (b * T + p + 1) * V);
      logit_diff[static_cast<size_t>(c)] = rel_diff(mine, wanted);
    }
    losses[static_cast<size_t>(c * tp + t)] = std::move(l);
  });
  double loss_sum = 0;
  int64_t count = 0;
  for (int c = 0; c < cp; ++c) {
    loss_sum += losses[static_cast<size_t>(c * tp)].loss_sum;
    count += losses[static_cast<size_t>(c * tp)].count;
    EXPECT_LT(logit_diff[static_cast<size_t>(c)], 1e-5) << "logits of context rank " << c;
  }
  EXPECT_EQ(count, B * T);
  EXPECT_NEAR(loss_sum, want.loss_sum, 1e-5 * std::abs(want.loss_sum));
  // Each tp rank's runs of the unsplit vector, its gradients summed over the context ranks.
  std::vector<float> merged(static_cast<size_t>(full.num_params()), 0.0f);
  for (int t = 0; t < tp; ++t) {
    std::vector<float> summed(static_cast<size_t>(stacks[static_cast<size_t>(t)]->num_params()), 0.0f);
    for (int c = 0; c < cp; ++c) {
      const std::vector<float> g = stacks[static_cast<size_t>(c * tp + t)]->grads().to_vector();
      for (size_t i = 0; i < g.size(); ++i) summed[i] += g[i];
    }
    std::vector<param_run> runs;
    const layer_stack& s = *stacks[static_cast<size_t>(t)];
    for (size_t l = 0; l < s.num_layers(); ++l)
      for (param_run p : s.at(l).full_runs()) runs.push_back({full.param_offset(l) + p.offset, p.count});
    scatter_runs(merged.data(), summed.data(), runs);
  }
  EXPECT_LT(rel_diff(merged, full.grads().to_vector()), 1e-4) << "parameter gradients";
}

class EveryMode : public ::testing::TestWithParam<context::cp_mode> {};

TEST_P(EveryMode, TheGptEqualsTheUnsplitModelAtCp2And4) {
  expect_gpt_matches_unsplit(2, 1, GetParam());
  expect_gpt_matches_unsplit(4, 1, GetParam());
}

TEST_P(EveryMode, TheGptEqualsTheUnsplitModelAtCp2TimesTp2) { expect_gpt_matches_unsplit(2, 2, GetParam()); }

TEST(ContextParallelGpt, AllToAllRefusesHeadsThatDoNotDivideByTheGroupNamingBoth) {
  auto g = net::make_local_tp_group(3, {2000});
  try {
    build_layers(small_gpt(), nullptr, false, {g[0].get(), context::cp_mode::all_to_all});
    FAIL() << "4 heads over 3 context ranks were accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("4 heads (per tensor-parallel rank) do not divide by cp 3"), std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW(build_layers(small_gpt(), nullptr, false, {g[0].get(), context::cp_mode::ring}));
}

TEST(ContextParallelGpt, RefusesAnMlpAndAnOddShareOfTheSequence) {
  model_spec mlp;
  auto g = net::make_local_tp_group(2, {2000});
  EXPECT_THROW(build_layers(mlp, nullptr, false, g[0].get()), std::invalid_argument);
  EXPECT_THROW(context::positions(*g[0], 3), std::invalid_argument);
  EXPECT_EQ(context::positions(*g[1], 4), (std::vector<int64_t>{2, 3, 4, 5}));  // chunks 1 and 2 of 4
}

// Each mode's attention backward against central differences of sum(out * w) taken through the
// group: every rank's qkv moves every rank's output, so the check spans the whole group.
TEST_P(EveryMode, TheAttentionBackwardMatchesFiniteDifferencesThroughTheGroup) {
  const context::cp_mode mode = GetParam();
  const int cp = 2;
  const int64_t B = 2, T = 4, C = 8, NH = 2;  // T tokens per rank, 8 per sequence
  std::vector<std::vector<float>> qkv(cp), w(cp);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  for (int r = 0; r < cp; ++r) {
    for (int64_t i = 0; i < B * T * 3 * C; ++i) qkv[static_cast<size_t>(r)].push_back(normal(rng));
    for (int64_t i = 0; i < B * T * C; ++i) w[static_cast<size_t>(r)].push_back(normal(rng));
  }
  auto groups = net::make_local_tp_group(cp, {20000});
  const int64_t state = context::attention_state_shape(B, NH, T, C)[0];
  // The objective summed over ranks, and (when asked) each rank's dqkv of it.
  auto run = [&](std::vector<std::vector<float>>* grads) {
    std::vector<double> part(cp);
    on_threads(cp, 1, [&](int r, int) {
      tp_group& g = *groups[static_cast<size_t>(r)];
      std::vector<float> out(static_cast<size_t>(B * T * C)), st(static_cast<size_t>(state));
      context::attention_forward(g, mode, out.data(), st.data(), qkv[static_cast<size_t>(r)].data(), B, T, C, NH);
      double f = 0;
      for (size_t i = 0; i < out.size(); ++i) f += static_cast<double>(out[i]) * w[static_cast<size_t>(r)][i];
      part[static_cast<size_t>(r)] = f;
      if (!grads) return;
      std::vector<float>& d = (*grads)[static_cast<size_t>(r)];
      d.assign(qkv[static_cast<size_t>(r)].size(), 0.0f);
      context::attention_backward(g, mode, d.data(), w[static_cast<size_t>(r)].data(), qkv[static_cast<size_t>(r)].data(),
                                  st.data(), B, T, C, NH);
    });
    return part[0] + part[1];
  };
  std::vector<std::vector<float>> grads(cp);
  run(&grads);
  const float h = 1e-2f;
  int checked = 0;
  for (int r = 0; r < cp; ++r)
    for (size_t i = 0; i < qkv[static_cast<size_t>(r)].size(); i += 5) {
      float& x = qkv[static_cast<size_t>(r)][i];
      const float keep = x;
      x = keep + h;
      const double up = run(nullptr);
      x = keep - h;
      const double down = run(nullptr);
      x = keep;
      const double numeric = (up - down) / (2 * h);
      EXPECT_NEAR(grads[static_cast<size_t>(r)][i], numeric, 2e-2 * std::max(1.0, std::abs(numeric)))
          << "rank " << r << " element " << i;
      ++checked;
    }
  EXPECT_GT(checked, 50);
}

INSTANTIATE_TEST_SUITE_P(ContextParallel, EveryMode,
                         ::testing::Values(context::cp_mode::all_gather, context::cp_mode::ring,
                                           context::cp_mode::all_to_all),
                         [](const auto& info) {
                           std::string name = context::to_string(info.param);
                           for (char& ch : name)
                             if (ch == '-') ch = '_';
                           return name;
                         });

}  // namespace
}  // namespace troupe
