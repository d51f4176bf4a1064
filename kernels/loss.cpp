// cross_entropy over ops::softmax_cross_entropy_*.
#include "kernels/loss.hpp"

#include <atomic>
#include <stdexcept>

#include "kernels/batch.hpp"
#include "kernels/ops.hpp"
#include "kernels/parallel.hpp"

namespace troupe {

loss_result cross_entropy(const tensor& logits, const std::vector<int32_t>& targets, float grad_scale) {
  const int64_t V = logits.size(-1);
  const int64_t N = logits.numel() / V;
  if (static_cast<int64_t>(targets.size()) != N)
    throw std::invalid_argument("cross_entropy: " + std::to_string(targets.size()) + " targets for logits " +
                                to_string(logits.shape()));
  loss_result r;
  r.count = N;
  tensor probs = tensor::uninitialized({N, V});
  r.loss_sum = ops::softmax_cross_entropy_forward(probs.data(), logits.data(), targets.data(), N, V);
  const float* p = probs.data();
  std::atomic<int64_t> correct{0};  // a count: the same whatever order the chunks add theirs
  parallel_for(N, rows_per_chunk(V), [&](int64_t begin, int64_t end) {
    int64_t here = 0;
    for (int64_t n = begin; n < end; ++n) {
      int64_t best = 0;
      for (int64_t v = 1; v < V; ++v)
        if (p[n * V + v] > p[n * V + best]) best = v;
      here += best == targets[static_cast<size_t>(n)];
    }
    correct.fetch_add(here, std::memory_order_relaxed);
  });
  r.correct += correct.load();
  if (grad_scale != 0.0f) {
    r.dlogits = tensor::uninitialized(logits.shape());
    ops::softmax_cross_entropy_backward(r.dlogits.data(), p, targets.data(), N, V, grad_scale);
  }
  return r;
}

batch slice(const batch& b, int64_t begin, int64_t end) {
  const int64_t n = b.samples();
  if (begin < 0 || end > n || begin > end)
    throw std::out_of_range("batch slice [" + std::to_string(begin) + ", " + std::to_string(end) +
                            ") of " + std::to_string(n) + " samples");
  const int64_t row = n ? b.inputs.numel() / n : 0;
  shape_t shape = b.inputs.shape();
  shape[0] = end - begin;
  batch out;
  out.inputs = tensor(shape, std::vector<float>(b.inputs.data() + begin * row, b.inputs.data() + end * row));
  const int64_t per_sample = n ? static_cast<int64_t>(b.targets.size()) / n : 0;
  out.targets.assign(b.targets.begin() + begin * per_sample, b.targets.begin() + end * per_sample);
  return out;
}

}  // namespace troupe
