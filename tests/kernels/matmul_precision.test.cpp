// Linear layers at matmul_precision::bf16 (kernels/matmul_precision.hpp): each of the three
// products is the fp32 sum of the exact products of bf16-rounded operands (against a double
// reference of the same rounded operands, and clearly not the fp32 products), and a whole GPT's
// gradients stay within bf16 rounding of the fp32 ones. PyTorch's view of the same rounding is
// tests/oracle's (pytorch_oracle.py, the "bf16." tensors).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/half.hpp"
#include "kernels/layer_stack.hpp"
#include "kernels/layers_dense.hpp"
#include "kernels/model.hpp"
#include "kernels/param_names.hpp"
#include "kernels/train_step.hpp"
#include "tests/kernels/grad_check.hpp"
#include "tests/kernels/token_batch.hpp"

namespace troupe {
namespace {

using test::random_tensor;

double rounded(float v) { return static_cast<double>(to_float(to_bf16(v))); }

// max|got - want| / max|want|
double error(const std::vector<double>& want, const float* got) {
  double scale = 0.0, worst = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    scale = std::max(scale, std::fabs(want[i]));
    worst = std::max(worst, std::fabs(static_cast<double>(got[i]) - want[i]));
  }
  return worst / std::max(scale, 1e-30);
}

TEST(MatmulPrecision, the_text_form_round_trips_and_an_unknown_name_is_refused_by_name) {
  for (matmul_precision p : {matmul_precision::f32, matmul_precision::bf16})
    EXPECT_EQ(parse_matmul_precision(to_string(p)), p);
  try {
    parse_matmul_precision("fp8");
    FAIL() << "fp8 accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("\"fp8\""), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("f32 or bf16"), std::string::npos) << e.what();
  }
}

// Forward, input gradient and weight gradient of one linear at a precision, on the same values.
struct linear_run {
  std::vector<float> y, dx, dweight, dbias;
};

constexpr int64_t N = 6, IN = 40, OUT = 24;

linear_run run_linear(matmul_precision p, const tensor& x, const tensor& dy) {
  layer_list one;
  one.push_back(std::make_unique<linear>(IN, OUT));
  layer_stack stack(std::move(one), 0, 7);
  test::randomize_params(stack, 11);
  stack.set_matmul_precision(p);
  layer& l = stack.at(0);
  saved_activations saved;
  const tensor y = l.forward(x, saved);
  stack.zero_grads();
  const tensor dx = l.backward_input(dy, saved);
  l.backward_weight(dy, saved);
  const float* g = stack.grads().data();
  return {{y.data(), y.data() + y.numel()}, {dx.data(), dx.data() + dx.numel()}, {g, g + OUT * IN},
          {g + OUT * IN, g + OUT * IN + OUT}};
}

TEST(MatmulPrecision, a_bf16_linear_computes_the_exact_products_of_its_rounded_operands_summed_in_fp32) {
  const tensor x = random_tensor({N, IN}, 3), dy = random_tensor({N, OUT}, 5);
  const linear_run b16 = run_linear(matmul_precision::bf16, x, dy), f32 = run_linear(matmul_precision::f32, x, dy);

  layer_list one;
  one.push_back(std::make_unique<linear>(IN, OUT));
  layer_stack params(std::move(one), 0, 7);
  test::randomize_params(params, 11);
  const float* w = params.params().data();
  const float* bias = w + OUT * IN;
  std::vector<double> y(N * OUT), dx(N * IN, 0.0), dw(OUT * IN, 0.0), db(OUT, 0.0);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t o = 0; o < OUT; ++o) {
      double s = bias[o];
      for (int64_t k = 0; k < IN; ++k) s += rounded(x.data()[i * IN + k]) * rounded(w[o * IN + k]);
      y[i * OUT + o] = s;
      const double d = rounded(dy.data()[i * OUT + o]);
      db[o] += d;
      for (int64_t k = 0; k < IN; ++k) {
        dx[i * IN + k] += d * rounded(w[o * IN + k]);
        dw[o * IN + k] += d * rounded(x.data()[i * IN + k]);
      }
    }
  // A sum of at most 40 exact products in fp32: a few ulps of the largest value, nowhere near
  // the rounding of an operand (2^-9 of it). The fp32 layer's products miss the same reference by
  // that rounding, which is what shows the bf16 layer did round.
  const struct {
    const char* what;
    const std::vector<double>& want;
    const std::vector<float>& bf16, &fp32;
  } checks[] = {{"y", y, b16.y, f32.y}, {"dx", dx, b16.dx, f32.dx}, {"dweight", dw, b16.dweight, f32.dweight},
                {"dbias", db, b16.dbias, f32.dbias}};
  for (const auto& c : checks) {
    EXPECT_LE(error(c.want, c.bf16.data()), 2e-6) << c.what;
    if (std::string(c.what) != "dbias") {  // a sum of rounded dy alone: fp32's misses it by dy's rounding only
      EXPECT_GE(error(c.want, c.fp32.data()), 2e-4) << c.what << ": the fp32 products are this close";
    }
  }
  EXPECT_GE(error(db, f32.dbias.data()), 1e-4) << "the bias gradient sums the rounded output gradient";
}

// A GPT's gradients at bf16 against fp32 on the same batch: every operand of every product off by
// at most 2^-9 of itself, so a product's sum is off by about that share of its terms' spread,
// and the errors of ~10 products in a row add, not multiply. Per tensor, ||bf16 - f32|| / ||f32||
// measured 0.08-0.5% here (the loss 3e-5); the bound is 3%, far below a wrong operand or scale
// (order 1).
TEST(MatmulPrecision, a_gpts_gradients_at_bf16_are_within_bf16_rounding_of_its_fp32_gradients) {
  model_spec spec;
  spec.kind = model_kind::gpt;
  spec.vocab = 65;
  spec.context = 16;
  spec.channels = 64;
  spec.heads = 4;
  spec.blocks = 2;
  const batch b = test::token_batch(spec, 4);
  layer_stack f32(build_layers(spec), 0, 42), b16(build_layers(spec), 0, 42);
  b16.set_matmul_precision(matmul_precision::bf16);
  const float scale = 1.0f / static_cast<float>(loss_rows(b));
  const step_stats s32 = compute_gradients(f32, b, scale), s16 = compute_gradients(b16, b, scale);
  EXPECT_NEAR(s16.mean_loss(), s32.mean_loss(), 1e-3 * s32.mean_loss());
  EXPECT_NE(s16.loss_sum, s32.loss_sum) << "bf16 operands left the loss bit for bit as fp32's";
  double worst = 0.0;
  for (const named_param& p : named_params(spec)) {
    const float* g32 = f32.grads().data() + p.offset;
    const float* g16 = b16.grads().data() + p.offset;
    double diff = 0.0, norm = 0.0;
    for (int64_t i = 0; i < p.count; ++i) {
      diff += (static_cast<double>(g16[i]) - g32[i]) * (static_cast<double>(g16[i]) - g32[i]);
      norm += static_cast<double>(g32[i]) * g32[i];
    }
    const double rel = std::sqrt(diff / std::max(norm, 1e-30));
    EXPECT_LE(rel, 3e-2) << p.name;
    worst = std::max(worst, rel);
  }
  EXPECT_GT(worst, 1e-4) << "no gradient moved: the bf16 setting did not reach the products";
}

}  // namespace
}  // namespace troupe
