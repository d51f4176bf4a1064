// plan_buckets: walk the layers last to first, closing a bucket once it holds cap_bytes.
#include "actors/dp_buckets.hpp"

#include <cstddef>

namespace troupe {

std::vector<grad_bucket> plan_buckets(const std::vector<int64_t>& layer_params, int64_t cap_bytes) {
  std::vector<int64_t> offsets(layer_params.size() + 1, 0);
  for (std::size_t i = 0; i < layer_params.size(); ++i) offsets[i + 1] = offsets[i] + layer_params[i];
  std::vector<grad_bucket> out;
  int64_t top = static_cast<int64_t>(layer_params.size()) - 1;  // highest layer of the open bucket
  for (int64_t i = top; i >= 0; --i) {
    const int64_t bytes = (offsets[top + 1] - offsets[i]) * static_cast<int64_t>(sizeof(float));
    if (bytes > 0 && (bytes >= cap_bytes || i == 0)) {
      out.push_back({offsets[i], offsets[top + 1] - offsets[i], i, top});
      top = i - 1;
    }
  }
  // Parameter-free layers below the last bucket (none in our models) join it.
  if (!out.empty() && top >= 0) out.back().first_layer = 0;
  return out;
}

}  // namespace troupe
