// Test-side models of the KV cache's element types (docs/semantics.md, "Incremental decoding"),
// written independently of the runtime's conversions (runtime/src/convert.h): rounding to f16
// and bf16 in double arithmetic (round to nearest even), their bit patterns, and the int8
// quantisation of a row (symmetric, one scale per row). Also an error measure for bounds other
// than the contract's per-dtype table.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "attngen/attngen.h"

namespace attngen::test::kv {

// x rounded to the nearest value with `bits` significant bits (round to nearest even), with
// quanta no finer than 2^min_exp (subnormals).
inline double round_significand(double x, int bits, int min_exp) {
  if (!std::isfinite(x) || x == 0) return x;
  int e = 0;
  std::frexp(std::abs(x), &e);  // |x| = m * 2^e, m in [0.5, 1)
  const double quantum = std::ldexp(1.0, std::max(e - bits, min_exp));
  return std::nearbyint(x / quantum) * quantum;  // exact division, then round half to even
}

// IEEE binary16: 11 significant bits, subnormal quantum 2^-24, overflow at 65520.
inline double round_f16(double x) {
  const double r = round_significand(x, 11, -24);
  return std::abs(r) > 65504.0 ? std::copysign(std::numeric_limits<double>::infinity(), r) : r;
}

// bfloat16: 8 significant bits, the f32 exponent range.
inline double round_bf16(double x) {
  const double r = round_significand(x, 8, -133);
  return std::abs(r) > 3.3895313892515355e38
             ? std::copysign(std::numeric_limits<double>::infinity(), r)
             : r;
}

// The bit pattern of an f16 value (one round_f16 returns).
inline uint16_t f16_bits(double r) {
  const uint16_t sign = std::signbit(r) ? 0x8000 : 0;
  const double a = std::abs(r);
  if (std::isinf(a)) return sign | 0x7c00;
  if (a < std::ldexp(1.0, -14)) {
    return static_cast<uint16_t>(sign | static_cast<int>(std::ldexp(a, 24)));
  }
  int e = 0;
  const double m = std::frexp(a, &e);  // a = m * 2^e: exponent field e + 14
  return static_cast<uint16_t>(sign | ((e + 14) << 10) |
                               static_cast<int>(std::ldexp(m, 11) - 1024));
}

// The bit pattern of a bf16 value (one round_bf16 returns): the upper half of its f32.
inline uint16_t bf16_bits(double r) {
  const float f = static_cast<float>(r);
  uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  return static_cast<uint16_t>(x >> 16);
}

inline double from_f16_bits(uint16_t h) {
  const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  const double sign = (h & 0x8000) ? -1.0 : 1.0;
  if (e == 31) return m ? std::numeric_limits<double>::quiet_NaN() : sign * HUGE_VAL;
  return sign * (e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25));
}

inline double from_bf16_bits(uint16_t h) {
  const uint32_t x = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &x, sizeof f);
  return f;
}

// The int8 model: scale = max|x| / 127 (in f32, as documented), q = round(x / scale) in
// [-127, 127]; x[i] is replaced by q * scale (in f32), what the cache reproduces. Returns the
// scale (0 for a row of zeros).
inline float quantise_row(float* x, int64_t n) {
  float amax = 0;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::abs(x[i]));
  if (amax == 0) return 0;
  const float scale = amax / 127.0f;
  for (int64_t i = 0; i < n; ++i) {
    const double q = std::clamp(std::nearbyint(static_cast<double>(x[i]) / scale), -127.0, 127.0);
    x[i] = static_cast<float>(q) * scale;
  }
  return scale;
}

// Rounds a value to what a cache (or an input tensor) of `dtype` holds; I8 rows go through
// quantise_row instead.
inline double round_to(attngen_dtype dtype, double x) {
  switch (dtype) {
    case ATTNGEN_F16:
      return round_f16(x);
    case ATTNGEN_BF16:
      return round_bf16(x);
    default:
      return static_cast<float>(x);
  }
}

// Relative L2 error and max abs error of got against want.
struct Error {
  double rel_l2 = 0, max_abs = 0;
};

inline Error measure(const std::vector<double>& got, const std::vector<double>& want) {
  double err2 = 0, ref2 = 0;
  Error e;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    const double d = std::isfinite(got[i]) ? got[i] - want[i] : HUGE_VAL;
    err2 += d * d;
    ref2 += want[i] * want[i];
    e.max_abs = std::max(e.max_abs, std::abs(d));
  }
  e.rel_l2 = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  return e;
}

}  // namespace attngen::test::kv
