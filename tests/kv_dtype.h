// Test-side models of the KV cache's element types (docs/semantics.md, "Incremental decoding"),
// independent of the runtime's conversions: f16 and bf16 rounding and bit patterns (tests/
// tensor.h's formats), and the int8 quantisation of a row (symmetric, one scale per row). Also an
// error measure for bounds other than the contract's per-dtype table.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "attngen/attngen.h"
#include "tests/tensor.h"

namespace attngen::test::kv {

// A cache dtype's storage bound (core/dtype.h): relative L2 error and max abs error / max|V|.
inline std::pair<double, double> storage_bound(attngen_dtype d) {
  const attngen::DTypeRow* r = attngen::dtype_row(d);
  return {r->storage_rel_l2, r->storage_abs_per_max};
}

// f16 and bf16 through tests/tensor.h's formats (one rounding to nearest even from the exact
// value; tests/dtype_test.cpp checks them against the runtime's conversions): a value rounded to
// the type, and the bit pattern of a value of the type.
inline double round_f16(double x) {
  return ElementTraits<Half>::to_double(ElementTraits<Half>::from_double(x));
}
inline double round_bf16(double x) {
  return ElementTraits<BFloat16>::to_double(ElementTraits<BFloat16>::from_double(x));
}
inline uint16_t f16_bits(double r) { return ElementTraits<Half>::from_double(r).bits; }
inline uint16_t bf16_bits(double r) { return ElementTraits<BFloat16>::from_double(r).bits; }

// The int8 model: scale = max|x| / 127 (in f32, as documented), q = round(x / scale) in
// [-127, 127]; x[i] is replaced by q * scale (in f32), what the cache reproduces. Returns the
// scale (0 for a row of zeros; NaN, and every element NaN, for a row holding a NaN or an
// infinity, as documented).
inline float quantise_row(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(x[i])) {
      std::fill(x, x + n, std::numeric_limits<float>::quiet_NaN());
      return std::numeric_limits<float>::quiet_NaN();
    }
  }
  float amax = 0;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::abs(x[i]));
  if (amax == 0) return 0;
  const float scale = amax / 127.0f;
  for (int64_t i = 0; i < n; ++i) {
    // In float, as the runtime's quantiser and the VNNI kernels' q divide (a quotient rounded
    // in double could round to the other integer at a tie).
    const float q = std::clamp(std::nearbyint(x[i] / scale), -127.0f, 127.0f);
    x[i] = q * scale;
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
