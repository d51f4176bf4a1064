// vocab_parallel_cross_entropy: the log-sum-exp of cross_entropy, with the row maximum, the sum of
// exponentials and the target logit assembled over the tensor-parallel group: three passes of the
// logits' device (ops.hpp on the host), an all-gather of the row peaks and an all-reduce of the
// sums between them, the group's collectives called with that device's memory.
#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/device_ops.hpp"
#include "kernels/loss.hpp"
#include "kernels/ops.hpp"

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
  const bool host = logits.where().is_cpu();
  if (host)  // a kernel cannot throw: a GPU's bad target gives NaN, as its cross_entropy's does
    for (int64_t n = 0; n < N; ++n) {
      const int32_t t = targets[static_cast<size_t>(n)];
      if (t < 0 || t >= vocab)
        throw std::out_of_range("vocab_parallel_cross_entropy: target " + std::to_string(t) + " at row " +
                                std::to_string(n) + " is outside [0, " + std::to_string(vocab) + ")");
    }
  const device_ops& k = ops_on(logits);
  const tensor on_device_targets = host ? tensor() : k.targets_here(targets);
  const int32_t* t = host ? targets.data() : targets_of(on_device_targets);
  // Per rank: 2N floats (row maxima, then their arg-max as a global index).
  tensor peaks = k.empty({2 * N * tp}), sums = k.empty({2 * N});
  float* all_peaks = f32_out(peaks);
  k.vocab_peaks(all_peaks + 2 * N * me, f32(logits), N, V, cols.begin);
  g.all_gather(all_peaks, peaks.numel());
  tensor probs = k.empty({N, V});
  k.vocab_exp_sums(f32_out(probs), f32_out(sums), all_peaks, tp, t, f32(logits), N, V, cols.begin);
  g.all_reduce_sum(f32_out(sums), sums.numel());
  loss_result r;
  r.count = N;
  if (grad_scale != 0.0f) r.dlogits = k.empty(logits.shape());
  float* dlogits = grad_scale != 0.0f ? f32_out(r.dlogits) : nullptr;
  if (!host) {  // each row's loss and hit, on their way to the host (settle() reads them)
    tensor stats = k.empty({N, 2});
    k.vocab_finish(f32_out(stats), dlogits, f32_out(probs), f32(sums), all_peaks, tp, t, N, V, cols.begin, grad_scale);
    r.row_stats = k.host_empty({N, 2});
    k.copy(r.row_stats, stats);
    return r;
  }
  // On the host the total is summed in double, row after row, as cross_entropy's.
  const float* s = f32(sums);
  for (int64_t n = 0; n < N; ++n) {
    const int owner = ops::vocab_owner(all_peaks, tp, N, n);
    r.loss_sum += static_cast<double>(all_peaks[2 * N * owner + n]) + std::log(static_cast<double>(s[n])) - s[N + n];
    r.correct += static_cast<int32_t>(all_peaks[2 * N * owner + N + n]) == targets[static_cast<size_t>(n)];
  }
  k.vocab_finish(nullptr, dlogits, f32_out(probs), s, all_peaks, tp, t, N, V, cols.begin, grad_scale);
  return r;
}

}  // namespace troupe
