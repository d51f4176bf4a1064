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

}  // namespace troupe::ops
