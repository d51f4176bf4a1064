// GCC's vector types for the CPU kernels that block their own registers (attention's products,
// row maxima): as plain float arrays GCC keeps accumulators in memory, and the loops ran at a
// fifth of the speed. Unaligned loads and stores through memcpy, which compile to one move.
#pragma once

namespace troupe::ops::simd {

typedef float v8 __attribute__((vector_size(32)));
typedef float v16 __attribute__((vector_size(64)));

template <class V>
inline V load(const float* p) {
  V v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}
template <class V>
inline void store(float* p, V v) {
  __builtin_memcpy(p, &v, sizeof v);
}

}  // namespace troupe::ops::simd
