// flash_attention: causal multi-head attention over packed qkv that keeps no (T, T) matrix. The
// forward walks the keys in tiles with a running (online) softmax and keeps one log-sum-exp per
// query row; the backward recomputes the probabilities from it. What a layer saves per head is
// T floats instead of T^2 (the CPU reference, ops.hpp, keeps the probabilities).
//
// The algorithm is written once, as the work of one thread block over a tile of rows: the CUDA
// kernels (kernels/cuda/transformer.cu) run it with a thread per row, and a host test runs the
// same code with the "threads" one after another (tests/kernels/flash_attention.test.cpp), so
// the tiling, the causal bounds and the recomputation are proved on a machine without a GPU.
// Each thread's state (its q, its running output, its gradient rows) lives in the block's shared
// array rather than in registers, so state survives between the phases on the host as on a GPU.
//
// No atomics: every sum goes in a fixed order, so a run gives the same bits each time. The
// price is arithmetic: the backward's query pass walks its keys twice (once for
// D_t = sum_j P_tj dP_tj, once for dq), where FlashAttention-2 takes D from the saved output;
// here the saved output may be a bf16 rounding of it (the projection's kept input).
#pragma once

#include <math.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#if defined(__CUDACC__)
#define TROUPE_HD __host__ __device__
#else
#define TROUPE_HD
#endif

namespace troupe::flash {

struct dims {
  int64_t T, C, NH;
  TROUPE_HD int64_t hs() const { return C / NH; }
};

// A thread's row in the block's shared array: hs floats and one of padding, so the threads of a
// warp reading element i of their rows hit different banks.
TROUPE_HD inline int64_t pitch(int64_t hs) { return hs + 1; }

// The shared floats a kernel's block takes: `rows` per-thread rows of each of `arrays` kinds,
// and `scalars` floats per thread.
TROUPE_HD inline int64_t shared_floats(int64_t rows, int64_t hs, int arrays, int scalars) {
  return rows * (arrays * pitch(hs) + scalars);
}

// The kernels' shapes of shared memory (arrays of hs-wide rows, scalars per row).
constexpr int forward_arrays = 4, forward_scalars = 2;      // q, o, k, v; running max and sum
constexpr int query_grad_arrays = 5, query_grad_scalars = 2;  // q, dO, dq, k, v; lse, D
constexpr int key_grad_arrays = 6, key_grad_scalars = 2;      // k, v, dk, dv, q, dO; lse, D

// Rows per block (threads per block, and the tile of keys or queries walked at a time): the most
// of 32, 16 and 8 whose shared arrays fit the 48 KiB a block gets without opting in to more.
inline int rows_per_block(int64_t hs, int arrays, int scalars) {
  for (int rows : {32, 16, 8})
    if (shared_floats(rows, hs, arrays, scalars) * 4 <= 48 * 1024) return rows;
  throw std::invalid_argument("attention: head size " + std::to_string(hs) +
                              " leaves no tile of rows within 48 KiB of shared memory (at most 254)");
}

TROUPE_HD inline float dot(const float* a, const float* b, int64_t n) {
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// The tile of keys from j0 into the block's k and v rows (zeros past T), one row a thread; base
// is the head's first q column of its sequence.
template <class Block>
TROUPE_HD void load_keys(const Block& blk, float* k, float* v, const float* base, dims d, int64_t j0) {
  const int64_t hs = d.hs(), P = pitch(hs), C3 = 3 * d.C;
  blk.each([&](int64_t r) {
    const int64_t j = j0 + r;
    for (int64_t i = 0; i < hs; ++i) {
      k[r * P + i] = j < d.T ? base[j * C3 + d.C + i] : 0.0f;
      v[r * P + i] = j < d.T ? base[j * C3 + 2 * d.C + i] : 0.0f;
    }
  });
}

// The tile of queries from t0 into the block's q and dy rows, with their log-sum-exps and D
// (zeros past T; D from `D`, or 0 where it is still to be summed: D null), one row a thread.
template <class Block>
TROUPE_HD void load_queries(const Block& blk, float* q, float* dy, float* ls, float* dd, const float* base,
                            const float* dout, const float* lse, const float* D, dims d, int64_t bh, int64_t t0) {
  const int64_t hs = d.hs(), P = pitch(hs), C3 = 3 * d.C, b = bh / d.NH, h = bh % d.NH;
  blk.each([&](int64_t r) {
    const int64_t t = t0 + r;
    const bool in = t < d.T;
    for (int64_t i = 0; i < hs; ++i) {
      q[r * P + i] = in ? base[t * C3 + i] : 0.0f;
      dy[r * P + i] = in ? dout[(b * d.T + t) * d.C + h * hs + i] : 0.0f;
    }
    ls[r] = in ? lse[bh * d.T + t] : 0.0f;
    dd[r] = in && D ? D[bh * d.T + t] : 0.0f;
  });
}

// Forward for query tile `tile` of head bh = b * NH + h: out (B, T, C) and lse (B * NH, T),
// P_tj = exp(scale q_t . k_j - lse_t) for j <= t.
template <class Block>
TROUPE_HD void forward_block(const Block& blk, float* smem, float* out, float* lse, const float* qkv, dims d,
                             int64_t bh, int64_t tile) {
  const int64_t R = blk.size(), hs = d.hs(), P = pitch(hs), C3 = 3 * d.C;
  const int64_t b = bh / d.NH, h = bh % d.NH, t0 = tile * R;
  const float* base = qkv + b * d.T * C3 + h * hs;
  float *q = smem, *o = q + R * P, *k = o + R * P, *v = k + R * P, *m = v + R * P, *l = m + R;
  const float scale = 1.0f / sqrtf(static_cast<float>(hs));
  blk.each([&](int64_t r) {
    const int64_t t = t0 + r;
    for (int64_t i = 0; i < hs; ++i) {
      q[r * P + i] = t < d.T ? base[t * C3 + i] : 0.0f;
      o[r * P + i] = 0.0f;
    }
    m[r] = -INFINITY;
    l[r] = 0.0f;
  });
  for (int64_t kt = 0; kt <= tile; ++kt) {  // causal: no key after the tile's last query
    const int64_t j0 = kt * R;
    load_keys(blk, k, v, base, d, j0);
    blk.each([&](int64_t r) {
      const int64_t t = t0 + r;
      if (t >= d.T) return;
      const int64_t n = t - j0 + 1 < R ? t - j0 + 1 : R;  // keys j0 .. min(t, j0 + R - 1)
      float mx = m[r];
      for (int64_t jj = 0; jj < n; ++jj) mx = fmaxf(mx, scale * dot(q + r * P, k + jj * P, hs));
      // One rescale per tile of what the earlier tiles summed (exp(-inf) = 0 on the first).
      const float c = expf(m[r] - mx);
      float* orow = o + r * P;
      for (int64_t i = 0; i < hs; ++i) orow[i] *= c;
      float sum = l[r] * c;
      for (int64_t jj = 0; jj < n; ++jj) {
        const float p = expf(scale * dot(q + r * P, k + jj * P, hs) - mx);
        sum += p;
        for (int64_t i = 0; i < hs; ++i) orow[i] += p * v[jj * P + i];
      }
      m[r] = mx;
      l[r] = sum;
    });
  }
  blk.each([&](int64_t r) {
    const int64_t t = t0 + r;
    if (t >= d.T) return;
    const float inv = 1.0f / l[r];
    for (int64_t i = 0; i < hs; ++i) out[(b * d.T + t) * d.C + h * hs + i] = o[r * P + i] * inv;
    lse[bh * d.T + t] = m[r] + logf(l[r]);
  });
}

// Backward, query side, for query tile `tile` of head bh: dq into dqkv's q columns and
// D_t = sum_j P_tj dP_tj (dP_tj = dy_t . v_j) into D (B * NH, T), which key_grad_block reads.
template <class Block>
TROUPE_HD void query_grad_block(const Block& blk, float* smem, float* dqkv, float* D, const float* dout,
                                const float* qkv, const float* lse, dims d, int64_t bh, int64_t tile) {
  const int64_t R = blk.size(), hs = d.hs(), P = pitch(hs), C3 = 3 * d.C;
  const int64_t b = bh / d.NH, h = bh % d.NH, t0 = tile * R;
  const float* base = qkv + b * d.T * C3 + h * hs;
  float *q = smem, *dy = q + R * P, *dq = dy + R * P, *k = dq + R * P, *v = k + R * P, *ls = v + R * P,
        *dd = ls + R;
  const float scale = 1.0f / sqrtf(static_cast<float>(hs));
  load_queries(blk, q, dy, ls, dd, base, dout, lse, nullptr, d, bh, t0);
  blk.each([&](int64_t r) {
    for (int64_t i = 0; i < hs; ++i) dq[r * P + i] = 0.0f;
  });
  // Pass 0 sums D, pass 1 the query gradient dq_t = scale sum_j P_tj (dP_tj - D_t) k_j.
  for (int pass = 0; pass < 2; ++pass)
    for (int64_t kt = 0; kt <= tile; ++kt) {
      const int64_t j0 = kt * R;
      load_keys(blk, k, v, base, d, j0);
      blk.each([&](int64_t r) {
        const int64_t t = t0 + r;
        if (t >= d.T) return;
        const int64_t n = t - j0 + 1 < R ? t - j0 + 1 : R;
        for (int64_t jj = 0; jj < n; ++jj) {
          const float p = expf(scale * dot(q + r * P, k + jj * P, hs) - ls[r]);
          const float dp = dot(dy + r * P, v + jj * P, hs);
          if (pass == 0) {
            dd[r] += p * dp;
          } else {
            const float ds = p * (dp - dd[r]) * scale;
            for (int64_t i = 0; i < hs; ++i) dq[r * P + i] += ds * k[jj * P + i];
          }
        }
      });
    }
  blk.each([&](int64_t r) {
    const int64_t t = t0 + r;
    if (t >= d.T) return;
    for (int64_t i = 0; i < hs; ++i) dqkv[(b * d.T + t) * C3 + h * hs + i] = dq[r * P + i];
    D[bh * d.T + t] = dd[r];
  });
}

// Backward, key side, for key tile `tile` of head bh: dk_j = scale sum_{t >= j} P_tj (dP_tj - D_t) q_t
// and dv_j = sum_{t >= j} P_tj dy_t into dqkv's k and v columns, the queries in t order.
template <class Block>
TROUPE_HD void key_grad_block(const Block& blk, float* smem, float* dqkv, const float* dout, const float* qkv,
                              const float* lse, const float* D, dims d, int64_t bh, int64_t tile) {
  const int64_t R = blk.size(), hs = d.hs(), P = pitch(hs), C3 = 3 * d.C;
  const int64_t b = bh / d.NH, h = bh % d.NH, j0 = tile * R;
  const float* base = qkv + b * d.T * C3 + h * hs;
  float *k = smem, *v = k + R * P, *dk = v + R * P, *dv = dk + R * P, *q = dv + R * P, *dy = q + R * P,
        *ls = dy + R * P, *dd = ls + R;
  const float scale = 1.0f / sqrtf(static_cast<float>(hs));
  load_keys(blk, k, v, base, d, j0);  // this block's own keys, for its whole walk
  blk.each([&](int64_t r) {
    for (int64_t i = 0; i < hs; ++i) dk[r * P + i] = dv[r * P + i] = 0.0f;
  });
  const int64_t tiles = (d.T + R - 1) / R;
  for (int64_t qt = tile; qt < tiles; ++qt) {  // causal: no query before the tile's first key
    const int64_t t0 = qt * R;
    load_queries(blk, q, dy, ls, dd, base, dout, lse, D, d, bh, t0);
    blk.each([&](int64_t r) {
      const int64_t j = j0 + r;
      if (j >= d.T) return;
      for (int64_t tt = 0; tt < R; ++tt) {
        const int64_t t = t0 + tt;
        if (t < j || t >= d.T) continue;
        const float p = expf(scale * dot(q + tt * P, k + r * P, hs) - ls[tt]);
        const float ds = p * (dot(dy + tt * P, v + r * P, hs) - dd[tt]) * scale;
        for (int64_t i = 0; i < hs; ++i) {
          dv[r * P + i] += p * dy[tt * P + i];
          dk[r * P + i] += ds * q[tt * P + i];
        }
      }
    });
  }
  blk.each([&](int64_t r) {
    const int64_t j = j0 + r;
    if (j >= d.T) return;
    for (int64_t i = 0; i < hs; ++i) {
      dqkv[(b * d.T + j) * C3 + d.C + h * hs + i] = dk[r * P + i];
      dqkv[(b * d.T + j) * C3 + 2 * d.C + h * hs + i] = dv[r * P + i];
    }
  });
}

}  // namespace troupe::flash
