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

batch take_positions(const batch& b, const std::vector<int64_t>& at) {
  if (b.inputs.rank() != 2 || static_cast<int64_t>(b.targets.size()) != b.inputs.numel())
    throw std::invalid_argument("a sequence's positions: the batch has inputs " + to_string(b.inputs.shape()) + " and " +
                                std::to_string(b.targets.size()) + " targets, not (B, T) tokens with one target each");
  const int64_t B = b.inputs.size(0), T = b.inputs.size(1), n = static_cast<int64_t>(at.size());
  batch out;
  out.inputs = tensor({B, n});
  for (int64_t i = 0; i < n; ++i)
    if (at[static_cast<size_t>(i)] < 0 || at[static_cast<size_t>(i)] >= T)
      throw std::invalid_argument("a sequence's positions: " + std::to_string(at[static_cast<size_t>(i)]) +
                                  " is not below T = " + std::to_string(T));
  for (int64_t s = 0; s < B; ++s)
    for (int64_t i = 0; i < n; ++i) {
      const int64_t from = s * T + at[static_cast<size_t>(i)];
      out.inputs.data()[s * n + i] = b.inputs.data()[from];
      out.targets.push_back(b.targets[static_cast<size_t>(from)]);
    }
  return out;
}

}  // namespace troupe
