// partition: a linear-partition dynamic program (minimize the largest part) and cut checks.
// Sizes are small (tens of layers, tens of chunks), so the O(n^2 * chunks) table is fine.
#include "kernels/partition.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>

namespace troupe {

std::vector<int64_t> params_per_layer(const layer_list& layers) {
  std::vector<int64_t> out;
  out.reserve(layers.size());
  for (const auto& l : layers) out.push_back(l->num_params());
  return out;
}

std::vector<int64_t> expert_tails(const layer_list& layers) {
  std::vector<int64_t> out;
  out.reserve(layers.size());
  for (const auto& l : layers) out.push_back(l->expert_tail());
  return out;
}

std::vector<layer_range> balanced_partition(const std::vector<int64_t>& layer_params, int chunks) {
  const auto n = static_cast<int64_t>(layer_params.size());
  if (chunks < 1) throw std::invalid_argument("partition: chunks must be >= 1, got " + std::to_string(chunks));
  if (n < chunks)
    throw std::invalid_argument("partition: the model has " + std::to_string(n) + " layers, too few for " +
                                std::to_string(chunks) + " pipeline chunks (each chunk needs at least one layer)");
  std::vector<int64_t> prefix(static_cast<size_t>(n) + 1, 0);
  for (int64_t i = 0; i < n; ++i) prefix[static_cast<size_t>(i) + 1] = prefix[static_cast<size_t>(i)] + layer_params[static_cast<size_t>(i)];
  auto sum = [&](int64_t a, int64_t b) { return prefix[static_cast<size_t>(b)] - prefix[static_cast<size_t>(a)]; };
  constexpr int64_t inf = std::numeric_limits<int64_t>::max();
  // best[k][i]: smallest possible largest part when the first i layers form k chunks.
  const auto K = static_cast<size_t>(chunks);
  std::vector<std::vector<int64_t>> best(K + 1, std::vector<int64_t>(static_cast<size_t>(n) + 1, inf));
  std::vector<std::vector<int64_t>> from(K + 1, std::vector<int64_t>(static_cast<size_t>(n) + 1, -1));
  best[0][0] = 0;
  for (size_t k = 1; k <= K; ++k) {
    for (int64_t i = static_cast<int64_t>(k); i <= n; ++i) {
      for (int64_t j = static_cast<int64_t>(k) - 1; j < i; ++j) {  // last chunk is [j, i)
        const int64_t prev = best[k - 1][static_cast<size_t>(j)];
        if (prev == inf) continue;
        const int64_t cost = std::max(prev, sum(j, i));
        if (cost <= best[k][static_cast<size_t>(i)]) {  // the latest j wins ties: an MLP chunk keeps its ReLU
          best[k][static_cast<size_t>(i)] = cost;
          from[k][static_cast<size_t>(i)] = j;
        }
      }
    }
  }
  std::vector<layer_range> out(K);
  int64_t end = n;
  for (size_t k = K; k >= 1; --k) {
    const int64_t begin = from[k][static_cast<size_t>(end)];
    out[k - 1] = {begin, end};
    end = begin;
  }
  return out;
}

std::vector<layer_range> partition_at(int64_t num_layers, const std::vector<int64_t>& cuts, int chunks) {
  if (static_cast<int64_t>(cuts.size()) != chunks - 1)
    throw std::invalid_argument("partition: " + std::to_string(chunks) + " chunks need " + std::to_string(chunks - 1) +
                                " cut points, got " + std::to_string(cuts.size()));
  std::vector<layer_range> out;
  int64_t begin = 0;
  for (int64_t cut : cuts) {
    if (cut <= begin || cut >= num_layers)
      throw std::invalid_argument("partition: cut point " + std::to_string(cut) + " must lie in (" +
                                  std::to_string(begin) + ", " + std::to_string(num_layers) +
                                  "): cuts are increasing first-layer indices of chunks 1.. of a " +
                                  std::to_string(num_layers) + "-layer model");
    out.push_back({begin, cut});
    begin = cut;
  }
  if (begin >= num_layers)
    throw std::invalid_argument("partition: the model has " + std::to_string(num_layers) + " layers, too few for " +
                                std::to_string(chunks) + " chunks");
  out.push_back({begin, num_layers});
  return out;
}

layer_list take_layers(layer_list& layers, const layer_range& r) {
  if (r.begin < 0 || r.end > static_cast<int64_t>(layers.size()) || r.begin >= r.end)
    throw std::out_of_range("take_layers: bad range [" + std::to_string(r.begin) + ", " + std::to_string(r.end) + ")");
  layer_list out;
  for (int64_t i = r.begin; i < r.end; ++i) {
    auto& slot = layers[static_cast<size_t>(i)];
    if (!slot) throw std::logic_error("take_layers: layer " + std::to_string(i) + " was already taken");
    out.push_back(std::move(slot));
  }
  return out;
}

}  // namespace troupe
