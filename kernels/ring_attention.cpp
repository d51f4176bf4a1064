// Blockwise causal attention with an online softmax (see ring_attention.hpp). Plain loops: the
// arithmetic and its order are what this file fixes; a rank's GEMM-shaped kernels can replace the
// loops once the order they sum in is the same.
#include "kernels/ring_attention.hpp"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace troupe::ring_attention {

std::vector<int64_t> balanced_positions(int64_t T, int n, int r) {
  if (n < 1 || r < 0 || r >= n || T % (2 * n) != 0)
    throw std::invalid_argument("ring attention: " + std::to_string(T) + " tokens do not split into 2 x " +
                                std::to_string(n) + " equal chunks, or rank " + std::to_string(r) + " is not below " +
                                std::to_string(n));
  const int64_t chunk = T / (2 * n);
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(2 * chunk));
  for (const int64_t c : {int64_t{r}, int64_t{2} * n - 1 - r})
    for (int64_t i = 0; i < chunk; ++i) out.push_back(c * chunk + i);
  return out;
}

partial start(int64_t Tq, int64_t C, int64_t NH) {
  if (Tq < 0 || C < 1 || NH < 1 || C % NH != 0)
    throw std::invalid_argument("ring attention: C " + std::to_string(C) + " does not split into " +
                                std::to_string(NH) + " heads");
  partial p;
  p.Tq = Tq;
  p.C = C;
  p.NH = NH;
  p.out.assign(static_cast<size_t>(Tq * C), 0.0f);
  p.max.assign(static_cast<size_t>(NH * Tq), -std::numeric_limits<float>::infinity());
  p.sum.assign(static_cast<size_t>(NH * Tq), 0.0f);
  return p;
}

namespace {

float dot(const float* a, const float* b, int64_t n) {
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

}  // namespace

void accumulate(partial& p, rows q, const int64_t* q_pos, rows k, rows v, const int64_t* k_pos, int64_t Tk) {
  const int64_t hs = p.C / p.NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  std::vector<float> scores(static_cast<size_t>(Tk));
  for (int64_t h = 0; h < p.NH; ++h)
    for (int64_t i = 0; i < p.Tq; ++i) {
      const float* qi = q.data + i * q.stride + h * hs;
      float block_max = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < Tk; ++j) {
        if (k_pos[j] > q_pos[i]) continue;
        scores[static_cast<size_t>(j)] = dot(qi, k.data + j * k.stride + h * hs, hs) * scale;
        block_max = std::max(block_max, scores[static_cast<size_t>(j)]);
      }
      if (block_max == -std::numeric_limits<float>::infinity()) continue;  // the mask hides the whole block
      float& m = p.max[static_cast<size_t>(h * p.Tq + i)];
      float& l = p.sum[static_cast<size_t>(h * p.Tq + i)];
      float* o = p.out.data() + i * p.C + h * hs;
      const float new_max = std::max(m, block_max);
      const float rescale = std::exp(m - new_max);  // 0 before the first key (m = -inf)
      l *= rescale;
      for (int64_t c = 0; c < hs; ++c) o[c] *= rescale;
      for (int64_t j = 0; j < Tk; ++j) {
        if (k_pos[j] > q_pos[i]) continue;
        const float e = std::exp(scores[static_cast<size_t>(j)] - new_max);
        l += e;
        const float* vj = v.data + j * v.stride + h * hs;
        for (int64_t c = 0; c < hs; ++c) o[c] += e * vj[c];
      }
      m = new_max;
    }
}

void finish(const partial& p, mutable_rows out, float* lse) {
  const int64_t hs = p.C / p.NH;
  for (int64_t h = 0; h < p.NH; ++h)
    for (int64_t i = 0; i < p.Tq; ++i) {
      const float l = p.sum[static_cast<size_t>(h * p.Tq + i)];
      if (!(l > 0)) throw std::invalid_argument("ring attention: query row " + std::to_string(i) + " met no key");
      const float* o = p.out.data() + i * p.C + h * hs;
      float* y = out.data + i * out.stride + h * hs;
      for (int64_t c = 0; c < hs; ++c) y[c] = o[c] / l;
      lse[h * p.Tq + i] = p.max[static_cast<size_t>(h * p.Tq + i)] + std::log(l);
    }
}

void row_dots(rows dout, rows out, int64_t Tq, int64_t C, int64_t NH, float* D) {
  const int64_t hs = C / NH;
  for (int64_t h = 0; h < NH; ++h)
    for (int64_t i = 0; i < Tq; ++i)
      D[h * Tq + i] = dot(dout.data + i * dout.stride + h * hs, out.data + i * out.stride + h * hs, hs);
}

void backward_block(rows q, const int64_t* q_pos, int64_t Tq, rows dout, const float* lse, const float* D, rows k,
                    rows v, const int64_t* k_pos, int64_t Tk, int64_t C, int64_t NH, mutable_rows dq,
                    mutable_rows dk, mutable_rows dv) {
  const int64_t hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  for (int64_t h = 0; h < NH; ++h)
    for (int64_t i = 0; i < Tq; ++i) {
      const float* qi = q.data + i * q.stride + h * hs;
      const float* dyi = dout.data + i * dout.stride + h * hs;
      float* dqi = dq.data + i * dq.stride + h * hs;
      for (int64_t j = 0; j < Tk; ++j) {
        if (k_pos[j] > q_pos[i]) continue;
        const float* kj = k.data + j * k.stride + h * hs;
        const float* vj = v.data + j * v.stride + h * hs;
        const float prob = std::exp(dot(qi, kj, hs) * scale - lse[h * Tq + i]);
        const float ds = prob * (dot(dyi, vj, hs) - D[h * Tq + i]) * scale;  // dS = P (dP - D), scaled
        float* dkj = dk.data + j * dk.stride + h * hs;
        float* dvj = dv.data + j * dv.stride + h * hs;
        for (int64_t c = 0; c < hs; ++c) {
          dqi[c] += ds * kj[c];
          dkj[c] += ds * qi[c];
          dvj[c] += prob * dyi[c];
        }
      }
    }
}

}  // namespace troupe::ring_attention
