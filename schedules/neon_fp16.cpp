// Half-precision P.V for targets with f16 arithmetic (ARMv8.2-A FP16, the neonfp16 row): the
// key-block schedule of schedules/cpu_simd.cpp with its product of probs and V in f16
// (AttentionSpec::half_pv_chunk, generator/online_softmax.h). Per key block of a query tile:
// the block's probs are rounded to f16 once (query rows innermost, like the f32 probs); then
// for each group of `rows` query rows and each chunk of half_pv_chunk keys, rows x Dv/8
// accumulators of 8 f16 lanes take one FMA per key (fmla v.8h, V a vector, the prob broadcast),
// and the chunk's sums are widened and added to the block's f32 product.
// Not measured on hardware yet (the build machine runs aarch64 under qemu only): twice the lanes
// per FMA of the f32 schedule, plus a widening and an add per 8 lanes every 16 keys.
#include "schedules/schedule.h"

namespace attngen {

using namespace Halide;

void schedule_half_pv(AttentionFuncs f, const AttentionSpec& spec, const TargetInfo& info,
                      const AttentionTunables& t) {
  const TargetRow& row = target_row(info.isa);
  const int half_lanes = lanes_of(row, 2);
  int dv_lanes = half_lanes;
  while (dv_lanes > 2 && spec.head_dim_v % dv_lanes != 0) dv_lanes /= 2;
  const TailStrategy dv_tail = tail_for(spec.head_dim_v, dv_lanes);
  const int f32_dv_lanes = lanes_dividing(spec.head_dim_v, info);
  const TailStrategy f32_dv_tail =
      spec.head_dim_v % f32_dv_lanes == 0 ? TailStrategy::Auto : TailStrategy::GuardWithIf;
  // f16 accumulators of a row group: as many rows as the accumulator registers hold.
  const int dv_vectors = (spec.head_dim_v + dv_lanes - 1) / dv_lanes;
  const int rows = rows_for_accumulators(dv_vectors, t.query_tile, info);
  const Var &d = f.d, &i = f.i;
  Var ro("hro"), ri("hri"), vo("hvo"), vi("hvi");

  // The block's probs in f16, computed where the f32 probs are (per key block of the tile).
  f.probs_half.compute_at(f.state, f.rb)
      .reorder_storage(i, f.j)
      .split(i, ro, ri, half_lanes, TailStrategy::GuardWithIf)
      .reorder(ri, ro, f.j)
      .vectorize(ri);

  // The block's f32 product: one widening add per (row, Dv vector) and chunk of keys.
  Func pv = f.block_pv;
  pv.update()
      .split(i, ro, ri, rows)
      .split(d, vo, vi, f32_dv_lanes, f32_dv_tail)
      .reorder(vi, vo, ri, f.rh, ro)
      .vectorize(vi)
      .unroll(vo)
      .unroll(ri);

  // One chunk's f16 sums for the row group: rows x Dv/8 accumulators across the chunk's keys.
  Func half = f.block_pv_half;
  half.compute_at(pv, f.rh).bound_extent(i, rows);
  half.split(d, vo, vi, dv_lanes, dv_tail).reorder(vi, vo, i).vectorize(vi).unroll(vo).unroll(i);
  half.update()
      .split(d, vo, vi, dv_lanes, dv_tail)
      .reorder(vi, vo, i, f.rx)
      .vectorize(vi)
      .unroll(vo)
      .unroll(i);
  if (spec.generic) half.bound(d, 0, spec.head_dim_v);
}

}  // namespace attngen
