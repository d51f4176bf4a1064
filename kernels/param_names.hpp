// The unsplit model's parameters by name: each tensor's place in the flat parameter vector (every
// layer's parameters end to end in layer order, the layout of train_summary::final_params), under
// the state_dict key of the same model written as a PyTorch module (tests/oracle/ builds it):
//   mlp: layers.<i>.weight (out, in), layers.<i>.bias (out), i the index in build_layers, so a
//        torch.nn.Sequential of Linear and ReLU has the same keys (the ReLUs hold none);
//   gpt: tok_emb.weight (V, C), pos_emb.weight (T, C), then per block b
//        blocks.<b>.ln1.{weight,bias} (C), blocks.<b>.attn.qkv.{weight (3C, C), bias (3C)} with
//        rows packed q | k | v, blocks.<b>.attn.proj.{weight (C, C), bias}, blocks.<b>.ln2.*,
//        blocks.<b>.mlp.fc.{weight (4C, C), bias (4C)}, blocks.<b>.mlp.proj.{weight (C, 4C), bias},
//        then ln_f.{weight,bias} (C) and head.{weight (V, C), bias (V)}, untied from tok_emb.
// Only the single-device layout; tensor-parallel shards map back to it through full_runs().
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/model.hpp"

namespace troupe {

struct named_param {
  std::string name;
  shape_t shape;
  int64_t offset = 0;  // in the flat parameter vector
  int64_t count = 0;   // product of shape
};

// Every parameter tensor of the unsplit model, in flat order. Throws std::invalid_argument for a
// spec validate() refuses (a GPT needs its vocab), std::logic_error if the builder's layers no
// longer have the shape the names above describe.
std::vector<named_param> named_params(const model_spec& spec);

}  // namespace troupe
