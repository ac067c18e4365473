// Schedule of the inspection variants (attention weights and/or log-sum-exp outputs): scores,
// row statistics and probabilities live in memory for the whole call (the weights output is
// that large anyway), each stage a plain parallel (CPU) or one-thread-per-element (CUDA) loop.
// Correct on every target; not fast, and never on the path of the kernels without them.
#include "schedules/schedule.h"

namespace attngen {

using namespace Halide;

namespace {

// A 4-d stage (x, y, h, b) of the row form: rows in parallel, vectors along x; on CUDA a
// 32 x 8 tile of threads per block of (x, y). Returns the loop at which a producer computes
// what one row (CPU) or one thread (CUDA) needs.
Var elementwise_4d(Stage g, const Var& x, const Var& y, const Var& h, const Var& b,
                   const TargetInfo& info) {
  if (info.isa == Isa::kCuda) {
    Var xo, yo, xi, yi;
    g.gpu_tile(x, y, xo, yo, xi, yi, 32, 8, TailStrategy::GuardWithIf);
    return xi;
  }
  Var hb;
  g.fuse(h, b, hb).parallel(hb).parallel(y).vectorize(x, info.f32_lanes, TailStrategy::GuardWithIf);
  return y;
}

// A per-row stage (i, h, b), pure or update: vectors (or threads) along i.
void per_row(Stage g, const Var& i, const Var& h, const Var& b, const TargetInfo& info) {
  if (info.isa == Isa::kCuda) {
    Var io, ii;
    g.gpu_tile(i, io, ii, 64, TailStrategy::GuardWithIf);
    return;
  }
  Var hb;
  g.fuse(h, b, hb).parallel(hb).vectorize(i, info.f32_lanes, TailStrategy::GuardWithIf);
}

// A stage of the row statistics (qi, qt, h, b): vectors (or threads) along the rows of a tile.
void per_tile_row(Stage g, const Var& qi, const Var& qt, const Var& h, const Var& b,
                  const TargetInfo& info) {
  if (info.isa == Isa::kCuda) {
    Var qio, qto, qii, qti;
    g.gpu_tile(qi, qt, qio, qto, qii, qti, 32, 2, TailStrategy::GuardWithIf);
    return;
  }
  Var hb;
  g.fuse(h, b, hb).parallel(hb).parallel(qt).vectorize(qi, info.f32_lanes,
                                                       TailStrategy::GuardWithIf);
}

}  // namespace

void schedule_attention_inspect(AttentionFuncs f, const AttentionSpec& spec,
                                const TargetInfo& info) {
  if (spec.key_block > 0) {
    throw CompileError("attngen: the inspection schedule needs the row form (key_block 0)");
  }
  const Var &d = f.d, &i = f.i, &j = f.j, &h = f.h, &b = f.b;
  const bool gpu = info.isa == Isa::kCuda;

  f.scores.compute_root();
  f.dot.compute_at(f.scores, elementwise_4d(f.scores, j, i, h, b, info));
  if (!gpu) {
    f.dot.vectorize(j, info.f32_lanes, TailStrategy::GuardWithIf);
    f.dot.update().reorder(j, f.rd).vectorize(j, info.f32_lanes, TailStrategy::GuardWithIf);
  }

  for (Func g : {f.row_max, f.row_sum}) {
    g.compute_root();
    per_tile_row(g, f.qi, f.qt, h, b, info);
    per_tile_row(g.update(), f.qi, f.qt, h, b, info);
  }
  f.probs.compute_root();
  elementwise_4d(f.probs, j, i, h, b, info);
  if (f.weights.defined()) elementwise_4d(f.weights, j, i, h, b, info);
  if (f.lse.defined()) per_row(f.lse, i, h, b, info);

  Func out = f.out;  // (d, h, i, b)
  if (gpu) {
    Var dox, iox, dix, iix;
    out.gpu_tile(d, i, dox, iox, dix, iix, 32, 8, TailStrategy::GuardWithIf);
    f.acc.compute_at(out, dix);
  } else {
    Var hb;
    out.fuse(h, b, hb).parallel(hb).parallel(i).vectorize(d, info.f32_lanes,
                                                          TailStrategy::GuardWithIf);
    f.acc.compute_at(out, i).vectorize(d, info.f32_lanes, TailStrategy::GuardWithIf);
    std::vector<VarOrRVar> order{d};
    order.insert(order.end(), f.pv_loops.begin(), f.pv_loops.end());
    f.acc.update().reorder(order).vectorize(d, info.f32_lanes, TailStrategy::GuardWithIf);
  }
}

}  // namespace attngen
