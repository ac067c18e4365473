// Element conversions of the algorithm, written once: an input element to the f32 the kernels
// compute in, and an f32 result to an output's type. bf16 both ways as integer bit operations:
// Halide 14's own bf16 casts reach LLVM 14's NVPTX backend as a register copy it aborts on, or
// a store of the f32 register as the 16 bits that ptxas rejects; on CPUs the bits are what its
// casts compute anyway.
#pragma once

#include <cstdint>

#include "Halide.h"

namespace attngen {

// x (f32, f16, bf16 or an integer type) as f32. bf16 is the upper half of an f32: its bits
// widened.
inline Halide::Expr to_f32(const Halide::Expr& x) {
  if (x.type().is_bfloat()) {
    using Halide::reinterpret;
    return reinterpret(Halide::Float(32),
                       Halide::cast(Halide::UInt(32), reinterpret(Halide::UInt(16), x)) << 16);
  }
  return Halide::cast<float>(x);
}

// An f32 result as type t, rounded to nearest even for f16 and bf16 (a bf16 NaN kept quiet).
inline Halide::Expr from_f32(const Halide::Expr& x, const Halide::Type& t) {
  if (t != Halide::BFloat(16)) return Halide::cast(t, x);
  using Halide::reinterpret;
  using Halide::UInt;
  const auto u32 = [](uint32_t v) { return Halide::Expr(v); };
  Halide::Expr bits = reinterpret(UInt(32), x);
  Halide::Expr rounded = (bits + u32(0x7fff) + ((bits >> 16) & u32(1))) >> 16;
  Halide::Expr nan = (bits & u32(0x7fffffff)) > u32(0x7f800000);
  return reinterpret(
      Halide::BFloat(16),
      Halide::cast(UInt(16), Halide::select(nan, (bits >> 16) | u32(0x40), rounded)));
}

}  // namespace attngen
