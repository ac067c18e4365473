// What the schedules need to know about a Halide target: its row of the target table
// (core/targets.h) and the helpers that size register tiles and cache chunks from it.
#pragma once

#include "Halide.h"
#include "core/targets.h"

namespace attngen {

struct TargetInfo {
  Isa isa = Isa::kGeneric;
  int f32_lanes = 4;          // lanes of one native f32 vector
  int vector_registers = 16;  // architectural vector registers
  // Vector registers a register-blocked loop may use for accumulators (TargetRow).
  int accumulators = 12;
  // L1 data cache the schedules size their key and feature chunks for: 32 KiB, the common size
  // (Skylake-X, Zen, Cortex-A55/A76 have 32-64 KiB; a kernel built for an ISA runs on all).
  int l1_bytes = 32 * 1024;
};

TargetInfo target_info(const Halide::Target& target);

// Which schedules a row's kernels take: the portable ones (the generic row), the SIMD ones (every
// CPU row, its vector width and registers from the row) or the GPU ones (cuda).
enum class Family { kPortable, kSimd, kGpu };
inline Family family_of(const TargetInfo& info) {
  if (info.isa == Isa::kGeneric) return Family::kPortable;
  return info.isa == Isa::kCuda ? Family::kGpu : Family::kSimd;
}

// The target table's row of a Halide target: what the generators hand the algorithm where the
// target's native operations shape it (native exp, native f16 widening).
const TargetRow& target_row_of(const Halide::Target& target);

const char* isa_name(Isa isa);

// Widest vector (in f32 lanes, at most the native width) that divides `extent` exactly, so a
// compile-time dimension such as a head dim of 40 or 80 is covered without a tail. Falls back to
// the native width when nothing divides (the schedule then needs a tail strategy).
int lanes_dividing(int extent, const TargetInfo& info);

// Vectors of lanes_dividing(extent) lanes that cover `extent` (a head dim's vectors).
int vectors_covering(int extent, const TargetInfo& info);

// The tail strategy of a loop of `extent` split by `lanes`: none needed where the lanes divide it
// (lanes_dividing()), else guarded.
inline Halide::TailStrategy tail_for(int extent, int lanes) {
  return extent % lanes == 0 ? Halide::TailStrategy::Auto : Halide::TailStrategy::GuardWithIf;
}

// Largest power of two n <= 256 (at least 8) with n * bytes_per_item <= info.l1_bytes: how many
// keys (features) a pass over a chunk takes while the chunk's operands stay in L1.
int chunk_for_l1(int bytes_per_item, const TargetInfo& info);

// Rows of a register tile whose rows each take vectors_per_row accumulators, with every row
// multiplying the same loaded vectors (one broadcast operand per row): the most rows r <= limit
// with r * vectors_per_row <= accumulators and room left for the loaded vectors and a broadcast
// (at least 1). Not only powers of two: 6 rows x 4 vectors at D64 on AVX-512, where 4 x 4 left a
// third of the accumulators unused (bench/RESULTS.md, "The p·v register tile at 6 rows").
int rows_for_accumulators(int vectors_per_row, int limit, const TargetInfo& info);

}  // namespace attngen
