// half: the two 16-bit float storage types of troupe (bf16, f16) and their conversions to and
// from float, bit for bit as CUDA's __float2bfloat16 / __float2half (round to nearest even, NaN
// to the canonical 0x7FFF, overflow to infinity), so a tensor converted on the CPU holds the same
// bits a kernel would have written. Storage only: no arithmetic on these types (compute is in
// float). No third-party header, no CUDA.
#pragma once

#include <cstdint>
#include <cstring>

namespace troupe {

struct bf16 {
  uint16_t bits = 0;
};
struct f16 {
  uint16_t bits = 0;
};
static_assert(sizeof(bf16) == 2 && sizeof(f16) == 2, "16-bit storage types must be two bytes");

namespace detail {
inline uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
inline float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
// Adds one to the kept bits when the dropped ones (left-aligned in `rest`) are above half, or
// exactly half and the kept value is odd: round to nearest, ties to even.
inline uint32_t round_even(uint32_t kept, uint32_t rest) {
  return (rest > 0x80000000u || (rest == 0x80000000u && (kept & 1u))) ? kept + 1 : kept;
}
}  // namespace detail

inline bf16 to_bf16(float f) {
  const uint32_t x = detail::bits_of(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return {0x7fff};  // NaN (CUDA gives the canonical one)
  // The carry out of the mantissa rounds into the exponent, and from the largest finite
  // values into infinity, as it should.
  return {static_cast<uint16_t>(detail::round_even(x >> 16, x << 16))};
}

inline float to_float(bf16 h) { return detail::float_of(static_cast<uint32_t>(h.bits) << 16); }

inline f16 to_f16(float f) {
  const uint32_t x = detail::bits_of(f);
  const uint32_t u = x & 0x7fffffffu;
  const uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t kept, rest;
  if (u >= 0x7f800000u) {  // infinity keeps its sign; NaN becomes the canonical one
    return {static_cast<uint16_t>(u == 0x7f800000u ? (sign | 0x7c00u) : 0x7fffu)};
  } else if (u > 0x477fefffu) {  // at or past 65520: rounds to infinity
    kept = sign | 0x7bffu;
    rest = 0x80000000u;
  } else if (u >= 0x38800000u) {  // a normal f16
    kept = sign | ((u - 0x38000000u) >> 13);
    rest = u << 19;
  } else if (u <= 0x33000000u) {  // at most half the smallest subnormal: a (signed) zero
    kept = sign;
    rest = u;
  } else {  // a subnormal f16
    const uint32_t shift = 0x7eu - (u >> 23);
    const uint32_t mantissa = (u & 0x7fffffu) | 0x800000u;
    kept = sign | (mantissa >> shift);
    rest = mantissa << (32 - shift);
  }
  return {static_cast<uint16_t>(detail::round_even(kept, rest))};
}

inline float to_float(f16 h) {
  const uint32_t sign = static_cast<uint32_t>(h.bits & 0x8000u) << 16;
  const uint32_t exponent = (h.bits >> 10) & 0x1fu;
  const uint32_t mantissa = h.bits & 0x3ffu;
  if (exponent == 0x1f) return detail::float_of(sign | 0x7f800000u | (mantissa << 13));  // inf, NaN
  if (exponent != 0) return detail::float_of(sign | ((exponent + 112) << 23) | (mantissa << 13));
  // Zero or subnormal: mantissa × 2^-24, exact in float.
  const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
  return sign ? -magnitude : magnitude;
}

}  // namespace troupe
