// Tiled CPU schedules for SIMD targets: written and measured for x86 AVX-512, used with the
// narrower vectors of AVX2 and NEON (AVX2's tiles tuned in schedules/tuned/x86_64_avx2.json).
//
// Attention: parallel over batches and heads, one loop (K and V of a head packed contiguous
// once, stage_kv 2), and the query tiles of a head (which the runtime runs in order where the
// heads alone spread evenly over the threads, runtime/src/allocator.cpp). Per query tile the row of
// scores (query_tile x the keys it visits, query rows innermost) stays in L2, so the row max, exp
// and row sum are plain vertical vector ops. Two register-blocked inner loops do the flops:
//   q.k : query_tile/lanes vectors x key_tile keys of accumulators, K broadcast from memory;
//   p.v : pv_rows rows x pv_vectors vectors of Dv of accumulators over a chunk of pv_chunk keys
//         (a part of Dv at a time where pv_vectors is less than all of it: AVX2's 16 registers
//         hold 2 rows x 4 vectors), V rows loaded as vectors, every row group of the tile passing
//         over a chunk while it is in L1.
// Causal tiles visit only the key chunks up to their last row (the algorithm's chunk predicate).
// Linear (X W^T + b): the weights are staged once per call in panels of a register tile's
// output features, the rows once per task in groups of a register tile's rows; the register tile
// runs over e_chunk input features at a time.
//
// The measurements behind these choices (2026-11-29, AVX-512, same-run ratios) are in
// bench/RESULTS.md, "Measurements behind the code's choices". Tuned classes (AVX-512's D64
// dense and causal kernels) run the tunables of schedules/tuned/, not these defaults.
#include "schedules/schedule.h"

namespace attngen {

using namespace Halide;

namespace {

// The scores of a query tile (all keys, or one key block), query rows innermost in memory and
// in vectors: q.k register-blocked with (query_tile / lanes) x key_tile accumulators live across
// Dqk; the row statistics (max and sum, rows along `row`, reduced over `r`) and the exps vertical
// over the rows. Where each Func is computed is the caller's choice.
void schedule_score_tile(const AttentionFuncs& f, const std::vector<Func>& stats, const Var& row,
                         const std::vector<VarOrRVar>& r, int lanes, int key_tile) {
  const Var &i = f.i, &j = f.j;
  Var qo("lo"), qi("li"), jo("jo"), ji("ji");
  Func scores = f.scores;
  scores.reorder_storage(i, j)
      .split(j, jo, ji, key_tile)
      .split(i, qo, qi, lanes)
      .reorder(qi, qo, ji, jo)
      .vectorize(qi)
      .unroll(qo);
  Func dot = f.dot;
  dot.compute_at(scores, jo).reorder_storage(i, j);
  dot.split(i, qo, qi, lanes).reorder(qi, qo, j).vectorize(qi).unroll(qo).unroll(j);
  dot.update().split(i, qo, qi, lanes).reorder(qi, qo, j, f.rd).vectorize(qi).unroll(qo).unroll(j);
  for (Func g : stats) {
    g.split(row, qo, qi, lanes).vectorize(qi).unroll(qo);
    std::vector<VarOrRVar> order{qi, qo};
    order.insert(order.end(), r.begin(), r.end());
    g.update().split(row, qo, qi, lanes).reorder(order).vectorize(qi).unroll(qo);
  }
  Func probs = f.probs;
  probs.reorder_storage(i, j).split(i, qo, qi, lanes).reorder(qi, qo, j).vectorize(qi).unroll(qo);
}

// Parallel over the query tiles in work items of `grain` tiles. The per-tile loop keeps the
// name `task`, so the producers computed at it stay per query tile.
void parallel_tasks(Func out, const Var& task, int grain) {
  if (grain <= 1) {
    out.parallel(task);
    return;
  }
  Var job("job");
  out.split(task, job, task, grain, TailStrategy::GuardWithIf).parallel(job);
}

// The p.v update's loops over Dv and their order, innermost first: Dv's lanes, the register
// tile's vectors of Dv (all of them, or a part of pv_vectors, AttentionTunables::pv_vectors), its
// rows `ri`, the `keys` of a chunk, the parts of Dv, then `outer` (row groups, chunks). A part of
// fewer vectors lets a tile hold more rows, each loaded V vector serving more of them, at the cost
// of the probs read once per part.
void schedule_pv_tile(Stage pv, const Var& d, const AttentionSpec& spec, const TargetInfo& info,
                      const AttentionTunables& t, const VarOrRVar& ri, const VarOrRVar& keys,
                      const std::vector<VarOrRVar>& outer) {
  const int dv_lanes = lanes_dividing(spec.head_dim_v, info);
  Var vo("vo"), vi("vi"), vt("vt"), vp("vp");
  pv.split(d, vo, vi, dv_lanes, tail_for(spec.head_dim_v, dv_lanes));
  std::vector<VarOrRVar> order{vi, vo, ri, keys};
  if (t.pv_vectors < vectors_covering(spec.head_dim_v, info)) {
    pv.split(vo, vt, vp, t.pv_vectors);
    order = {vi, vp, ri, keys, vt};
  }
  order.insert(order.end(), outer.begin(), outer.end());
  pv.reorder(order).vectorize(vi).unroll(order[1]).unroll(ri);
}

// K and V of a head copied once, contiguous, before its query tiles run (stage_kv 2). In
// place, one key's row is Hkv x D floats from the next (a 4 KiB stride at H16 D64), so a head's
// keys fall in 1/16 of the L2's sets and each query tile streams them from L3 again. Packed, a
// head's K and V (S x D floats each, 512 KiB at S2048 D64) stay in L2 for all its query tiles.
void stage_head_kv(AttentionFuncs f, const AttentionSpec& spec, const TargetInfo& info, Func out,
                   const Var& h, int stage_kv) {
  if (stage_kv != 2) return;
  f.k.compute_at(out, h).vectorize(f.d, lanes_dividing(spec.head_dim_qk, info));
  f.v.compute_at(out, h).vectorize(f.d, lanes_dividing(spec.head_dim_v, info));
}

// The query tile's rows copied contiguous (a vector of d at a time) before q transposes them
// into query rows innermost. Gathered straight from the input, a tile's rows are Hq x Dqk floats
// apart (4 KiB at H16 D64): the whole tile falls in one or a few of L1's sets, and each of the
// transposition's per-element loads missed L1.
void stage_q_rows(const AttentionFuncs& f, const AttentionSpec& spec, const TargetInfo& info,
                  Func out, const Var& task) {
  if (!f.q_rows.defined()) return;
  Func q_rows = f.q_rows;
  // (A generic kernel's rows are the call's Dqk long, which may be shorter than a vector.)
  q_rows.compute_at(out, task).vectorize(
      f.d, lanes_dividing(spec.head_dim_qk, info),
      spec.generic ? TailStrategy::GuardWithIf : TailStrategy::Auto);
}

}  // namespace

Var schedule_row_form_output(const AttentionFuncs& f, const AttentionSpec& spec,
                             const TargetInfo& info, const AttentionTunables& t, const Var& task) {
  const int dv_lanes = lanes_dividing(spec.head_dim_v, info);
  const TailStrategy dv_tail = tail_for(spec.head_dim_v, dv_lanes);
  Var io("io"), ii("ii"), vo("vo"), vi("vi"), head("head");
  Func out = f.out;
  out.split(f.i, io, ii, t.query_tile, TailStrategy::GuardWithIf)
      .split(f.d, vo, vi, dv_lanes, dv_tail)
      .reorder(vi, vo, ii, io, f.h, f.b)
      .vectorize(vi)
      .unroll(vo)
      .fuse(f.h, f.b, head)
      .parallel(head)
      .rename(io, task);
  parallel_tasks(out, task, t.parallel_grain);
  return head;
}

void schedule_attention_simd(AttentionFuncs f, const AttentionSpec& spec, const TargetInfo& info,
                             const AttentionTunables& t) {
  const int lanes = info.f32_lanes;
  const int dv_lanes = lanes_dividing(spec.head_dim_v, info);
  const TailStrategy dv_tail = tail_for(spec.head_dim_v, dv_lanes);
  const Var &d = f.d, &i = f.i, &h = f.h, &b = f.b;
  Var io("io"), ii("ii"), ro("ro"), ri("ri"), task("task");
  Var vo("vo"), vi("vi");

  Func out = f.out;
  const Var head = schedule_row_form_output(f, spec, info, t, task);
  stage_head_kv(f, spec, info, out, head, t.stage_kv);

  // The row statistics and acc of the tile: rows qi of tile qt (the task's).
  const auto per_tile_rows = [&](Func g) -> Func {
    g.compute_at(out, task).bound(f.qi, 0, t.query_tile).bound_extent(f.qt, 1);
    return g;
  };

  // probs.v, register-blocked: pv_rows x (Dv / dv_lanes) accumulators live across a chunk of
  // keys (spec.key_chunk = pv_chunk); every row group of the tile passes over one chunk before
  // the next, so that chunk of V and of probs is read from L1 rather than the whole row's from
  // L2. Between chunks the accumulators go to the tile's acc (LLVM keeps them in registers
  // within a chunk).
  Func acc = per_tile_rows(f.acc);
  acc.split(d, vo, vi, dv_lanes, dv_tail).vectorize(vi).unroll(vo);
  Stage pv = acc.update();
  RVar rjo("rjo"), rji("rji");
  if (f.pv_loops.size() == 1) {  // one loop over the keys: chunks made here, the last one cut
    pv.split(f.pv_loops[0], rjo, rji, t.pv_chunk, TailStrategy::GuardWithIf);
  } else {  // the algorithm's chunks (causal)
    rji = f.pv_loops[0];
    rjo = f.pv_loops[1];
  }
  pv.split(f.qi, ro, ri, t.pv_rows, TailStrategy::GuardWithIf);
  schedule_pv_tile(pv, d, spec, info, t, ri, rji, {ro, rjo});

  // Everything below works on one query tile, with query rows innermost in memory.
  const auto per_query_tile = [&](Func g) -> Func {
    g.compute_at(out, task).bound_extent(i, t.query_tile);
    return g;
  };

  per_query_tile(f.q).reorder_storage(i, d).reorder(i, d).vectorize(i, lanes);
  stage_q_rows(f, spec, info, out, task);

  for (Func g : {f.scores, f.probs}) per_query_tile(g);
  for (Func g : {f.row_max, f.row_sum}) per_tile_rows(g);
  schedule_score_tile(f, {f.row_max, f.row_sum}, f.qi, {f.rj_loops.begin(), f.rj_loops.end()},
                      lanes, t.key_tile);

  // Causal kernels restrict the key chunks of a tile by position; with top-left alignment that
  // predicate reads no buffer and leaves the inner loops (the accumulators then stay in
  // registers), so that case gets its own copy of the loops.
  if (spec.mask == MaskKind::kCausal) out.specialize(f.top_left);
}

// Key blocks with the online softmax (AttentionSpec::key_block > 0): memory per task is
// query_tile x key_block scores instead of query_tile x Skv, whatever the sequence length.
// Per block: q.k as above, block max / exp / sum vertical over the query rows, p.v with
// pv_rows x Dv accumulators, then the running state of the tile is rescaled and merged.
void schedule_attention_simd_blocked(AttentionFuncs f, const AttentionSpec& spec,
                                     const TargetInfo& info, const AttentionTunables& t) {
  if (spec.strided_classes) {
    // The strided pattern's two parts (AttentionSpec::strided_classes): the band in this form,
    // and the class rows of a head computed at that head of the output, in this form too
    // (tiles of class rows in parallel, each class's K and V gathered once, by stage_kv).
    AttentionTunables tb = t;
    tb.query_tile = strided_band_spec(spec).query_tile;
    schedule_attention_simd_blocked(f, strided_band_spec(spec), info, tb);
    const int dv_lanes = lanes_dividing(spec.head_dim_v, info);
    const int extent = (class_rows_extent(spec) + dv_lanes - 1) / dv_lanes * dv_lanes;
    f.class_rows.compute_at(f.out, f.h).bound(f.classes->d, 0, extent);
    AttentionTunables tc = t;
    tc.query_tile = strided_class_spec(spec).query_tile;
    schedule_attention_simd_blocked(*f.classes, strided_class_spec(spec), info, tc);
    return;
  }
  const int lanes = info.f32_lanes;
  const int dv_lanes = lanes_dividing(spec.head_dim_v, info);
  const TailStrategy dv_tail = tail_for(spec.head_dim_v, dv_lanes);
  const Var &d = f.d, &i = f.i, &h = f.h, &b = f.b;
  Var io("io"), ii("ii"), ro("ro"), ri("ri"), task("task");
  Var vo("vo"), vi("vi");

  Func out = f.out;
  out.split(i, io, ii, t.query_tile, TailStrategy::GuardWithIf)
      .split(d, vo, vi, dv_lanes, spec.generic ? TailStrategy::GuardWithIf : dv_tail)
      .reorder(vi, vo, ii, io, h, b)
      .vectorize(vi)
      .parallel(b)
      .parallel(h)
      .rename(io, task);
  // A generic kernel writes the call's Dv (run-time) of the state's padded head dim.
  if (!spec.generic) out.unroll(vo);
  // Heads and batches are parallel loops of their own, not fused into the task loop: through
  // a fused loop bounds inference sized the state for every head, a heap allocation per task
  // (measured: causal B1 H12 S1024 44 ms against 50-64 ms, dense key-block 128 B1 H16 S2048
  // 360-399 ms against 468-495 ms, same minutes, loaded machine).
  parallel_tasks(out, task, t.parallel_grain);
  if (f.lse.defined()) {
    // The log-sum-exp of the tile's rows, from the state the tile's output reads: its loops
    // fused with the output's at the task, so both read one computation of the state.
    f.lse.split(i, io, ii, t.query_tile, TailStrategy::GuardWithIf)
        .reorder(ii, io, h, b)
        .parallel(b)
        .parallel(h)
        .rename(io, task);
    parallel_tasks(f.lse, task, t.parallel_grain);
    f.lse.compute_with(out, task);
  }

  // The running (acc, max, sum) of the tile, updated once per key block.
  Func state = f.state;
  state.compute_at(out, task).bound(f.qi, 0, t.query_tile).bound_extent(f.qt, 1);
  if (spec.generic) state.bound(d, 0, spec.head_dim_v);
  state.split(d, vo, vi, dv_lanes, dv_tail).vectorize(vi).unroll(vo);
  // The merge loops over the head dim's vectors rather than unrolling them: each vector rescales
  // by its own exp, and unrolled they were most of the kernel's code (bench/RESULTS.md, "The
  // online-softmax merge as a loop").
  state.update().split(d, vo, vi, dv_lanes, dv_tail).reorder(vi, vo, f.qi, f.rb).vectorize(vi);

  f.q.compute_at(out, task)
      .bound_extent(i, t.query_tile)
      .reorder_storage(i, d)
      .reorder(i, d)
      .vectorize(i, lanes);
  stage_q_rows(f, spec, info, out, task);

  // K and V of the key block, staged once per block for the whole tile: the inner loops then
  // read fixed offsets from one base, with no per-key clamping or strided addressing.
  if (t.stage_kv == 1) {
    f.k.compute_at(state, f.rb).vectorize(d, lanes_dividing(spec.head_dim_qk, info));
    f.v.compute_at(state, f.rb).vectorize(d, dv_lanes);
  }
  stage_head_kv(f, spec, info, out, h, t.stage_kv);

  // Everything below works on one key block of one query tile, query rows innermost.
  for (Func g : {f.scores, f.block_max, f.block_sum, f.probs}) g.compute_at(state, f.rb);
  schedule_score_tile(f, {f.block_max, f.block_sum}, f.i, {f.rk}, lanes, t.key_tile);
  Func pv = f.block_pv;
  pv.compute_at(state, f.rb).split(d, vo, vi, dv_lanes, dv_tail).vectorize(vi).unroll(vo);
  if (spec.generic) pv.bound(d, 0, spec.head_dim_v);
  if (spec.half_pv_chunk > 0) {
    schedule_half_pv(f, spec, info, t);  // schedules/neon_fp16.cpp
  } else {
    // As in the row form, every row group passes over a chunk of the block's keys before the
    // next, so that chunk of V and of probs is read from L1 (at D64 a block of 128 keys of both
    // is 64 KiB, more than the L1 of the AVX-512 CPUs).
    RVar rko("rko"), rki("rki");
    Stage u = pv.update();
    u.split(i, ro, ri, t.pv_rows);
    if (t.pv_chunk < spec.key_block) {
      u.split(f.rk, rko, rki, t.pv_chunk, TailStrategy::GuardWithIf);
      schedule_pv_tile(u, d, spec, info, t, ri, rki, {ro, rko});
    } else {
      schedule_pv_tile(u, d, spec, info, t, ri, f.rk, {ro});
    }
  }
  // A generic kernel's common case, no mask tensor and no soft cap, without their selects and
  // mask reads in the score tile.
  if (spec.generic) f.scores.specialize(f.plain);
}

void schedule_linear_simd(LinearFuncs f, const TargetInfo& info, const LinearTunables& t) {
  // Half-precision products (LinearShape::half_chunk): register tiles of f16 vectors.
  const bool half = f.sum_half.defined();
  const int lanes = half ? lanes_of(target_row(info.isa), 2) : info.f32_lanes;
  const int n_tile = t.n_vectors * lanes;
  const Var &e = f.e, &n = f.n, &s = f.s, &b = f.b;
  Var sb("sb"), s1("s1"), so("so"), si("si"), no("no"), ni("ni"), vo("vo"), vi("vi"), task("task");

  Func out = f.out;
  // Tiles of n line up with the weight panels (of n_tile features) where out starts at a
  // multiple of n_tile: outputs start at 0 (the generators), an internal out is aligned by its
  // pipeline (mha). The product then reads a panel at fixed offsets, not a division per lane.
  // A task is a block of rows and a range of the output features: all of them where the row
  // blocks alone make kMinTasks tasks, else a share of the n tiles each, so that few rows (one
  // block at S 128, a decode step's one row) still spread over the threads. A task stages its
  // rows once; smaller shares of n restage them more often (about 0.3 of one tile's time each).
  constexpr int kMinTasks = 4;
  const LinearShape& shape = f.shape;
  const Expr n_tiles = (shape.out_features + n_tile - 1) / n_tile;
  const Expr row_tasks = shape.batches * ((shape.rows + t.row_block - 1) / t.row_block);
  const Expr shares = clamp((kMinTasks + row_tasks - 1) / row_tasks, 1, n_tiles);
  Var nc("nc"), nt("nt");
  out.split(s, sb, s1, t.row_block, TailStrategy::GuardWithIf)
      .split(s1, so, si, t.rows)
      .split(n, no, ni, n_tile, TailStrategy::GuardWithIf)
      .split(no, nc, nt, (n_tiles + shares - 1) / shares, TailStrategy::GuardWithIf)
      .split(ni, vo, vi, lanes)
      .reorder(vi, vo, si, so, nt, nc, sb, b)
      .fuse(sb, b, task)
      .parallel(task)
      .parallel(nc)
      .vectorize(vi)
      .unroll(vo);

  // The register tile (rows x n_vectors accumulators) runs over e_chunk input features at a
  // time; every row group of the block passes over one chunk before the next, so the chunk of
  // the weight panel (n_tile x e_chunk floats) is read from L1. Between chunks the accumulators
  // go to the block's sum (LLVM keeps them in registers within a chunk).
  Func sum = f.sum;
  RVar reo("reo"), rei("rei");
  sum.compute_at(out, nt).bound_extent(n, n_tile);
  sum.split(n, vo, vi, lanes).vectorize(vi).unroll(vo);
  if (!half) {
    sum.update()
        .split(f.re, reo, rei, t.e_chunk, TailStrategy::GuardWithIf)
        .split(s, so, si, t.rows, TailStrategy::GuardWithIf)
        .split(n, vo, vi, lanes)
        .reorder(vi, vo, si, rei, so, reo)
        .vectorize(vi)
        .unroll(vo)
        .unroll(si);
  } else {
    // The f32 sums take one widening add per chunk of half_chunk features; the register tile,
    // rows x n_vectors f16 accumulators, is sum_half, computed per row group and chunk.
    const int chunk = static_cast<int>(*Internal::as_const_int(f.rx.x.extent()));
    const int chunks = std::max(1, t.e_chunk / chunk);
    sum.update()
        .split(f.rh, reo, rei, chunks, TailStrategy::GuardWithIf)
        .split(s, so, si, t.rows, TailStrategy::GuardWithIf)
        .split(n, vo, vi, lanes)
        .reorder(vi, vo, si, rei, so, reo)
        .vectorize(vi)
        .unroll(vo)
        .unroll(si);
    Func h = f.sum_half;
    h.compute_at(sum, rei).bound_extent(s, t.rows);
    h.split(n, vo, vi, lanes).reorder(vi, vo, s).vectorize(vi).unroll(vo).unroll(s);
    h.update().split(n, vo, vi, lanes).reorder(vi, vo, s, f.rx).vectorize(vi).unroll(vo).unroll(s);
  }

  // The rows of a task's row block, staged once per task (reused by each of its n tiles): the
  // inner loop then reads them with no per-row clamping. f32 products read them in groups of a
  // register tile's rows (LinearShape::row_group): per input feature the group's rows side by
  // side, each group's features one contiguous block, so the tile's rows are one address
  // register and compile-time offsets, and a chunk of a group is one sequential stream. Against
  // the two layouts before it (autotune harness, linear alone, AVX-512, 2 threads) it is
  // 1.04-1.06x faster than rows at a run-time stride (one address register per row; in the MHA
  // layer they did not fit the general registers and LLVM kept them in vector registers,
  // vpextrq next to the FMAs), and the MHA layer takes 0.97x the time of the block transposed
  // (the row block's rows side by side: at 64 rows a chunk's features 256 bytes apart, in 16 of
  // L1's 64 sets; same-run A/B, 5 pairs, B4 S512 E768).
  // The f16 products keep those two: as rows, or transposed (the MHA generator's transpose_x).
  if (f.x_groups.defined()) {
    // A group's rows interleaved a vector of features at a time: one store per vector, which
    // Halide combines from the unrolled rows' strided stores (as scalars, or gathered, the
    // staging took 6% of the time at N 768), the last vector shifted inwards.
    Func xg = f.x_groups;
    Var eo("eo"), ei("ei");
    xg.compute_at(out, nc).bound(f.gr, 0, shape.row_group);
    xg.specialize(shape.in_features >= lanes)
        .split(e, eo, ei, lanes, TailStrategy::ShiftInwards)
        .reorder(ei, f.gr, eo, f.group, b)
        .vectorize(ei)
        .unroll(f.gr);
    xg.reorder(e, f.gr, f.group, b);
  } else if (t.transpose_x) {
    f.x.compute_at(out, nc).bound_extent(s, t.row_block).reorder_storage(s, e, b).reorder(s, e, b);
  } else {
    f.x.compute_at(out, nc).vectorize(e, lanes, TailStrategy::GuardWithIf);
  }

  // The weights arrive in panels of n_tile output features (shape.panel == n_tile,
  // plan_linear(); packed by the runtime), each panel contiguous: a register tile's weights are
  // one block of memory, read where they are. (Transposed without panels, a step along e is a
  // row of N floats: at N = 2304 the rows of a chunk shared a few L1 sets and each fell in its
  // own page; a panel copy inside the kernel took 20% of the time, B4 S512 E768 N2304, and one
  // of the current layout 1.5%, both per call.) The f16 products take them rounded to f16 and
  // padded to whole chunks, staged once per call.
  if (half) f.w_panels.compute_root().vectorize(f.pi, lanes).parallel(f.po);
}

}  // namespace attngen
