#include "schedules/target_info.h"

namespace attngen {

TargetInfo target_info(const Halide::Target& t) {
  using T = Halide::Target;
  TargetInfo info;
  if (t.has_gpu_feature()) {
    info.isa = Isa::kCuda;
    info.f32_lanes = 1;
    info.vector_registers = 255;
    info.accumulators = 64;
  } else if (t.arch == T::X86 &&
             (t.has_feature(T::AVX512_Skylake) || t.has_feature(T::AVX512_Cannonlake) ||
              t.has_feature(T::AVX512_SapphireRapids))) {
    info.isa = Isa::kAvx512;
    info.f32_lanes = 16;
    info.vector_registers = 32;
    info.accumulators = 24;
  } else if (t.arch == T::X86 && t.has_feature(T::AVX2) && t.has_feature(T::FMA)) {
    info.isa = Isa::kAvx2;
    info.f32_lanes = 8;
    info.vector_registers = 16;
    info.accumulators = 12;
  } else if (t.arch == T::X86 && t.has_feature(T::SSE41)) {
    info.isa = Isa::kSse41;
    info.f32_lanes = 4;
    info.vector_registers = 16;
    info.accumulators = 12;
  } else if (t.arch == T::ARM && t.bits == 64) {
    info.isa = Isa::kNeon;
    info.f32_lanes = 4;
    info.vector_registers = 32;
    info.accumulators = 24;
  }
  return info;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kSse41:
      return "sse41";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
    case Isa::kNeon:
      return "neon";
    case Isa::kCuda:
      return "cuda";
    case Isa::kGeneric:
      break;
  }
  return "generic";
}

int lanes_dividing(int extent, const TargetInfo& info) {
  for (int lanes = info.f32_lanes; lanes >= 4; lanes /= 2) {
    if (extent % lanes == 0) return lanes;
  }
  return info.f32_lanes;
}

int chunk_for_l1(int bytes_per_item, const TargetInfo& info) {
  int n = 8;
  while (n < 256 && 2 * n * bytes_per_item <= info.l1_bytes) n *= 2;
  return n;
}

int rows_for_accumulators(int vectors_per_row, int limit, const TargetInfo& info) {
  int rows = 1;
  while (rows * 2 <= limit && rows * 2 * vectors_per_row <= info.accumulators) rows *= 2;
  return rows;
}

}  // namespace attngen
