// Softmax cross-entropy with a numerically stable log-sum-exp; the loss is summed in double so
// the value reported does not depend on batch size rounding.
#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/ops.hpp"

namespace troupe::ops {

double softmax_cross_entropy_forward(float* probs, const float* logits, const int32_t* targets, int64_t N,
                                     int64_t V) {
  double total = 0.0;
  for (int64_t n = 0; n < N; ++n) {
    const int32_t t = targets[n];
    if (t < 0 || t >= V)
      throw std::out_of_range("softmax_cross_entropy: target " + std::to_string(t) + " at row " +
                              std::to_string(n) + " is outside [0, " + std::to_string(V) + ")");
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
    total += static_cast<double>(maxv) + std::log(static_cast<double>(sum)) - row[t];
  }
  return total;
}

void softmax_cross_entropy_backward(float* dlogits, const float* probs, const int32_t* targets, int64_t N,
                                    int64_t V, float scale) {
  for (int64_t n = 0; n < N; ++n) {
    const float* p = probs + n * V;
    float* d = dlogits + n * V;
    for (int64_t v = 0; v < V; ++v) d[v] = p[v] * scale;
    d[targets[n]] -= scale;
  }
}

}  // namespace troupe::ops
