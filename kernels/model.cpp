// model_spec validation and the MLP builder.
#include "kernels/model.hpp"

#include <stdexcept>

#include "kernels/layers_dense.hpp"

namespace troupe {

void validate(const model_spec& spec) {
  auto positive = [](int64_t v, const char* name) {
    if (v <= 0) throw std::invalid_argument(std::string("model.") + name + " must be positive, got " + std::to_string(v));
  };
  if (spec.kind == "mlp") {
    positive(spec.inputs, "inputs");
    positive(spec.classes, "classes");
    for (int64_t h : spec.hidden) positive(h, "hidden");
  } else if (spec.kind == "gpt") {
    positive(spec.vocab, "vocab");
    positive(spec.context, "context");
    positive(spec.channels, "channels");
    positive(spec.heads, "heads");
    positive(spec.blocks, "blocks");
    if (spec.channels % spec.heads != 0)
      throw std::invalid_argument("model.channels (" + std::to_string(spec.channels) +
                                  ") must be divisible by model.heads (" + std::to_string(spec.heads) + ")");
  } else {
    throw std::invalid_argument("model.kind must be \"mlp\" or \"gpt\", got \"" + spec.kind + "\"");
  }
}

std::string describe(const model_spec& spec) {
  if (spec.kind == "mlp") {
    std::string s = "mlp " + std::to_string(spec.inputs);
    for (int64_t h : spec.hidden) s += "-" + std::to_string(h);
    return s + "-" + std::to_string(spec.classes);
  }
  return "gpt vocab=" + std::to_string(spec.vocab) + " T=" + std::to_string(spec.context) +
         " C=" + std::to_string(spec.channels) + " heads=" + std::to_string(spec.heads) +
         " blocks=" + std::to_string(spec.blocks);
}

layer_list build_layers(const model_spec& spec) {
  validate(spec);
  return spec.kind == "mlp" ? build_mlp(spec) : build_gpt(spec);
}

layer_list build_mlp(const model_spec& spec) {
  layer_list layers;
  int64_t in = spec.inputs;
  for (int64_t h : spec.hidden) {
    layers.push_back(std::make_unique<linear>(in, h));
    layers.push_back(std::make_unique<relu>());
    in = h;
  }
  layers.push_back(std::make_unique<linear>(in, spec.classes));
  return layers;
}

}  // namespace troupe
