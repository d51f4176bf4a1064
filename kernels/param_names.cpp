// named_params: walks build_layers' list and prefixes each layer's own param_specs() names.
#include "kernels/param_names.hpp"

#include <stdexcept>

namespace troupe {

namespace {
// The module path of layer i of the GPT: [embedding, block x blocks, layernorm, linear head].
std::string gpt_prefix(const model_spec& spec, size_t i, const layer& l) {
  const auto blocks = static_cast<size_t>(spec.blocks);
  const char* expected = i == 0                                          ? "embedding"
                         : i <= blocks && spec.is_moe_block(int64_t(i) - 1) ? "moe_block"
                         : i <= blocks                                      ? "block"
                         : i == blocks + 1                                  ? "layernorm"
                                                                            : "linear";
  if (l.kind() != expected || i > blocks + 2)
    throw std::logic_error("named_params: GPT layer " + std::to_string(i) + " is a " + l.kind() + ", expected a " +
                           expected);
  if (i == 0) return "";
  if (i <= blocks) return "blocks." + std::to_string(i - 1) + ".";
  return i == blocks + 1 ? "ln_f." : "head.";
}
}  // namespace

std::vector<named_param> named_params(const model_spec& spec) {
  const layer_list layers = build_layers(spec);
  std::vector<named_param> out;
  int64_t offset = 0;
  for (size_t i = 0; i < layers.size(); ++i) {
    const std::string prefix =
        spec.kind == model_kind::gpt ? gpt_prefix(spec, i, *layers[i]) : "layers." + std::to_string(i) + ".";
    for (const param_spec& p : layers[i]->param_specs()) {
      // The embedding's two tables are modules of their own in PyTorch (nn.Embedding each).
      const std::string name =
          p.name == "wte" ? "tok_emb.weight" : p.name == "wpe" ? "pos_emb.weight" : prefix + p.name;
      out.push_back({name, p.shape, offset, numel_of(p.shape)});
      offset += out.back().count;
    }
  }
  return out;
}

}  // namespace troupe
