// Causal multi-head attention over packed qkv on the CPU (ops.hpp): one (batch, head) pair per
// chunk of the device's threads, each pair's products in register blocks of 4 rows x 32 columns
// with AVX-512 (4 x 16 without) that skip the blocks above the causal diagonal and read a
// transposed operand in place. A head is small (T 64, hs 32 in the example
// GPT): sgemm per head ran at a third of its large-matrix rate, and plain loops spent their time
// in loop overhead. The softmax is fused into the scores (masked, exponentiated and normalized
// in place, once per row). Per-thread scratch (a head's transposed keys or values, its (T, T)
// score gradients) is kept across calls; nothing else allocates.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/ops.hpp"
#include "kernels/parallel.hpp"
#include "kernels/simd.hpp"
#include "kernels/sums.hpp"

namespace troupe::ops {

namespace {

constexpr int64_t R = 4;  // rows of a register block

using simd::load;
using simd::store;
using simd::v16;
using simd::v8;
#if defined(__AVX512F__)
// Blocks of 4 rows x 32 columns: 8 zmm accumulators, twice the work per FMA of 4 x 16 in ymm.
using vec = v16;
#else
using vec = v8;  // 4 x 16 in ymm: with 16 registers, 4 x 32 would spill
#endif
constexpr int64_t L = sizeof(vec) / sizeof(float);  // lanes of one vector
constexpr int64_t W = 2 * L;                        // columns of a full block

// out[r][0..N*lanes) = alpha * sum over k in [lo, hi) of a(r, k) * b[k][0..N*lanes), for 4
// rows r, where a(r, k) = a[r * ars + k * aks] (a row-major matrix, or with ars = 1 and aks its
// row stride, the transpose of one, read in place); b with row stride ldb, out with ldo. Each
// output is one fused multiply-add chain in k order, whatever the block's width: every width
// gives the same bits.
template <class V, int N>
void block(float* __restrict out, int64_t ldo, const float* __restrict a, int64_t ars, int64_t aks,
           const float* __restrict b, int64_t ldb, int64_t lo, int64_t hi, float alpha) {
  constexpr int64_t lanes = sizeof(V) / sizeof(float);
  V acc[R][N] = {};
  for (int64_t k = lo; k < hi; ++k) {
    V bv[N];
    for (int n = 0; n < N; ++n) bv[n] = load<V>(b + k * ldb + n * lanes);
    for (int64_t r = 0; r < R; ++r) {
      const float x = a[r * ars + k * aks];
      for (int n = 0; n < N; ++n) acc[r][n] += x * bv[n];
    }
  }
  for (int64_t r = 0; r < R; ++r)
    for (int n = 0; n < N; ++n) store(out + r * ldo + n * lanes, alpha * acc[r][n]);
}

// One element the blocks leave over: sum over k in [lo, hi) of a[k * aks] * b[k][0].
float element(const float* a, int64_t aks, const float* b, int64_t ldb, int64_t lo, int64_t hi) {
  float acc = 0.0f;
  for (int64_t k = lo; k < hi; ++k) acc += a[k * aks] * b[k * ldb];
  return acc;
}

// s[t][c] = alpha * sum_i a[t][i] * bt[i][c] for c <= t (and the rest of the last block of
// columns, which the caller masks): a (T, hs) with row stride lda, bt (hs, T), s (T, T). Full
// blocks where more than half of one is needed, a half block (one vector) for the rest.
void causal_scores(float* s, const float* a, int64_t lda, const float* bt, int64_t T, int64_t hs, float alpha) {
  for (int64_t t0 = 0; t0 < T; t0 += R) {
    const int64_t rows = std::min(R, T - t0);
    const int64_t cols = std::min(T, t0 + rows);  // columns a row of this block can see
    int64_t c0 = 0;
    if (rows == R) {
      for (; c0 + L < cols && c0 + W <= T; c0 += W)
        block<vec, 2>(s + t0 * T + c0, T, a + t0 * lda, lda, 1, bt + c0, T, 0, hs, alpha);
      for (; c0 < cols && c0 + L <= T; c0 += L)
        block<vec, 1>(s + t0 * T + c0, T, a + t0 * lda, lda, 1, bt + c0, T, 0, hs, alpha);
    }
    for (int64_t r = 0; r < rows; ++r)  // what no full block covered
      for (int64_t c = c0; c <= t0 + r; ++c) s[(t0 + r) * T + c] = alpha * element(a + (t0 + r) * lda, 1, bt + c, T, 0, hs);
  }
}

// o[t][j] = sum_k p(t, k) * v[k][j] over k in [lo(t0), hi(t0)) for each block of rows t0..t0+3,
// o (T, hs) with row stride ldo, v (T, hs) with row stride ldv, p(t, k) = p[t * T + k], or with
// transposed_p, p[k * T + t] (p is (T, T)). lower: p(t, k) is zero for k > t, so k < t0 + 4;
// otherwise zero for k < t, so k >= t0.
void banded_product(float* o, int64_t ldo, const float* p, bool transposed_p, const float* v, int64_t ldv, int64_t T,
                    int64_t hs, bool lower) {
  const int64_t prs = transposed_p ? 1 : T, pks = transposed_p ? T : 1;
  for (int64_t t0 = 0; t0 < T; t0 += R) {
    const int64_t rows = std::min(R, T - t0);
    const int64_t lo = lower ? 0 : t0, hi = lower ? t0 + rows : T;
    int64_t j0 = 0;
    if (rows == R) {
      for (; j0 + W <= hs; j0 += W) block<vec, 2>(o + t0 * ldo + j0, ldo, p + t0 * prs, prs, pks, v + j0, ldv, lo, hi, 1.0f);
      for (; j0 + L <= hs; j0 += L) block<vec, 1>(o + t0 * ldo + j0, ldo, p + t0 * prs, prs, pks, v + j0, ldv, lo, hi, 1.0f);
    }
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = j0; j < hs; ++j) o[(t0 + r) * ldo + j] = element(p + (t0 + r) * prs, pks, v + j, ldv, lo, hi);
  }
}

// exp(x) for x <= 0 (a softmax's shifted scores) as Cephes' expf: x = n ln2 + r, |r| <= ln2 / 2,
// a degree-6 polynomial for e^r and n added to the exponent bits; about 1 ulp from expf. libm's
// expf is a call GCC cannot vectorize, and it was half of the attention's forward.
inline float exp_nonpositive(float x) {
  x = x < -87.0f ? -87.0f : x;  // below, 2^n would leave the normal range
  const float n = std::floor(x * 1.44269504088896341f + 0.5f);
  const float r = (x - n * 0.693359375f) - n * -2.12194440e-4f;  // ln2 in two parts, for precision
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float er = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float two_n;
  __builtin_memcpy(&two_n, &bits, sizeof two_n);
  return er * two_n;
}

// Per-thread buffers, sized on first use and kept.
float* scratch(int which, int64_t n) {
  thread_local std::vector<float> buf[3];
  buf[which].resize(static_cast<size_t>(n));
  return buf[which].data();
}

// m (rows, cols) with row stride ld, transposed into (cols, rows).
float* transposed(int which, const float* m, int64_t ld, int64_t rows, int64_t cols) {
  float* t = scratch(which, rows * cols);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) t[c * rows + r] = m[r * ld + c];
  return t;
}

// f(b, h, bh) for every (batch, head) pair bh = b * NH + h, one pair per chunk of the device's
// threads: the pairs read and write disjoint parts of every buffer.
template <class F>
void for_each_head(int64_t B, int64_t NH, F&& f) {
  parallel_for(B * NH, 1, [&](int64_t first, int64_t end) {
    for (int64_t bh = first; bh < end; ++bh) f(bh / NH, bh % NH, bh);
  });
}

}  // namespace

void attention_forward(float* out, float* att, const float* qkv, int64_t B, int64_t T, int64_t C, int64_t NH) {
  const int64_t hs = C / NH;
  const int64_t C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  for_each_head(B, NH, [&](int64_t b, int64_t h, int64_t bh) {
    const float* q = qkv + b * T * C3 + h * hs;
    float* p = att + bh * T * T;  // att is (B, NH, T, T): pair bh's block
    causal_scores(p, q, C3, transposed(0, q + C, C3, T, hs), T, hs, scale);
    for (int64_t t = 0; t < T; ++t) {
      float* row = p + t * T;
      const float maxv = max_of(row, t + 1);
      for (int64_t t2 = 0; t2 <= t; ++t2) row[t2] = exp_nonpositive(row[t2] - maxv);
      const float inv = 1.0f / sum(row, t + 1);
      for (int64_t t2 = 0; t2 <= t; ++t2) row[t2] *= inv;
      for (int64_t t2 = t + 1; t2 < T; ++t2) row[t2] = 0.0f;  // causal mask, explicit zeros
    }
    banded_product(out + b * T * C + h * hs, C, p, false, q + 2 * C, C3, T, hs, /*lower=*/true);
  });
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att, int64_t B, int64_t T,
                        int64_t C, int64_t NH) {
  const int64_t hs = C / NH;
  const int64_t C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  for_each_head(B, NH, [&](int64_t b, int64_t h, int64_t bh) {
    const float* q = qkv + b * T * C3 + h * hs;
    const float* dy = dout + b * T * C + h * hs;
    const float* p = att + bh * T * T;
    float* dq = dqkv + b * T * C3 + h * hs;
    float* ds = scratch(2, T * T);
    causal_scores(ds, dy, C, transposed(0, q + 2 * C, C3, T, hs), T, hs, 1.0f);  // dP = dY V^T
    for (int64_t t = 0; t < T; ++t) {  // dS = P * (dP - sum_j P_j dP_j) * scale, zero where masked
      const float* pr = p + t * T;
      float* row = ds + t * T;
      float s = 0.0f;
      for (int64_t t2 = 0; t2 <= t; ++t2) s += pr[t2] * row[t2];
      for (int64_t t2 = 0; t2 <= t; ++t2) row[t2] = pr[t2] * (row[t2] - s) * scale;
      for (int64_t t2 = t + 1; t2 < T; ++t2) row[t2] = 0.0f;
    }
    banded_product(dq, C3, ds, false, q + C, C3, T, hs, /*lower=*/true);        // dQ = dS K
    banded_product(dq + C, C3, ds, true, q, C3, T, hs, /*lower=*/false);        // dK = dS^T Q
    banded_product(dq + 2 * C, C3, p, true, dy, C, T, hs, /*lower=*/false);     // dV = P^T dY
  });
}

}  // namespace troupe::ops
