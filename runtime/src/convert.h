// Element conversions of the KV cache's append (kv_cache.cpp): f32 <-> f16 and bf16 by bit
// manipulation (round to nearest even, infinities and NaNs kept), and the symmetric int8
// quantisation of one row. Portable C++, no F16C or other ISA needed.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "attngen/attngen.h"

namespace attngen::rt {

inline uint32_t f32_bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  return x;
}

inline float f32_from_bits(uint32_t x) {
  float f;
  std::memcpy(&f, &x, sizeof f);
  return f;
}

// IEEE binary16, round to nearest even; overflow to infinity, NaN stays a (quiet) NaN.
inline uint16_t f16_from_f32(float f) {
  const uint32_t x = f32_bits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520: infinity
  if (a < 0x38800000u) {
    // Below 2^-14: a subnormal half, |f| * 2^24 rounded to an integer (exact scaling, then
    // the FPU's round to nearest even); 1024 is the smallest normal's bit pattern.
    const float scaled = f32_from_bits(a) * 16777216.0f;
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(scaled)));
  }
  // Normal: round the mantissa at bit 13 to nearest even (a carry moves into the exponent), then
  // rebias the exponent from 127 to 15.
  const uint32_t rounded = a + 0xfffu + ((a >> 13) & 1u);
  return static_cast<uint16_t>(sign | ((rounded >> 13) - (112u << 10)));
}

inline float f32_from_f16(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t em = h & 0x7fffu;
  if (em >= 0x7c00u) return f32_from_bits(sign | 0x7f800000u | ((em & 0x3ffu) << 13));
  if (em < 0x400u) {  // zero or subnormal: em * 2^-24, exact in f32
    const float m = static_cast<float>(em) * 5.9604644775390625e-8f;
    return sign ? -m : m;
  }
  return f32_from_bits(sign | ((em << 13) + (112u << 23)));
}

// bfloat16: the upper half of an f32, round to nearest even; NaN stays a (quiet) NaN.
inline uint16_t bf16_from_f32(float f) {
  const uint32_t x = f32_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

inline float f32_from_bf16(uint16_t h) { return f32_from_bits(static_cast<uint32_t>(h) << 16); }

// Element i of an F32, F16 or BF16 row as f32.
inline float load_f32(const void* row, attngen_dtype dtype, int64_t i) {
  switch (dtype) {
    case ATTNGEN_F16:
      return f32_from_f16(static_cast<const uint16_t*>(row)[i]);
    case ATTNGEN_BF16:
      return f32_from_bf16(static_cast<const uint16_t*>(row)[i]);
    default:
      return static_cast<const float*>(row)[i];
  }
}

// Symmetric int8 quantisation of a row of n values: scale = max|x| / 127 and
// q = round(x / scale) (to nearest even), clamped to [-127, 127], so q * scale reproduces x
// within scale / 2. A row of zeros has scale 0 (and q 0: it dequantises to exact zeros); a row
// holding an infinity or NaN has a NaN scale (q 0), so every score or output that reads it is
// NaN, as in f32. Returns the scale.
inline float quantise_i8(const float* x, int64_t n, int8_t* q) {
  float amax = 0.0f;
  bool finite = true;
  for (int64_t i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    if (!(a <= std::numeric_limits<float>::max())) finite = false;
    if (a > amax) amax = a;
  }
  if (!finite || amax == 0.0f) {
    std::memset(q, 0, static_cast<size_t>(n));
    return finite ? 0.0f : std::numeric_limits<float>::quiet_NaN();
  }
  const float scale = amax / 127.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float r = std::nearbyint(x[i] / scale);
    q[i] = static_cast<int8_t>(r > 127.0f ? 127.0f : r < -127.0f ? -127.0f : r);
  }
  return scale;
}

}  // namespace attngen::rt
