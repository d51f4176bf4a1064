// shard_of: the one split of troupe (tp_group.hpp).
#include "kernels/tp_group.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace troupe {

shard_range shard_of(int64_t n, int parts, int j) {
  if (parts < 1 || j < 0 || j >= parts)
    throw std::invalid_argument("shard_of: part " + std::to_string(j) + " of " + std::to_string(parts));
  const int64_t base = n / parts, extra = n % parts;
  return {j * base + std::min<int64_t>(j, extra), base + (j < extra ? 1 : 0)};
}

void tp_layout::all_reduce_sum(float*, int64_t) {
  throw std::logic_error("tp_layout: a layer built to read its shapes was run");
}
void tp_layout::reduce_scatter_sum(float*, int64_t) {
  throw std::logic_error("tp_layout: a layer built to read its shapes was run");
}
void tp_layout::all_gather(float*, int64_t) {
  throw std::logic_error("tp_layout: a layer built to read its shapes was run");
}

void tp_layout::shift(const float*, int64_t, float*, int64_t) {
  throw std::logic_error("tp_layout: a layer built to read its shapes was run");
}
void tp_layout::all_to_all(const float*, const std::vector<int64_t>&, float*, const std::vector<int64_t>&) {
  throw std::logic_error("tp_layout: a layer built to read its shapes was run");
}

}  // namespace troupe
