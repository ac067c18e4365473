// CPU schedule of the decode kernels (generator/decode_algorithm.h) for SIMD targets.
//
// Decode streams the cache: every K and V element is used by only the g * Sq rows of its kv
// head (4 at Llama's g = 4 and one query), so the arithmetic per element must stay small enough
// to hide behind the memory time, also when the cache is f16, bf16 or i8. What each choice below
// measured against what it replaced, and what was tried and dropped:
// docs/decisions/decode-cpu-schedule.md.
//  - One parallel task per (split, kv head, sequence) computes that split's partial state; its
//    key blocks are visited in order (those no row attends skipped), and per block and tile of
//    row_tile rows the scores, max, exps, sum and probs.V live in L1.
//  - An f32 cache (slot by slot, K then V): q.k vectorises over the head dim (an rfactor of the
//    dot product): per key, each vector of K is loaded once and feeds one FMA per row of the
//    tile, and each (key, row) ends with one horizontal sum.
//  - An i8 cache on a row with integer dot products (DecodeSpec::int8_dot: avx512bf16's VNNI,
//    neondot's sdot): q.k as dot products over K in groups of 16 slots with 4 adjacent bytes of
//    each slot side by side (core/kv_layout.h), the lanes being the keys (no horizontal sums);
//    with VNNI P.V as integer dot products too (define_i8_pv: each row's weights in 23-bit fixed
//    point, 3 bytes; V in quads of 4 keys), with sdot as below without them.
//  - An i8 cache without VNNI: the same grouped K, each 16-byte quarter of a vector widened to
//    one f32 vector for one FMA per row against q's 4 elements repeated; P.V alike.
//  - An f16 or bf16 cache: K in groups of 16 slots, element d of the 16 slots side by side, so
//    per 16 keys and element d one load, one conversion and one FMA per row; each q.k iteration
//    prefetches the line at the same place of the group 128 keys ahead, and P.V (keys taken as
//    (group, slot), DecodeSpec::pv_by_group) each key's V 128 keys ahead.
//  - Scores, max, exps and sums take the block's keys in the lanes; probs.V keeps Dv in the
//    lanes (pv_rows rows x a part of Dv of accumulators across the keys of the block).
//  - Key blocks of 128 keys, read where they are in the cache (plan_decode); a variant's
//    KEY_BLOCK for long caches (the runtime's form from kDecodeLongKeys keys, core/targets.h).
//    stage_block = 1 (a tunable) copies each block's slots as stored first.
//  - On x86, q.k prefetches each slot's K and P.V its V prefetch_slots keys ahead into L2
//    (prefetcht1: prefetch_lines_pass, schedules/prefetch.cpp): P.V, which runs once per part
//    of Dv, the lines of that part (decode_pv_bytes), so each line of V once (bench/RESULTS.md,
//    "Decode's V prefetched a line once"); an i8 cache's q.k prefetches its groups of slots, K
//    and V, one group ahead.
//  - The merge of the splits is a small second stage, parallel over queries.
#include <algorithm>

#include "core/kv_layout.h"
#include "schedules/schedule.h"

namespace attngen {

using namespace Halide;

namespace {

// The largest divisor of n that is at most limit.
int divisor_at_most(int n, int limit) {
  for (int f = std::min(n, limit); f > 1; --f) {
    if (n % f == 0) return f;
  }
  return 1;
}

// Integer-dot i8 q.k: partial sums per row over alternate 4-byte groups of the head dim where a
// group of 16 keys (16 32-bit lanes) is one vector (below); where it takes several (NEON's 4),
// those are the chains in flight, and two partial sums would double the accumulators of a row
// tile past the registers (4 rows x 4 vectors x 2 spilled on aarch64).
// Where the schedules prefetch K and V: every sequence one page (DecodeFuncs::one_page, where a
// prefetch's box is the key's K or V) in a call whose slots fill a key block. A shorter call
// reads a few lines; its branch of the state (whole_blocks, below) keeps one form of each stage,
// since the condition is false there.
Expr prefetch_condition(const DecodeFuncs& f) {
  return f.whole_blocks.defined() ? f.one_page && f.whole_blocks : f.one_page;
}

// The stage's specialisation where the schedules prefetch (the stage itself where they always do).
Stage prefetched(Stage stage, const Expr& condition) {
  return Halide::Internal::is_const_one(condition) ? stage : stage.specialize(condition);
}
Stage prefetched(Stage stage, const DecodeFuncs& f) {
  return prefetched(stage, prefetch_condition(f));
}

int i8_dot_chains(const TargetInfo& info) { return kSlotGroup / info.f32_lanes >= 2 ? 1 : 2; }

// 16-bit q.k: partial sums per row over alternate elements of the head dim where a group of
// 16 keys is one vector (more than one FMA chain in flight per row).
int half_chains(const TargetInfo& info) { return kSlotGroup / info.f32_lanes >= 2 ? 1 : 2; }

// probs.V's vectors of Dv per register tile: as many as the accumulators leave for pv_rows rows.
int pv_vectors_of(const DecodeSpec& spec, const TargetInfo& info, const DecodeTunables& t) {
  return divisor_at_most(vectors_covering(spec.head_dim_v, info),
                         std::max(1, info.accumulators / std::max(1, t.pv_rows)));
}

}  // namespace

int decode_pv_bytes(const DecodeSpec& spec, const TargetInfo& info, const DecodeTunables& t) {
  const int dv_lanes = lanes_dividing(spec.head_dim_v, info);
  return std::min(spec.head_dim_v, pv_vectors_of(spec, info, t) * dv_lanes) * spec.kv_type.bytes();
}

int decode_line_bytes(const DecodeSpec& spec, const TargetInfo& info) {
  if (spec.int8_dot != Int8Dot::kNone) return i8_dot_chains(info) * kI8DotBytes * kSlotGroup;
  return half_chains(info) * kSlotGroup * spec.kv_type.bytes();
}

void schedule_decode_simd(DecodeFuncs f, const DecodeSpec& spec, const TargetInfo& info,
                          const DecodeTunables& t) {
  const int lanes = info.f32_lanes;
  const int qk_lanes = lanes_dividing(spec.head_dim_qk, info);
  const int dv_lanes = lanes_dividing(spec.head_dim_v, info);
  const TailStrategy dv_tail = tail_for(spec.head_dim_v, dv_lanes);
  const TailStrategy round = TailStrategy::RoundUp;
  const int rows = t.row_tile;
  const Var &d = f.d, &s = f.s, &r = f.r, &hk = f.hk, &b = f.b, &sp = f.sp;
  Var vo("vo"), vi("vi"), ro("ro"), ri("ri"), ib("ib"), po("po"), pi("pi"), so("so"), si("si");
  Var u("u"), vt("vt"), vp("vp"), group("group");

  // The partial states: one parallel task per (split, kv head, sequence). The splits are a
  // parallel loop nested in the one over (kv head, sequence) rather than fused with it: with sp
  // fused, bounds inference widens the per-block stages under the block-skipping predicate to
  // every block of the sequence. Per key block, the rows go by tiles of row_tile. The merge into
  // the state loops over the head dim's vectors, each with its own rescaling exp: unrolled, they
  // were half of the kernel's code and slower (bench/RESULTS.md, "The online-softmax merge as a
  // loop").
  Func state = f.state;
  state.compute_root().split(d, vo, vi, dv_lanes, dv_tail).vectorize(vi).unroll(vo).parallel(b);
  // A generic kernel computes its padded head dim; the output takes the cache's (run-time).
  if (spec.generic) state.bound(d, 0, spec.head_dim_v);
  state.update()
      .split(r, ro, ri, rows, TailStrategy::GuardWithIf)
      .split(d, vo, vi, dv_lanes, dv_tail)
      .reorder(vi, vo, ri, ro, f.rb, sp, hk, b)
      .fuse(hk, b, group)
      .parallel(group)
      .parallel(sp)
      .vectorize(vi);
  // A constant key block wherever the call's slots fill one (decode_algorithm.cpp, block_keys);
  // only a shorter call computes its one block over the slots it has.
  if (f.whole_blocks.defined()) state.update().specialize(f.whole_blocks);
  f.visit.compute_root();
  f.row_position.compute_root();

  // The block's slots, copied as stored (K then V of each slot, in memory order) before the
  // row tiles use them.
  if (t.stage_block) {
    const int stored_lanes = lanes * 4 / spec.kv_type.bytes();
    for (Func g : {f.k_stored, f.v_stored}) {
      g.compute_at(state, f.rb)
          .bound_storage(s, spec.key_block)
          .vectorize(d, stored_lanes, TailStrategy::GuardWithIf);
    }
    f.v_stored.compute_with(f.k_stored, s);
  }

  // The task's query rows, staged once as they are stored (d innermost: q.k loads vectors of d).
  f.q.compute_at(state, sp).vectorize(d, qk_lanes, TailStrategy::GuardWithIf);

  // Per key block and row tile (rounded up to whole tiles: the rows past the last compute
  // junk that nothing reads), storage one tile's worth on the stack.
  const auto per_tile = [&](Func g) -> Func {
    g.compute_at(state, ro).bound_storage(r, rows);
    return g;
  };

  // q.k. An i8, f16 or bf16 cache (grouped K): the keys in the lanes, below. An f32 cache, over
  // the head dim:
  // dot_rf (u, s, r) holds per-lane partial sums of d = rdo * qk_lanes + u; per key the rows are
  // unrolled, so each converted vector of K feeds row_tile FMAs. int8_dot takes 64-byte vectors
  // (a 256-bit vector made LLVM's sapphirerapids CPU emit AVX-VNNI's VEX form, which Zen 4 lacks).
  RVar rdo("rdo"), rdi("rdi"), rdoo("rdoo"), rdoi("rdoi"), rdq("rdq");
  Func dot = per_tile(f.dot);
  // q.k with the keys in the lanes (a grouped cache's K: the VNNI i8 and the 16-bit kernels):
  // dot_rf, an rfactor of dot over `chain` (alternate parts of the head dim, rdoi), is computed
  // per group of 16 keys (sg) and summed into dot there. Its update's loop over the rest of the
  // head dim (rdoo), each iteration reading decode_line_bytes of the group's K part,
  // prefetches the group prefetch_slots keys (whole groups) ahead a line at a time: each
  // iteration the lines at the same place of that group's K part (Halide's box of K for an
  // iteration that many iterations on, left as it is (NonFaulting): the groups follow one
  // another, k_cache's dim 1 apart), and for an i8 cache of its V part too (the generator's
  // prefetch span, decode_line_bytes). Spread over the work so, not a group in one burst.
  Var sg("sg"), chain("chain");
  // dot per group of 16 keys (sg), the keys in the lanes, summing the rfactor's `parts`.
  const auto sum_groups = [&](const RVar& parts) {
    dot.vectorize(s, kSlotGroup).unroll(r, rows, round);
    dot.update()
        .split(s, sg, si, kSlotGroup, TailStrategy::GuardWithIf)
        .reorder(si, parts, r, sg)
        .vectorize(si)
        .unroll(parts)
        .unroll(r, rows, round);
  };
  const auto keys_in_lanes = [&](Func dot_rf) {
    sum_groups(rdoi);
    dot_rf.compute_at(dot, sg).bound_storage(r, rows);
    dot_rf.vectorize(s, kSlotGroup).unroll(chain).unroll(r);
    if (t.prefetch_slots > 0 && f.k_cache.defined()) {
      const int groups_ahead = std::max(1, t.prefetch_slots / kSlotGroup);
      const int per_iteration = decode_line_bytes(spec, info) / spec.kv_type.bytes();  // elements
      const Expr ahead = groups_ahead * f.k_cache.dim(1).stride() / per_iteration;
      prefetched(dot_rf.update(), f)
          .prefetch(f.k_cache, rdoo, rdoo, ahead, PrefetchBoundStrategy::NonFaulting);
    }
  };
  if (spec.int8_dot != Int8Dot::kNone) {
    // The row's quantised q, its scale and sum, once per task.
    for (Func g : {f.q_amax, f.q_scale, f.q_sum}) {
      if (g.defined()) g.compute_at(state, sp);
    }
    f.q_i8.compute_at(state, sp).vectorize(d, 64, TailStrategy::GuardWithIf);
    // The keys in the lanes: a group's K part holds 4 adjacent bytes of the head dim of its 16
    // slots in each 64-byte vector (core/kv_layout.h), one vpdpbusd operand against the 4
    // bytes of a row's q broadcast: per (16 keys, 4 elements of the head dim) one load, one
    // xor into u8 and one vpdpbusd per row, and no horizontal sums. The head dim's 4-byte
    // groups alternate between two partial sums (an rfactor over i8_dot_chains, dot_rf), so
    // that each row has two chains of vpdpbusd (latency 4) in flight instead of one of Dqk / 4:
    // 0.98 of the time (bench/RESULTS.md, "Every call's thread count read once": 6 alternating
    // rounds; 4 chains 0.98 too).
    Func dot_rf = dot.update()
                      .split(f.rd, rdo, rdq, kI8DotBytes)
                      .split(rdo, rdoo, rdoi, i8_dot_chains(info))
                      .rfactor(rdoi, chain);
    dot_rf.update()
        .reorder(rdq, s, chain, r, rdoo)
        .atomic()
        .vectorize(rdq)
        .vectorize(s, kSlotGroup)
        .unroll(chain)
        .unroll(r);
    keys_in_lanes(dot_rf);
  } else if (spec.kv_type == Int(8)) {
    // An i8 cache without integer dot products: each 16-byte quarter of a K vector (4 keys x 4
    // adjacent elements of the head dim, core/kv_layout.h) widened to 16 f32 lanes and
    // taken by one FMA per row against the row's 4 elements of q (a 128-bit broadcast): an
    // rfactor over the 4 elements (dq), summed per key at the end of the head dim.
    Var dq("dq"), s4o("s4o"), s4i("s4i"), lane("lane");
    f.q_tiled.compute_at(state, sp)
        .bound(f.q_tiled.args()[0], 0, kSlotGroup)
        .vectorize(f.q_tiled.args()[0]);
    Func dot_rf = dot.update().split(f.rd, rdo, rdq, kI8DotBytes).rfactor(rdq, dq);
    sum_groups(rdq);
    dot_rf.compute_at(dot, sg).reorder_storage(dq, s, r, hk, b).bound_storage(r, rows);
    dot_rf.split(s, s4o, s4i, kI8DotBytes)
        .reorder(dq, s4i, s4o, r)
        .fuse(dq, s4i, lane)
        .vectorize(lane)
        .unroll(s4o)
        .unroll(r);
    dot_rf.update()
        .split(s, s4o, s4i, kI8DotBytes)
        .reorder(dq, s4i, r, s4o, rdo)
        .fuse(dq, s4i, lane)
        .vectorize(lane)
        .unroll(r)
        .unroll(s4o);
    if (t.prefetch_slots > 0 && f.k_cache.defined()) {
      prefetched(dot.update(), f)
          .prefetch(f.k_cache, sg, sg, std::max(1, t.prefetch_slots / kSlotGroup),
                    PrefetchBoundStrategy::NonFaulting);
    }
  } else if (spec.kv_type.bits() == 16) {
    // An f16 or bf16 cache (grouped K, core/kv_layout.h): the keys in the lanes. Per group
    // of 16 keys and element d of the head dim one load of 16 halves, one conversion to f32
    // and one FMA per row against q[d] broadcast, and no horizontal sums. The head dim's
    // elements alternate between q_chains partial sums (an rfactor, dot_rf), so that each row
    // has more than one FMA chain (latency 4) in flight where a group is one vector.
    const int q_chains = half_chains(info);
    Func dot_rf = dot.update().split(f.rd, rdoo, rdoi, q_chains).rfactor(rdoi, chain);
    dot_rf.update().reorder(s, chain, r, rdoo).vectorize(s, kSlotGroup).unroll(chain).unroll(r);
    keys_in_lanes(dot_rf);
  } else {
    Stage dot_split = dot.update().split(f.rd, rdo, rdi, qk_lanes);
    Func dot_rf = dot_split.rfactor(rdi, u);
    dot.vectorize(s, lanes).unroll(r, rows, round);
    dot.update()
        .split(s, so, si, t.key_tile, TailStrategy::GuardWithIf)
        .reorder(rdi, r, si, so)
        .atomic()
        .vectorize(rdi)
        .unroll(r, rows, round)
        .unroll(si);
    // Software prefetch of the slot's K prefetch_slots keys ahead of q.k (its V: P.V, below):
    // Halide's prefetch of K's box there, made a prefetch of every line of the slot's K by
    // prefetch_lines_pass (which the generator adds to the pipeline).
    if (t.prefetch_slots > 0 && f.k_cache.defined()) {
      prefetched(dot.update(), f)
          .prefetch(f.k_cache, so, so, t.prefetch_slots, PrefetchBoundStrategy::NonFaulting);
    }
    const int d_vectors = spec.head_dim_qk / qk_lanes;
    dot_rf.compute_at(dot, si).reorder_storage(u, s, r, hk, b).bound_storage(r, rows);
    dot_rf.vectorize(u).unroll(r);
    dot_rf.update()
        .split(rdo, rdoo, rdoi, divisor_at_most(d_vectors, 8))
        .reorder(u, r, rdoi, rdoo)
        .vectorize(u)
        .unroll(r)
        .unroll(rdoi);
  }

  // Scores, max, exps and sums with the block's keys in the lanes. The per-key stages take a
  // vector of keys and then the tile's rows (unrolled), so that what depends on the keys alone
  // (their positions for the mask, an i8 cache's K and V scales) is computed once for the rows:
  // the i8 VNNI kernel 0.96 of the time with the rows outside (bench/RESULTS.md, "An I8 cache's
  // scales by group").
  const auto keys_then_rows = [&](Func g) {
    per_tile(g)
        .split(s, so, si, lanes)
        .split(r, ro, ri, rows, round)
        .reorder(si, ri, so, ro)
        .vectorize(si)
        .unroll(ri);
  };
  keys_then_rows(f.scores);
  std::vector<Func> row_sums = {f.block_max, f.block_sum};
  if (f.pv_max.defined()) row_sums.push_back(f.pv_max);
  for (Func g : row_sums) {
    per_tile(g).bound_storage(f.kb, 1).unroll(r, rows, round);
    Func g_rf = g.update().split(f.rk, rdo, rdi, lanes).rfactor(rdi, u);
    g.update().reorder(rdi, r).atomic().vectorize(rdi).unroll(r, rows, round);
    g_rf.compute_at(g, r).reorder_storage(u, f.kb, r, hk, b).vectorize(u);
    g_rf.update().reorder(u, rdo).vectorize(u);
  }
  keys_then_rows(f.probs);
  if (f.probs_scaled.defined()) keys_then_rows(f.probs_scaled);

  // probs.V: pv_rows rows x pv_vectors vectors of Dv of accumulators across the keys of the
  // block; the V vector of a key is converted once and used by the pv_rows rows.
  const int dv_vectors = vectors_covering(spec.head_dim_v, info);
  const int pv_vectors = pv_vectors_of(spec, info, t);
  Func pv = per_tile(f.block_pv);
  pv.bound_storage(f.kb, 1).split(d, vo, vi, dv_lanes, dv_tail).vectorize(vi).unroll(vo);
  if (f.block_pv_i32.defined()) {
    // P.V as integer dot products (define_i8_pv). Per tile each row's largest weight, then the
    // weights' bytes (keys innermost: 4 keys' bytes are one 32-bit broadcast; a weight in fixed
    // point computed once for its 3 bytes); then the head dim in the lanes, 4 keys a vpdpbusd (V's
    // layout puts their elements side by side), register tiles of 3 limbs x row_tile rows x 2
    // vectors of Dv.
    per_tile(f.pv_unit).bound_storage(f.kb, 1);
    const Var c = f.pv_limb.args()[1];
    per_tile(f.pv_limb)
        .bound(c, 0, 3)
        .split(s, so, si, lanes)
        .split(r, ro, ri, rows, round)
        .reorder(si, c, ri, so, ro)
        .vectorize(si)
        .unroll(c)
        .unroll(ri);
    Func pvi = per_tile(f.block_pv_i32);
    const Var ci = pvi.args()[1];
    pvi.bound(ci, 0, 3)
        .bound_storage(f.kb, 1)
        .split(d, vo, vi, dv_lanes, dv_tail)
        .vectorize(vi)
        .unroll(vo)
        .unroll(ci);
    const RVar quad = f.rquad.x, lane = f.rquad.y;
    pvi.update()
        .split(d, vo, vi, dv_lanes, dv_tail)
        .split(vo, vt, vp, divisor_at_most(dv_vectors, 2))
        .reorder(lane, vi, vp, ci, r, quad, vt)
        .atomic()
        .vectorize(lane)
        .vectorize(vi)
        .unroll(ci)
        .unroll(r, rows, round)
        .unroll(vp);
  } else if (f.rquad.defined()) {
    // An i8 cache without integer dot products: each 16-byte quarter of a V vector (4 elements
    // of the head dim x 4 keys, core/kv_layout.h) widened to one f32 vector for one FMA
    // per row against the 4 keys' weights repeated (a 128-bit broadcast): an rfactor over the 4
    // keys, summed per element at the end of the block.
    Var kq("kq"), dc("dc"), d4("d4"), dct("dct"), dcp("dcp");
    const RVar quad = f.rquad.x, lane = f.rquad.y;
    Func pv_rf = pv.update().rfactor(lane, kq);
    pv.update()
        .split(d, vo, vi, dv_lanes, dv_tail)
        .reorder(vi, lane, vo, r)
        .vectorize(vi)
        .unroll(lane)
        .unroll(vo)
        .unroll(r, rows, round);
    per_tile(pv_rf).bound_storage(f.kb, 1).reorder_storage(kq, d, f.kb, r, hk, b);
    pv_rf.split(d, dc, d4, kI8DotBytes).reorder(kq, d4, dc, r).vectorize(kq).vectorize(d4);
    pv_rf.update()
        .split(d, dc, d4, kI8DotBytes)
        .split(dc, dct, dcp, 4)
        .reorder(kq, d4, dcp, r, quad, dct)
        .vectorize(kq)
        .vectorize(d4)
        .unroll(dcp)
        .unroll(r, rows, round);
  } else {
    // The keys of the block: rk, or for an f16 or bf16 cache (pv_by_group) (group, slot of the
    // group). Each key's V prefetch_slots keys ahead of P.V (as q.k does its K), an f16 or bf16
    // cache's from the group that many keys (whole groups) on: the part of Dv (vt) the iteration
    // reads (the generator's span, decode_pv_bytes).
    const bool by_group = f.rgroup.defined();
    const RVar key = by_group ? f.rgroup.y : f.rk, key_outer = by_group ? f.rgroup.x : f.rk;
    Stage pv_update = pv.update()
                          .split(r, po, pi, t.pv_rows, round)
                          .split(d, vo, vi, dv_lanes, dv_tail)
                          .split(vo, vt, vp, pv_vectors);
    if (by_group) {
      pv_update.reorder(vi, vp, pi, key, key_outer, vt, po);
    } else {
      pv_update.reorder(vi, vp, pi, key, vt, po);
    }
    pv_update.vectorize(vi).unroll(vp).unroll(pi);
    // The P.V of a layer whose V is finite multiplies as it is (as for attention; generator/
    // online_softmax.h, pv_term); otherwise it tests each product (a paged decode whose P.V
    // tested each product ran 1.5-1.9x as long: docs/decisions/paged-kv.md). Where it prefetches
    // (one page in whole blocks), the finite-V branch with the prefetch comes first: Halide takes
    // a stage's first specialisation whose condition holds.
    // (A quantised V's P.V takes its probabilities scaled, 0 where not attended: no test.)
    const bool tested = !f.probs_scaled.defined();
    if (t.prefetch_slots > 0 && f.v_cache.defined()) {
      const int ahead = by_group ? std::max(1, t.prefetch_slots / kSlotGroup) : t.prefetch_slots;
      const Expr condition = prefetch_condition(f);
      prefetched(pv_update, tested ? condition && f.v_finite : condition)
          .prefetch(f.v_cache, key, key_outer, ahead, PrefetchBoundStrategy::NonFaulting);
    }
    if (tested) pv_update.specialize(f.v_finite);
  }

  // A whole block's keys of storage for the per-key stages also where a short call's block
  // computes fewer (block_keys): on the stack, not a heap block of that size. (After the
  // rfactors above, whose intermediates would take the bound too.)
  for (Func g : {f.dot, f.scores, f.probs, f.probs_scaled}) {
    if (g.defined()) g.bound_storage(s, spec.key_block);
  }

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
