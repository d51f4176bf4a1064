// Every CUDA op (kernels/cuda/ops.hpp) against its CPU reference (kernels/ops.hpp, the
// optimizers) on random inputs, odd sizes so no tail is skipped. Outputs that an op writes start
// as NaN on the device, so an element a kernel forgets fails the comparison.
//
// Tolerances. Each comparison allows |gpu - cpu| <= limit[i], built per op from:
// - fp32 sums: both sides round, in different orders. A sum's error is bounded by a multiple of
//   u = 2^-24 times the sum of its terms' magnitudes ("bound" below; for a product a . b it is
//   |a| . |b|), the multiple growing with the length (about sqrt(K) for random signs, log2 K for
//   a tree, K at worst). 1e-5 * bound is ~170 u: room for any legitimate order at the sizes here
//   (K <= 1000, where K u <= 6e-5 worst case is not reached by random data), while a wrong index,
//   a missing term or a wrong formula moves a result by O(bound).
// - bf16 storage: bf16 keeps an 8-bit significand, so one rounding to nearest moves a value by at
//   most 2^-8 of itself (the spacing is 2^-7; half of it). Inputs are rounded to bf16 once and
//   the CPU reference is run on exactly those values, so only what the GPU stores as bf16 adds
//   2^-8 |value| per rounding, on top of the fp32 allowance.
// - bf16 matmul operands with fp32 accumulation: the products of bf16 values are exact in fp32,
//   so the difference is the accumulation alone; tensor cores add partial sums with an internal
//   alignment that is not IEEE round-to-nearest, so the allowance is 2^-12 * bound (still four
//   orders below a wrong result).
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cuda/check.hpp"
#include "kernels/cuda/kernel_faults.hpp"
#include "kernels/cuda/ops.hpp"
#include "kernels/ops.hpp"
#include "kernels/optimizer.hpp"
#include "tests/kernels/flash_host.hpp"

namespace {

namespace cu = troupe::cuda;
namespace ops = troupe::ops;
using cu::bf16;
using vec = std::vector<float>;

constexpr double u32 = 1e-5;                   // fp32 allowance, relative to a bound (see above)
constexpr double u16 = 1.0 / 256;              // one bf16 rounding: 2^-8
constexpr double u16_acc = 1.0 / 4096;         // bf16 operands, fp32 tensor-core accumulation: 2^-12

// A device buffer filled with NaN bytes (0xFF..: NaN in fp32 and bf16) or with given values.
template <class T>
class dev {
 public:
  explicit dev(size_t n) : n_(n) {
    TROUPE_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&p_), std::max<size_t>(n, 1) * sizeof(T)));
    TROUPE_CUDA_CHECK(cudaMemset(p_, 0xFF, n * sizeof(T)));
  }
  explicit dev(const std::vector<T>& h) : dev(h.size()) {
    TROUPE_CUDA_CHECK(cudaMemcpy(p_, h.data(), n_ * sizeof(T), cudaMemcpyHostToDevice));
  }
  ~dev() { cudaFree(p_); }
  dev(const dev&) = delete;
  dev& operator=(const dev&) = delete;
  T* get() const { return p_; }
  std::vector<T> host(cudaStream_t s) const {
    TROUPE_CUDA_CHECK(cudaStreamSynchronize(s));
    std::vector<T> h(n_);
    TROUPE_CUDA_CHECK(cudaMemcpy(h.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }

 private:
  T* p_ = nullptr;
  size_t n_;
};

vec random(size_t n, float lo, float hi, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  vec v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

std::vector<bf16> to_bf16(const vec& v) {
  std::vector<bf16> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = __float2bfloat16(v[i]);
  return r;
}
vec to_float(const std::vector<bf16>& v) {
  vec r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = __bfloat162float(v[i]);
  return r;
}
// v rounded to bf16 and back: the values a bf16 op actually sees.
vec rounded(const vec& v) { return to_float(to_bf16(v)); }
vec absolute(vec v) {
  for (auto& x : v) x = std::fabs(x);
  return v;
}

// limit[i] = a * x[i] + b * y[i] (+ c * z[i]), the building block of every tolerance.
vec limits(double a, const vec& x, double b = 0, const vec* y = nullptr, double c = 0, const vec* z = nullptr) {
  vec l(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    l[i] = static_cast<float>(a * std::fabs(x[i]) + (y ? b * std::fabs((*y)[i]) : 0.0) + (z ? c * std::fabs((*z)[i]) : 0.0));
  return l;
}
vec constant(size_t n, double v) { return vec(n, static_cast<float>(v)); }
vec plus(vec a, const vec& b) {
  for (size_t i = 0; i < a.size(); ++i) a[i] += b[i];
  return a;
}

// Passes when |got - want| <= limit everywhere (a NaN never does); otherwise names the count,
// the worst excess and the first few mismatches.
::testing::AssertionResult close(const char* what, const vec& got, const vec& want, const vec& limit) {
  if (got.size() != want.size() || limit.size() != want.size())
    return ::testing::AssertionFailure() << what << ": sizes differ";
  size_t bad = 0;
  std::ostringstream first;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (err <= limit[i]) continue;
    if (++bad <= 5)
      first << "\n  [" << i << "] gpu " << got[i] << " cpu " << want[i] << " |diff| " << err << " limit " << limit[i];
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": " << bad << " of " << got.size() << " elements outside the tolerance"
                                       << first.str();
}
::testing::AssertionResult close(const char* what, const std::vector<bf16>& got, const vec& want, const vec& limit) {
  return close(what, to_float(got), want, limit);
}

class CudaOps : public ::testing::Test {
 protected:
  void SetUp() override { TROUPE_CUDA_CHECK(cudaStreamCreate(&s)); }
  void TearDown() override { cudaStreamDestroy(s); }
  cudaStream_t s = nullptr;
  cu::blas blas;
};

// ---- matmul ----
// The CPU product on magnitudes: the bound of each output's rounding error (see the top).
vec forward_bound(const vec& inp, const vec& w, const vec& bias, int64_t N, int64_t C, int64_t OC) {
  vec b(static_cast<size_t>(N * OC));
  const vec ab = absolute(bias);
  ops::matmul_forward(b.data(), absolute(inp).data(), absolute(w).data(), ab.data(), N, C, OC);
  return b;
}

TEST_F(CudaOps, MatmulFp32MatchesCpu) {
  const int64_t N = 67, C = 96, OC = 80;
  const vec inp = random(N * C, -1, 1, 1), w = random(OC * C, -1, 1, 2), bias = random(OC, -1, 1, 3);
  const vec dout = random(N * OC, -1, 1, 4), dw0 = random(OC * C, -1, 1, 5), db0 = random(OC, -1, 1, 6);
  for (bool with_bias : {true, false}) {
    SCOPED_TRACE(with_bias ? "with bias" : "without bias");
    vec want(N * OC);
    ops::matmul_forward(want.data(), inp.data(), w.data(), with_bias ? bias.data() : nullptr, N, C, OC);
    dev<float> d_out(N * OC), d_inp(inp), d_w(w), d_bias(bias);
    cu::matmul_forward(d_out.get(), d_inp.get(), d_w.get(), with_bias ? d_bias.get() : nullptr, N, C, OC, blas, s);
    const vec bound = forward_bound(inp, w, with_bias ? bias : vec(OC, 0.0f), N, C, OC);
    EXPECT_TRUE(close("matmul_forward", d_out.host(s), want, limits(u32, bound)));
  }
  // backward: dinp written, dweight and dbias added onto what they held
  vec dinp(N * C), dw = dw0, db = db0;
  ops::matmul_backward_input(dinp.data(), dout.data(), w.data(), N, C, OC);
  ops::matmul_backward_weight(dw.data(), db.data(), dout.data(), inp.data(), N, C, OC);
  dev<float> d_dinp(N * C), d_dout(dout), d_w(w), d_inp(inp), d_dw(dw0), d_db(db0);
  cu::matmul_backward_input(d_dinp.get(), d_dout.get(), d_w.get(), N, C, OC, blas, s);
  cu::matmul_backward_weight(d_dw.get(), d_db.get(), d_dout.get(), d_inp.get(), N, C, OC, blas, s);
  vec bdinp(N * C), bdw = absolute(dw0), bdb = absolute(db0);
  ops::matmul_backward_input(bdinp.data(), absolute(dout).data(), absolute(w).data(), N, C, OC);
  ops::matmul_backward_weight(bdw.data(), bdb.data(), absolute(dout).data(), absolute(inp).data(), N, C, OC);
  EXPECT_TRUE(close("matmul_backward_input", d_dinp.host(s), dinp, limits(u32, bdinp)));
  EXPECT_TRUE(close("matmul_backward_weight dweight", d_dw.host(s), dw, limits(u32, bdw)));
  EXPECT_TRUE(close("matmul_backward_weight dbias", d_db.host(s), db, limits(u32, bdb)));
}

TEST_F(CudaOps, MatmulBf16MatchesCpuOnTheSameRoundedOperands) {
  const int64_t N = 70, C = 136, OC = 72;
  const vec inp = rounded(random(N * C, -1, 1, 11)), w = rounded(random(OC * C, -1, 1, 12));
  const vec bias = random(OC, -1, 1, 13), dout = rounded(random(N * OC, -1, 1, 14));
  const vec dw0 = random(OC * C, -1, 1, 15), db0 = random(OC, -1, 1, 16);
  dev<bf16> d_inp(to_bf16(inp)), d_w(to_bf16(w)), d_dout(to_bf16(dout));
  dev<float> d_bias(bias);

  vec want(N * OC);
  ops::matmul_forward(want.data(), inp.data(), w.data(), bias.data(), N, C, OC);
  const vec bound = forward_bound(inp, w, bias, N, C, OC);
  dev<float> d_out32(N * OC);
  cu::matmul_forward(d_out32.get(), d_inp.get(), d_w.get(), d_bias.get(), N, C, OC, blas, s);
  EXPECT_TRUE(close("matmul_forward bf16 -> fp32", d_out32.host(s), want, limits(u16_acc, bound)));
  // bf16 out: the bias is stored as bf16 before the product is added onto it, and cuBLAS rounds
  // the product to bf16 before it adds the bias (on an H200, 14 of 5040 elements were outside a
  // bound with one rounding of the sum), then rounds the sum: |product| <= |sum| + |bias|.
  dev<bf16> d_out16(N * OC);
  cu::matmul_forward(d_out16.get(), d_inp.get(), d_w.get(), d_bias.get(), N, C, OC, blas, s);
  vec bias_rows(N * OC);
  for (int64_t i = 0; i < N * OC; ++i) bias_rows[i] = bias[i % OC];
  EXPECT_TRUE(close("matmul_forward bf16 -> bf16", d_out16.host(s), want,
                    limits(2 * u16, want, 2 * u16, &bias_rows, u16_acc, &bound)));

  vec dinp(N * C), bdinp(N * C), dw = dw0, db = db0, bdw = absolute(dw0), bdb = absolute(db0);
  ops::matmul_backward_input(dinp.data(), dout.data(), w.data(), N, C, OC);
  ops::matmul_backward_input(bdinp.data(), absolute(dout).data(), absolute(w).data(), N, C, OC);
  ops::matmul_backward_weight(dw.data(), db.data(), dout.data(), inp.data(), N, C, OC);
  ops::matmul_backward_weight(bdw.data(), bdb.data(), absolute(dout).data(), absolute(inp).data(), N, C, OC);
  dev<float> d_dinp32(N * C), d_dw(dw0), d_db(db0);
  dev<bf16> d_dinp16(N * C);
  cu::matmul_backward_input(d_dinp32.get(), d_dout.get(), d_w.get(), N, C, OC, blas, s);
  cu::matmul_backward_input(d_dinp16.get(), d_dout.get(), d_w.get(), N, C, OC, blas, s);
  cu::matmul_backward_weight(d_dw.get(), d_db.get(), d_dout.get(), d_inp.get(), N, C, OC, blas, s);
  EXPECT_TRUE(close("matmul_backward_input bf16 -> fp32", d_dinp32.host(s), dinp, limits(u16_acc, bdinp)));
  EXPECT_TRUE(close("matmul_backward_input bf16 -> bf16", d_dinp16.host(s), dinp, limits(u16, dinp, u16_acc, &bdinp)));
  EXPECT_TRUE(close("matmul_backward_weight bf16 dweight", d_dw.host(s), dw, limits(u16_acc, bdw)));
  // dbias is a plain fp32 column sum of the (exact) bf16 values: the fp32 allowance
  EXPECT_TRUE(close("matmul_backward_weight bf16 dbias", d_db.host(s), db, limits(u32, bdb)));
}

// ---- element-wise ----
// GELU: the CPU's tanh is a rational fit within 4e-7 of tanh, CUDA's tanhf within 2 ulp; gelu =
// 0.5 x (1 + tanh(.)) carries that as 0.5 |x| * 7e-7, and a few ulp of its own.
vec gelu_limit(const vec& x, const vec& want) { return limits(1e-6, x, 1e-6, &want); }
// Its derivative multiplies a tanh error by about |x|^3 * 0.1 (the x * sech^2 * (1 + 0.13 x^2)
// term), times dout.
vec gelu_backward_limit(const vec& x, const vec& dout, const vec& want) {
  vec l(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    l[i] = static_cast<float>(1e-6 * (1 + std::pow(std::fabs(x[i]), 3)) * std::fabs(dout[i]) + 1e-6 * std::fabs(want[i]));
  return l;
}

TEST_F(CudaOps, ElementwiseFp32MatchesCpu) {
  const int64_t n = 100003;
  const vec a = random(n, -5, 5, 21), b = random(n, -1, 1, 22);
  {
    vec want = a;
    ops::add_into(want.data(), b.data(), n);
    dev<float> d_a(a), d_b(b);
    cu::add_into(d_a.get(), d_b.get(), n, s);
    EXPECT_TRUE(close("add_into", d_a.host(s), want, constant(n, 0)));  // one IEEE add: exact
  }
  {
    vec out(n), dinp(n);
    ops::relu_forward(out.data(), a.data(), n);
    ops::relu_backward(dinp.data(), b.data(), out.data(), n);
    dev<float> d_in(a), d_out(n), d_dout(b), d_dinp(n);
    cu::relu_forward(d_out.get(), d_in.get(), n, s);
    cu::relu_backward(d_dinp.get(), d_dout.get(), d_out.get(), n, s);
    EXPECT_TRUE(close("relu_forward", d_out.host(s), out, constant(n, 0)));  // selections: exact
    EXPECT_TRUE(close("relu_backward", d_dinp.host(s), dinp, constant(n, 0)));
  }
  {
    vec out(n), dinp(n);
    ops::gelu_forward(out.data(), a.data(), n);
    ops::gelu_backward(dinp.data(), a.data(), b.data(), n);
    dev<float> d_in(a), d_out(n), d_dout(b), d_dinp(n);
    cu::gelu_forward(d_out.get(), d_in.get(), n, s);
    cu::gelu_backward(d_dinp.get(), d_in.get(), d_dout.get(), n, s);
    EXPECT_TRUE(close("gelu_forward", d_out.host(s), out, gelu_limit(a, out)));
    EXPECT_TRUE(close("gelu_backward", d_dinp.host(s), dinp, gelu_backward_limit(a, b, dinp)));
  }
  {
    const int64_t N = 301, OC = 333;
    const vec pre0 = random(N * OC, -3, 3, 23), bias = random(OC, -1, 1, 24);
    vec out(N * OC), pre = pre0;
    ops::bias_gelu_forward(out.data(), pre.data(), bias.data(), N, OC);
    dev<float> d_out(N * OC), d_pre(pre0), d_bias(bias);
    cu::bias_gelu_forward(d_out.get(), d_pre.get(), d_bias.get(), N, OC, s);
    EXPECT_TRUE(close("bias_gelu_forward pre", d_pre.host(s), pre, constant(N * OC, 0)));  // one add: exact
    EXPECT_TRUE(close("bias_gelu_forward out", d_out.host(s), out, gelu_limit(pre, out)));
  }
}

TEST_F(CudaOps, ElementwiseBf16MatchesCpuWithinOneRounding) {
  const int64_t n = 70001;
  const vec a = rounded(random(n, -5, 5, 31)), b = rounded(random(n, -1, 1, 32));
  dev<bf16> d_a(to_bf16(a)), d_b(to_bf16(b));
  {
    vec want = a;
    ops::add_into(want.data(), b.data(), n);
    dev<bf16> d_sum(to_bf16(a));
    cu::add_into(d_sum.get(), d_b.get(), n, s);
    EXPECT_TRUE(close("add_into bf16", d_sum.host(s), want, limits(u16, want)));
  }
  {
    vec out(n), dinp(n);
    ops::relu_forward(out.data(), a.data(), n);
    ops::relu_backward(dinp.data(), b.data(), out.data(), n);
    dev<bf16> d_out(n), d_dinp(n);
    cu::relu_forward(d_out.get(), d_a.get(), n, s);
    cu::relu_backward(d_dinp.get(), d_b.get(), d_out.get(), n, s);
    EXPECT_TRUE(close("relu_forward bf16", d_out.host(s), out, constant(n, 0)));  // selects bf16 values: exact
    EXPECT_TRUE(close("relu_backward bf16", d_dinp.host(s), dinp, constant(n, 0)));
  }
  {
    vec out(n), dinp(n);
    ops::gelu_forward(out.data(), a.data(), n);
    ops::gelu_backward(dinp.data(), a.data(), b.data(), n);
    dev<bf16> d_out(n), d_dinp(n);
    cu::gelu_forward(d_out.get(), d_a.get(), n, s);
    cu::gelu_backward(d_dinp.get(), d_a.get(), d_b.get(), n, s);
    EXPECT_TRUE(close("gelu_forward bf16", d_out.host(s), out, plus(limits(u16, out), gelu_limit(a, out))));
    EXPECT_TRUE(close("gelu_backward bf16", d_dinp.host(s), dinp,
                      plus(limits(u16, dinp), gelu_backward_limit(a, b, dinp))));
  }
  {
    // pre + bias is stored as bf16 (one rounding) and GELU reads that stored value: |gelu'| <= 1.13,
    // so out moves by 1.13 * 2^-8 |pre|, then one rounding of its own (1.2 covers the product of both).
    const int64_t N = 129, OC = 257;
    const vec pre0 = rounded(random(N * OC, -3, 3, 33)), bias = random(OC, -1, 1, 34);
    vec out(N * OC), pre = pre0;
    ops::bias_gelu_forward(out.data(), pre.data(), bias.data(), N, OC);
    dev<bf16> d_out(N * OC), d_pre(to_bf16(pre0));
    dev<float> d_bias(bias);
    cu::bias_gelu_forward(d_out.get(), d_pre.get(), d_bias.get(), N, OC, s);
    EXPECT_TRUE(close("bias_gelu_forward bf16 pre", d_pre.host(s), pre, limits(u16, pre)));
    EXPECT_TRUE(close("bias_gelu_forward bf16 out", d_out.host(s), out,
                      plus(limits(u16, out, 1.2 * u16, &pre), gelu_limit(pre, out))));
  }
}

TEST_F(CudaOps, ConversionsRoundToNearestEven) {
  const int64_t n = 4099;
  vec x = random(n, -100, 100, 41);
  x[0] = 1.0f + 1.0f / 256;  // a tie: rounds to the even 1.0
  x[1] = 0.0f;
  x[2] = -3.0e-39f;  // subnormal
  dev<float> d_x(x), d_back(n);
  dev<bf16> d_b(n);
  cu::to_bf16(d_b.get(), d_x.get(), n, s);
  cu::to_float(d_back.get(), d_b.get(), n, s);
  const std::vector<bf16> got = d_b.host(s), want = to_bf16(x);
  int differ = 0;
  for (int64_t i = 0; i < n; ++i) differ += std::memcmp(&got[i], &want[i], sizeof(bf16)) != 0;
  EXPECT_EQ(differ, 0) << "to_bf16 differs from the host's __float2bfloat16 in " << differ << " elements";
  EXPECT_TRUE(close("to_float", d_back.host(s), to_float(want), constant(n, 0)));
}

// A normwise allowance, for sums whose terms' scale is the tensor's rather than the element's:
// u32 of the tensor's largest magnitude, plus u32 relative.
vec normwise(const vec& want) {
  float mx = 0;
  for (float x : want) mx = std::max(mx, std::fabs(x));
  return plus(constant(want.size(), u32 * mx), limits(u32, want));
}

// ---- layernorm ----
// Inputs are offset by 3 so a kernel that skips the mean, or takes E[x^2] - m^2, is caught. The
// output's terms are x and the mean (about 3) before they cancel, scaled by rstd and the weight:
// the fp32 allowance is u32 of |w| rstd (|x| + |mean|) + |b| + |out|. dinp is checked normwise
// (its row sums mix terms of the row's largest scale); dweight and dbias sum N rows, bounded by
// the sum of their terms' magnitudes.
struct layernorm_case {
  int64_t N, C;
};

void layernorm_check(cudaStream_t s, bool bf, int64_t N, int64_t C, unsigned seed) {
  SCOPED_TRACE("N " + std::to_string(N) + " C " + std::to_string(C) + (bf ? " bf16" : " fp32"));
  vec inp = random(N * C, 2, 4, seed), dout = random(N * C, -1, 1, seed + 1);
  if (bf) inp = rounded(inp), dout = rounded(dout);
  const vec w = random(C, -2, 2, seed + 2), b = random(C, -1, 1, seed + 3);
  const vec dw0 = random(C, -1, 1, seed + 4), db0 = random(C, -1, 1, seed + 5);
  vec out(N * C), mean(N), rstd(N), dinp(N * C), dw = dw0, db = db0;
  ops::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
  ops::layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), mean.data(), rstd.data(),
                          N, C);
  vec bdw = absolute(dw0), bdb = absolute(db0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) {
      bdb[c] += std::fabs(dout[n * C + c]);
      bdw[c] += std::fabs((inp[n * C + c] - mean[n]) * rstd[n] * dout[n * C + c]);
    }
  vec lim_out(N * C);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) {
      const double x = std::fabs(inp[n * C + c]), o = std::fabs(out[n * C + c]);
      lim_out[n * C + c] = static_cast<float>(u32 * (std::fabs(w[c]) * rstd[n] * (x + std::fabs(mean[n])) + std::fabs(b[c]) + o));
    }
  const vec lim_dinp = normwise(dinp);

  dev<float> d_w(w), d_b(b), d_mean(N), d_rstd(N), d_dw(dw0), d_db(db0), d_wmean(mean), d_wrstd(rstd);
  if (!bf) {
    dev<float> d_inp(inp), d_out(N * C), d_dout(dout), d_dinp(N * C);
    cu::layernorm_forward(d_out.get(), d_mean.get(), d_rstd.get(), d_inp.get(), d_w.get(), d_b.get(), N, C, s);
    // backward from the CPU's mean and rstd, so it is checked on its own
    cu::layernorm_backward(d_dinp.get(), d_dw.get(), d_db.get(), d_dout.get(), d_inp.get(), d_w.get(), d_wmean.get(),
                           d_wrstd.get(), N, C, s);
    EXPECT_TRUE(close("layernorm_forward out", d_out.host(s), out, lim_out));
    EXPECT_TRUE(close("layernorm_backward dinp", d_dinp.host(s), dinp, lim_dinp));
  } else {
    dev<bf16> d_inp(to_bf16(inp)), d_out(N * C), d_dout(to_bf16(dout)), d_dinp(N * C);
    cu::layernorm_forward(d_out.get(), d_mean.get(), d_rstd.get(), d_inp.get(), d_w.get(), d_b.get(), N, C, s);
    cu::layernorm_backward(d_dinp.get(), d_dw.get(), d_db.get(), d_dout.get(), d_inp.get(), d_w.get(), d_wmean.get(),
                           d_wrstd.get(), N, C, s);
    EXPECT_TRUE(close("layernorm_forward bf16 out", d_out.host(s), out, plus(lim_out, limits(u16, out))));
    EXPECT_TRUE(close("layernorm_backward bf16 dinp", d_dinp.host(s), dinp, plus(lim_dinp, limits(u16, dinp))));
  }
  EXPECT_TRUE(close("layernorm_forward mean", d_mean.host(s), mean, limits(u32, mean)));
  EXPECT_TRUE(close("layernorm_forward rstd", d_rstd.host(s), rstd, limits(u32, rstd)));
  EXPECT_TRUE(close("layernorm_backward dweight", d_dw.host(s), dw, limits(u32, bdw)));
  EXPECT_TRUE(close("layernorm_backward dbias", d_db.host(s), db, limits(u32, bdb)));
}

TEST_F(CudaOps, LayernormMatchesCpu) {
  // C below, at and above the block's 256 threads
  for (auto [N, C] : {layernorm_case{33, 200}, layernorm_case{17, 256}, layernorm_case{9, 1000}}) {
    layernorm_check(s, false, N, C, 50);
    layernorm_check(s, true, N, C, 60);
  }
}

TEST_F(CudaOps, LayernormBackwardHalvesRunAlone) {
  const int64_t N = 5, C = 64;
  const vec inp = random(N * C, -1, 1, 70), dout = random(N * C, -1, 1, 71), w = random(C, -1, 1, 72);
  const vec b(C, 0.0f), dw0(C, 0.5f);
  vec out(N * C), mean(N), rstd(N);
  ops::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
  dev<float> d_inp(inp), d_dout(dout), d_w(w), d_mean(mean), d_rstd(rstd), d_dw(dw0), d_db(dw0), d_dinp(N * C);
  cu::layernorm_backward(nullptr, d_dw.get(), d_db.get(), d_dout.get(), d_inp.get(), d_w.get(), d_mean.get(),
                         d_rstd.get(), N, C, s);
  cu::layernorm_backward(d_dinp.get(), nullptr, nullptr, d_dout.get(), d_inp.get(), d_w.get(), d_mean.get(),
                         d_rstd.get(), N, C, s);
  vec dinp(N * C), dw = dw0, db = dw0;
  ops::layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), mean.data(), rstd.data(),
                          N, C);
  EXPECT_TRUE(close("dinp alone", d_dinp.host(s), dinp, normwise(dinp)));
  EXPECT_TRUE(close("dweight alone", d_dw.host(s), dw, normwise(dw)));
  EXPECT_TRUE(close("dbias alone", d_db.host(s), db, normwise(db)));
}

// ---- embedding ----
TEST_F(CudaOps, EmbeddingMatchesCpu) {
  const int64_t B = 3, T = 17, C = 40, V = 50, maxT = 20;  // 51 tokens over 50 rows: some repeat
  vec tokens(B * T);
  std::mt19937 rng(80);
  for (auto& t : tokens) t = static_cast<float>(rng() % 7);  // few distinct rows, many shared
  tokens[5] = V - 1;
  const vec wte = random(V * C, -1, 1, 81), wpe = random(maxT * C, -1, 1, 82), dout = random(B * T * C, -1, 1, 83);
  const vec dwte0 = random(V * C, -1, 1, 84), dwpe0 = random(maxT * C, -1, 1, 85);
  vec out(B * T * C), dwte = dwte0, dwpe = dwpe0;
  ops::embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C, V);
  ops::embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C);
  dev<float> d_out(B * T * C), d_tok(tokens), d_wte(wte), d_wpe(wpe), d_dout(dout), d_dwte(dwte0), d_dwpe(dwpe0);
  cu::embedding_forward(d_out.get(), d_tok.get(), d_wte.get(), d_wpe.get(), B, T, C, V, s);
  cu::embedding_backward(d_dwte.get(), d_dwpe.get(), d_dout.get(), d_tok.get(), B, T, C, V, s);
  EXPECT_TRUE(close("embedding_forward", d_out.host(s), out, constant(B * T * C, 0)));  // one add: exact
  // sums of up to B * T terms of magnitude <= 1, added in another grouping for dwpe
  vec bwte = absolute(dwte0), bwpe = absolute(dwpe0);
  for (int64_t i = 0; i < B * T; ++i)
    for (int64_t c = 0; c < C; ++c) {
      bwte[static_cast<int64_t>(tokens[i]) * C + c] += std::fabs(dout[i * C + c]);
      bwpe[(i % T) * C + c] += std::fabs(dout[i * C + c]);
    }
  EXPECT_TRUE(close("embedding_backward dwte", d_dwte.host(s), dwte, limits(u32, bwte)));
  EXPECT_TRUE(close("embedding_backward dwpe", d_dwpe.host(s), dwpe, limits(u32, bwpe)));
}

TEST_F(CudaOps, AnOutOfRangeTokenGivesNaNIsNamedInTheFaultSlotAndItsBackwardWritesNoRow) {
  const int64_t B = 1, T = 3, C = 4, V = 5;
  const vec tokens = {1, 5, 2.5f}, wte = random(V * C, -1, 1, 86), wpe = random(T * C, -1, 1, 87);
  dev<float> d_out(B * T * C), d_tok(tokens), d_wte(wte), d_wpe(wpe);
  EXPECT_EQ(cu::take_kernel_fault(0), "");
  cu::embedding_forward(d_out.get(), d_tok.get(), d_wte.get(), d_wpe.get(), B, T, C, V, s);
  const vec out = d_out.host(s);
  for (int64_t c = 0; c < C; ++c) {
    EXPECT_FLOAT_EQ(out[c], wte[C + c] + wpe[c]);
    EXPECT_TRUE(std::isnan(out[C + c])) << "token V";
    EXPECT_TRUE(std::isnan(out[2 * C + c])) << "token 2.5";
  }
  // The first of the two (either may claim the slot first), with the CPU's words.
  const std::string fault = cu::take_kernel_fault(0);
  EXPECT_TRUE(fault == "embedding: token 5 at (0, 1) is outside [0, 5)" ||
              fault == "embedding: token 2.5 at (0, 2) is outside [0, 5)")
      << fault;
  EXPECT_EQ(cu::take_kernel_fault(0), "") << "taking it clears the slot";
  // Backward: a table of V rows with guards after it; token V must not write the row past the end.
  const float guard = 12345.0f;
  vec table((V + 1) * C, 0.0f);
  for (int64_t c = 0; c < C; ++c) table[V * C + c] = guard;
  dev<float> d_dwte(table), d_dwpe(T * C), d_dout(random(B * T * C, -1, 1, 88));
  cu::embedding_backward(d_dwte.get(), d_dwpe.get(), d_dout.get(), d_tok.get(), B, T, C, V, s);
  const vec dwte = d_dwte.host(s);
  for (int64_t c = 0; c < C; ++c) EXPECT_EQ(dwte[V * C + c], guard) << "the row past the table was written";
}

// ---- attention ----
// The GPU keeps a log-sum-exp per row (kernels/flash_attention.hpp, whose algorithm
// tests/kernels/flash_attention.test.cpp proves on the host): it must be the host run's of the
// same blocks to an exponential's rounding, 1e-6 (1 + |lse|). out and dqkv are sums of up to T
// products: normwise against the CPU reference. The backward starts from the GPU's own
// log-sum-exps.

void attention_check(cudaStream_t s, int64_t B, int64_t T, int64_t C, int64_t NH, unsigned seed) {
  SCOPED_TRACE("B " + std::to_string(B) + " T " + std::to_string(T) + " C " + std::to_string(C) + " NH " +
               std::to_string(NH));
  const vec qkv = random(B * T * 3 * C, -2, 2, seed), dout = random(B * T * C, -1, 1, seed + 1);
  vec out(B * T * C), att(B * NH * T * T), dqkv(B * T * 3 * C), host_out(B * T * C), host_lse(B * NH * T);
  ops::attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
  ops::attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH);
  troupe::test::flash_forward_on_host(host_out.data(), host_lse.data(), qkv.data(), B, T, C, NH);
  dev<float> d_out(B * T * C), d_lse(B * NH * T), d_qkv(qkv), d_dout(dout), d_dqkv(B * T * 3 * C), d_D(B * NH * T);
  cu::attention_forward(d_out.get(), d_lse.get(), d_qkv.get(), B, T, C, NH, s);
  cu::attention_backward(d_dqkv.get(), d_D.get(), d_dout.get(), d_qkv.get(), d_lse.get(), B, T, C, NH, s);
  vec lse_limit(host_lse.size());
  for (size_t i = 0; i < host_lse.size(); ++i) lse_limit[i] = static_cast<float>(1e-6 * (1 + std::fabs(host_lse[i])));
  EXPECT_TRUE(close("attention_forward lse", d_lse.host(s), host_lse, lse_limit));
  EXPECT_TRUE(close("attention_forward out", d_out.host(s), out, normwise(out)));
  EXPECT_TRUE(close("attention_backward dqkv", d_dqkv.host(s), dqkv, normwise(dqkv)));
}

TEST_F(CudaOps, AttentionMatchesCpu) {
  attention_check(s, 2, 37, 48, 3, 90);    // head size 16, T not a multiple of a tile
  attention_check(s, 1, 150, 128, 2, 95);  // head size 64: tiles of 32 and (key side) 16 rows
  attention_check(s, 2, 70, 256, 2, 97);   // head size 128: tiles of 16 and 8 rows
}

// ---- softmax cross-entropy ----
// A row's loss is max + log(sum of V exponentials) - logit: the sum's relative error (~sqrt(V) u
// for random data, 2e-6 at V 1000) is the log's absolute error, so 1e-5 (1 + |loss|).
void cross_entropy_check(cudaStream_t s, int64_t N, int64_t V, unsigned seed) {
  SCOPED_TRACE("N " + std::to_string(N) + " V " + std::to_string(V));
  const vec logits = random(N * V, -4, 4, seed);
  std::vector<int32_t> targets(N);
  std::mt19937 rng(seed + 1);
  for (auto& t : targets) t = static_cast<int32_t>(rng() % V);
  vec probs(N * V), row_loss(N);
  double total = 0;
  for (int64_t n = 0; n < N; ++n) {
    row_loss[n] = static_cast<float>(
        ops::softmax_cross_entropy_forward(probs.data() + n * V, logits.data() + n * V, targets.data() + n, 1, V));
    total += row_loss[n];
  }
  const float scale = 1.0f / static_cast<float>(N);
  vec dlogits(N * V);
  ops::softmax_cross_entropy_backward(dlogits.data(), probs.data(), targets.data(), N, V, scale);
  dev<float> d_logits(logits), d_probs(N * V), d_losses(N), d_cpu_probs(probs), d_dlogits(N * V);
  dev<int32_t> d_targets(targets);
  cu::softmax_cross_entropy_forward(d_probs.get(), d_losses.get(), d_logits.get(), d_targets.get(), N, V, s);
  cu::softmax_cross_entropy_backward(d_dlogits.get(), d_cpu_probs.get(), d_targets.get(), N, V, scale, s);
  EXPECT_TRUE(close("softmax probs", d_probs.host(s), probs, plus(limits(u32, probs), constant(N * V, 1e-9))));
  const vec losses = d_losses.host(s);
  EXPECT_TRUE(close("row losses", losses, row_loss, plus(constant(N, u32), limits(u32, row_loss))));
  double gpu_total = 0;
  for (float l : losses) gpu_total += l;
  EXPECT_NEAR(gpu_total, total, u32 * (static_cast<double>(N) + std::fabs(total)));
  // p * scale, minus scale at the target: a possible FMA is the only difference
  EXPECT_TRUE(close("softmax_cross_entropy_backward", d_dlogits.host(s), dlogits,
                    plus(limits(1e-6, dlogits), constant(N * V, 1e-6 * scale))));
}

TEST_F(CudaOps, SoftmaxCrossEntropyMatchesCpu) {
  cross_entropy_check(s, 19, 1000, 100);  // V over the block's threads
  cross_entropy_check(s, 7, 50, 110);     // V under a warp's multiple
}

TEST_F(CudaOps, SoftmaxCrossEntropyOfAnOutOfRangeTargetIsNaN) {
  const int64_t N = 2, V = 10;
  const vec logits = random(N * V, -1, 1, 120);
  const std::vector<int32_t> targets = {3, 10};
  dev<float> d_logits(logits), d_probs(N * V), d_losses(N);
  dev<int32_t> d_targets(targets);
  cu::softmax_cross_entropy_forward(d_probs.get(), d_losses.get(), d_logits.get(), d_targets.get(), N, V, s);
  const vec losses = d_losses.host(s);
  EXPECT_TRUE(std::isfinite(losses[0]));
  EXPECT_TRUE(std::isnan(losses[1]));
}

// ---- vocab-parallel cross-entropy ----
// The three passes of one rank among tp over its V columns, each kernel fed the CPU's results of
// the passes before it (the group's peaks, the summed sums) so each is checked alone. Peaks and
// arg-maxes are exact (a maximum rounds nothing; a tie goes to the first column, planted in row
// 0 across two threads' strides). The exponentials differ by expf's few ulp and the sums by their
// order: 1e-5 of the value, as for softmax above; a row's loss 1e-5 (1 + |loss|).
void vocab_check(cudaStream_t s, int64_t N, int64_t V, int tp, int rank, unsigned seed) {
  SCOPED_TRACE("N " + std::to_string(N) + " V " + std::to_string(V) + " rank " + std::to_string(rank) + " of " +
               std::to_string(tp));
  const int64_t full = V * tp, begin = V * rank;
  vec all = random(N * full, -4, 4, seed);
  all[begin + 3] = all[begin + V - 2] = 5.0f;  // row 0's maximum twice on this rank
  std::vector<int32_t> targets(N);
  std::mt19937 rng(seed + 1);
  for (auto& t : targets) t = static_cast<int32_t>(rng() % full);
  targets[0] = static_cast<int32_t>(begin + 3);
  // every rank's columns, and the group's peaks and sums as its collectives leave them
  std::vector<vec> logits(tp, vec(N * V));
  vec all_peaks(2 * N * tp), sums(2 * N, 0.0f), mine_probs(N * V), mine_sums(2 * N);
  for (int q = 0; q < tp; ++q) {
    for (int64_t n = 0; n < N; ++n)
      std::copy_n(all.begin() + n * full + V * q, V, logits[q].begin() + n * V);
    ops::vocab_peaks(all_peaks.data() + 2 * N * q, logits[q].data(), N, V, V * q);
  }
  for (int q = 0; q < tp; ++q) {
    vec probs(N * V), part(2 * N);
    ops::vocab_exp_sums(probs.data(), part.data(), all_peaks.data(), tp, targets.data(), logits[q].data(), N, V, V * q);
    for (int64_t i = 0; i < 2 * N; ++i) sums[i] += part[i];
    if (q == rank) mine_probs = probs, mine_sums = part;
  }
  const float scale = 1.0f / static_cast<float>(N);
  vec probs = mine_probs, dlogits(N * V), row_stats(2 * N);
  ops::vocab_finish(row_stats.data(), dlogits.data(), probs.data(), sums.data(), all_peaks.data(), tp, targets.data(),
                    N, V, begin, scale);
  const vec& here = logits[rank];
  const vec want_peaks(all_peaks.begin() + 2 * N * rank, all_peaks.begin() + 2 * N * (rank + 1));

  dev<float> d_logits(here), d_peaks(2 * N), d_all_peaks(all_peaks), d_probs(N * V), d_sums(2 * N);
  dev<float> d_cpu_probs(mine_probs), d_group_sums(sums), d_dlogits(N * V), d_stats(2 * N);
  dev<int32_t> d_targets(targets);
  cu::vocab_peaks(d_peaks.get(), d_logits.get(), N, V, begin, s);
  cu::vocab_exp_sums(d_probs.get(), d_sums.get(), d_all_peaks.get(), tp, d_targets.get(), d_logits.get(), N, V, begin,
                     s);
  cu::vocab_finish(d_stats.get(), d_dlogits.get(), d_cpu_probs.get(), d_group_sums.get(), d_all_peaks.get(), tp,
                   d_targets.get(), N, V, begin, scale, s);
  EXPECT_TRUE(close("vocab_peaks", d_peaks.host(s), want_peaks, constant(2 * N, 0)));
  EXPECT_EQ(d_peaks.host(s)[N], static_cast<float>(begin + 3)) << "row 0's tie goes to its first column";
  EXPECT_TRUE(close("vocab_exp_sums probs", d_probs.host(s), mine_probs, plus(limits(u32, mine_probs), constant(N * V, 1e-9))));
  EXPECT_TRUE(close("vocab_exp_sums sums", d_sums.host(s), mine_sums, limits(u32, mine_sums)));
  EXPECT_TRUE(close("vocab_finish probs", d_cpu_probs.host(s), probs, plus(limits(u32, probs), constant(N * V, 1e-9))));
  EXPECT_TRUE(close("vocab_finish dlogits", d_dlogits.host(s), dlogits,
                    plus(limits(1e-6, dlogits), constant(N * V, 1e-6 * scale))));
  const vec stats = d_stats.host(s);
  for (int64_t n = 0; n < N; ++n) {
    EXPECT_NEAR(stats[2 * n], row_stats[2 * n], u32 * (1 + std::fabs(row_stats[2 * n]))) << "row " << n << " loss";
    EXPECT_EQ(stats[2 * n + 1], row_stats[2 * n + 1]) << "row " << n << " hit";
  }
  EXPECT_EQ(stats[1], 1.0f) << "row 0's target is its first maximum";
}

TEST_F(CudaOps, VocabParallelCrossEntropyPassesMatchCpu) {
  vocab_check(s, 13, 700, 2, 0, 130);  // V over the block's threads
  vocab_check(s, 13, 700, 2, 1, 140);
  vocab_check(s, 6, 37, 3, 2, 150);    // V under a warp's multiple, a third rank
}

// ---- optimizers ----
// Three steps of the CPU optimizer and of the CUDA one on the same gradients. Each step is a few
// element-wise operations on O(1) values, identical formulas on both sides, so the only
// difference is where a compiler fuses a multiply-add: a few ulp, 2e-6 relative (+ 2e-6 lr
// absolute). A wrong bias correction or decay moves a parameter by O(lr * weight_decay) = 1e-3.
void optimizer_check(cudaStream_t s, const troupe::optimizer_config& cfg, unsigned seed) {
  SCOPED_TRACE(std::string(troupe::to_string(cfg.kind)) + " momentum " + std::to_string(cfg.momentum));
  const int64_t n = 10007;
  const vec p0 = random(n, -1, 1, seed);
  auto cpu = troupe::make_optimizer(cfg, n);
  vec p = p0;
  const int states = cpu->state_floats();
  dev<float> d_p(p0), d_state0(vec(n, 0.0f)), d_state1(vec(n, 0.0f));
  dev<bf16> d_p16(n);
  for (int64_t step = 1; step <= 3; ++step) {
    const vec g = random(n, -1, 1, seed + static_cast<unsigned>(step));
    cpu->step(p.data(), g.data(), n);
    dev<float> d_g(g);
    if (cfg.kind == troupe::optimizer_kind::adamw)
      cu::adamw_step(d_p.get(), d_p16.get(), d_state0.get(), d_state1.get(), d_p.get(), d_g.get(), n, cfg, step, s);
    else
      cu::sgd_step(d_p.get(), d_p16.get(), states ? d_state0.get() : nullptr, d_p.get(), d_g.get(), n, cfg, step, s);
  }
  const vec got = d_p.host(s);
  EXPECT_TRUE(close("parameters", got, p, plus(limits(2e-6, p), constant(n, 2e-6 * cfg.lr))));
  const std::vector<bf16> got16 = d_p16.host(s), want16 = to_bf16(got);
  int differ = 0;
  for (int64_t i = 0; i < n; ++i) differ += std::memcmp(&got16[i], &want16[i], sizeof(bf16)) != 0;
  EXPECT_EQ(differ, 0) << "the bf16 copy is not the new fp32 parameters rounded";
  const vec& state = cpu->state();
  for (int j = 0; j < states; ++j) {
    const vec want(state.begin() + j * n, state.begin() + (j + 1) * n);
    const vec have = (j == 0 ? d_state0 : d_state1).host(s);
    EXPECT_TRUE(close(j == 0 ? "state 0" : "state 1", have, want, plus(limits(2e-6, want), constant(n, 1e-12))));
  }
}

TEST_F(CudaOps, OptimizersMatchCpu) {
  troupe::optimizer_config adamw;
  adamw.kind = troupe::optimizer_kind::adamw;
  adamw.lr = 1e-2f;
  adamw.weight_decay = 0.1f;
  optimizer_check(s, adamw, 130);
  troupe::optimizer_config sgd;
  sgd.kind = troupe::optimizer_kind::sgd;
  sgd.lr = 1e-2f;
  sgd.weight_decay = 0.1f;
  sgd.momentum = 0.9f;
  optimizer_check(s, sgd, 140);
  sgd.momentum = 0.0f;
  optimizer_check(s, sgd, 150);
}

TEST_F(CudaOps, ACudaFailureNamesTheCall) {
  try {
    TROUPE_CUDA_CHECK(cudaSetDevice(-1));
    FAIL() << "no exception";
  } catch (const cu::error& e) {
    EXPECT_NE(std::string(e.what()).find("cudaSetDevice(-1)"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("cuda_ops.test.cpp:"), std::string::npos) << e.what();
  }
  cudaGetLastError();  // the failed call's error stays recorded until read; later tests start clean
}

}  // namespace

#define TROUPE_GPU_TEST_BINARY "kernels_cuda_ops_test"
#include "tests/gpu_test_main.hpp"
