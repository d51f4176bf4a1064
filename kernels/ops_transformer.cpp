// Transformer ops on the CPU after karpathy/llm.c train_gpt2.c: GELU (tanh), layernorm, token +
// position embedding (attention is ops_attention.cpp); the reference CUDA is tested against.
// Nothing allocates. layernorm_backward takes null dinp, or null dweight and dbias, so a layer
// can run the input and weight halves of its backward at different times.
// On the device's threads (parallel.hpp): row-wise ops by rows; a parameter gradient summed over
// rows is split by channels instead, each summing its rows in row order, so every value gets the
// same additions in the same order on any thread count.
#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>
#include <string>

#include "kernels/ops.hpp"
#include "kernels/parallel.hpp"
#include "kernels/sums.hpp"

namespace troupe::ops {

namespace {

// y += a * x
inline void axpy(float* y, float a, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

constexpr float gelu_scale = 0.7978845608028654f;  // sqrt(2 / pi)

// tanh as a clamped 13/6 rational polynomial (Eigen's float tanh): within 4e-7 of the exact
// value on all floats (libm's tanhf: 1e-7), but branch- and call-free, so GCC vectorizes GELU.
// With libm, tanhf and its expm1f took ~40% of a small GPT's forward + backward.
inline float tanh_approx(float x) {
  const float c = 7.90531110763549805f;  // beyond this the polynomial exceeds 1; tanh is 1 there
  const float xc = std::min(std::max(x, -c), c);
  const float x2 = xc * xc;
  float p = -2.76076847742355e-16f;
  p = p * x2 + 2.00018790482477e-13f;
  p = p * x2 + -8.60467152213735e-11f;
  p = p * x2 + 5.12229709037114e-08f;
  p = p * x2 + 1.48572235717979e-05f;
  p = p * x2 + 6.37261928875436e-04f;
  p = p * x2 + 4.89352455891786e-03f;
  float q = 1.19825839466702e-06f;
  q = q * x2 + 1.18534705686654e-04f;
  q = q * x2 + 2.26843463243900e-03f;
  q = q * x2 + 4.89352518554385e-03f;
  return std::abs(x) < 0.0004f ? x : p * xc / q;  // tiny x: tanh(x) = x to float precision
}

}  // namespace

void gelu_forward(float* out, const float* inp, int64_t n) {
  parallel_for(n, elementwise_grain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const float x = inp[i];
      const float cube = 0.044715f * x * x * x;
      out[i] = 0.5f * x * (1.0f + tanh_approx(gelu_scale * (x + cube)));
    }
  });
}

namespace {
// One row; restrict parameters, since without them GCC keeps the loop scalar (out might alias pre
// or bias).
void bias_gelu_row(float* __restrict out, float* __restrict pre, const float* __restrict bias, int64_t n) {
  for (int64_t c = 0; c < n; ++c) {
    const float x = pre[c] + bias[c];
    pre[c] = x;
    out[c] = 0.5f * x * (1.0f + tanh_approx(gelu_scale * (x + 0.044715f * x * x * x)));
  }
}
}  // namespace

void bias_gelu_forward(float* out, float* pre, const float* bias, int64_t N, int64_t OC) {
  parallel_for(N, rows_per_chunk(OC), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) bias_gelu_row(out + r * OC, pre + r * OC, bias, OC);
  });
}

void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) {
  parallel_for(n, elementwise_grain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const float x = inp[i];
      const float th = tanh_approx(gelu_scale * (x + 0.044715f * x * x * x));
      // sech^2 = 1 - tanh^2: llm.c's 1/cosh^2 overflows cosh for |x| > ~10 (harmlessly, but slower).
      const float sech2 = 1.0f - th * th;
      const float local = 0.5f * (1.0f + th) + 0.5f * x * sech2 * gelu_scale * (1.0f + 3.0f * 0.044715f * x * x);
      dinp[i] = local * dout[i];
    }
  });
}

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int64_t N, int64_t C) {
  const float eps = 1e-5f;  // PyTorch's default, so a PyTorch peer normalizes the same way
  parallel_for(N, rows_per_chunk(C), [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) {
      const float* x = inp + n * C;
      float* o = out + n * C;
      const float m = sum(x, C) / static_cast<float>(C);
      // Two passes (mean, then squared deviations) rather than E[x^2] - m^2, which cancels badly.
      float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      int64_t i = 0;
      for (; i + 8 <= C; i += 8)
        for (int j = 0; j < 8; ++j) acc[j] += (x[i + j] - m) * (x[i + j] - m);
      float v = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
      for (; i < C; ++i) v += (x[i] - m) * (x[i] - m);
      const float s = 1.0f / std::sqrt(v / static_cast<float>(C) + eps);
      for (int64_t c = 0; c < C; ++c) o[c] = (x[c] - m) * s * weight[c] + bias[c];
      mean[n] = m;
      rstd[n] = s;
    }
  });
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int64_t N, int64_t C) {
  if (dweight && dbias) {
    parallel_for(C, columns_per_chunk(N), [&](int64_t c0, int64_t c1) {
      for (int64_t n = 0; n < N; ++n) {
        const float* dy = dout + n * C;
        const float* x = inp + n * C;
        const float m = mean[n], s = rstd[n];
        for (int64_t c = c0; c < c1; ++c) {
          dbias[c] += dy[c];
          dweight[c] += (x[c] - m) * s * dy[c];
        }
      }
    });
  }
  if (!dinp) return;
  parallel_for(N, rows_per_chunk(C), [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) {
      const float* dy = dout + n * C;
      const float* x = inp + n * C;
      const float m = mean[n];
      const float s = rstd[n];
      // dnorm = weight * dy; dx = (dnorm - mean(dnorm) - norm * mean(dnorm * norm)) * rstd
      float acc_a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      float acc_b[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      int64_t i = 0;
      for (; i + 8 <= C; i += 8)
        for (int j = 0; j < 8; ++j) {
          const float dnorm = weight[i + j] * dy[i + j];
          acc_a[j] += dnorm;
          acc_b[j] += dnorm * (x[i + j] - m) * s;
        }
      float a = 0.0f, b = 0.0f;
      for (int j = 0; j < 8; ++j) a += acc_a[j], b += acc_b[j];
      for (; i < C; ++i) {
        const float dnorm = weight[i] * dy[i];
        a += dnorm;
        b += dnorm * (x[i] - m) * s;
      }
      a /= static_cast<float>(C);
      b /= static_cast<float>(C);
      float* dx = dinp + n * C;
      for (int64_t c = 0; c < C; ++c) dx[c] = (weight[c] * dy[c] - a - (x[c] - m) * s * b) * s;
    }
  });
}

namespace {
// A token id that is not an integer in [0, V) would read another row or past the table.
void check_token(float v, int64_t b, int64_t t, int64_t V) {
  if (!(v >= 0.0f && v < static_cast<float>(V)) || v != std::floor(v)) {
    std::ostringstream msg;
    msg << "embedding: token " << v << " at (" << b << ", " << t << ") is outside [0, " << V << ")";
    throw std::out_of_range(msg.str());
  }
}
}  // namespace

void embedding_forward(float* out, const float* tokens, const float* wte, const float* wpe, int64_t B, int64_t T,
                       int64_t C, int64_t V) {
  for (int64_t i = 0; i < B * T; ++i) check_token(tokens[i], i / T, i % T, V);  // before any row is written
  parallel_for(B * T, rows_per_chunk(C), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const float* e = wte + static_cast<int64_t>(tokens[i]) * C;
      const float* p = wpe + (i % T) * C;
      float* o = out + i * C;
      for (int64_t c = 0; c < C; ++c) o[c] = e[c] + p[c];
    }
  });
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const float* tokens, int64_t B, int64_t T,
                        int64_t C) {
  // Tokens were range-checked by the forward that produced dout. Two tokens may share a row, so
  // the split is by channels: each chunk adds every token's slice, in token order.
  parallel_for(C, columns_per_chunk(B * T), [&](int64_t c0, int64_t c1) {
    for (int64_t i = 0; i < B * T; ++i) {
      const float* d = dout + i * C + c0;
      axpy(dwte + static_cast<int64_t>(tokens[i]) * C + c0, 1.0f, d, c1 - c0);
      axpy(dwpe + (i % T) * C + c0, 1.0f, d, c1 - c0);
    }
  });
}

void embedding_shard_forward(float* out, const float* tokens, const float* wte_shard, int64_t B, int64_t T, int64_t C,
                             int64_t V, int64_t begin, int64_t count) {
  for (int64_t i = 0; i < B * T; ++i) check_token(tokens[i], i / T, i % T, V);
  parallel_for(B * T, rows_per_chunk(C), [&](int64_t first, int64_t end) {
    for (int64_t i = first; i < end; ++i) {
      const int64_t row = static_cast<int64_t>(tokens[i]) - begin;
      float* o = out + i * C;
      if (row >= 0 && row < count) std::copy(wte_shard + row * C, wte_shard + (row + 1) * C, o);
      else std::fill(o, o + C, 0.0f);
    }
  });
}

void embedding_shard_backward(float* dwte_shard, const float* dout, const float* tokens, int64_t B, int64_t T,
                              int64_t C, int64_t begin, int64_t count) {
  parallel_for(C, columns_per_chunk(B * T), [&](int64_t c0, int64_t c1) {
    for (int64_t i = 0; i < B * T; ++i) {
      const int64_t row = static_cast<int64_t>(tokens[i]) - begin;
      if (row >= 0 && row < count) axpy(dwte_shard + row * C + c0, 1.0f, dout + i * C + c0, c1 - c0);
    }
  });
}

void position_forward(float* out, const float* wpe, int64_t B, int64_t T, int64_t C) {
  parallel_for(B * T, rows_per_chunk(C), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      float* o = out + i * C;
      const float* p = wpe + (i % T) * C;
      for (int64_t c = 0; c < C; ++c) o[c] += p[c];
    }
  });
}

void position_backward(float* dwpe, const float* dout, int64_t B, int64_t T, int64_t C) {
  parallel_for(T, rows_per_chunk(B * C), [&](int64_t t0, int64_t t1) {  // dwpe[t] sums over b, in order
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = t0; t < t1; ++t) axpy(dwpe + t * C, 1.0f, dout + (b * T + t) * C, C);
  });
}
}  // namespace troupe::ops
