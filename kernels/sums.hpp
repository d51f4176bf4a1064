// A float sum that vectorizes without -ffast-math, for the ops' row reductions (layernorm's mean,
// softmax's total). Its order is fixed by the length alone; nothing else lives here.
#pragma once

#include <cstdint>

namespace troupe::ops {

// Eight independent partial sums: a single float accumulator is a serial dependency GCC must not
// reorder, eight are one vector add per step.
inline float sum(const float* a, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j];
  float tail = 0.0f;
  for (; i < n; ++i) tail += a[i];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail;
}

}  // namespace troupe::ops
