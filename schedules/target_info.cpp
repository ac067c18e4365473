#include "schedules/target_info.h"

namespace attngen {

// The row of a Halide target: the ISA its features name, as the table's targets spell them.
TargetInfo target_info(const Halide::Target& t) {
  using T = Halide::Target;
  Isa isa = Isa::kGeneric;
  if (t.has_gpu_feature()) {
    isa = Isa::kCuda;
  } else if (t.arch == T::X86 && t.has_feature(T::AVX512_SapphireRapids)) {
    isa = Isa::kAvx512Bf16;
  } else if (t.arch == T::X86 &&
             (t.has_feature(T::AVX512_Skylake) || t.has_feature(T::AVX512_Cannonlake))) {
    isa = Isa::kAvx512;
  } else if (t.arch == T::X86 && t.has_feature(T::AVX2) && t.has_feature(T::FMA)) {
    isa = Isa::kAvx2;
  } else if (t.arch == T::X86 && t.has_feature(T::SSE41)) {
    isa = Isa::kSse41;
  } else if (t.arch == T::ARM && t.bits == 64 && t.has_feature(T::ARMFp16)) {
    isa = Isa::kNeonFp16;
  } else if (t.arch == T::ARM && t.bits == 64) {
    isa = Isa::kNeon;
  } else if (t.arch == T::ARM && t.bits == 32 && !t.has_feature(T::NoNEON)) {
    isa = Isa::kNeon32;
  }
  const TargetRow& row = target_row(isa);
  TargetInfo info;
  info.isa = isa;
  info.f32_lanes = lanes_of(row, 4);
  info.vector_registers = row.vector_registers;
  info.accumulators = row.accumulators;
  return info;
}

const TargetRow& target_row_of(const Halide::Target& t) { return target_row(target_info(t).isa); }

const char* isa_name(Isa isa) { return target_row(isa).name; }

int lanes_dividing(int extent, const TargetInfo& info) {
  for (int lanes = info.f32_lanes; lanes >= 4; lanes /= 2) {
    if (extent % lanes == 0) return lanes;
  }
  return info.f32_lanes;
}

int vectors_covering(int extent, const TargetInfo& info) {
  const int lanes = lanes_dividing(extent, info);
  return (extent + lanes - 1) / lanes;
}

int chunk_for_l1(int bytes_per_item, const TargetInfo& info) {
  int n = 8;
  while (n < 256 && 2 * n * bytes_per_item <= info.l1_bytes) n *= 2;
  return n;
}

int rows_for_accumulators(int vectors_per_row, int limit, const TargetInfo& info) {
  const auto fits = [&](int rows) {
    return rows <= limit && rows * vectors_per_row <= info.accumulators &&
           (rows + 1) * vectors_per_row + 1 <= info.vector_registers;
  };
  int rows = 1;
  while (fits(rows + 1)) ++rows;
  return rows;
}

}  // namespace attngen
