// dtype: the element types of troupe, one enum for every layer that names one: tensors (f32,
// bf16, f16), the wire's frames, which also carry integers and plain bytes (comm/wire_frame.hpp),
// NCCL's calls (comm/nccl_group.hpp) and the planner's GEMMs (schedules/plan/time_model.hpp).
// Storage types only: how a product computes (bf16 operands, TF32 tensor cores) is a matmul
// precision, not a dtype. Header only, standard library only, so that layers with no tensor
// (the wire, the planner) name types without linking kernels.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

namespace troupe {

// The byte values cross in actor messages (actors/messages.hpp): never renumber. Wire frames
// carry codes of their own (comm/wire_frame.hpp), fixed before the integer types came here.
enum class dtype : uint8_t { f32 = 0, bf16 = 1, f16 = 2, i32 = 3, i64 = 4, u8 = 5 };
inline constexpr dtype all_dtypes[] = {dtype::f32, dtype::bf16, dtype::f16, dtype::i32, dtype::i64, dtype::u8};

constexpr size_t size_of(dtype d) {
  switch (d) {
    case dtype::f32: return 4;
    case dtype::bf16: return 2;
    case dtype::f16: return 2;
    case dtype::i32: return 4;
    case dtype::i64: return 8;
    case dtype::u8: return 1;
  }
  return 0;
}

constexpr bool is_floating(dtype d) { return d == dtype::f32 || d == dtype::bf16 || d == dtype::f16; }

// "f32", "bf16", "f16", "i32", "i64", "u8"
inline const char* to_string(dtype d) {
  switch (d) {
    case dtype::f32: return "f32";
    case dtype::bf16: return "bf16";
    case dtype::f16: return "f16";
    case dtype::i32: return "i32";
    case dtype::i64: return "i64";
    case dtype::u8: return "u8";
  }
  return "unknown dtype";
}

// The inverse of to_string; throws std::invalid_argument naming the text.
inline dtype parse_dtype(const std::string& text) {
  for (dtype d : all_dtypes)
    if (text == to_string(d)) return d;
  throw std::invalid_argument("a dtype is f32, bf16, f16, i32, i64 or u8, got \"" + text + "\"");
}

// The dtype whose byte value this is, or nothing (a byte off the wire).
inline std::optional<dtype> dtype_from_byte(uint8_t b) {
  if (b > static_cast<uint8_t>(dtype::u8)) return std::nullopt;
  return static_cast<dtype>(b);
}

}  // namespace troupe
