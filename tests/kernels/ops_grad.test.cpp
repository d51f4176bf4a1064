// Op-level checks: attention forward against a naive double reference and its backward against
// finite differences; softmax cross-entropy backward; GELU and layernorm forward values; and the
// contracts that refuse bad input (tokens, targets, writes to frozen tensors).
// Layer-level gradient checks are in layers_grad.test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "kernels/layers_transformer.hpp"
#include "kernels/loss.hpp"
#include "kernels/ops.hpp"
#include "tests/kernels/grad_check.hpp"

namespace troupe {
namespace {

using test::grads_close;
using test::numeric_grad;
using test::project;
using test::random_tensor;

constexpr int64_t B = 2, T = 5, C = 8, NH = 2;

struct attention_shape {
  int64_t B, T, C, NH;
};
// Small heads (hs 4) take the attention's scalar paths; hs 16 over T 21 its 4 x 16 register
// blocks, with rows and columns left over for the scalar paths.
constexpr attention_shape small_heads{B, T, C, NH}, blocked_heads{1, 21, 32, 2};

tensor attention(const attention_shape& a, const tensor& qkv, tensor* att = nullptr) {
  tensor out({a.B, a.T, a.C}), p({a.B, a.NH, a.T, a.T});
  ops::attention_forward(out.data(), p.data(), qkv.data(), a.B, a.T, a.C, a.NH);
  if (att) *att = p;
  return out;
}

// Straight from the definition, in double: softmax(q k^T / sqrt(hs) + causal mask) v per head.
void check_attention_forward(const attention_shape& shape) {
  const auto [B, T, C, NH] = shape;
  const tensor qkv = random_tensor({B, T, 3 * C}, 1, -2.0f, 2.0f);
  tensor att;
  const tensor out = attention(shape, qkv, &att);
  const int64_t hs = C / NH;
  auto at = [&](int64_t b, int64_t t, int64_t part, int64_t h, int64_t i) {
    return static_cast<double>(qkv[(b * T + t) * 3 * C + part * C + h * hs + i]);
  };
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < NH; ++h)
      for (int64_t t = 0; t < T; ++t) {
        std::vector<double> w(static_cast<size_t>(t + 1));
        double total = 0.0;
        for (int64_t u = 0; u <= t; ++u) {
          double s = 0.0;
          for (int64_t i = 0; i < hs; ++i) s += at(b, t, 0, h, i) * at(b, u, 1, h, i);
          total += w[static_cast<size_t>(u)] = std::exp(s / std::sqrt(static_cast<double>(hs)));
        }
        const float* row = att.data() + ((b * NH + h) * T + t) * T;
        for (int64_t u = 0; u < T; ++u) {
          if (u > t) {
            EXPECT_EQ(row[u], 0.0f) << "future position " << u << " visible from " << t;
          } else {
            EXPECT_NEAR(row[u], w[static_cast<size_t>(u)] / total, 1e-6);
          }
        }
        for (int64_t i = 0; i < hs; ++i) {
          double o = 0.0;
          for (int64_t u = 0; u <= t; ++u) o += w[static_cast<size_t>(u)] / total * at(b, u, 2, h, i);
          EXPECT_NEAR(out[(b * T + t) * C + h * hs + i], o, 1e-5);
        }
      }
}

void check_attention_backward(const attention_shape& shape) {
  const auto [B, T, C, NH] = shape;
  tensor qkv = random_tensor({B, T, 3 * C}, 2, -2.0f, 2.0f);
  tensor att;
  attention(shape, qkv, &att);
  const tensor r = random_tensor({B, T, C}, 3);
  tensor dqkv({B, T, 3 * C});
  ops::attention_backward(dqkv.data(), r.data(), qkv.data(), att.data(), B, T, C, NH);
  const auto numeric =
      numeric_grad(qkv.data(), qkv.numel(), [&] { return project(attention(shape, qkv), r); }, 1e-2f);
  EXPECT_TRUE(grads_close("dqkv", dqkv.data(), numeric));
}

TEST(AttentionForward, MatchesNaiveDoubleReferenceAndIsCausal) { check_attention_forward(small_heads); }
TEST(AttentionForward, MatchesNaiveDoubleReferenceInRegisterBlocks) { check_attention_forward(blocked_heads); }
TEST(AttentionBackward, MatchesFiniteDifferences) { check_attention_backward(small_heads); }
TEST(AttentionBackward, MatchesFiniteDifferencesInRegisterBlocks) { check_attention_backward(blocked_heads); }

TEST(SoftmaxCrossEntropyBackward, MatchesFiniteDifferences) {
  tensor logits = random_tensor({6, 5}, 4, -3.0f, 3.0f);
  const std::vector<int32_t> targets{0, 4, 2, 2, 1, 3};
  const float scale = 1.0f / 6.0f;  // gradient of the mean, as train_step asks for
  const loss_result r = cross_entropy(logits, targets, scale);
  const auto numeric = numeric_grad(
      logits.data(), logits.numel(), [&] { return cross_entropy(logits, targets, 0.0f).loss_sum * scale; }, 1e-2f);
  EXPECT_TRUE(grads_close("dlogits", r.dlogits.data(), numeric));
}

TEST(CrossEntropy, RejectsOutOfRangeTargets) {
  const tensor logits = random_tensor({2, 3}, 5);
  EXPECT_THROW(cross_entropy(logits, {0, 3}, 1.0f), std::out_of_range);
  EXPECT_THROW(cross_entropy(logits, {-1, 0}, 1.0f), std::out_of_range);
  EXPECT_THROW(cross_entropy(logits, {0}, 1.0f), std::invalid_argument);  // wrong count
  EXPECT_NO_THROW(cross_entropy(logits, {0, 2}, 1.0f));
}

// Values of PyTorch's gelu(x, approximate="tanh"), i.e. 0.5 x (1 + tanh(sqrt(2/pi)(x + 0.044715 x^3))).
TEST(GeluForward, MatchesTanhApproximationValues) {
  const float x[] = {1.0f, -1.0f, 0.5f, 3.0f, -3.0f, 0.0f};
  const double want[] = {0.8411920, -0.1588080, 0.3457140, 2.9963626, -0.0036374, 0.0};
  float y[6];
  ops::gelu_forward(y, x, 6);
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(y[i], want[i], 1e-6) << "gelu(" << x[i] << ")";
}

TEST(LayernormForward, RowsHaveZeroMeanAndUnitVarianceBeforeAffine) {
  const int64_t N = 4, D = 16;
  const tensor x = random_tensor({N, D}, 6, -5.0f, 5.0f);
  std::vector<float> w(D, 1.0f), b(D, 0.0f), y(N * D), mean(N), rstd(N);
  ops::layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, D);
  for (int64_t n = 0; n < N; ++n) {
    double m = 0.0, v = 0.0;
    for (int64_t c = 0; c < D; ++c) m += y[static_cast<size_t>(n * D + c)];
    for (int64_t c = 0; c < D; ++c) v += std::pow(y[static_cast<size_t>(n * D + c)] - m / D, 2);
    EXPECT_NEAR(m / D, 0.0, 1e-6);
    // Biased variance with eps 1e-5 inside the root, as PyTorch: var / (var + eps) ~ 1.
    EXPECT_NEAR(v / D, 1.0, 1e-4);
  }
}

TEST(EmbeddingForward, RejectsOutOfRangeTokenNamingIt) {
  embedding e(6, 4, 2);
  std::vector<float> params(static_cast<size_t>(e.num_params())), grads(params.size());
  e.bind(params.data(), grads.data());
  saved_activations s;
  for (float bad : {6.0f, -1.0f, 2.5f}) {
    try {
      e.forward(tensor({1, 2}, {0.0f, bad}), s);
      ADD_FAILURE() << "token " << bad << " accepted";
    } catch (const std::out_of_range& err) {
      std::ostringstream v;
      v << "token " << bad;
      EXPECT_NE(std::string(err.what()).find(v.str()), std::string::npos) << err.what();
    }
  }
  EXPECT_THROW(e.forward(tensor({1, 5}), s), std::invalid_argument);  // T beyond the context
}

TEST(Tensor, FrozenTensorRefusesWriteAccessAndSharesTheFreeze) {
  tensor t({2, 2}, {1, 2, 3, 4});
  tensor alias = t;  // shares storage
  t.freeze();
  EXPECT_THROW(t.data(), std::logic_error);
  EXPECT_THROW(alias.data(), std::logic_error);
  EXPECT_EQ(std::as_const(t).data()[3], 4.0f);  // reading stays allowed
  tensor copy = t.clone();
  EXPECT_FALSE(copy.frozen());
  copy.data()[0] = 5.0f;
  EXPECT_EQ(t[0], 1.0f);
}

}  // namespace
}  // namespace troupe
