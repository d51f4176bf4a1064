// merge_tp_shards: every rank's layers, built only to read their layout (tp_layout), say where
// their values go in the unsplit layers.
#include "kernels/tp_shards.hpp"

#include <stdexcept>
#include <string>

#include "kernels/layers_parallel.hpp"

namespace troupe {

std::vector<float> merge_tp_shards(const model_spec& spec, const layer_range& r, const std::vector<tensor>& shards) {
  const int tp = static_cast<int>(shards.size());
  if (tp == 1) return shards.front().to_vector();
  std::vector<float> full;
  for (int t = 0; t < tp; ++t) {
    tp_layout at(t, tp);
    layer_list layers = build_layers(spec, &at);
    int64_t full_at = 0, own_at = 0;
    for (int64_t l = r.begin; l < r.end; ++l) {
      const layer& lay = *layers.at(static_cast<size_t>(l));
      if (t == 0) full.resize(full.size() + static_cast<size_t>(lay.full_params()));
      if (own_at + lay.num_params() > shards[static_cast<size_t>(t)].numel())
        throw std::invalid_argument("merge_tp_shards: tp rank " + std::to_string(t) + " sent " +
                                    std::to_string(shards[static_cast<size_t>(t)].numel()) +
                                    " parameters, fewer than its layers hold");
      std::vector<param_run> runs = lay.full_runs();
      for (auto& run : runs) run.offset += full_at;
      scatter_runs(full.data(), shards[static_cast<size_t>(t)].data() + own_at, runs);
      full_at += lay.full_params();
      own_at += lay.num_params();
    }
    if (own_at != shards[static_cast<size_t>(t)].numel())
      throw std::invalid_argument("merge_tp_shards: tp rank " + std::to_string(t) + " sent " +
                                  std::to_string(shards[static_cast<size_t>(t)].numel()) + " parameters, its layers hold " +
                                  std::to_string(own_at));
  }
  return full;
}

}  // namespace troupe
