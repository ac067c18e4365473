#include "schedules/target_info.h"

namespace attngen {

namespace {

// The features of `row`'s Halide target that `t` has too, or -1 where `t` lacks one of them (or
// is of another architecture or width).
int features_shared(const TargetRow& row, const Halide::Target& t) {
  const Halide::Target r(row.halide_target);
  if (r.arch != t.arch || r.bits != t.bits) return -1;
  int n = 0;
  for (int f = 0; f < Halide::Target::FeatureEnd; ++f) {
    const auto feature = static_cast<Halide::Target::Feature>(f);
    if (!r.has_feature(feature)) continue;
    if (!t.has_feature(feature)) return -1;
    ++n;
  }
  return n;
}

}  // namespace

// The row of a Halide target, read from the table: a GPU target's is the cuda row; else the CPU
// row of the same architecture whose target's features it has, the one with the most of them (the
// first such row where two share a target: avx512bf16, not amx). Without a row's features (or with
// no_neon, which no ARM row has) it is the generic row's.
TargetInfo target_info(const Halide::Target& t) {
  Isa isa = Isa::kGeneric;
  if (t.has_gpu_feature()) {
    isa = Isa::kCuda;
  } else if (!t.has_feature(Halide::Target::NoNEON)) {
    int best = -1;
    for (const TargetRow& row : kTargets) {
      if (row.isa == Isa::kGeneric || row.isa == Isa::kCuda) continue;
      const int n = features_shared(row, t);
      if (n > best) {
        best = n;
        isa = row.isa;
      }
    }
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
