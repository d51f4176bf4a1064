// model_spec: the serializable description of a model, and the builders that turn it into a
// flat list of layers. Stages, tensor-parallel splits and checkpoints all start from the list.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/layer.hpp"

namespace troupe {

struct model_spec {
  std::string kind = "mlp";  // "mlp" or "gpt"
  // mlp: inputs -> hidden... -> classes, ReLU between linears
  int64_t inputs = 784;
  std::vector<int64_t> hidden{256, 256};
  int64_t classes = 10;
  // gpt: character-level decoder; vocab comes from the corpus
  int64_t vocab = 0;
  int64_t context = 64;   // T, tokens per sequence
  int64_t channels = 128; // C
  int64_t heads = 4;      // NH
  int64_t blocks = 4;     // transformer blocks
};

// Checks a spec and throws std::invalid_argument naming the bad field.
void validate(const model_spec& spec);
std::string describe(const model_spec& spec);

layer_list build_layers(const model_spec& spec);
layer_list build_mlp(const model_spec& spec);
layer_list build_gpt(const model_spec& spec);  // defined in gpt.cpp

}  // namespace troupe
