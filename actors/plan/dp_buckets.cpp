// plan_buckets: walk the layers last to first, closing a bucket when the next layer would overflow it.
#include "actors/plan/dp_buckets.hpp"

#include "comm/ring_schedule.hpp"

#include <cstddef>
#include <stdexcept>
#include <string>

namespace troupe {

std::vector<grad_bucket> plan_buckets(const std::vector<int64_t>& layer_params, int64_t cap_bytes,
                                      const std::vector<int64_t>& expert_tails) {
  std::vector<int64_t> offsets(layer_params.size() + 1, 0);
  for (std::size_t i = 0; i < layer_params.size(); ++i) offsets[i + 1] = offsets[i] + layer_params[i];
  auto tail = [&](int64_t i) { return expert_tails.empty() ? int64_t{0} : expert_tails.at(static_cast<size_t>(i)); };
  std::vector<grad_bucket> out;
  int64_t top = static_cast<int64_t>(layer_params.size()) - 1;  // highest layer of the open bucket
  int64_t end = offsets[top + 1];                               // and where it ends
  // Closes the open bucket down to `from` (exclusive of layer `below` and under).
  auto close = [&](int64_t from, int64_t below) {
    int64_t first = below + 1;  // ready after its lowest layer with parameters
    while (first < top && layer_params[first] == 0) ++first;
    out.push_back({from, end - from, first, top});
  };
  for (int64_t i = top; i >= 0; --i) {
    const int64_t dense_end = offsets[i + 1] - tail(i);  // layer i's elements before its experts'
    if (tail(i) > 0) {
      if (end > offsets[i + 1]) close(offsets[i + 1], i);
      out.push_back({dense_end, tail(i), i, i, true});
      top = i;
      end = dense_end;
    }
    const int64_t open = end - dense_end;  // elements already in the open bucket
    const int64_t with = open + dense_end - offsets[i];
    if (open > 0 && with * static_cast<int64_t>(sizeof(float)) > cap_bytes) {  // layer i does not fit
      close(dense_end, i);
      top = i;
      end = dense_end;
    }
  }
  if (end > 0) out.push_back({0, end, 0, top});
  else if (!out.empty()) out.back().first_layer = 0;  // parameter-free layers at the bottom
  return out;
}

grad_units plan_grad_units(const std::vector<grad_bucket>& buckets) {
  grad_units u;
  for (size_t b = 0; b < buckets.size(); ++b) {
    const grad_bucket& g = buckets[b];
    if (g.experts) {  // its layer's other elements end where it begins, in the next bucket
      if (b + 1 >= buckets.size() || buckets[b + 1].offset + buckets[b + 1].count != g.offset ||
          buckets[b + 1].last_layer != g.first_layer)
        throw std::invalid_argument("plan_grad_units: the experts' bucket " + std::to_string(b) +
                                    " has no bucket after it holding the rest of layer " + std::to_string(g.first_layer));
      const grad_bucket& below = buckets[b + 1];
      u.unit_of.insert(u.unit_of.end(), {u.layers.size(), u.layers.size()});
      u.at.insert(u.at.end(), {g.offset - below.offset, 0});
      u.ready_layer.insert(u.ready_layer.end(), {below.first_layer, below.first_layer});
      u.layers.emplace_back(static_cast<size_t>(below.first_layer), static_cast<size_t>(g.last_layer));
      u.buckets_of_unit.push_back(2);
      ++b;
      continue;
    }
    u.unit_of.push_back(u.layers.size());
    u.at.push_back(0);
    u.ready_layer.push_back(g.first_layer);
    u.layers.emplace_back(static_cast<size_t>(g.first_layer), static_cast<size_t>(g.last_layer));
    u.buckets_of_unit.push_back(1);
  }
  return u;
}

std::vector<shard_piece> shard_layout(const std::vector<std::vector<grad_bucket>>& buckets, int ranks, int rank,
                                      int expert_ranks, int expert_rank) {
  std::vector<shard_piece> out;
  int64_t at = 0;
  for (size_t c = 0; c < buckets.size(); ++c)
    for (size_t b = 0; b < buckets[c].size(); ++b) {
      const bool experts = buckets[c][b].experts && expert_ranks > 0;
      const ring::range seg =
          ring::segment(buckets[c][b].count, experts ? expert_ranks : ranks, experts ? expert_rank : rank);
      out.push_back({static_cast<int>(c), b, seg.offset, seg.count, at});
      at += seg.count;
    }
  return out;
}

int64_t shard_size(const std::vector<shard_piece>& pieces) {
  return pieces.empty() ? 0 : pieces.back().at_shard + pieces.back().count;
}

}  // namespace troupe
