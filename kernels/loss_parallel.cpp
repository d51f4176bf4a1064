// vocab_parallel_cross_entropy: the log-sum-exp of cross_entropy, with the row maximum, the sum of
// exponentials and the target logit assembled over the tensor-parallel group.
#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/loss.hpp"

namespace troupe {

loss_result vocab_parallel_cross_entropy(const tensor& logits, const std::vector<int32_t>& targets, float grad_scale,
                                         int64_t vocab, tp_group& g) {
  const int tp = g.size(), me = g.rank();
  const shard_range cols = shard_of(vocab, tp, me);
  const int64_t V = cols.count;
  if (logits.rank() < 1 || logits.size(-1) != V)
    throw std::invalid_argument("vocab_parallel_cross_entropy: logits " + to_string(logits.shape()) + " on tp rank " +
                                std::to_string(me) + ", expected last dimension " + std::to_string(V) + " of " +
                                std::to_string(vocab));
  const int64_t N = logits.numel() / V;
  if (static_cast<int64_t>(targets.size()) != N)
    throw std::invalid_argument("vocab_parallel_cross_entropy: " + std::to_string(targets.size()) +
                                " targets for logits " + to_string(logits.shape()));
  const float* l = logits.data();
  // Per rank: 2N floats (row maxima, then their arg-max as a global index; exact below 2^24).
  std::vector<float> peaks(static_cast<size_t>(2 * N * tp));
  float* mine = peaks.data() + 2 * N * me;
  for (int64_t n = 0; n < N; ++n) {
    const int32_t t = targets[static_cast<size_t>(n)];
    if (t < 0 || t >= vocab)
      throw std::out_of_range("vocab_parallel_cross_entropy: target " + std::to_string(t) + " at row " +
                              std::to_string(n) + " is outside [0, " + std::to_string(vocab) + ")");
    int64_t best = 0;
    for (int64_t v = 1; v < V; ++v)
      if (l[n * V + v] > l[n * V + best]) best = v;
    mine[n] = V ? l[n * V + best] : -INFINITY;
    mine[N + n] = static_cast<float>(cols.begin + best);
  }
  g.all_gather(peaks.data(), static_cast<int64_t>(peaks.size()));
  std::vector<float> maxv(static_cast<size_t>(N));
  loss_result r;
  r.count = N;
  for (int64_t n = 0; n < N; ++n) {
    int owner = 0;  // the lowest rank holding the maximum: the first arg-max, as cross_entropy picks
    for (int q = 1; q < tp; ++q)
      if (peaks[static_cast<size_t>(2 * N * q + n)] > peaks[static_cast<size_t>(2 * N * owner + n)]) owner = q;
    maxv[static_cast<size_t>(n)] = peaks[static_cast<size_t>(2 * N * owner + n)];
    r.correct += static_cast<int32_t>(peaks[static_cast<size_t>(2 * N * owner + N + n)]) == targets[static_cast<size_t>(n)];
  }
  // Per row: the sum of exponentials over this rank's columns, and the target's logit where it
  // lives here (0 elsewhere, so the sum over ranks is exactly that one value).
  tensor probs = tensor::uninitialized({N, V});
  std::vector<float> sums(static_cast<size_t>(2 * N), 0.0f);
  float* p = probs.data();
  for (int64_t n = 0; n < N; ++n) {
    const float m = maxv[static_cast<size_t>(n)];
    float sum = 0.0f;
    for (int64_t v = 0; v < V; ++v) {
      p[n * V + v] = std::exp(l[n * V + v] - m);
      sum += p[n * V + v];
    }
    sums[static_cast<size_t>(n)] = sum;
    const int64_t t = targets[static_cast<size_t>(n)] - cols.begin;
    if (t >= 0 && t < V) sums[static_cast<size_t>(N + n)] = l[n * V + t];
  }
  g.all_reduce_sum(sums.data(), 2 * N);
  for (int64_t n = 0; n < N; ++n) {
    const float sum = sums[static_cast<size_t>(n)];
    r.loss_sum += static_cast<double>(maxv[static_cast<size_t>(n)]) + std::log(static_cast<double>(sum)) -
                  sums[static_cast<size_t>(N + n)];
    const float inv = 1.0f / sum;
    for (int64_t v = 0; v < V; ++v) p[n * V + v] *= inv;
  }
  if (grad_scale != 0.0f) {
    r.dlogits = tensor::uninitialized(logits.shape());
    float* d = r.dlogits.data();
    for (int64_t i = 0; i < N * V; ++i) d[i] = p[i] * grad_scale;
    for (int64_t n = 0; n < N; ++n) {
      const int64_t t = targets[static_cast<size_t>(n)] - cols.begin;
      if (t >= 0 && t < V) d[n * V + t] -= grad_scale;
    }
  }
  return r;
}

}  // namespace troupe
