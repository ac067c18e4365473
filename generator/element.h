// Element conversions of the algorithm, written once: an input element to the f32 the kernels
// compute in, and an f32 result to an output's type. bf16 both ways as integer bit operations:
// Halide 14's own bf16 casts reach LLVM 14's NVPTX backend as a register copy it aborts on, or
// a store of the f32 register as the 16 bits that ptxas rejects; on CPUs the bits are what its
// casts compute anyway.
#pragma once

#include <cstdint>

#include "Halide.h"
#include "generator/native_f16.h"

namespace attngen {

// x (f32, f16, bf16 or an integer type) as f32. bf16 is the upper half of an f32: its bits
// widened. f16 by the CPU's conversion instruction where the kernel widens f16 natively
// (generator/native_f16.h), else by Halide's cast.
inline Halide::Expr to_f32(const Halide::Expr& x, bool native_f16 = false) {
  if (native_f16 && x.type() == Halide::Float(16)) return widen_f16_native(x);
  if (x.type().is_bfloat()) {
    using Halide::reinterpret;
    return reinterpret(Halide::Float(32),
                       Halide::cast(Halide::UInt(32), reinterpret(Halide::UInt(16), x)) << 16);
  }
  return Halide::cast<float>(x);
}

// An f32 result as type t, rounded to nearest even for f16 and bf16 (a NaN kept a quiet NaN).
// f16: Halide 14's emulated cast (targets without native f16 conversions, e.g. plain NEON) tests
// its overflow bound before NaN and turns every NaN into an infinity; NaN is chosen here first.
inline Halide::Expr from_f32(const Halide::Expr& x, const Halide::Type& t) {
  using Halide::reinterpret;
  using Halide::UInt;
  if (t == Halide::Float(16)) {
    Halide::Expr bits = reinterpret(UInt(32), x);
    Halide::Expr nan =
        (bits & Halide::Expr(uint32_t{0x7fffffff})) > Halide::Expr(uint32_t{0x7f800000});
    return Halide::select(nan, reinterpret(t, Halide::Expr(uint16_t{0x7e00})), Halide::cast(t, x));
  }
  if (t != Halide::BFloat(16)) return Halide::cast(t, x);
  const auto u32 = [](uint32_t v) { return Halide::Expr(v); };
  Halide::Expr bits = reinterpret(UInt(32), x);
  Halide::Expr rounded = (bits + u32(0x7fff) + ((bits >> 16) & u32(1))) >> 16;
  Halide::Expr nan = (bits & u32(0x7fffffff)) > u32(0x7f800000);
  return reinterpret(
      Halide::BFloat(16),
      Halide::cast(UInt(16), Halide::select(nan, (bits >> 16) | u32(0x40), rounded)));
}

}  // namespace attngen
