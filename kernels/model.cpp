// model_spec validation and the MLP builder.
#include "kernels/model.hpp"

#include <stdexcept>

#include "kernels/layers_dense.hpp"
#include "kernels/layers_parallel.hpp"

namespace troupe {

const char* to_string(model_kind k) {
  switch (k) {
    case model_kind::mlp: return "mlp";
    case model_kind::gpt: return "gpt";
  }
  return "?";
}

std::optional<model_kind> parse_model_kind(const std::string& text) {
  for (model_kind k : {model_kind::mlp, model_kind::gpt})
    if (text == to_string(k)) return k;
  return std::nullopt;
}

void validate(const model_spec& spec, int tp) {
  auto positive = [](int64_t v, const char* name) {
    if (v <= 0) throw std::invalid_argument(std::string("model.") + name + " must be positive, got " + std::to_string(v));
  };
  if (spec.kind == model_kind::mlp) {
    positive(spec.inputs, "inputs");
    positive(spec.classes, "classes");
    for (int64_t h : spec.hidden) positive(h, "hidden");
  } else if (spec.kind == model_kind::gpt) {
    positive(spec.vocab, "vocab");
    positive(spec.context, "context");
    positive(spec.channels, "channels");
    positive(spec.heads, "heads");
    positive(spec.blocks, "blocks");
    if (spec.channels % spec.heads != 0)
      throw std::invalid_argument("model.channels (" + std::to_string(spec.channels) +
                                  ") must be divisible by model.heads (" + std::to_string(spec.heads) + ")");
    if (spec.experts < 0 || spec.experts == 1)
      throw std::invalid_argument("model.experts must be 0 (dense) or at least 2, got " + std::to_string(spec.experts));
    if (spec.experts > 0) {
      if (spec.top_k < 1 || spec.top_k > spec.experts)
        throw std::invalid_argument("model.top_k must be between 1 and model.experts (" + std::to_string(spec.experts) +
                                    "), got " + std::to_string(spec.top_k));
      if (spec.moe_every < 1 || spec.moe_every > spec.blocks)
        throw std::invalid_argument("model.moe_every must be between 1 and model.blocks (" + std::to_string(spec.blocks) +
                                    "), got " + std::to_string(spec.moe_every));
      if (!(spec.capacity_factor >= 0) || !(spec.aux_loss_coefficient >= 0))
        throw std::invalid_argument("model.capacity_factor and model.aux_loss_coefficient must be >= 0");
    }
  }
  if (spec.kind == model_kind::mlp && spec.experts != 0)
    throw std::invalid_argument("model.experts replaces a GPT block's MLP; the mlp has no blocks (use gpt)");
  if (spec.experts > 0 && tp > 1)
    throw std::invalid_argument("model.experts with tp " + std::to_string(tp) +
                                ": an MoE block holds its experts and attention whole on one rank; use --tp 1");
  validate_tp_split(spec, tp);
}

void validate_tp_split(const model_spec& spec, int tp) {
  if (tp < 1) throw std::invalid_argument("tensor-parallel size must be positive, got " + std::to_string(tp));
  if (tp == 1) return;
  auto splits = [tp](int64_t v, const char* name) {
    if (v < tp)
      throw std::invalid_argument(std::string("model.") + name + " (" + std::to_string(v) + ") is smaller than tp (" +
                                  std::to_string(tp) + "): every tensor-parallel rank needs a share of it");
  };
  if (spec.kind == model_kind::mlp) {
    splits(spec.classes, "classes");
    for (int64_t h : spec.hidden) splits(h, "hidden");
  } else {
    if (spec.vocab > 0) splits(spec.vocab, "vocab");  // 0: not read from the corpus yet
    if (spec.heads % tp != 0)
      throw std::invalid_argument("model.heads (" + std::to_string(spec.heads) + ") must be divisible by tp (" +
                                  std::to_string(tp) + "): tensor parallelism splits attention by heads");
  }
}

int64_t param_count(const model_spec& spec) {
  validate(spec);
  // Summed in long double: a product past 2^62 is refused rather than wrapped.
  long double n = 0;
  auto linear = [&n](long double in, long double out) { n += in * out + out; };
  if (spec.kind == model_kind::mlp) {
    long double in = static_cast<long double>(spec.inputs);
    for (int64_t h : spec.hidden) linear(in, static_cast<long double>(h)), in = static_cast<long double>(h);
    linear(in, static_cast<long double>(spec.classes));
  } else {
    const auto V = static_cast<long double>(spec.vocab), T = static_cast<long double>(spec.context),
               C = static_cast<long double>(spec.channels), B = static_cast<long double>(spec.blocks);
    // embeddings; per block two layernorms, qkv, the attention's projection, the MLP's two
    // linears (12C^2 + 13C); the final layernorm; the head
    n = V * C + T * C + B * (12 * C * C + 13 * C) + 2 * C + V * C + V;
    // An MoE block's MLP is a router (E x C) and E MLPs of 4C features (8C^2 + 5C each).
    const auto E = static_cast<long double>(spec.experts);
    for (int64_t b = 0; b < spec.blocks; ++b)
      if (spec.is_moe_block(b)) n += E * C + (E - 1) * (8 * C * C + 5 * C);
  }
  if (!(n < 4.6e18L)) throw std::invalid_argument("model " + describe(spec) + " has more than 2^62 parameters");
  return static_cast<int64_t>(n);
}

std::string describe(const model_spec& spec) {
  if (spec.kind == model_kind::mlp) {
    std::string s = "mlp " + std::to_string(spec.inputs);
    for (int64_t h : spec.hidden) s += "-" + std::to_string(h);
    return s + "-" + std::to_string(spec.classes);
  }
  return "gpt vocab=" + std::to_string(spec.vocab) + " T=" + std::to_string(spec.context) +
         " C=" + std::to_string(spec.channels) + " heads=" + std::to_string(spec.heads) +
         " blocks=" + std::to_string(spec.blocks) +
         (spec.experts > 0 ? " experts=" + std::to_string(spec.experts) + " top_k=" + std::to_string(spec.top_k) +
                                 (spec.moe_every > 1 ? " moe_every=" + std::to_string(spec.moe_every) : std::string())
                           : std::string());
}

layer_list build_layers(const model_spec& spec, tp_group* tp, bool sequence_parallel, context::context_split context,
                        tp_group* experts) {
  validate(spec, tp_size(tp));
  if (sequence_parallel && spec.kind != model_kind::gpt)
    throw std::invalid_argument("sequence parallelism splits a GPT's layernorm regions; the mlp has none");
  if (context && spec.kind != model_kind::gpt)
    throw std::invalid_argument("context parallelism splits sequences: model.kind \"" + std::string(to_string(spec.kind)) + "\" has none (use gpt)");
  if (tp_size(experts) > 1 && spec.experts == 0)
    throw std::invalid_argument("expert parallelism shares out a mixture of experts: the model has none (set model.experts)");
  return spec.kind == model_kind::mlp ? build_mlp(spec, tp) : build_gpt(spec, tp, sequence_parallel, context, experts);
}

bool splits_logits(const model_spec& spec, int tp) {
  // The MLP's linears alternate column, row, column...: its last one is column-parallel when it
  // is an even one. The GPT's head always is.
  return tp > 1 && (spec.kind == model_kind::gpt || spec.hidden.size() % 2 == 0);
}

int64_t output_features(const model_spec& spec) { return spec.kind == model_kind::gpt ? spec.vocab : spec.classes; }

layer_list build_mlp(const model_spec& spec, tp_group* tp) {
  const int n = tp_size(tp), r = tp_rank(tp);
  layer_list layers;
  int64_t in = spec.inputs;
  std::vector<int64_t> outs = spec.hidden;
  outs.push_back(spec.classes);
  for (size_t i = 0; i < outs.size(); ++i) {
    const int64_t out = outs[i];
    if (n == 1) layers.push_back(std::make_unique<linear>(in, out));
    else if (i % 2 == 0) layers.push_back(std::make_unique<column_parallel_linear>(in, out, std::vector<shard_range>{shard_of(out, n, r)}, tp));
    else layers.push_back(std::make_unique<row_parallel_linear>(in, out, shard_of(in, n, r), tp));
    if (i + 1 < outs.size()) layers.push_back(std::make_unique<relu>());
    in = out;
  }
  return layers;
}

}  // namespace troupe
