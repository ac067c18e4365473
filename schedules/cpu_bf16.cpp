// AVX512-BF16 schedule of the row form: bf16 products in pairs (AttentionSpec::bf16_pairs), and
// its AMX form (AttentionSpec::amx, schedule_attention_amx below).
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
#include "generator/native_code.h"
#include "schedules/schedule.h"

namespace attngen {

using namespace Halide;
using namespace Halide::Internal;

namespace {

// Rows x key vectors of the q.k register tile: 4 x 4 accumulators (of 24).
constexpr int kScoreRows = 4;

// g's reduction over `loops` (innermost first) as `lanes` partial results per row, combined once
// at the end: the per-key work is one vertical op per vector of keys. With row_outermost each
// row's partial runs over all its keys in one register; otherwise the partials of all the tile's
// rows are updated in turn, a vector of keys each, each a load and a store (on Zen 4 the row max
// and sum took 15% of the avx512bf16 dense kernel's time that way, 5.5% row outermost;
// bench/RESULTS.md). The amx kernels keep the second order: not measured with the first (no CPU
// with AMX at hand when it changed).
void vertical_row_reduction(Func g, const Var& row, const std::vector<RVar>& loops, int lanes,
                            Func at, const Var& task, bool row_outermost) {
  RVar ro("ro"), rl("rl");
  Var u("u");
  Func partial = g.update().split(loops[0], ro, rl, lanes).rfactor(rl, u);
  // rfactor appends u to the args: make it innermost in memory too.
  std::vector<Var> storage{u};
  for (const Var& v : partial.args()) {
    if (v.name() != u.name()) storage.push_back(v);
  }
  partial.compute_at(at, task).reorder_storage(storage).vectorize(u);
  std::vector<VarOrRVar> order{u, ro};
  if (!row_outermost) order.push_back(row);
  order.insert(order.end(), loops.begin() + 1, loops.end());
  if (row_outermost) order.push_back(row);
  partial.update().reorder(order).vectorize(u);
}

// K and V of a head converted to f32 with dense loads, then packed in pairs back in bf16, once
// before its query tiles run. (Packing straight from the bf16 input gathers 16-bit elements,
// which LLVM's Sapphire Rapids CPU moves with AVX512-FP16 instructions (vmovw) that the
// AVX512-BF16 CPUs without FP16, AMD's Zen 4 and 5, lack; 32-bit gathers have no such form.)
void pack_kv_pairs(AttentionFuncs f, const AttentionSpec& spec, const TargetInfo& info,
                   const Var& head) {
  const int dv_lanes = lanes_dividing(spec.head_dim_v, info);
  f.k.compute_at(f.out, head).vectorize(f.d, lanes_dividing(spec.head_dim_qk, info));
  f.v.compute_at(f.out, head).vectorize(f.d, dv_lanes);
  const std::vector<Var> kp = f.k_pairs.args();  // (l, j, rr, h, b)
  f.k_pairs.compute_at(f.out, head).vectorize(kp[0]).vectorize(kp[1], info.f32_lanes);
  const std::vector<Var> vp = f.v_pairs.args();  // (l, d, jj, h, b)
  f.v_pairs.compute_at(f.out, head)
      .vectorize(vp[0])
      .vectorize(vp[1], dv_lanes, tail_for(spec.head_dim_v, dv_lanes));
}

// Where the row form's per-tile Funcs go: those of the tile's rows (qi of tile qt) and those of
// its query rows (i), both at the output's task loop.
struct TileFuncs {
  Func out;
  Var task;
  const AttentionFuncs& f;
  int query_tile;
  Func rows(Func g) const {
    g.compute_at(out, task).bound(f.qi, 0, query_tile).bound_extent(f.qt, 1);
    return g;
  }
  Func queries(Func g) const {
    g.compute_at(out, task).bound_extent(f.i, query_tile);
    return g;
  }
};

// What both forms share besides K and V: the tile's q rows (bf16, as stored) copied contiguous
// (the left-hand operand of q.k at fixed offsets from one base, where their run-time strides in
// the input took address arithmetic in the inner loop); the row statistics vertical over vectors
// of keys, then across the 16 lanes once per row; P in bf16 straight from the scores (the f32
// probs inline), one pass.
void schedule_pairs_softmax(const AttentionFuncs& f, const TargetInfo& info, const TileFuncs& tile,
                            bool row_outermost) {
  const int lanes = info.f32_lanes;
  tile.queries(f.q).vectorize(f.d, 2 * lanes, TailStrategy::GuardWithIf);
  for (Func g : {f.row_max, f.row_sum}) {
    tile.rows(g);
    vertical_row_reduction(g, f.qi, f.rj_loops, lanes, tile.out, tile.task, row_outermost);
  }
  tile.queries(f.probs_bf16).vectorize(f.j, lanes);
}

}  // namespace

void schedule_attention_bf16_pairs(AttentionFuncs f, const AttentionSpec& spec,
                                   const TargetInfo& info, const AttentionTunables& t) {
  const int lanes = info.f32_lanes;
  const int dv_lanes = lanes_dividing(spec.head_dim_v, info);
  const TailStrategy dv_tail = tail_for(spec.head_dim_v, dv_lanes);
  const Var &d = f.d, &i = f.i, &j = f.j;
  Var io("io"), ii("ii"), task("task"), vo("vo"), vi("vi"), jo("jo"), jv("jv"), jl("jl");
  Var ro("ro"), ri("ri");

  Func out = f.out;
  const Var head = schedule_row_form_output(f, spec, info, t, task);

  pack_kv_pairs(f, spec, info, head);
  const TileFuncs tile{out, task, f, t.query_tile};
  schedule_pairs_softmax(f, info, tile, true);

  // q.k: key_tile vectors of 16 keys x kScoreRows rows of accumulators over Dqk / 2 pair steps.
  const int key_vectors = std::max(1, t.key_tile);
  Func scores = tile.queries(f.scores);
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

  // p.v: pv_rows rows x Dv / 16 accumulators over the pairs of a chunk of keys.
  Func acc = tile.rows(f.acc);
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

// The amx row (AttentionSpec::amx): the bf16 pair products of the schedule above as AMX tile
// products, which Halide 14 makes of an update stored in MemoryType::AMXTile whose vectorised
// body is a 16 x 16 tile of sums of bf16 pair products (ExtractTileOperations), each step of
// the reduction one pair deep; amx_full_depth_pass() then merges 16 steps into one tdpbf16ps.
//   q.k : the raw dots of the query tile (f32, all keys; `dots`, a copy of the tile out of AMX,
//         tilestored) in 16 x 16 tiles, each a tile product over the head dim: q's rows (bf16,
//         copied contiguous) by K's pairs (k_pairs, (pair, key, d / 2): AMX's layout of the
//         right-hand matrix). The scores are inline in what reads them.
//   p.v : 16 rows x 16 head dims of acc a tile, over all keys: P (bf16, keys innermost) by V's
//         pairs (v_pairs, (pair, d, key / 2)), the keys in chunks of key_chunk.
// The row statistics and P in between as in schedule_attention_bf16_pairs. A call whose V holds
// a non-finite element takes the output's other branch (v_finite), acc_masked in AVX-512.
void schedule_attention_amx(AttentionFuncs f, const AttentionSpec& spec, const TargetInfo& info,
                            const AttentionTunables& t) {
  const int dv_lanes = lanes_dividing(spec.head_dim_v, info);
  const TailStrategy dv_tail = tail_for(spec.head_dim_v, dv_lanes);
  const Var &d = f.d, &i = f.i, &j = f.j;
  Var task("task"), vo("vo"), vi("vi");
  Func out = f.out;
  const Var head = schedule_row_form_output(f, spec, info, t, task);
  pack_kv_pairs(f, spec, info, head);
  const TileFuncs tile{out, task, f, t.query_tile};
  schedule_pairs_softmax(f, info, tile, false);
  // A 16 x 16 tile of `g` in AMX, computed per tile of its copy `copy` (x, y the tile's dims,
  // x innermost), its update's reduction one pair a step: the pair innermost, then the tile,
  // then the reduction's other loops (`steps`, innermost first).
  const auto amx_tile = [&](Func g, Func copy, const Var& x, const Var& y, Stage update,
                            const RVar& pair, const std::vector<RVar>& steps) {
    Var xo("xo"), yo("yo"), xt("xt"), yt("yt");
    // (Whole tiles: a tile shifted inwards at the end gave the store a form Halide 14 does not
    // take as a tile's.)
    copy.tile(x, y, xo, yo, xt, yt, kAmxColumns, kAmxRows, TailStrategy::RoundUp)
        .reorder(xt, yt, yo, xo)
        .vectorize(xt)
        .vectorize(yt)
        .unroll(yo);  // copies that amx_full_depth_pass() interleaves
    g.compute_at(copy, yo)
        .store_in(MemoryType::AMXTile)
        .tile(x, y, xo, yo, xt, yt, kAmxColumns, kAmxRows)
        .vectorize(xt)
        .vectorize(yt);
    std::vector<VarOrRVar> order{pair, xt, yt};
    order.insert(order.end(), steps.begin(), steps.end());
    update.tile(x, y, xo, yo, xt, yt, kAmxColumns, kAmxRows)
        .reorder(order)
        .atomic()
        .vectorize(pair)
        .vectorize(xt)
        .vectorize(yt);
  };

  // q.k.
  Func dots = tile.queries(f.dot.in());
  RVar rdo("rdo"), rdi("rdi");
  Stage dot_update = f.dot.update().split(f.rd, rdo, rdi, 2);
  amx_tile(f.dot, dots, j, i, dot_update, rdi, {rdo});

  // p.v.
  Func accs = tile.rows(f.acc.in());
  amx_tile(f.acc, accs, d, f.qi, f.acc.update(), f.pv_loops[0], {f.pv_loops[1], f.pv_loops[2]});

  // V with a non-finite element: P.V with V masked by the probs, in AVX-512.
  Func masked = tile.rows(f.acc_masked);
  masked.split(d, vo, vi, dv_lanes, dv_tail).vectorize(vi).unroll(vo);
  masked.update()
      .split(d, vo, vi, dv_lanes, dv_tail)
      .reorder(vi, vo, f.qi)
      .vectorize(vi)
      .unroll(vo);

  // Causal: each alignment a branch of its own (with the bottom-right one's select on the
  // alignment left in, the tile's store to `dots` took a form Halide 14 does not take as a
  // tile's), each with a branch per v_finite.
  if (spec.mask == MaskKind::kCausal) {
    for (const Expr& alignment : {f.top_left, simplify(!f.top_left)}) {
      out.specialize(alignment).specialize(f.v_finite);
    }
    out.specialize_fail("attngen: unreachable (the alignment is top-left or bottom-right)");
  } else {
    out.specialize(f.v_finite);
  }
}

namespace {

bool is_intrinsic(const Expr& e, const char* name) {
  const Call* c = e.as<Call>();
  return c != nullptr && c->name == name && c->call_type == Call::Intrinsic;
}

// e with the lets (in the order they enclose it) substituted.
Expr inline_lets(Expr e, const std::vector<std::pair<std::string, Expr>>& lets) {
  for (auto let = lets.rbegin(); let != lets.rend(); ++let) {
    e = substitute(let->first, let->second, e);
  }
  return e;
}

// for (k, 0, 16 n) { lets; t = tile_matmul(M, N, 2, t, tile_load(M, 4, a, a0 + 4 k, sa),
//                                     tile_load(1, N, b, b0 + sb k, _)) }
// -> for (k, 0, n) { t = tile_matmul(M, N, 64, t, tile_load(M, 64, a, a0 + 64 k, sa),
//                                     tile_load(16, N, b, b0 + 16 sb k, sb)) }
// Any tile product left one pair deep is an error: the schedule meant every one to merge.
class AmxFullDepth : public IRMutator {
 public:
  using IRMutator::visit;

 protected:
  Stmt visit(const For* op) override {
    // The body's lets, inlined into the product.
    std::vector<std::pair<std::string, Expr>> lets;
    Stmt body = op->body;
    while (const LetStmt* let = body.as<LetStmt>()) {
      lets.emplace_back(let->name, let->value);
      body = let->body;
    }
    const Store* st = body.as<Store>();
    const Expr value = st != nullptr ? inline_lets(st->value, lets) : Expr();
    const Call* mm = value.defined() ? value.as<Call>() : nullptr;
    const int64_t* extent = as_const_int(op->extent);
    if (mm == nullptr || !is_intrinsic(mm, "tile_matmul") || !is_const(mm->args[2], 2) ||
        !is_intrinsic(mm->args[4], "tile_load") || !is_intrinsic(mm->args[5], "tile_load") ||
        extent == nullptr || *extent % kAmxRows != 0) {
      return IRMutator::visit(op);
    }
    const Call* lhs = mm->args[4].as<Call>();
    const Call* rhs = mm->args[5].as<Call>();
    const int bytes_per_step = 4;  // one pair of bf16
    // The loop's step in each load's byte offset.
    const Expr k = Variable::make(Int(32), op->name);
    const auto step = [&](const Expr& offset) {
      return simplify(substitute(op->name, k + 1, offset) - offset);
    };
    if (!is_const(lhs->args[1], bytes_per_step) || !is_const(rhs->args[0], 1) ||
        !is_const(step(lhs->args[3]), bytes_per_step)) {
      return IRMutator::visit(op);
    }
    const Expr rhs_stride = step(rhs->args[3]);
    const std::string name = op->name + ".amx";
    const Expr first = Variable::make(Int(32), name) * kAmxRows;
    const int depth_bytes = kAmxRows * bytes_per_step;
    Expr a = Call::make(lhs->type, "tile_load",
                        {lhs->args[0], depth_bytes, lhs->args[2],
                         substitute(op->name, first, lhs->args[3]), lhs->args[4]},
                        Call::Intrinsic);
    Expr b = Call::make(rhs->type, "tile_load",
                        {kAmxRows, rhs->args[1], rhs->args[2],
                         substitute(op->name, first, rhs->args[3]), rhs_stride},
                        Call::Intrinsic);
    Expr product =
        Call::make(mm->type, "tile_matmul",
                   {mm->args[0], mm->args[1], depth_bytes, mm->args[3], a, b}, Call::Intrinsic);
    return For::make(
        name, 0, static_cast<int>(*extent / kAmxRows), op->for_type, op->device_api,
        Store::make(st->name, product, st->index, st->param, st->predicate, st->alignment));
  }

  Expr visit(const Call* op) override {
    if (op->name == "tile_matmul" && op->call_type == Call::Intrinsic && is_const(op->args[2], 2)) {
      throw CompileError(
          "attngen: an AMX tile product was left one bf16 pair deep (the amx "
          "schedule's reduction loop is not a multiple of 16 pairs)");
    }
    return IRMutator::visit(op);
  }
};

// One unrolled copy of a tile's computation: its AMX allocation (lets around it), the tile's
// zeroing, the loop nest of its products (For and IfThenElse, outermost first, bodies left
// out, lets inlined), the product, and the store out of the tile.
struct TileChain {
  const Allocate* tile = nullptr;
  std::vector<std::pair<std::string, Expr>> lets;
  Stmt zero, product, out;
  std::vector<Stmt> loops;
};

// The loop nest under `s` down to one store of a tile product.
bool parse_nest(Stmt s, TileChain* c) {
  while (true) {
    if (const LetStmt* let = s.as<LetStmt>()) {
      c->lets.emplace_back(let->name, let->value);
      s = let->body;
    } else if (const For* loop = s.as<For>()) {
      c->loops.push_back(For::make(loop->name, inline_lets(loop->min, c->lets),
                                   inline_lets(loop->extent, c->lets), loop->for_type,
                                   loop->device_api, Evaluate::make(0)));
      s = loop->body;
    } else if (const IfThenElse* branch = s.as<IfThenElse>()) {
      if (branch->else_case.defined()) return false;
      c->loops.push_back(
          IfThenElse::make(inline_lets(branch->condition, c->lets), Evaluate::make(0)));
      s = branch->then_case;
    } else if (const Store* st = s.as<Store>()) {
      if (!is_intrinsic(st->value, "tile_matmul")) return false;
      c->product = Store::make(st->name, inline_lets(st->value, c->lets), st->index, st->param,
                               st->predicate, st->alignment);
      return true;
    } else {
      return false;
    }
  }
}

// The statements of a tile's allocation: its zeroing, products and store out, and its free.
bool parse_body(const Stmt& s, TileChain* c) {
  if (const Block* b = s.as<Block>()) return parse_body(b->first, c) && parse_body(b->rest, c);
  if (const ProducerConsumer* pc = s.as<ProducerConsumer>()) return parse_body(pc->body, c);
  if (const LetStmt* let = s.as<LetStmt>()) {
    c->lets.emplace_back(let->name, let->value);
    return parse_body(let->body, c);
  }
  if (s.as<Free>() != nullptr) return true;
  if (const Store* st = s.as<Store>()) {
    if (!is_intrinsic(st->value, "tile_zero") || c->zero.defined()) return false;
    c->zero = s;
    return true;
  }
  if (const Evaluate* e = s.as<Evaluate>()) {
    if (!is_intrinsic(e->value, "tile_store") || c->out.defined()) return false;
    c->out = Evaluate::make(inline_lets(e->value, c->lets));
    return true;
  }
  if (s.as<For>() != nullptr && c->product.defined()) return false;
  return s.as<For>() != nullptr && parse_nest(s, c);
}

bool parse_chain(Stmt s, TileChain* c) {
  while (const LetStmt* let = s.as<LetStmt>()) {
    c->lets.emplace_back(let->name, let->value);
    s = let->body;
  }
  c->tile = s.as<Allocate>();
  return c->tile != nullptr && c->tile->memory_type == MemoryType::AMXTile &&
         parse_body(c->tile->body, c) && c->zero.defined() && c->product.defined() &&
         c->out.defined();
}

bool same_loops(const TileChain& a, const TileChain& b) {
  if (a.loops.size() != b.loops.size()) return false;
  for (size_t k = 0; k < a.loops.size(); ++k) {
    const For *fa = a.loops[k].as<For>(), *fb = b.loops[k].as<For>();
    const IfThenElse *ia = a.loops[k].as<IfThenElse>(), *ib = b.loops[k].as<IfThenElse>();
    if (fa != nullptr && fb != nullptr) {
      if (fa->name != fb->name || !equal(fa->min, fb->min) || !equal(fa->extent, fb->extent) ||
          fa->for_type != fb->for_type) {
        return false;
      }
    } else if (ia == nullptr || ib == nullptr || !equal(ia->condition, ib->condition)) {
      return false;
    }
  }
  return true;
}

class RenameBuffer : public IRMutator {
 public:
  RenameBuffer(std::string from, std::string to) : from_(std::move(from)), to_(std::move(to)) {}
  using IRMutator::visit;

 private:
  Expr visit(const Load* op) override {
    Expr e = IRMutator::visit(op);
    const Load* l = e.as<Load>();
    if (l->name != from_) return e;
    return Load::make(l->type, to_, l->index, l->image, l->param, l->predicate, l->alignment);
  }
  Stmt visit(const Store* op) override {
    Stmt s = IRMutator::visit(op);
    const Store* st = s.as<Store>();
    if (st->name != from_) return s;
    return Store::make(to_, st->value, st->index, st->param, st->predicate, st->alignment);
  }
  std::string from_, to_;
};

// Unrolled copies of a tile's computation (the tiles of a row of the schedule's tile loop) as
// one loop nest whose body does each copy's product in turn, each in a tile of its own: a
// tdpbf16ps waits for the previous product into its tile (about 50 cycles measured on Sapphire
// Rapids, against 16 between independent ones), so one tile at a time ran at a quarter of the
// AMX units' rate.
Stmt interleave(const std::vector<TileChain>& chains) {
  std::vector<Stmt> zeros, products, outs;
  for (size_t i = 0; i < chains.size(); ++i) {
    RenameBuffer rename(chains[i].tile->name, chains[i].tile->name + "." + std::to_string(i));
    // (The zeroing by kAmxTileZeroF32, which LLVM does not merge: generator/native_code.h.)
    const Store* zero = chains[i].zero.as<Store>();
    const Call* tile_zero = zero->value.as<Call>();
    Stmt own_zero = Store::make(
        zero->name, Call::make(tile_zero->type, kAmxTileZeroF32, tile_zero->args, Call::Extern),
        zero->index, zero->param, zero->predicate, zero->alignment);
    zeros.push_back(rename.mutate(own_zero));
    products.push_back(rename.mutate(chains[i].product));
    outs.push_back(rename.mutate(chains[i].out));
  }
  Stmt nest = Block::make(products);
  for (auto w = chains[0].loops.rbegin(); w != chains[0].loops.rend(); ++w) {
    if (const For* loop = w->as<For>()) {
      nest = For::make(loop->name, loop->min, loop->extent, loop->for_type, loop->device_api, nest);
    } else {
      nest = IfThenElse::make(w->as<IfThenElse>()->condition, nest);
    }
  }
  std::vector<Stmt> body = zeros;
  body.push_back(nest);
  body.insert(body.end(), outs.begin(), outs.end());
  Stmt s = Block::make(body);
  for (size_t i = 0; i < chains.size(); ++i) {
    const Allocate* a = chains[i].tile;
    const std::string name = a->name + "." + std::to_string(i);
    s = Allocate::make(name, a->type, a->memory_type, a->extents, a->condition,
                       Block::make(s, Free::make(name)));
  }
  return s;
}

class AmxInterleave : public AmxFullDepth {
 public:
  using AmxFullDepth::visit;

 private:
  Stmt visit(const Block* op) override {
    std::vector<Stmt> items;
    for (Stmt s = op; s.defined();) {
      if (const Block* b = s.as<Block>()) {
        items.push_back(mutate(b->first));
        s = b->rest;
      } else {
        items.push_back(mutate(s));
        s = Stmt();
      }
    }
    std::vector<Stmt> out;
    for (size_t k = 0; k < items.size();) {
      std::vector<TileChain> run;
      for (size_t n = k; n < items.size(); ++n) {
        TileChain c;
        if (!parse_chain(items[n], &c) || (!run.empty() && !same_loops(run[0], c))) break;
        run.push_back(std::move(c));
      }
      if (run.size() > 1) {
        out.push_back(interleave(run));
        k += run.size();
      } else {
        out.push_back(items[k++]);
      }
    }
    return Block::make(out);
  }
};

}  // namespace

IRMutator* amx_full_depth_pass() { return new AmxInterleave; }

}  // namespace attngen
