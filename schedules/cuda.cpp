// CUDA schedules (Halide target host-cuda). Plain SIMT f32; no tensor cores.
//
// Attention runs the key-block form of the algorithm (AttentionSpec::key_block > 0): one thread
// block per (query tile, head, batch), a 32 (threads_x) x query_tile / 4 grid of threads. Per key
// block the block stages Q, K and V in shared memory (K transposed, so neighbouring threads read
// neighbouring banks), computes the scores of its query rows (a thread: 4 rows of one key, in
// registers), their block max, exps and sums, and each thread folds its tile of probs.V (4 rows
// x Dv / 32 consecutive d, in registers) into the running (acc, max, sum) kept in shared memory.
// Nothing of size Sq x Skv exists anywhere: global memory holds only Q, K, V and O. Shared memory
// per block is budgeted in schedule.cpp (cuda_shared_bytes), which sizes the query tile and key
// block from the head dims.
//
// Measured on an H200 (bench/RESULTS.md, two alternating rounds in one run): the register tiles
// made the f32, f16 and bf16 D64 kernels 1.14-1.32x faster at S 512-8192 than one score and one
// output element per thread (which Nsight Compute showed bound by shared-memory loads, L1
// 91.5%); at S 197 0.93-1.22x. 126 registers a thread (54 before), no spills.
//
// Linear: one thread per output element, 32 x 8 threads per block (threads_x, threads_y),
// weights staged transposed once so that a warp reads consecutive output features.
#include "schedules/schedule.h"

namespace attngen {

using namespace Halide;

namespace {

constexpr int kWarp = 32;  // threads along the fastest dimension where no tunable says otherwise
// Query rows a thread computes of attention's scores and probs.V (a register tile).
constexpr int kRowsPerThread = 4;

// The d a thread of the probs.V tile owns: the fewest that divide Dv into at most `threads`
// threads (so that no thread's tile reaches past Dv), at most 16 (64 accumulators with 4 rows;
// ptxas: no kernel spills, at most 168 registers, D256); else 1, and the threads loop over d.
int d_per_thread(int dv, int threads) {
  for (int n = 1; n <= 16 && n <= dv; ++n) {
    if (dv % n == 0 && dv / n <= threads) return n;
  }
  return 1;
}

// Maps (x, y) of one stage onto a threads_x x threads_y grid of threads (threads_x: the
// threads_x tunable, a warp by default), with serial loops over
// what does not fit; GuardWithIf keeps every extent exact. `outer`, when given, is a serial
// loop placed outside the thread loops (the key-block loop of an update). Returns the innermost
// serial loop: one iteration is one element of one thread.
Var on_threads(Stage g, const VarOrRVar& x, const VarOrRVar& y, int threads_x, int threads_y,
               const RVar* outer = nullptr) {
  Var xo, xi, yo, yi;
  g.split(x, xo, xi, threads_x, TailStrategy::GuardWithIf)
      .split(y, yo, yi, threads_y, TailStrategy::GuardWithIf);
  if (outer != nullptr) {
    g.reorder(xo, yo, xi, yi, *outer);
  } else {
    g.reorder(xo, yo, xi, yi);
  }
  g.gpu_threads(xi, yi);
  return xo;
}

}  // namespace

void schedule_attention_cuda(AttentionFuncs f, const AttentionSpec& spec, const TargetInfo& info,
                             const AttentionTunables& t) {
  (void)info;
  const int tq = t.query_tile;
  const int kb = spec.key_block;
  const int tx = t.threads_x;
  // Register tiles: each thread keeps the q.k of kRowsPerThread rows of one key, and the probs.V
  // of those rows for `dpt` consecutive d, so that each operand it loads from shared memory feeds
  // several FMAs (one load per FMA before: Nsight Compute on an H200 showed the kernel bound by
  // shared-memory loads, bench/RESULTS.md). The block is tx x ty threads.
  const int rpt = tq % kRowsPerThread == 0 ? kRowsPerThread : 1;
  const int ty = tq / rpt;
  const int dpt = d_per_thread(spec.head_dim_v, tx);
  const TailStrategy guard = TailStrategy::GuardWithIf;
  const Var &d = f.d, &i = f.i, &j = f.j, &h = f.h, &b = f.b;
  Var io("io"), ii("ii");

  Func out = f.out;
  out.split(i, io, ii, tq, guard).reorder(d, ii, io, h, b);
  on_threads(out, d, ii, tx, ty);
  out.gpu_blocks(io, h, b);

  // Running state of the tile in shared memory, one update per key block.
  Func state = f.state;
  state.compute_at(out, io).bound(f.qi, 0, tq).bound_extent(f.qt, 1);
  // A generic kernel computes its padded head dim (the output takes the call's).
  if (spec.generic) state.bound(d, 0, spec.head_dim_v);
  on_threads(state, d, f.qi, tx, ty);
  const RVar rb = f.rb;  // the key blocks: serial, outside the threads
  // The update: thread (dt, qy) owns d in [dt * dpt, dt * dpt + dpt) of rows
  // [qy * rpt, qy * rpt + rpt), its probs.V tile in registers.
  Var dt("dt"), dc("dc"), dto("dto"), dti("dti"), qy("qy"), qr("qr");
  state.update()
      .split(d, dt, dc, dpt, guard)
      .split(dt, dto, dti, tx, guard)
      .split(f.qi, qy, qr, rpt, guard)
      .reorder(dc, qr, dto, dti, qy, rb)
      .gpu_threads(dti, qy)
      .unroll(dc)
      .unroll(qr);
  f.block_pv.compute_at(state, dto).bound_extent(d, dpt).bound_extent(i, rpt);
  f.block_pv.unroll(d).unroll(i);
  f.block_pv.update().reorder(d, i, f.rk).unroll(d).unroll(i);

  // The tile's query rows, staged in shared memory per key block. (Staged once per thread
  // block, outside the key-block loop, Halide 14 packed the tile into the same shared memory as
  // the block max, which it takes to be dead after the scores of the first block: row 0 of
  // every tile came out wrong on a GPU. Its packing does not see that the next iteration of the
  // serial loop reads the tile again.)
  f.q.compute_at(state, f.rb).bound_extent(i, tq);
  on_threads(f.q, d, i, tx, ty);

  // Per key block: K (transposed) and V staged, scores, stats and probs in shared memory.
  f.k.compute_at(state, f.rb).bound_extent(j, kb).reorder_storage(j, d);
  on_threads(f.k, j, d, tx, ty);
  f.v.compute_at(state, f.rb).bound_extent(j, kb);
  on_threads(f.v, d, j, tx, ty);

  // Scores: thread (key, qy) computes rows [qy * rpt, qy * rpt + rpt) of its key, q.k in
  // registers, the key's K column loaded once per d for all of them.
  Var jo("jo"), ji("ji"), iy("iy"), ir("ir");
  f.scores.compute_at(state, f.rb).bound_extent(j, kb).bound_extent(i, tq);
  f.scores.split(j, jo, ji, tx, guard)
      .split(i, iy, ir, rpt, guard)
      .reorder(ir, jo, ji, iy)
      .gpu_threads(ji, iy)
      .unroll(ir);
  f.dot.compute_at(f.scores, jo).bound_extent(i, rpt);
  f.dot.unroll(i);
  f.dot.update().reorder(i, j, f.rd).unroll(i);
  // Block max and sum: one thread per row reduces in registers, then stores to shared memory.
  for (Func g : {f.block_max, f.block_sum}) {
    Func shared = g.in();
    shared.compute_at(state, f.rb).bound_extent(i, tq).gpu_threads(i);
    g.compute_at(shared, i);
  }
  f.probs.compute_at(state, f.rb).bound_extent(j, kb).bound_extent(i, tq);
  on_threads(f.probs, j, i, tx, ty);
}

void schedule_linear_cuda(LinearFuncs f, const TargetInfo& info, const LinearTunables& t) {
  (void)info;
  const Var &e = f.e, &n = f.n, &s = f.s, &b = f.b;
  Var sb("sb"), no("no"), ni("ni"), so("so"), si("si");
  Func out = f.out;
  out.fuse(s, b, sb).gpu_tile(n, sb, no, so, ni, si, t.threads_x, t.threads_y,
                              TailStrategy::GuardWithIf);
  f.sum.compute_at(out, ni);
  Var eo("eo"), ei("ei"), nno("nno"), nni("nni");
  f.w.compute_root().reorder_storage(n, e).gpu_tile(n, e, nno, eo, nni, ei, t.threads_x,
                                                    t.threads_y, TailStrategy::GuardWithIf);
}

}  // namespace attngen

namespace attngen {

// Decode: one thread block per (row tile, split, kv head x sequence), 32 x kCudaDecodeRowTile
// threads (d along x, rows along y). The tile's query rows are staged once in shared memory; per
// key block the block stages K and V in shared memory, computes the scores of its rows (one thread
// per (key, row)), their block max and sum (one thread per row) and probs, and each thread folds
// its (d, row) slice of probs.V into the split's running state in global memory. The merge of
// the splits is a second kernel, one thread per output element.
void schedule_decode_cuda(DecodeFuncs f, const DecodeSpec& spec, const TargetInfo& info) {
  (void)info;
  const int tx = kWarp;
  const int tr = kCudaDecodeRowTile;
  const int kb = spec.key_block;
  const TailStrategy guard = TailStrategy::GuardWithIf;
  const Var &d = f.d, &s = f.s, &r = f.r, &hk = f.hk, &b = f.b, &sp = f.sp;
  Var rt("rt"), ri("ri"), hb("hb"), dox("dox"), dix("dix"), kbo("kbo"), kbi("kbi");

  f.visit.compute_root().gpu_tile(f.kb, kbo, kbi, tx, guard);
  f.row_position.compute_root().gpu_tile(r, kbo, kbi, tx, guard);

  Func state = f.state;
  if (spec.generic) state.bound(d, 0, spec.head_dim_v);  // the padded head dim (cpu_decode.cpp)
  state.compute_root()
      .split(r, rt, ri, tr, guard)
      .split(d, dox, dix, tx, guard)
      .reorder(dox, dix, ri, rt, sp, hk, b)
      .fuse(hk, b, hb)
      .gpu_threads(dix, ri)
      .gpu_blocks(rt, sp, hb);
  const RVar rb = f.rb;
  state.update()
      .split(r, rt, ri, tr, guard)
      .split(d, dox, dix, tx, guard)
      .reorder(dox, dix, ri, rb, rt, sp, hk, b)
      .fuse(hk, b, hb)
      .gpu_threads(dix, ri)
      .gpu_blocks(rt, sp, hb);

  // The tile's query rows, staged per key block (as for attention above: once per thread block,
  // Halide 14's shared memory packing let a later stage of the key-block loop overwrite them).
  f.q.compute_at(state, rb).bound_extent(r, tr);
  on_threads(f.q, d, r, tx, tr);

  // Per key block: K (transposed) and V staged, scores, stats and probs in shared memory.
  f.k.compute_at(state, rb).bound_extent(s, kb).reorder_storage(s, d);
  on_threads(f.k, s, d, tx, tr);
  f.v.compute_at(state, rb).bound_extent(s, kb);
  on_threads(f.v, d, s, tx, tr);
  f.scores.compute_at(state, rb).bound_extent(s, kb).bound_extent(r, tr);
  f.dot.compute_at(f.scores, on_threads(f.scores, s, r, tx, tr));
  for (Func g : {f.block_max, f.block_sum}) {
    Func shared = g.in();
    Var ro("ro"), rr("rr");
    shared.compute_at(state, rb).bound_extent(r, tr).split(r, ro, rr, tr, guard).gpu_threads(rr);
    g.compute_at(shared, rr);
  }
  f.probs.compute_at(state, rb).bound_extent(s, kb).bound_extent(r, tr);
  on_threads(f.probs, s, r, tx, tr);
  f.block_pv.compute_at(state, dox);

  // The merge: one thread per output element, looping over the splits.
  Func out = f.out;
  Var ib("ib"), hib("hib"), yo("yo"), yi("yi");
  out.fuse(f.i, b, ib).fuse(f.h, ib, hib).gpu_tile(d, hib, dox, yo, dix, yi, tx, 8, guard);
  f.weight.compute_inline();
  for (Func g : {f.max, f.sum, f.acc}) g.compute_at(out, dix);
}

}  // namespace attngen
