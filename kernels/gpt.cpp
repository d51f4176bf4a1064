// GPT-style decoder builder: [embedding, transformer_block x blocks, layernorm, linear lm head].
// Tokens (B, T) in, logits (B, T, V) out; cross_entropy reads them as (B*T, V) rows. The lm head
// is a plain untied linear (with bias, PyTorch default init) so pipelines can cut before it and
// tensor parallelism can split it like any other linear; GPT-2 ties it to wte instead.
#include <cmath>
#include <stdexcept>

#include "kernels/layers_dense.hpp"
#include "kernels/layers_moe_block.hpp"
#include "kernels/layers_transformer.hpp"
#include "kernels/model.hpp"

namespace troupe {

layer_list build_gpt(const model_spec& spec, tp_group* tp, bool sequence_parallel, context::context_split context,
                     tp_group* experts) {
  const bool sp = sequence_parallel && tp_size(tp) > 1;
  if (spec.kind != model_kind::gpt) throw std::invalid_argument("build_gpt: model.kind is \"" + std::string(to_string(spec.kind)) + "\", not \"gpt\"");
  validate(spec, tp_size(tp));
  const int64_t C = spec.channels;
  // GPT-2 scales the residual output projections by 1/sqrt(2 * blocks): each block adds two
  // branches to the residual stream, and this keeps its variance independent of depth.
  const float proj_std = 0.02f / std::sqrt(2.0f * static_cast<float>(spec.blocks));
  layer_list layers;
  layers.push_back(std::make_unique<embedding>(spec.vocab, spec.context, C, tp, sp, context.group));
  for (int64_t i = 0; i < spec.blocks; ++i) {
    if (spec.is_moe_block(i)) {
      moe_options o;
      o.experts = spec.experts;
      o.top_k = spec.top_k;
      o.capacity_factor = spec.capacity_factor;
      o.aux_coefficient = static_cast<float>(spec.aux_loss_coefficient);
      layers.push_back(std::make_unique<moe_block>(C, spec.heads, o, proj_std, context, experts));
    } else {
      layers.push_back(std::make_unique<transformer_block>(C, spec.heads, proj_std, tp, sp, context));
    }
  }
  layers.push_back(std::make_unique<layernorm>(C, sp ? tp : nullptr));
  if (tp_size(tp) == 1) {
    layers.push_back(std::make_unique<linear>(C, spec.vocab));
    return layers;
  }
  // The head's logits stay split over the vocabulary (vocab_parallel_cross_entropy reads them);
  // under sequence parallelism it gathers every sequence first, so the loss sees the whole batch.
  auto head = std::make_unique<column_parallel_linear>(
      C, spec.vocab, std::vector<shard_range>{shard_of(spec.vocab, tp_size(tp), tp_rank(tp))}, tp);
  head->set_sequence_parallel(sp);
  layers.push_back(std::move(head));
  return layers;
}

}  // namespace troupe
