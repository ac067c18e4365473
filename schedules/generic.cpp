// Fallback schedules for targets without a tuned one (e.g. baseline x86-64, 32-bit ARM, or an
// unknown architecture): parallel over rows, vectorised at the native width, no register
// blocking. Correct everywhere; not fast.
#include "schedules/schedule.h"

namespace attngen {

using namespace Halide;

void schedule_attention_generic(AttentionFuncs f, const TargetInfo& info) {
  const int lanes = info.f32_lanes;
  Var io("io"), ii("ii"), task("task"), hb("hb");
  Func out = f.out;
  out.split(f.i, io, ii, 8, TailStrategy::GuardWithIf)
      .reorder(f.d, ii, io, f.h, f.b)
      .fuse(f.h, f.b, hb)
      .fuse(io, hb, task)
      .parallel(task)
      .vectorize(f.d, lanes, TailStrategy::GuardWithIf);
  for (Func g : {f.scores, f.probs}) g.compute_at(out, task).vectorize(f.j, lanes);
  for (Func g : {f.row_max, f.row_sum}) g.compute_at(out, task);
  f.acc.compute_at(out, task).vectorize(f.d, lanes, TailStrategy::GuardWithIf);
  std::vector<VarOrRVar> order{f.d, f.qi};
  order.insert(order.end(), f.pv_loops.begin(), f.pv_loops.end());
  f.acc.update().reorder(order).vectorize(f.d, lanes, TailStrategy::GuardWithIf);
}

void schedule_linear_generic(LinearFuncs f, const TargetInfo& info) {
  const int lanes = info.f32_lanes;
  Var task("task");
  Func out = f.out;
  out.fuse(f.s, f.b, task).parallel(task).vectorize(f.n, lanes, TailStrategy::GuardWithIf);
  f.w.compute_root().reorder_storage(f.n, f.e).reorder(f.n, f.e).vectorize(f.n, lanes);
  f.sum.compute_at(out, task).vectorize(f.n, lanes);
  f.sum.update().reorder(f.n, f.re).vectorize(f.n, lanes);
}

}  // namespace attngen

namespace attngen {

using namespace Halide;

void schedule_decode_generic(DecodeFuncs f, const TargetInfo& info) {
  const int lanes = info.f32_lanes;
  Var task("task"), shk("shk");
  f.visit.compute_root();
  f.row_position.compute_root();
  f.state.compute_root();
  f.state.update()
      .reorder(f.d, f.r, f.rb, f.sp, f.hk, f.b)
      .fuse(f.sp, f.hk, shk)
      .fuse(shk, f.b, task);
  f.state.update().parallel(task).vectorize(f.d, lanes, TailStrategy::GuardWithIf);
  for (Func g : {f.scores, f.block_max, f.probs, f.block_sum, f.block_pv}) {
    g.compute_at(f.state, f.rb);
  }
  f.out.parallel(f.b).vectorize(f.d, lanes, TailStrategy::GuardWithIf);
  for (Func g : {f.max, f.sum, f.weight, f.acc}) g.compute_at(f.out, f.h);
}

}  // namespace attngen
