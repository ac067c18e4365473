// CPU schedule of the decode kernels (generator/decode_algorithm.h) for SIMD targets.
//
// Decode is a stream over the cache: every K and V element is used by only g * Sq rows (a few),
// so the kernel is bound by memory bandwidth, and the schedule's job is to read K and V exactly
// once, at full speed, on every core:
//  - one parallel task per (split, kv head, sequence) computes that split's partial state; its
//    key blocks are visited in order (those no row attends skipped), and per block the scores,
//    max, exps, sum and probs.V live in L1 (key_block x one vector of rows);
//  - rows (the g query heads x Sq queries of a kv head) are the vector lanes, in tiles of one
//    vector (more rows re-read the block from L1/L2): q.k broadcasts each K element against a
//    vector of rows, key_tile keys of independent accumulators; max, exp and sum are vertical;
//    no horizontal reductions;
//  - probs.V holds pv_rows x Dv of accumulators across the keys of a block;
//  - the merge of the splits is a small second stage, parallel over queries.
//
// Measured (bench/RESULTS.md, "Decode over a KV cache"; 2-core Ice Lake-SP VM, AVX-512, paired
// runs): B1 Hq32/Hkv8 D128 Skv8192 at 0.80-0.86 of a streaming read of as many bytes on 2
// threads; key blocks of 32/128/256 and key tiles of 4/16 no better than 64 and 8. The same code
// ran up to 1.5x slower from DRAM in other builds, with the q.k loop at another alignment.
#include "schedules/schedule.h"

namespace attngen {

using namespace Halide;

void schedule_decode_simd(DecodeFuncs f, const DecodeSpec& spec, const TargetInfo& info,
                          const DecodeTunables& t) {
  const int lanes = info.f32_lanes;
  const int dv_lanes = lanes_dividing(spec.head_dim_v, info);
  const TailStrategy dv_tail =
      spec.head_dim_v % dv_lanes == 0 ? TailStrategy::Auto : TailStrategy::GuardWithIf;
  const TailStrategy round = TailStrategy::RoundUp;
  const Var &d = f.d, &s = f.s, &r = f.r, &hk = f.hk, &b = f.b, &sp = f.sp;
  Var group("group"), vo("vo"), vi("vi"), so("so"), si("si"), ro("ro"), ri("ri"), ib("ib");
  Var po("po"), pi("pi");

  // The partial states: one parallel task per (split, kv head, sequence). The splits are a
  // parallel loop nested in the one over (kv head, sequence) rather than fused with it: with sp
  // fused, bounds inference widens the per-block stages under the block-skipping predicate to
  // every block of the sequence. Per key block, the rows go by tiles of one vector.
  Func state = f.state;
  state.compute_root().split(d, vo, vi, dv_lanes, dv_tail).vectorize(vi).unroll(vo).parallel(b);
  // A generic kernel computes its padded head dim; the output takes the cache's (run-time).
  if (spec.generic) state.bound(d, 0, spec.head_dim_v);
  state.update()
      .split(r, ro, ri, lanes, TailStrategy::GuardWithIf)
      .split(d, vo, vi, dv_lanes, dv_tail)
      .reorder(vi, vo, ri, ro, f.rb, sp, hk, b)
      .fuse(hk, b, group)
      .parallel(group)
      .parallel(sp)
      .vectorize(vi)
      .unroll(vo);
  f.visit.compute_root();
  f.row_position.compute_root();

  // The task's query rows, staged once, transposed ([d][r]) so that a tile's rows are a vector.
  f.q.compute_at(state, sp).reorder_storage(r, f.d);

  // Per key block and row tile, rows are the vector lanes (rounded up to a whole vector: the
  // lanes past the last row compute junk that nothing reads) and every stage is elementwise or
  // a reduction across keys, vertical in the lanes. Storage is one tile's worth, on the stack.
  const auto per_tile = [&](Func g) -> Func {
    g.compute_at(state, ro).bound_storage(r, lanes);
    return g;
  };
  // q.k: key_tile keys of accumulators, each FMA broadcasting one K element (K rows are
  // contiguous in the cache, so the block's K streams through once).
  Func scores = per_tile(f.scores);
  scores.reorder_storage(r, s)
      .split(s, so, si, t.key_tile, TailStrategy::GuardWithIf)
      .reorder(r, si, so)
      .vectorize(r, lanes, round)
      .unroll(si);
  f.dot.compute_at(scores, so).reorder_storage(r, s).bound_storage(r, lanes);
  f.dot.reorder(r, s).vectorize(r, lanes, round).unroll(s);
  f.dot.update().reorder(r, s, f.rd).vectorize(r, lanes, round).unroll(s);
  // A cache of another type (f16, bf16, i8) is converted a key tile at a time with vector
  // instructions into key_tile x Dqk floats on the stack (L1), which the FMAs above broadcast
  // from as they do from an f32 cache; converting each element where it is broadcast would be
  // a scalar load and conversion per K element.
  if (spec.kv_type != Float(32)) {
    f.k.compute_at(scores, so).vectorize(d, lanes, TailStrategy::GuardWithIf);
  }

  for (Func g : {f.block_max, f.block_sum}) {
    per_tile(g).bound_storage(f.kb, 1).vectorize(r, lanes, round);
    g.update().reorder(r, f.rk).vectorize(r, lanes, round);
  }
  per_tile(f.probs).reorder_storage(r, s).reorder(r, s).vectorize(r, lanes, round);

  // probs.V: pv_rows x Dv accumulators live across the keys of the block; only real rows.
  Func pv = per_tile(f.block_pv);
  pv.bound_storage(f.kb, 1).split(d, vo, vi, dv_lanes, dv_tail).vectorize(vi).unroll(vo);
  pv.update()
      .split(r, po, pi, t.pv_rows, TailStrategy::GuardWithIf)
      .split(d, vo, vi, dv_lanes, dv_tail)
      .reorder(vi, vo, pi, f.rk, po)
      .vectorize(vi)
      .unroll(vo)
      .unroll(pi);

  // The merge: per (query, sequence), over the splits, for every head.
  Func out = f.out;
  const TailStrategy out_tail = spec.generic ? TailStrategy::GuardWithIf : dv_tail;
  out.split(d, vo, vi, dv_lanes, out_tail).vectorize(vi).fuse(f.i, b, ib).parallel(ib);
  if (!spec.generic) out.unroll(vo);
  for (Func g : {f.max, f.sum, f.weight}) g.compute_at(out, ib);
  f.acc.compute_at(out, ib).vectorize(d, dv_lanes, out_tail);
  f.acc.update().reorder(d, f.rs).vectorize(d, dv_lanes, out_tail);
}

}  // namespace attngen
