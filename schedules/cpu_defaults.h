// Defaults of the CPU schedules that the runtime's dispatch needs to know as well
// (runtime/src/registry.cpp): plain constants, no Halide, so both sides include this one header.
#pragma once

namespace attngen {

// Query rows per parallel task of the CPU attention schedules, in vectors of f32 lanes: 64 rows
// on AVX-512, 32 on AVX2, 16 on SSE4.1 and NEON (measured: schedules/cpu_simd.cpp).
constexpr int kCpuQueryTileVectors = 4;

}  // namespace attngen
