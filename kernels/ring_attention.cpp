// Blockwise causal attention with an online softmax (see ring_attention.hpp). Per head, a block's
// scores and its products with V are GEMMs (ops.hpp's, on the head's rows copied out contiguous);
// the mask, the running max and sum and the exponentials are plain loops over the scores. A block
// the mask hides whole (every key after every query) costs nothing.
#include "kernels/ring_attention.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "kernels/ops.hpp"

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

namespace {

// Head h's hs columns of n strided rows, contiguous.
void head_rows(float* out, rows r, int64_t n, int64_t h, int64_t hs) {
  for (int64_t i = 0; i < n; ++i) std::copy(r.data + i * r.stride + h * hs, r.data + i * r.stride + (h + 1) * hs, out + i * hs);
}
// Adds contiguous (n, hs) into head h's columns of n strided rows.
void add_head_rows(mutable_rows r, const float* in, int64_t n, int64_t h, int64_t hs) {
  for (int64_t i = 0; i < n; ++i) {
    float* to = r.data + i * r.stride + h * hs;
    for (int64_t c = 0; c < hs; ++c) to[c] += in[i * hs + c];
  }
}
// True when no key of the block may attend to any query (every key after every query).
bool hidden(const int64_t* q_pos, int64_t Tq, const int64_t* k_pos, int64_t Tk) {
  return Tq == 0 || Tk == 0 || *std::min_element(k_pos, k_pos + Tk) > *std::max_element(q_pos, q_pos + Tq);
}

}  // namespace

void accumulate(partial& p, rows q, const int64_t* q_pos, rows k, rows v, const int64_t* k_pos, int64_t Tk) {
  const int64_t hs = p.C / p.NH, Tq = p.Tq;
  if (hidden(q_pos, Tq, k_pos, Tk)) return;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const float none = -std::numeric_limits<float>::infinity();
  std::vector<float> qh(static_cast<size_t>(Tq * hs)), kh(static_cast<size_t>(Tk * hs)), vh(kh.size()),
      s(static_cast<size_t>(Tq * Tk)), pv(qh.size());
  for (int64_t h = 0; h < p.NH; ++h) {
    head_rows(qh.data(), q, Tq, h, hs);
    head_rows(kh.data(), k, Tk, h, hs);
    head_rows(vh.data(), v, Tk, h, hs);
    ops::matmul_forward(s.data(), qh.data(), kh.data(), nullptr, Tq, hs, Tk);  // q . k for every pair
    for (int64_t i = 0; i < Tq; ++i) {
      float* row = s.data() + i * Tk;
      float block_max = none;
      for (int64_t j = 0; j < Tk; ++j) {
        row[j] = k_pos[j] > q_pos[i] ? none : row[j] * scale;
        block_max = std::max(block_max, row[j]);
      }
      if (block_max == none) {  // the mask hides the block from this query: it adds nothing
        std::fill(row, row + Tk, 0.0f);
        continue;
      }
      float& m = p.max[static_cast<size_t>(h * Tq + i)];
      float& l = p.sum[static_cast<size_t>(h * Tq + i)];
      float* o = p.out.data() + i * p.C + h * hs;
      const float new_max = std::max(m, block_max);
      const float rescale = std::exp(m - new_max);  // 0 before the first key (m = -inf)
      l *= rescale;
      for (int64_t c = 0; c < hs; ++c) o[c] *= rescale;
      for (int64_t j = 0; j < Tk; ++j) {
        row[j] = std::exp(row[j] - new_max);  // 0 where masked
        l += row[j];
      }
      m = new_max;
    }
    ops::matmul_backward_input(pv.data(), s.data(), vh.data(), Tq, hs, Tk);  // the weights times v
    add_head_rows({p.out.data(), p.C}, pv.data(), Tq, h, hs);
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
  if (hidden(q_pos, Tq, k_pos, Tk)) return;
  const int64_t hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  std::vector<float> qh(static_cast<size_t>(Tq * hs)), dyh(qh.size()), kh(static_cast<size_t>(Tk * hs)), vh(kh.size()),
      prob(static_cast<size_t>(Tq * Tk)), ds(prob.size()), dqh(qh.size()), dkh(kh.size()), dvh(kh.size());
  for (int64_t h = 0; h < NH; ++h) {
    head_rows(qh.data(), q, Tq, h, hs);
    head_rows(dyh.data(), dout, Tq, h, hs);
    head_rows(kh.data(), k, Tk, h, hs);
    head_rows(vh.data(), v, Tk, h, hs);
    ops::matmul_forward(prob.data(), qh.data(), kh.data(), nullptr, Tq, hs, Tk);  // the scores again
    ops::matmul_forward(ds.data(), dyh.data(), vh.data(), nullptr, Tq, hs, Tk);   // dP = dout . v
    for (int64_t i = 0; i < Tq; ++i) {
      const float lse_i = lse[h * Tq + i], D_i = D[h * Tq + i];
      float* pr = prob.data() + i * Tk;
      float* dsr = ds.data() + i * Tk;
      for (int64_t j = 0; j < Tk; ++j) {
        pr[j] = k_pos[j] > q_pos[i] ? 0.0f : std::exp(pr[j] * scale - lse_i);
        dsr[j] = pr[j] * (dsr[j] - D_i) * scale;  // dS = P (dP - D), scaled
      }
    }
    std::fill(dkh.begin(), dkh.end(), 0.0f);
    std::fill(dvh.begin(), dvh.end(), 0.0f);
    ops::matmul_backward_input(dqh.data(), ds.data(), kh.data(), Tq, hs, Tk);               // dS . k
    ops::matmul_backward_weight(dkh.data(), nullptr, ds.data(), qh.data(), Tq, hs, Tk);     // dS^T . q
    ops::matmul_backward_weight(dvh.data(), nullptr, prob.data(), dyh.data(), Tq, hs, Tk);  // P^T . dout
    add_head_rows(dq, dqh.data(), Tq, h, hs);
    add_head_rows(dk, dkh.data(), Tk, h, hs);
    add_head_rows(dv, dvh.data(), Tk, h, hs);
  }
}

}  // namespace troupe::ring_attention
