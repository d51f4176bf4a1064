// Softmax cross-entropy with a numerically stable log-sum-exp; the loss is summed in double so
// the value reported does not depend on batch size rounding. Rows run on the device's threads
// (parallel.hpp); each row's loss is kept and the total summed in row order afterwards, so it
// has the same bits on any thread count.
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/ops.hpp"
#include "kernels/parallel.hpp"

namespace troupe::ops {

double softmax_cross_entropy_forward(float* probs, const float* logits, const int32_t* targets, int64_t N,
                                     int64_t V) {
  for (int64_t n = 0; n < N; ++n)  // before any row is written
    if (targets[n] < 0 || targets[n] >= V)
      throw std::out_of_range("softmax_cross_entropy: target " + std::to_string(targets[n]) + " at row " +
                              std::to_string(n) + " is outside [0, " + std::to_string(V) + ")");
  std::vector<double> row_loss(static_cast<size_t>(N));
  parallel_for(N, rows_per_chunk(V), [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) {
      const float* row = logits + n * V;
      float* p = probs + n * V;
      float maxv = row[0];
      for (int64_t v = 1; v < V; ++v) maxv = std::max(maxv, row[v]);
      float sum = 0.0f;
      for (int64_t v = 0; v < V; ++v) {
        p[v] = std::exp(row[v] - maxv);
        sum += p[v];
      }
      const float inv = 1.0f / sum;
      for (int64_t v = 0; v < V; ++v) p[v] *= inv;
      row_loss[static_cast<size_t>(n)] = static_cast<double>(maxv) + std::log(static_cast<double>(sum)) - row[targets[n]];
    }
  });
  double total = 0.0;
  for (double l : row_loss) total += l;
  return total;
}

void softmax_cross_entropy_backward(float* dlogits, const float* probs, const int32_t* targets, int64_t N,
                                    int64_t V, float scale) {
  parallel_for(N, rows_per_chunk(V), [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) {
      const float* p = probs + n * V;
      float* d = dlogits + n * V;
      for (int64_t v = 0; v < V; ++v) d[v] = p[v] * scale;
      d[targets[n]] -= scale;
    }
  });
}

void vocab_peaks(float* peaks, const float* logits, int64_t N, int64_t V, int64_t begin) {
  for (int64_t n = 0; n < N; ++n) {
    const float* l = logits + n * V;
    int64_t best = 0;
    for (int64_t v = 1; v < V; ++v)
      if (l[v] > l[best]) best = v;
    peaks[n] = V ? l[best] : -INFINITY;
    peaks[N + n] = static_cast<float>(begin + best);
  }
}

void vocab_exp_sums(float* probs, float* sums, const float* all_peaks, int tp, const int32_t* targets,
                    const float* logits, int64_t N, int64_t V, int64_t begin) {
  for (int64_t n = 0; n < N; ++n) {
    const float m = all_peaks[2 * N * vocab_owner(all_peaks, tp, N, n) + n];
    const float* l = logits + n * V;
    float* p = probs + n * V;
    float sum = 0.0f;
    for (int64_t v = 0; v < V; ++v) {
      p[v] = std::exp(l[v] - m);
      sum += p[v];
    }
    sums[n] = sum;
    const int64_t t = targets[n] - begin;
    sums[N + n] = t >= 0 && t < V ? l[t] : 0.0f;
  }
}

void vocab_finish(float* row_stats, float* dlogits, float* probs, const float* sums, const float* all_peaks, int tp,
                  const int32_t* targets, int64_t N, int64_t V, int64_t begin, float scale) {
  for (int64_t n = 0; n < N; ++n) {
    float* p = probs + n * V;
    const float inv = 1.0f / sums[n];
    for (int64_t v = 0; v < V; ++v) p[v] *= inv;
    const int64_t t = targets[n] - begin;
    if (dlogits) {
      float* d = dlogits + n * V;
      for (int64_t v = 0; v < V; ++v) d[v] = p[v] * scale;
      if (t >= 0 && t < V) d[t] -= scale;
    }
    if (row_stats) {
      const int owner = vocab_owner(all_peaks, tp, N, n);
      const double m = all_peaks[2 * N * owner + n];
      row_stats[2 * n] = static_cast<float>(m + std::log(static_cast<double>(sums[n])) - sums[N + n]);
      row_stats[2 * n + 1] = static_cast<int32_t>(all_peaks[2 * N * owner + N + n]) == targets[n] ? 1.0f : 0.0f;
    }
  }
}

}  // namespace troupe::ops
