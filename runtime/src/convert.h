// Element conversions of the runtime (the F32 staging of api.cpp, the KV cache's append): f32 <->
// f16 and bf16 by bit manipulation (round to nearest even, infinities and NaNs kept; core/dtype.h),
// and the symmetric int8 quantisation of one row. Portable C++, no F16C or other ISA needed.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "attngen/attngen.h"
#include "core/dtype.h"

namespace attngen::rt {

// IEEE conversions between float32 and binary16 / bfloat16 bits, the dtype rows' (core/dtype.h):
// rounding to nearest even, subnormals kept, overflow to infinity, NaN stays NaN (quiet, sign and
// leading payload bits kept). Checked exhaustively by tests/dtype_test.cpp.
using attngen::bf16_to_f32;
using attngen::f16_to_f32;
using attngen::f32_bits;
using attngen::f32_from_bits;
using attngen::f32_to_bf16;
using attngen::f32_to_f16;

// n F16 / BF16 values as F32, the values f16_to_f32 / bf16_to_f32 give, in loops of selects
// (no branches) that the compiler vectorises with the runtime's baseline ISA.
void f16_to_f32_n(const uint16_t* src, float* dst, int64_t n);
void bf16_to_f32_n(const uint16_t* src, float* dst, int64_t n);

// Element i of an F32, F16 or BF16 row as f32.
inline float load_f32(const void* row, attngen_dtype dtype, int64_t i) {
  switch (dtype) {
    case ATTNGEN_F16:
      return f16_to_f32(static_cast<const uint16_t*>(row)[i]);
    case ATTNGEN_BF16:
      return bf16_to_f32(static_cast<const uint16_t*>(row)[i]);
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
    for (int64_t i = 0; i < n; ++i) q[i] = 0;  // (a loop: GCC warns on memset of an int64 size)
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
