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

namespace {

// A count as two floats of 24 bits each: exact through any group's all-gather.
constexpr int64_t half_bits = 24;
constexpr int64_t half_mask = (int64_t{1} << half_bits) - 1;

}  // namespace

exchanged all_to_all(tp_group& g, const float* send, const std::vector<int64_t>& send_counts) {
  const int n = g.size(), r = g.rank();
  if (static_cast<int>(send_counts.size()) != n)
    throw std::invalid_argument("all_to_all: " + std::to_string(send_counts.size()) + " send counts for a group of " +
                                std::to_string(n));
  if (n > 4096) throw std::invalid_argument("all_to_all: a group of " + std::to_string(n) + " members");
  for (int j = 0; j < n; ++j)
    if (send_counts[static_cast<size_t>(j)] < 0 || send_counts[static_cast<size_t>(j)] > (half_mask << half_bits))
      throw std::invalid_argument("all_to_all: block " + std::to_string(j) + " has " +
                                  std::to_string(send_counts[static_cast<size_t>(j)]) + " floats");
  // count(o, d): floats member o sends member d. Row o is member o's shard of the gather.
  const auto N = static_cast<size_t>(n);
  std::vector<float> matrix(2 * N * N, 0.0f);
  for (size_t d = 0; d < N; ++d) {
    matrix[(static_cast<size_t>(r) * N + d) * 2] = static_cast<float>(send_counts[d] >> half_bits);
    matrix[(static_cast<size_t>(r) * N + d) * 2 + 1] = static_cast<float>(send_counts[d] & half_mask);
  }
  g.all_gather(matrix.data(), static_cast<int64_t>(matrix.size()));
  auto count = [&](int o, int d) {
    const size_t at = (static_cast<size_t>(o) * N + static_cast<size_t>(d)) * 2;
    return (static_cast<int64_t>(matrix[at]) << half_bits) + static_cast<int64_t>(matrix[at + 1]);
  };
  exchanged out;
  out.counts.resize(N);
  out.offsets.resize(N);
  int64_t total = 0;
  for (int o = 0; o < n; ++o) {
    out.counts[static_cast<size_t>(o)] = count(o, r);
    out.offsets[static_cast<size_t>(o)] = total;
    total += count(o, r);
  }
  out.data.resize(static_cast<size_t>(total));
  g.all_to_all(send, send_counts, out.data.data(), out.counts);
  return out;
}

}  // namespace troupe
