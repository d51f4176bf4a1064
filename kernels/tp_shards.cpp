// merge_tp_shards: every rank's layers, built only to read their layout (tp_layout), say where
// their values go in the unsplit layers.
#include "kernels/tp_shards.hpp"

#include <stdexcept>
#include <string>

#include "kernels/layers_parallel.hpp"

namespace troupe {

std::vector<float> merge_tp_shards(const model_spec& spec, const layer_range& r, const std::vector<tensor>& shards,
                                   int ep) {
  const int ranks = static_cast<int>(shards.size()), tp = ranks / ep;
  if (ranks == 1) return shards.front().to_vector();
  std::vector<float> full;
  for (int i = 0; i < ranks; ++i) {
    const int t = i % tp;
    tp_layout at(t, tp), expert_at(i / tp, ep);
    layer_list layers = build_layers(spec, tp > 1 ? &at : nullptr, false, {}, ep > 1 ? &expert_at : nullptr);
    const std::string who = "merge_tp_shards: tp rank " + std::to_string(t) +
                            (ep > 1 ? " at expert place " + std::to_string(i / tp) : std::string()) + " sent " +
                            std::to_string(shards[static_cast<size_t>(i)].numel()) + " parameters, ";
    int64_t full_at = 0, own_at = 0;
    for (int64_t l = r.begin; l < r.end; ++l) {
      const layer& lay = *layers.at(static_cast<size_t>(l));
      if (i == 0) full.resize(full.size() + static_cast<size_t>(lay.full_params()));
      if (own_at + lay.num_params() > shards[static_cast<size_t>(i)].numel())
        throw std::invalid_argument(who + "fewer than its layers hold");
      std::vector<param_run> runs = lay.full_runs();
      for (auto& run : runs) run.offset += full_at;
      scatter_runs(full.data(), shards[static_cast<size_t>(i)].data() + own_at, runs);
      full_at += lay.full_params();
      own_at += lay.num_params();
    }
    if (own_at != shards[static_cast<size_t>(i)].numel())
      throw std::invalid_argument(who + "its layers hold " + std::to_string(own_at));
  }
  return full;
}

}  // namespace troupe
