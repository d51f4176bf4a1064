// cross_entropy on the logits' device (device_ops.hpp), and slicing a batch.
#include "kernels/loss.hpp"

#include <stdexcept>

#include "kernels/batch.hpp"
#include "kernels/device_ops.hpp"

namespace troupe {

loss_result cross_entropy(const tensor& logits, const std::vector<int32_t>& targets, float grad_scale) {
  const int64_t V = logits.size(-1);
  const int64_t N = logits.numel() / V;
  if (static_cast<int64_t>(targets.size()) != N)
    throw std::invalid_argument("cross_entropy: " + std::to_string(targets.size()) + " targets for logits " +
                                to_string(logits.shape()));
  return ops_on(logits).cross_entropy(logits, targets, grad_scale);
}

void loss_result::settle() {
  if (row_stats.empty()) return;
  const float* s = row_stats.data();
  for (int64_t n = 0; n < row_stats.numel() / 2; ++n) {
    loss_sum += s[2 * n];
    correct += s[2 * n + 1] != 0.0f;
  }
  row_stats = tensor();
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
