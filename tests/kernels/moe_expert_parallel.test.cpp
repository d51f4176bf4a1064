// The mixture-of-experts MLP over an expert group (expert parallelism, layers_moe.hpp), each rank
// a thread with its member of an in-process group and tokens of its own: against every rank
// running the whole layer (every expert) on its own tokens, its outputs, input gradients and
// router gradients are that rank's, and each expert's gradient on its owner is the sum over the
// ranks of theirs for it, with tokens dropped for capacity and the load-balancing loss on; its
// parameters are the single-device layer's, split; and its backward against finite differences
// taken through the group (an expert's weight moves every rank's output).
#include <gtest/gtest.h>

#include <exception>
#include <functional>
#include <memory>
#include <thread>

#include "comm/tp_groups.hpp"
#include "kernels/layer_stack.hpp"
#include "kernels/layers_moe.hpp"
#include "tests/kernels/grad_check.hpp"

namespace troupe {
namespace {

constexpr int64_t C = 6, F = 5, E = 4, N = 8;

layer_list one(std::unique_ptr<layer> l) {
  layer_list v;
  v.push_back(std::move(l));
  return v;
}

moe_options dropping() {
  moe_options o;
  o.experts = E;
  o.top_k = 2;
  o.capacity_factor = 0.75;
  o.aux_coefficient = 0.05f;
  return o;
}

void on_threads(int n, const std::function<void(int)>& fn) {
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

double rel_diff(const float* a, const float* b, int64_t n) {
  double worst = 0, scale = 1e-3;
  for (int64_t i = 0; i < n; ++i) {
    worst = std::max(worst, static_cast<double>(std::abs(a[i] - b[i])));
    scale = std::max(scale, static_cast<double>(std::abs(b[i])));
  }
  return worst / scale;
}

void expect_split_equals_whole(int P) {
  SCOPED_TRACE("expert group of " + std::to_string(P));
  const int64_t per_expert = 2 * C * F + F + C;
  // The whole layer on each rank's tokens: outputs, input and parameter gradients.
  layer_stack whole(one(std::make_unique<moe_mlp>(C, F, dropping())), 0, 7);
  std::vector<tensor> xs, dys, ys, dxs;
  std::vector<std::vector<float>> grads;
  int64_t dropped = 0;
  for (int r = 0; r < P; ++r) {
    xs.push_back(test::random_tensor({N, C}, 100 + r));
    dys.push_back(test::random_tensor({N, C}, 200 + r));
    saved_activations s;
    ys.push_back(whole.at(0).forward(xs.back(), s));
    dropped += dynamic_cast<moe_mlp&>(whole.at(0)).last_routing().dropped;
    whole.zero_grads();
    dxs.push_back(whole.at(0).backward_input(dys.back(), s));
    whole.at(0).backward_weight(dys.back(), s);
    grads.push_back(whole.grads().to_vector());
  }
  ASSERT_GT(dropped, 0) << "the capacity drops tokens, so the drops are part of what is compared";
  auto group = net::make_local_tp_group(P, {20000});
  std::vector<std::unique_ptr<layer_stack>> split(static_cast<size_t>(P));
  std::vector<tensor> y_split(static_cast<size_t>(P)), dx_split(static_cast<size_t>(P));
  on_threads(P, [&](int r) {
    auto& s = split[static_cast<size_t>(r)];
    s = std::make_unique<layer_stack>(one(std::make_unique<moe_mlp>(C, F, dropping(), group[static_cast<size_t>(r)].get())), 0, 7);
    saved_activations saved;
    y_split[static_cast<size_t>(r)] = s->at(0).forward(xs[static_cast<size_t>(r)], saved);
    s->zero_grads();
    dx_split[static_cast<size_t>(r)] = s->at(0).backward_input(dys[static_cast<size_t>(r)], saved);
    s->at(0).backward_weight(dys[static_cast<size_t>(r)], saved);
  });
  const int64_t local = E / P;
  for (int r = 0; r < P; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    const layer_stack& s = *split[static_cast<size_t>(r)];
    ASSERT_EQ(s.num_params(), E * C + local * per_expert);
    // Its parameters: the single-device router and its own experts.
    const std::vector<float> p = s.params().to_vector(), full = whole.params().to_vector();
    EXPECT_EQ(std::vector<float>(p.begin(), p.begin() + E * C), std::vector<float>(full.begin(), full.begin() + E * C));
    EXPECT_EQ(std::vector<float>(p.begin() + E * C, p.end()),
              std::vector<float>(full.begin() + E * C + r * local * per_expert,
                                 full.begin() + E * C + (r + 1) * local * per_expert));
    EXPECT_LT(rel_diff(y_split[static_cast<size_t>(r)].data(), ys[static_cast<size_t>(r)].data(), N * C), 1e-6) << "outputs";
    EXPECT_LT(rel_diff(dx_split[static_cast<size_t>(r)].data(), dxs[static_cast<size_t>(r)].data(), N * C), 1e-6)
        << "input gradients";
    const std::vector<float> g = s.grads().to_vector();
    EXPECT_LT(rel_diff(g.data(), grads[static_cast<size_t>(r)].data(), E * C), 1e-6) << "router gradient";
    std::vector<float> summed(static_cast<size_t>(local * per_expert), 0.0f);
    for (int q = 0; q < P; ++q)
      for (int64_t i = 0; i < local * per_expert; ++i)
        summed[static_cast<size_t>(i)] += grads[static_cast<size_t>(q)][static_cast<size_t>(E * C + r * local * per_expert + i)];
    EXPECT_LT(rel_diff(g.data() + E * C, summed.data(), local * per_expert), 1e-5) << "experts' gradients";
  }
}

TEST(MoeExpertParallel, EachRankGetsTheWholeLayersValuesAndEachOwnerTheSumOfItsExpertsGradientsOver2And4Ranks) {
  expect_split_equals_whole(2);
  expect_split_equals_whole(4);
}

TEST(MoeExpertParallel, ExpertsThatDoNotSplitEvenlyOverTheGroupAreRefused) {
  auto group = net::make_local_tp_group(3, {2000});
  EXPECT_THROW(moe_mlp(C, F, dropping(), group[0].get()), std::invalid_argument);
}

// Finite differences of the group's objective, the sum over ranks of <y_r, w_r> plus each rank's
// load-balancing loss, with respect to rank 0's router, experts and input: rank 0's router and
// input move its own tokens only, its experts every rank's tokens routed to them.
TEST(MoeExpertParallel, TheBackwardMatchesFiniteDifferencesThroughTheGroup) {
  const int P = 2;
  auto group = net::make_local_tp_group(P, {20000});
  std::vector<std::unique_ptr<layer_stack>> stacks(P);
  std::vector<tensor> xs, ws;
  for (int r = 0; r < P; ++r) {
    stacks[static_cast<size_t>(r)] =
        std::make_unique<layer_stack>(one(std::make_unique<moe_mlp>(C, F, dropping(), group[static_cast<size_t>(r)].get())), 0, 7);
    test::randomize_params(*stacks[static_cast<size_t>(r)], 11 + r);
    float* router = stacks[static_cast<size_t>(r)]->params().data();  // clear choices: no flip under a step
    for (int64_t e = 0; e < E; ++e)
      for (int64_t c = 0; c < C; ++c) router[e * C + c] = e == c ? 3.0f : 0.0f;
    tensor x = test::random_tensor({N, C}, 31 + r, -0.1f, 0.1f);
    for (int64_t n = 0; n < N; ++n) {
      x.data()[n * C + (n + r) % E] += 1.0f;
      x.data()[n * C + (n + r + 1) % E] += 0.5f;
    }
    xs.push_back(x);
    ws.push_back(test::random_tensor({N, C}, 41 + r));
  }
  auto objective = [&] {
    std::vector<double> part(P);
    on_threads(P, [&](int r) {
      saved_activations s;
      auto& l = dynamic_cast<moe_mlp&>(stacks[static_cast<size_t>(r)]->at(0));
      part[static_cast<size_t>(r)] = test::project(l.forward(xs[static_cast<size_t>(r)], s), ws[static_cast<size_t>(r)]) +
                                     l.last_routing().aux_loss;
    });
    return part[0] + part[1];
  };
  std::vector<tensor> dx(P);
  on_threads(P, [&](int r) {
    layer_stack& s = *stacks[static_cast<size_t>(r)];
    saved_activations saved;
    s.at(0).forward(xs[static_cast<size_t>(r)], saved);
    s.zero_grads();
    dx[static_cast<size_t>(r)] = s.at(0).backward_input(ws[static_cast<size_t>(r)], saved);
    s.at(0).backward_weight(ws[static_cast<size_t>(r)], saved);
  });
  EXPECT_GT(dynamic_cast<moe_mlp&>(stacks[0]->at(0)).last_routing().dropped, 0);
  test::expect_param_grads_close(*stacks[0], objective, 1e-2f);
  EXPECT_TRUE(test::grads_close("rank 0's input", dx[0].data(), test::numeric_grad(xs[0].data(), xs[0].numel(), objective, 1e-2f)));
}

}  // namespace
}  // namespace troupe
