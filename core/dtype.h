// The element types, one row each (ggml's type traits): the public enum value, the names, the
// size, the contract's error bounds and the host conversions. The rows come from one X-macro list
// keyed on the public enum (attngen/dtype.h), and the internal enum takes its values from it, so
// the C API, the variant model, the runtime and the tests cannot disagree on a dtype. Adding a
// dtype is a row here (and its kernels' conversion in generator/element.h where it is a kernel
// type). Plain C++, no Halide.
#pragma once

#include <cstdint>
#include <cstring>

#include "attngen/dtype.h"

namespace attngen {

// X(id, C enum, variant name, C name, bytes, kernel element, rel L2, abs per max|V|, abs floor,
//   storage rel L2, storage abs per max|V|):
//  - kernel element: a type kernels store tensors in (DTYPE, KV_DTYPE, OUT_DTYPE of a variant);
//    the others describe masks and lengths only.
//  - rel L2, abs per max|V|, abs floor: the contract's bound on a kernel's result against the
//    float64 reference for inputs of this type (docs/semantics.md, "Precision and tolerance"):
//    relative L2 error <= rel L2, max abs error <= abs per max|V| * max|V| + abs floor (0: only
//    the relative L2 bound is documented).
//  - storage rel L2 and abs per max|V|: the bound on the error of storing unrounded values in
//    this type (a KV cache's K and V), against the float64 result of the values as given; for I8
//    the symmetric per-slot quantisation (docs/semantics.md, "I8").
#define ATTNGEN_DTYPE_ROWS(X)                                                 \
  X(kF32, ATTNGEN_F32, "f32", "F32", 4, true, 1e-5, 1e-5, 1e-6, 1e-5, 1e-5)   \
  X(kF16, ATTNGEN_F16, "f16", "F16", 2, true, 5e-3, 0.0, 0.0, 5e-3, 5e-3)     \
  X(kBF16, ATTNGEN_BF16, "bf16", "BF16", 2, true, 2e-2, 0.0, 0.0, 2e-2, 2e-2) \
  X(kBool, ATTNGEN_BOOL, "bool", "BOOL", 1, false, 0.0, 0.0, 0.0, 0.0, 0.0)   \
  X(kI32, ATTNGEN_I32, "i32", "I32", 4, false, 0.0, 0.0, 0.0, 0.0, 0.0)       \
  X(kI8, ATTNGEN_I8, "i8", "I8", 1, true, 0.0, 0.0, 0.0, 0.04, 0.1)

enum class DType : int32_t {
#define ATTNGEN_DTYPE_ENUM_(id, c, ...) id = c,
  ATTNGEN_DTYPE_ROWS(ATTNGEN_DTYPE_ENUM_)
#undef ATTNGEN_DTYPE_ENUM_
};

struct DTypeRow {
  DType dtype;
  attngen_dtype c;
  const char* name;    // in variants and kernel names: "f32"
  const char* c_name;  // in messages, as the enum spells it: "F32"
  int bytes;
  bool kernel_element;
  double rel_l2, abs_per_max, abs_floor;
  double storage_rel_l2, storage_abs_per_max;
};

inline constexpr DTypeRow kDTypes[] = {
#define ATTNGEN_DTYPE_ROW_(id, c, ...) {DType::id, c, __VA_ARGS__},
    ATTNGEN_DTYPE_ROWS(ATTNGEN_DTYPE_ROW_)
#undef ATTNGEN_DTYPE_ROW_
};

// The row of a C enum value, or nullptr for a value that names no dtype (callers' ints are
// checked, never trusted).
inline constexpr const DTypeRow* dtype_row(int32_t c) {
  for (const DTypeRow& r : kDTypes) {
    if (static_cast<int32_t>(r.c) == c) return &r;
  }
  return nullptr;
}
inline constexpr const DTypeRow& dtype_row(DType d) { return *dtype_row(static_cast<int32_t>(d)); }

inline constexpr attngen_dtype c_dtype(DType d) { return static_cast<attngen_dtype>(d); }

// The row of a variant name ("bf16"), or nullptr.
inline const DTypeRow* dtype_row_named(const char* name) {
  for (const DTypeRow& r : kDTypes) {
    if (std::strcmp(r.name, name) == 0) return &r;
  }
  return nullptr;
}

// Host conversions between f32 and the 16-bit floats, bit for bit what the kernels compute:
// rounding to nearest even, NaN kept a quiet NaN (its payload's top bits), f16 overflow to
// infinity, subnormals exact.
inline uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
inline float f32_from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return f32_from_bits(sign | 0x7f800000u | (mant << 13));  // Inf, NaN (payload)
  if (exp != 0) return f32_from_bits(sign | ((exp + 112) << 23) | (mant << 13));
  if (mant == 0) return f32_from_bits(sign);
  // Subnormal, mant * 2^-24: normalise (every one is a normal float32).
  uint32_t e = 113;
  while ((mant & 0x400u) == 0) {
    mant <<= 1;
    --e;
  }
  return f32_from_bits(sign | (e << 23) | ((mant & 0x3ffu) << 13));
}

inline uint16_t f32_to_f16(float f) {
  const uint32_t x = f32_bits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00u | ((a >> 13) & 0x3ffu);  // NaN, quiet
  // 65520 (halfway between the largest binary16, 65504, and 2^16) and above round to Inf.
  if (a >= 0x477ff000u) return sign | 0x7c00u;
  if (a >= 0x38800000u) {  // a normal binary16 (>= 2^-14): rebias, round the 13 dropped bits
    const uint32_t rounded = a + 0xfffu + ((a >> 13) & 1u);
    return static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
  }
  if (a <= 0x33000000u) return sign;  // at most 2^-25, half the smallest subnormal: to even, 0
  // A binary16 subnormal m * 2^-24: the float's 24-bit significand shifted right, to even.
  const uint32_t e = a >> 23;
  const uint32_t significand = (a & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126 - e;  // 14 .. 24
  uint32_t m = significand >> shift;
  const uint32_t rest = significand & ((1u << shift) - 1), half = 1u << (shift - 1);
  if (rest > half || (rest == half && (m & 1u))) ++m;  // may carry into the smallest normal
  return static_cast<uint16_t>(sign | m);
}

inline float bf16_to_f32(uint16_t h) { return f32_from_bits(static_cast<uint32_t>(h) << 16); }

inline uint16_t f32_to_bf16(float f) {
  const uint32_t x = f32_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // NaN
  // Round the 16 dropped bits to even; a carry moves into the exponent (up to Inf) correctly.
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

}  // namespace attngen
