// Row reductions that vectorize without -ffast-math, for the ops (layernorm's mean, softmax's
// total and peak). A sum's order is fixed by the length alone; nothing else lives here.
#pragma once

#include <cstdint>

#include "kernels/simd.hpp"

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

// The largest of a[0..n), n >= 1. Eight running maxima: a single one is a chain of dependent
// compares GCC keeps scalar (a max is exact, but its NaN rule stops GCC reordering it), and in
// a causal softmax that chain was 40% of the attention's forward. Any order gives the same value
// for values that are not NaN.
inline float max_of(const float* a, int64_t n) {
  simd::v8 m = {a[0], a[0], a[0], a[0], a[0], a[0], a[0], a[0]};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const simd::v8 x = simd::load<simd::v8>(a + i);
    m = x > m ? x : m;
  }
  float r = m[0];
  for (int j = 1; j < 8; ++j) r = m[j] > r ? m[j] : r;
  for (; i < n; ++i) r = a[i] > r ? a[i] : r;
  return r;
}

}  // namespace troupe::ops
