// AVX512-BF16 schedule of the row form: bf16 products in pairs (AttentionSpec::bf16_pairs).
//
// vdpbf16ps adds to each of 16 f32 lanes the products of one pair of bf16 values, so both
// products are vectorised along the keys or the head dim with the pair innermost:
//   q.k : 16 keys a vector, K packed per head as (pair, key, d / 2): one load gives the pairs of
//         16 keys, q's pair (adjacent in memory) is broadcast; a register tile of
//         key_tile vectors x score_rows query rows of accumulators runs over Dqk / 2 steps.
//   p.v : 16 head dims a vector, V packed per head as (pair, d, key / 2), P rounded to bf16 with
//         the keys innermost, its pair broadcast; pv_rows rows x Dv / 16 accumulators.
// The scores of a query tile are stored keys innermost, so the row max and sum are vertical over
// vectors of 16 keys (an rfactor) and horizontal once per row.
#include "schedules/schedule.h"

namespace attngen {

using namespace Halide;
using namespace Halide::Internal;

namespace {

// Rows x key vectors of the q.k register tile: 4 x 4 accumulators (of 24).
constexpr int kScoreRows = 4;

// g's reduction over `loops` (innermost first) as `lanes` partial results per row, combined once
// at the end: the per-key work is one vertical op per vector of keys. The partial results of all
// the tile's rows are updated in turn, a vector of keys each (a running vector per row carried
// through the key loop was split by LLVM into scalars, a dozen shuffles per vector).
void vertical_row_reduction(Func g, const Var& row, const std::vector<RVar>& loops, int lanes,
                            Func at, const Var& task) {
  RVar ro("ro"), rl("rl");
  Var u("u");
  Func partial = g.update().split(loops[0], ro, rl, lanes).rfactor(rl, u);
  // rfactor appends u to the args: make it innermost in memory too.
  std::vector<Var> storage{u};
  for (const Var& v : partial.args()) {
    if (v.name() != u.name()) storage.push_back(v);
  }
  partial.compute_at(at, task).reorder_storage(storage).vectorize(u);
  std::vector<VarOrRVar> order{u, row, ro};
  order.insert(order.end(), loops.begin() + 1, loops.end());
  partial.update().reorder(order).vectorize(u);
}

}  // namespace

void schedule_attention_bf16_pairs(AttentionFuncs f, const AttentionSpec& spec,
                                   const TargetInfo& info, const AttentionTunables& t) {
  const int lanes = info.f32_lanes;
  const int dv_lanes = lanes_dividing(spec.head_dim_v, info);
  const TailStrategy dv_tail = tail_for(spec.head_dim_v, dv_lanes);
  const Var &d = f.d, &i = f.i, &j = f.j, &h = f.h, &b = f.b;
  Var io("io"), ii("ii"), task("task"), vo("vo"), vi("vi"), jo("jo"), jv("jv"), jl("jl");
  Var ro("ro"), ri("ri");

  Func out = f.out;
  const Var head = schedule_row_form_output(f, spec, info, t, task);

  // K and V of a head converted to f32 with dense loads, then packed in pairs back in bf16, once
  // before its query tiles run. (Packing straight from the bf16 input gathers 16-bit elements,
  // which LLVM's Sapphire Rapids CPU moves with AVX512-FP16 instructions (vmovw) that the
  // AVX512-BF16 CPUs without FP16, AMD's Zen 4 and 5, lack; 32-bit gathers have no such form.)
  f.k.compute_at(out, head).vectorize(d, lanes_dividing(spec.head_dim_qk, info));
  f.v.compute_at(out, head).vectorize(d, dv_lanes);
  {
    const std::vector<Var> kp = f.k_pairs.args();  // (l, j, rr, h, b)
    f.k_pairs.compute_at(out, head).vectorize(kp[0]).vectorize(kp[1], lanes);
    const std::vector<Var> vp = f.v_pairs.args();  // (l, d, jj, h, b)
    f.v_pairs.compute_at(out, head).vectorize(vp[0]).vectorize(vp[1], dv_lanes, dv_tail);
  }

  const auto per_tile_rows = [&](Func g) -> Func {
    g.compute_at(out, task).bound(f.qi, 0, t.query_tile).bound_extent(f.qt, 1);
    return g;
  };
  const auto per_query_tile = [&](Func g) -> Func {
    g.compute_at(out, task).bound_extent(i, t.query_tile);
    return g;
  };

  // The tile's q rows (bf16, as stored) copied contiguous: the register tile's rows are then at
  // fixed offsets from one base, where their run-time strides in the input took address
  // arithmetic in the inner loop.
  per_query_tile(f.q).vectorize(d, 2 * lanes, TailStrategy::GuardWithIf);

  // q.k: key_tile vectors of 16 keys x kScoreRows rows of accumulators over Dqk / 2 pair steps.
  const int key_vectors = std::max(1, t.key_tile);
  Func scores = per_query_tile(f.scores);
  scores.split(j, jo, jv, key_vectors * lanes)
      .split(jv, jv, jl, lanes)
      .split(i, ro, ri, kScoreRows)
      .reorder(jl, jv, ri, jo, ro)
      .vectorize(jl)
      .unroll(jv)
      .unroll(ri);
  Func dot = f.dot;
  RVar rdo("rdo"), rdi("rdi");
  dot.compute_at(scores, jo);
  dot.split(j, jv, jl, lanes).reorder(jl, jv, i).vectorize(jl).unroll(jv).unroll(i);
  dot.update()
      .split(f.rd, rdo, rdi, 2)
      .split(j, jv, jl, lanes)
      .reorder(rdi, jl, jv, i, rdo)
      .atomic()
      .vectorize(rdi)
      .vectorize(jl)
      .unroll(jv)
      .unroll(i);

  // Row statistics: vertical over vectors of keys, then across the 16 lanes once per row.
  for (Func g : {f.row_max, f.row_sum}) {
    per_tile_rows(g);
    vertical_row_reduction(g, f.qi, f.rj_loops, lanes, out, task);
  }
  // P in bf16 straight from the scores (the f32 probs inline): one pass.
  per_query_tile(f.probs_bf16).vectorize(j, lanes);

  // p.v: pv_rows rows x Dv / 16 accumulators over the pairs of a chunk of keys.
  Func acc = per_tile_rows(f.acc);
  acc.split(d, vo, vi, dv_lanes, dv_tail).vectorize(vi).unroll(vo);
  Stage pv = acc.update();
  RVar rp("rp"), rl("rl"), rjo("rjo"), rji("rji");
  pv.split(f.pv_loops[0], rp, rl, 2);
  if (f.pv_loops.size() == 1) {  // one loop over the keys: chunks of pairs, the last one cut
    pv.split(rp, rjo, rji, t.pv_chunk / 2, TailStrategy::GuardWithIf);
  } else {  // the algorithm's chunks (causal): the chunk's pairs, then the chunks
    rji = rp;
    rjo = f.pv_loops[1];
  }
  pv.split(f.qi, ro, ri, t.pv_rows, TailStrategy::GuardWithIf)
      .split(d, vo, vi, dv_lanes, dv_tail)
      .reorder(rl, vi, vo, ri, rji, ro, rjo)
      .atomic()
      .vectorize(rl)
      .vectorize(vi)
      .unroll(vo)
      .unroll(ri);

  if (spec.mask == MaskKind::kCausal) out.specialize(f.top_left);
}

namespace {

// acc + vector_reduce(Add, f32(a) * f32(b)) with a, b bf16 x 32 and acc f32 x 16 (a broadcast
// pair counts: broadcast(f32(bf16 x 2), 16) is f32(broadcast(bf16 x 2, 16))).
class Bf16PairDots : public IRMutator {
 public:
  using IRMutator::visit;

 private:
  static Expr bf16_of(const Expr& e) {
    if (const Cast* c = e.as<Cast>()) {
      if (c->value.type().is_bfloat() && c->value.type().bits() == 16) return c->value;
    }
    if (const Broadcast* br = e.as<Broadcast>()) {
      Expr inner = bf16_of(br->value);
      if (inner.defined()) return Broadcast::make(inner, br->lanes);
    }
    return Expr();
  }

  Expr visit(const Add* op) override {
    for (int side = 0; side < 2; ++side) {
      const VectorReduce* r = (side == 0 ? op->b : op->a).as<VectorReduce>();
      const Expr& init = side == 0 ? op->a : op->b;
      if (r == nullptr || r->op != VectorReduce::Add || r->type != Float(32, 16) ||
          r->value.type().lanes() != 32) {
        continue;
      }
      const Mul* m = r->value.as<Mul>();
      if (m == nullptr) continue;
      Expr a = bf16_of(m->a), b = bf16_of(m->b);
      if (!a.defined() || !b.defined()) continue;
      // The x86 AVX-512 runtime module (linked into every kernel of that target) defines
      // dpbf16psx16(<16 x float>, <32 x i16>, <32 x i16>) over llvm.x86.avx512bf16.dpbf16ps.512;
      // codegen finds it by the name and the lanes.
      return Call::make(Float(32, 16), "dpbf16ps", {mutate(init), a, b}, Call::PureExtern);
    }
    return IRMutator::visit(op);
  }
};

}  // namespace

IRMutator* bf16_pair_dots_pass() { return new Bf16PairDots; }

}  // namespace attngen
