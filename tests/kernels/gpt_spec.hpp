// gpt_spec: the small GPTs the kernel tests build, by their five sizes.
#pragma once

#include <cstdint>

#include "kernels/model.hpp"

namespace troupe::test {

inline model_spec gpt_spec(int64_t vocab, int64_t context, int64_t channels, int64_t heads, int64_t blocks) {
  model_spec s;
  s.kind = model_kind::gpt;
  s.vocab = vocab;
  s.context = context;
  s.channels = channels;
  s.heads = heads;
  s.blocks = blocks;
  return s;
}

}  // namespace troupe::test
