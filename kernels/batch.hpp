// batch: the inputs and integer targets of one (micro-)batch, as the data loader produces them.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/tensor.hpp"

namespace troupe {

struct batch {
  tensor inputs;                 // MLP: (B, features); GPT: (B, T) token ids held as floats
  std::vector<int32_t> targets;  // MLP: (B) class ids; GPT: (B*T) next-token ids
  int64_t samples() const { return inputs.rank() > 0 ? inputs.size(0) : 0; }
};

// Rows [begin, end) of a batch (sample-wise; GPT targets move with their sequences).
batch slice(const batch& b, int64_t begin, int64_t end);

// Tokens `at` (ascending positions) of every sequence of a GPT batch, with their targets: a
// context-parallel rank's share. Throws std::invalid_argument for a batch that is not (B, T)
// tokens or a position past T.
batch take_positions(const batch& b, const std::vector<int64_t>& at);

}  // namespace troupe
