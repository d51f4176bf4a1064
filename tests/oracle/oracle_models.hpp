// The oracle's models, small enough for PyTorch to redo every step in about a second: what
// oracle_dump runs, and what tests/kernels/param_names.test.cpp checks the names of.
#pragma once

#include "kernels/model.hpp"

namespace troupe::test {

// Two hidden layers, so a ReLU sits between linears on both sides.
inline model_spec oracle_mlp() {
  model_spec s;
  s.inputs = 12;
  s.hidden = {16, 8};
  s.classes = 5;
  return s;
}

// Two blocks of two heads, so the residual stream and head split both count.
inline model_spec oracle_gpt() {
  model_spec s;
  s.kind = model_kind::gpt;
  s.vocab = 11;
  s.context = 8;
  s.channels = 16;
  s.heads = 2;
  s.blocks = 2;
  return s;
}

// The GPT with a mixture of 3 experts, top-2, in both blocks, dropless, and a load-balancing loss
// large enough for its gradient to show in the router's.
inline model_spec oracle_moe_gpt() {
  model_spec s = oracle_gpt();
  s.experts = 3;
  s.top_k = 2;
  s.moe_every = 1;
  s.aux_loss_coefficient = 0.05;
  return s;
}

}  // namespace troupe::test
