// A deterministic GPT batch for the kernel tests: B sequences of the spec's context, tokens and
// targets from fixed strides over the vocabulary.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/batch.hpp"
#include "kernels/model.hpp"

namespace troupe::test {

inline batch token_batch(const model_spec& spec, int64_t B) {
  batch b;
  std::vector<float> tokens;
  for (int64_t i = 0; i < B * spec.context; ++i) {
    tokens.push_back(static_cast<float>((i * 7 + 3) % spec.vocab));
    b.targets.push_back(static_cast<int32_t>((i * 5 + 1) % spec.vocab));
  }
  b.inputs = tensor({B, spec.context}, tokens);
  return b;
}

}  // namespace troupe::test
