#include "schedules/schedule.h"

namespace attngen {

AttentionTunables resolve(AttentionTunables t, const AttentionSpec& spec, const TargetInfo& info) {
  const int lanes = info.f32_lanes;
  if (t.query_tile <= 0) t.query_tile = 4 * lanes;  // measured: see cpu_simd.cpp
  // Round to whole vectors: producers vectorise along the query rows.
  t.query_tile = (t.query_tile + lanes - 1) / lanes * lanes;
  const int q_vectors = t.query_tile / lanes;
  if (t.key_tile <= 0) t.key_tile = std::max(1, info.accumulators / q_vectors);
  if (t.pv_rows <= 0) {
    const int dv_lanes = lanes_dividing(spec.head_dim_v, info);
    const int dv_vectors = (spec.head_dim_v + dv_lanes - 1) / dv_lanes;
    t.pv_rows = rows_for_accumulators(dv_vectors, t.query_tile, info);
  }
  return t;
}

LinearTunables resolve(LinearTunables t, const TargetInfo& info) {
  if (t.n_vectors <= 0) t.n_vectors = 3;
  if (t.rows <= 0) t.rows = std::max(1, info.accumulators / t.n_vectors);
  if (t.row_block <= 0) t.row_block = 8 * t.rows;
  t.row_block = (t.row_block + t.rows - 1) / t.rows * t.rows;
  return t;
}

void schedule_attention(AttentionFuncs f, const AttentionSpec& spec, const Halide::Target& target,
                        bool autoscheduled, const AttentionTunables& tunables) {
  if (autoscheduled) return;  // the generator's estimates drive the autoscheduler
  const TargetInfo info = target_info(target);
  switch (info.isa) {
    case Isa::kCuda:
      throw Halide::CompileError("attngen: no CUDA schedule yet for attention");
    case Isa::kAvx512:
    case Isa::kAvx2:
    case Isa::kNeon:
    case Isa::kSse41:
      schedule_attention_simd(f, spec, info, resolve(tunables, spec, info));
      return;
    case Isa::kGeneric:
      schedule_attention_generic(f, info);
      return;
  }
}

void schedule_linear(LinearFuncs f, const Halide::Target& target, bool autoscheduled,
                     const LinearTunables& tunables) {
  if (autoscheduled) return;
  const TargetInfo info = target_info(target);
  switch (info.isa) {
    case Isa::kCuda:
      throw Halide::CompileError("attngen: no CUDA schedule yet for linear");
    case Isa::kAvx512:
    case Isa::kAvx2:
    case Isa::kNeon:
    case Isa::kSse41:
      schedule_linear_simd(f, info, resolve(tunables, info));
      return;
    case Isa::kGeneric:
      schedule_linear_generic(f, info);
      return;
  }
}

}  // namespace attngen
