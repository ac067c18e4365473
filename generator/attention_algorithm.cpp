#include "generator/attention_algorithm.h"

#include <algorithm>
#include <limits>

namespace attngen {

using namespace Halide;

// The pattern definitions of core/pattern.h on Halide Exprs.
template <>
struct PatternOps<Expr> {
  using Bool = Expr;
  static Expr always() { return Internal::const_true(); }
  static Expr abs(const Expr& x) { return Halide::abs(x); }
  static Expr floor_div(const Expr& x, const Expr& n) { return x / n; }  // Halide's / rounds down
  static Expr side(int param, const Expr& cond, const Expr& otherwise) {
    return param >= 0 ? cond : otherwise;
  }
  static Expr side(const Expr& param, const Expr& cond, const Expr& otherwise) {
    return select(param >= 0, cond, otherwise);
  }
};

namespace {

// The block-sparse layout entry of (query block, key block), as a condition.
auto layout_lookup(const AttentionInputs& in) {
  return [&in](const Expr& query_block, const Expr& key_block) {
    return in.layout(key_block, query_block) != 0;
  };
}

// The modifier's run-time parameters, with the stages its functions define kept in f.
ModifierParams modifier_params(const AttentionInputs& in, AttentionFuncs& f) {
  ModifierParams p = in.modifier_params;
  p.stages = &f.modifier_stages;
  return p;
}

// The optional outputs, from a row's final max m (of the scores) and sum l (of exp(s - m)).
void define_extra_outputs(AttentionFuncs& f, const AttentionSpec& spec, const Expr& m,
                          const Expr& l) {
  const Var &j = f.j, &i = f.i, &h = f.h, &b = f.b;
  if (spec.weights) {
    f.weights = Func(spec.part + "weights");
    // (Masked keys weigh 0 in rows made NaN by a NaN score too.)
    const Expr s = f.scores(j, i, h, b);
    f.weights(j, i, h, b) =
        select(is_plus_zero(l) || is_masked(s), 0.0f, softmax_exp(s - m, spec.native_exp) / l);
  }
  if (spec.lse) {
    f.lse = Func(spec.part + "lse");
    // (Halide's vectorised log reads NaN's exponent field as 128: 89.1 for log(NaN). A NaN sum
    // is passed on as it is.)
    f.lse(i, h, b) = select(is_plus_zero(l), Expr(-std::numeric_limits<float>::infinity()),
                            is_nan_bits(l), l, m + log(l));
  }
}

// FlashAttention's merge: per key block its max, exps relative to that max, their sum and their
// product with V; then the blocks are folded in order into a running (acc, max, sum), rescaling
// what came before whenever the max grows (both in generator/online_softmax.h, shared with
// decode). Every term is exp(x) with x <= 0, as in the row form.
// The running max and sum are carried by every d of the row (a Tuple per element), so the fold
// is elementwise in d and vectorises or maps to GPU threads without cross-lane traffic. (A form
// with per-row weights from a history of block maxima was measured slower on AVX-512.)
//
// The state is indexed by query tile (qt) and row within it (qi): the key blocks a tile visits
// are restricted by a predicate on (block, tile) alone, so a schedule that computes a tile per
// task skips whole blocks that the mask excludes for every row of the tile (past kv_len; above
// the diagonal for causal), with the elementwise mask handling the partly masked ones.
void define_online_softmax(AttentionFuncs& f, const AttentionSpec& spec, const AttentionInputs& in,
                           const Expr& offset) {
  const Var &d = f.d, &j = f.j, &i = f.i, &h = f.h, &b = f.b, &kb = f.kb;
  const Var &qi = f.qi, &qt = f.qt;
  const int block = spec.key_block, tile = spec.query_tile;
  f.rk = RDom(0, block, spec.part + "rk");
  f.rb = RDom(0, (in.seq_kv + block - 1) / block, spec.part + "rb");
  const RDom &rk = f.rk, &rb = f.rb;

  // Key blocks with at least one attended key for some row of tile qt.
  Expr first_key = rb * block;
  Expr visit = first_key < in.kv_len(b);
  Expr first_row = qt * tile;
  Expr first_position = offset + first_row, last_position = first_position + (tile - 1);
  if (spec.mask == MaskKind::kCausal) {
    visit = visit && first_key <= last_position;
  } else if (spec.generic) {
    visit = visit && (!in.causal || first_key <= last_position);
  }
  if (spec.generic) {
    Expr pattern_visit =
        pattern_visits(spec.pattern.kind, in.pattern, first_position, last_position, first_row,
                       first_key, first_key + (block - 1), layout_lookup(in));
    if (spec.pattern.kind == Pattern::kBlockSparse) {
      // One layout entry decides a (tile, key block) only where both lie in one layout block.
      pattern_visit =
          pattern_visit || in.pattern.block % tile != 0 || in.pattern.block % block != 0;
    }
    visit = visit && pattern_visit;
  } else {
    visit = visit && pattern_visits(spec.pattern, first_position, last_position, first_row,
                                    first_key, first_key + (block - 1), layout_lookup(in));
  }
  if (in.modifier != nullptr) {
    ModifierBlock mb;
    mb.b = b;
    mb.h = h;
    mb.query_tile_index = qt;
    mb.key_block_index = rb;
    mb.query_tile = tile;
    mb.key_block = block;
    mb.offset = offset;
    mb.heads_q = in.heads_q;
    mb.seq_q = in.seq_q;
    mb.seq_kv = in.seq_kv;
    visit = visit && modifier_block_visit(*in.modifier, mb, modifier_params(in, f));
  }
  f.rb.where(visit);

  const KeyBlockStats stats =
      define_key_block_stats(f.scores, f.v, block, rk, {d, j, kb, i, h, b}, f.v_finite,
                             spec.half_pv_chunk, Func(), spec.part, spec.native_exp);
  f.block_max = stats.block_max;
  f.probs = stats.probs;
  f.block_sum = stats.block_sum;
  f.block_pv = stats.block_pv;
  f.probs_half = stats.probs_half;
  f.block_pv_half = stats.block_pv_half;
  f.rx = stats.rx;
  f.rh = stats.rh;

  f.state = Func(spec.part + "state");
  if (in.modifier != nullptr && in.modifier->sink) {
    f.state(d, qi, qt, h, b) = sink_softmax_state(in.modifier->sink(h, modifier_params(in, f)));
  } else {
    f.state(d, qi, qt, h, b) = initial_softmax_state();
  }
  Expr row = qt * tile + qi;
  const SoftmaxState merged = online_merge(
      {f.state(d, qi, qt, h, b)[0], f.state(d, qi, qt, h, b)[1], f.state(d, qi, qt, h, b)[2]},
      {f.block_pv(d, rb, row, h, b), f.block_max(rb, row, h, b), f.block_sum(rb, row, h, b)},
      spec.native_exp);
  f.state(d, qi, qt, h, b) = Tuple(merged.acc, merged.max, merged.sum);

  f.out = Func(spec.part + "attention");
  f.out(d, h, i, b) =
      normalise(f.state(d, i % tile, i / tile, h, b)[0], f.state(d, i % tile, i / tile, h, b)[2]);
  define_extra_outputs(f, spec, f.state(0, i % tile, i / tile, h, b)[1],
                       f.state(0, i % tile, i / tile, h, b)[2]);
}

// AttentionSpec::strided_classes. Class c = b * stride + r holds the positions r (mod stride):
// its row t is position (first + t) * stride + r, first = floor(offset / stride) with offset the
// batch's position of query 0, so that rows 0 .. (Sq + stride - 2) / stride cover every query of
// the class (rows outside [0, Sq) are computed from a clamped query and never read); its key u is
// key u * stride + r, causal where the kernel is: u <= first + t, the class problem's offset.
AttentionFuncs define_strided_classes(const AttentionSpec& spec, const AttentionInputs& in) {
  const int l = spec.pattern.stride, dv = spec.head_dim_v;
  if (in.modifier != nullptr) {
    // (The class problem's indices are gathered ones, not the call's.)
    throw CompileError("attngen: a modifier with the strided pattern's class form");
  }
  const AttentionSpec band_spec = strided_band_spec(spec), class_spec = strided_class_spec(spec);
  AttentionFuncs f = define_attention(band_spec, in);

  Var d("d"), h("h"), s("s"), c("c");
  const auto offset_of = [&in](const Expr& b) {
    return select(in.bottom_right, in.kv_len(b) - in.seq_q, 0);
  };
  AttentionInputs ci = in;
  // (Top-left, position 0 starts class 0's row 0: (Sq + l - 1) / l rows, no extra tile.)
  ci.seq_q = select(in.bottom_right, (in.seq_q + l - 2) / l + 1, (in.seq_q + l - 1) / l);
  ci.seq_kv = (in.seq_kv + l - 1) / l;
  ci.batch = in.batch * l;
  {
    Expr b = c / l, r = c % l, first = offset_of(b) / l;  // (Halide's / and % round down)
    Expr row = clamp((first + s) * l + r - offset_of(b), 0, in.seq_q - 1);
    Expr key = clamp(s * l + r, 0, in.seq_kv - 1);
    ci.q = Func("class_q");
    ci.q(d, h, s, c) = in.q(d, h, row, b);
    ci.k = Func("class_k");
    ci.k(d, h, s, c) = in.k(d, h, key, b);
    ci.v = Func("class_v");
    ci.v(d, h, s, c) = in.v(d, h, key, b);
    ci.kv_len = Func("class_kv_len");
    ci.kv_len(c) = (in.kv_len(b) - r + (l - 1)) / l;
    ci.offset = Func("class_offset");
    ci.offset(c) = first;
  }
  ci.v_finite = f.v_finite;
  auto classes = std::make_shared<AttentionFuncs>(define_attention(class_spec, ci));
  const AttentionFuncs& k = *classes;
  {
    const int tile = class_spec.query_tile;
    Expr dc = min(k.d, dv - 1), qi = k.i % tile, qt = k.i / tile;
    const auto state = [&](int e) { return k.state(dc, qi, qt, k.h, k.b)[e]; };
    f.class_rows = Func("class_rows");
    f.class_rows(k.d, k.h, k.i, k.b) = select(k.d < dv, state(0), k.d == dv, state(1), state(2));
  }
  classes->out = f.class_rows;
  f.classes = classes;

  // Each row's class state merged into its band state, like one more key block.
  const Var &fd = f.d, &fh = f.h, &fi = f.i, &fb = f.b;
  Expr p = offset_of(fb) + fi;
  Expr t = clamp(p / l - offset_of(fb) / l, 0, ci.seq_q - 1), cls = fb * l + p % l;
  const int band_tile = band_spec.query_tile;
  const auto band = [&](int e) { return f.state(fd, fi % band_tile, fi / band_tile, fh, fb)[e]; };
  const SoftmaxState merged =
      online_merge({band(0), band(1), band(2)},
                   {f.class_rows(fd, fh, t, cls), f.class_rows(dv, fh, t, cls),
                    f.class_rows(dv + 1, fh, t, cls)},
                   spec.native_exp);
  f.out = Func("attention");
  f.out(fd, fh, fi, fb) = normalise(merged.acc, merged.sum);
  return f;
}

}  // namespace

AttentionSpec strided_band_spec(const AttentionSpec& spec) {
  AttentionSpec band = spec;
  band.strided_classes = false;
  band.pattern = PatternSpec{};
  band.pattern.kind = Pattern::kWindow;
  band.pattern.left = band.pattern.right = spec.pattern.stride - 1;
  band.without_diagonal = true;
  // Query tiles and key blocks of the stride (a power of two, 16 at least), so that a tile
  // visits few keys past its rows' band: at stride 16, 3 blocks of 16 keys (31 attended) where
  // tiles of 64 and blocks of 64 visited 192 (AVX-512, B1 H8 S2048: 7.8 ms against 11.4 with
  // tiles of 64 and blocks of 16, 12.0 with blocks of 32; single runs).
  int unit = 16;
  while (unit < spec.pattern.stride && unit < spec.key_block) unit *= 2;
  band.key_block = std::min(unit, spec.key_block);
  band.query_tile = std::min(unit, spec.query_tile);
  return band;
}

AttentionSpec strided_class_spec(const AttentionSpec& spec) {
  AttentionSpec classes = spec;
  classes.strided_classes = false;
  classes.pattern = PatternSpec{};
  classes.part = "class_";
  // A class holds about S / stride rows and keys: tiles and blocks of 2048 / stride (a power of
  // two, 16 to the kernel's), one of each per class at S2048, so that short classes are not
  // padded to whole tiles of 64 (stride 128, S1024: 8 rows a class).
  int unit = 16;
  while (unit < 2048 / spec.pattern.stride && unit < spec.query_tile) unit *= 2;
  classes.query_tile = std::min(unit, spec.query_tile);
  classes.key_block = std::min(unit, spec.key_block);
  return classes;
}

AttentionFuncs define_attention(const AttentionSpec& spec, const AttentionInputs& in) {
  if (spec.strided_classes) return define_strided_classes(spec, in);
  AttentionFuncs f;
  const Var &d = f.d, &j = f.j, &i = f.i, &h = f.h, &b = f.b;
  f.rd = RDom(0, spec.head_dim_qk, spec.part + "rd");
  const RDom &rd = f.rd, &rj = f.rj;

  // Grouped-query attention: query head h reads kv head h / group.
  Expr group = in.heads_q / in.heads_kv;
  Expr hk = h / group;

  // Reads along the sequence are clamped, so a schedule may compute whole tiles past the end
  // of a sequence without reading out of bounds; the extra rows and columns are never used.
  // The scale is applied to q once (Sq x D multiplies) instead of to every score (Sq x Skv).
  f.q = Func(spec.part + "q_tile");
  Expr kj = clamp(j, 0, in.seq_kv - 1);
  f.k = Func(spec.part + "k_tile");
  f.v = Func(spec.part + "v_tile");
  if (spec.generic) {
    // The call's head dims padded with zeros up to the kernel's: the padded q.k terms add 0, the
    // padded columns of p.v are never written out.
    Expr dq = min(d, in.dqk - 1), dv = min(d, in.dv - 1);
    f.q_rows = Func(spec.part + "q_rows");
    f.q_rows(d, h, i, b) = in.q(d, h, i, b);
    f.q(d, h, i, b) =
        select(d < in.dqk, f.q_rows(dq, h, clamp(i, 0, in.seq_q - 1), b), 0.0f) * in.scale;
    f.k(d, j, h, b) = select(d < in.dqk, in.k(dq, hk, kj, b), 0.0f);
    f.v(d, j, h, b) = select(d < in.dv, in.v(dv, hk, kj, b), 0.0f);
  } else if (spec.bf16_pairs) {
    // q's bf16 values as they are (scaling q would round it again); k and v as f32 (in.k and
    // in.v convert), packed in pairs back in bf16, which is exact.
    f.q(d, h, i, b) = in.q(d, h, clamp(i, 0, in.seq_q - 1), b);
    f.k(d, j, h, b) = in.k(d, hk, kj, b);
    f.v(d, j, h, b) = in.v(d, hk, kj, b);
    Var l("l"), rr("rr"), jj("jj");
    f.k_pairs = Func(spec.part + "k_pairs");
    f.k_pairs(l, j, rr, h, b) = cast(BFloat(16), f.k(2 * rr + l, j, h, b));
    f.v_pairs = Func(spec.part + "v_pairs");
    f.v_pairs(l, d, jj, h, b) = cast(BFloat(16), f.v(d, 2 * jj + l, h, b));
  } else {
    f.q_rows = Func(spec.part + "q_rows");
    f.q_rows(d, h, i, b) = in.q(d, h, i, b);
    f.q(d, h, i, b) = f.q_rows(d, h, clamp(i, 0, in.seq_q - 1), b) * in.scale;
    f.k(d, j, h, b) = in.k(d, hk, kj, b);
    f.v(d, j, h, b) = in.v(d, hk, kj, b);
  }
  if (spec.half_pv_chunk > 0) {
    // V as f16 for the half-precision P.V: f16 inputs as stored (the cast of their f32 value
    // folds away), staged as f16 where a schedule stages V.
    if (spec.key_block <= 0) {
      throw CompileError("attngen: half-precision P.V needs the key-block form (key_block > 0)");
    }
    Func v32 = f.v;
    f.v = Func(spec.part + "v_tile_half");
    f.v(d, j, h, b) = cast(Float(16), v32(d, j, h, b));
  }

  // Whether V holds only finite values (pv_term): the largest exponent field of its elements, of
  // every key, attended or not, below the all-ones of NaN and infinity.
  if (in.v_finite.defined()) {
    f.v_finite = in.v_finite;
  } else {
    f.rv = RDom(0, spec.generic ? in.dv : Expr(spec.head_dim_v), 0, in.heads_kv, 0, in.seq_kv, 0,
                in.batch, spec.part + "rv");
    f.v_exponents = Func(spec.part + "v_exponents");
    f.v_exponents() = cast<uint32_t>(0);
    f.v_exponents() = max(f.v_exponents(), bits_of(in.v(f.rv.x, f.rv.y, f.rv.z, f.rv.w)) &
                                               Internal::make_const(UInt(32), 0x7f800000));
    f.v_finite = f.v_exponents() < Internal::make_const(UInt(32), 0x7f800000);
  }

  f.dot = Func(spec.part + "dot");
  f.dot(j, i, h, b) = 0.0f;
  if (spec.bf16_pairs) {
    f.dot(j, i, h, b) +=
        cast<float>(f.q(rd, h, i, b)) * cast<float>(f.k_pairs(rd % 2, j, rd / 2, h, b));
  } else {
    f.dot(j, i, h, b) += f.q(rd, h, i, b) * f.k(rd, j, h, b);
  }

  Expr s = spec.bf16_pairs ? f.dot(j, i, h, b) * in.scale : f.dot(j, i, h, b);
  if (spec.softcap) {
    s = in.softcap * tanh(s / in.softcap);
  } else if (spec.generic) {
    s = select(in.softcap == 0.0f, s, in.softcap * tanh(s / in.softcap));
    // The common case a schedule specialises for: no soft cap and no mask tensor. (Written as
    // `input == constant`, which the specialised branch substitutes, dropping the selects.)
    f.plain = in.softcap == 0.0f && in.mask_kind == 0;
  }

  // Position alignment: query i sits at absolute position offset + i.
  Expr kv_len = in.kv_len(b);
  Expr offset = in.offset.defined() ? in.offset(b) : select(in.bottom_right, kv_len - in.seq_q, 0);
  f.top_left = !in.bottom_right;
  Expr attend = j < kv_len;
  // The variant's modifier: a score modifier after the scale and the soft cap, before the masks;
  // a mask modifier as one more mask (generator/modifier.h).
  if (in.modifier != nullptr) {
    // The row as schedules compute it: within the call's rows rounded up to whole query tiles
    // (promised, not clamped: a modifier's index affine in it stays a vector load; every form
    // computes rows in tiles of query_tile).
    const int tile = std::max(1, spec.query_tile);
    const Expr row = unsafe_promise_clamped(i, 0, (in.seq_q + tile - 1) / tile * tile - 1);
    const ModifierIndex at{
        b,      h,  clamp(i, 0, in.seq_q - 1), kj, offset + i, in.heads_q, in.seq_q, in.seq_kv,
        offset, row};
    const ModifierParams params = modifier_params(in, f);
    if (in.modifier->score) s = in.modifier->score(s, at, params);
    if (in.modifier->mask) attend = attend && in.modifier->mask(at, params);
  }
  if (spec.without_diagonal) attend = attend && j != offset + i;
  if (spec.mask == MaskKind::kCausal) {
    attend = attend && j <= offset + i;
  } else if (spec.generic) {
    attend = attend && (!in.causal || j <= offset + i);
  }
  if (spec.generic) {
    attend = attend && pattern_attends(spec.pattern.kind, in.pattern, offset + i,
                                       clamp(i, 0, in.seq_q - 1), kj, layout_lookup(in));
  } else {
    attend = attend && pattern_attends(spec.pattern, offset + i, clamp(i, 0, in.seq_q - 1), kj,
                                       layout_lookup(in));
  }
  Expr mi = clamp(i, 0, in.seq_q - 1);
  if (spec.mask_tensor == MaskTensor::kBool) {
    attend = attend && in.mask(kj, mi, h, b) != 0;
  } else if (spec.mask_tensor == MaskTensor::kAdditive) {
    // -inf (or anything at or below kAdditiveMaskBelow) masks the key; NaN is added (its rows
    // become NaN, as in IEEE arithmetic).
    Expr add = in.mask(kj, mi, h, b);
    attend = attend && (add > kAdditiveMaskBelow || is_nan_bits(add));
    s = s + add;
  } else if (spec.generic) {
    Expr add = in.add_mask(kj, mi, h, b);
    attend = attend && (in.mask_kind != 1 || in.bool_mask(kj, mi, h, b) != 0) &&
             (in.mask_kind != 2 || add > kAdditiveMaskBelow || is_nan_bits(add));
    s = select(in.mask_kind == 2, s + add, s);
  }

  f.scores = Func(spec.part + "scores");
  f.scores(j, i, h, b) = select(attend, s, kMaskedScore);

  if (spec.key_block > 0) {
    define_online_softmax(f, spec, in, offset);
    return f;
  }

  // Whole rows. The row statistics and the product are indexed by query tile (qt) and row in it
  // (qi), so the keys they visit can depend on the tile. With a causal mask the keys are taken
  // in chunks of spec.key_chunk, and the chunks past the diagonal of the tile's last row are
  // never visited; the scores and probs a tile computes cover only the chunks visited. Keys of a
  // visited chunk that some row does not attend (or past kv_len, or past Skv in the last chunk)
  // are masked elementwise: exactly 0. (Patterns skip key blocks in the key-block form.)
  // The skipping applies to top-left alignment (query i at key position i; the runtime passes
  // bottom-right as top-left wherever the two agree): its predicate reads no buffer, so lowering
  // can lift it out of the inner loops (schedules specialise on this case), where with the
  // kv_len-dependent offset of bottom-right alignment it stayed in them, and bounds inference
  // widened the rows of a tile. The reads go through the chunk index clamped to the visited range
  // (a no-op where the predicate holds): bounds inference ignores the predicate when it sizes
  // scores and probs, but not the clamp.
  // Without a causal mask the keys are one loop, which schedules split into chunks themselves,
  // the last one cut at Skv (whole chunks would pad S197 to 256 keys).
  const Var &qi = f.qi, &qt = f.qt;
  const int tile = spec.query_tile, chunk = spec.key_chunk;
  Expr first_row = qt * tile;
  Expr key;
  Expr key_pv;
  Expr pair_pv;  // spec.amx: the pair of key_pv (key_pv / 2) in v_pairs
  const bool causal = spec.mask == MaskKind::kCausal;
  const Expr chunks = (in.seq_kv + chunk - 1) / chunk;
  const Expr last_chunk = (first_row + (tile - 1)) / chunk;
  // The chunk of keys a causal tile visits as chunk y, clamped to the visited range.
  const auto visited = [&](const Expr& y) {
    return causal ? select(in.bottom_right, y, min(y, last_chunk)) : y;
  };
  if (causal || spec.amx) {
    // amx: whole chunks without a causal mask too, the last one past Skv masked (AMX's products
    // take 32 keys at a time, with no test on the key).
    f.rj = RDom(0, chunk, 0, chunks, spec.part + "rj");
    if (causal) f.rj.where(in.bottom_right || rj.y <= last_chunk);
    key = visited(rj.y) * chunk + rj.x;
    f.rj_loops = {rj.x, rj.y};
  }
  if (spec.amx) {
    // P.V over (key of a pair, pair, chunk): V's pairs indexed without a division.
    f.rj_pv = RDom(0, 2, 0, chunk / 2, 0, chunks, spec.part + "rj_pv");
    const RDom& rp = f.rj_pv;
    if (causal) f.rj_pv.where(in.bottom_right || rp.z <= last_chunk);
    pair_pv = visited(rp.z) * (chunk / 2) + rp.y;
    key_pv = 2 * pair_pv + rp.x;
    f.pv_loops = {rp.x, rp.y, rp.z};
  } else if (causal) {
    // The product also stops each group of spec.row_group rows at the group's last row (its
    // probs past it are 0): within the diagonal chunk a group visits only the keys up to it.
    // The bound is the same for every row of a group, so it becomes the key loop's bound where
    // a schedule makes the group a register tile (no test in the loop). At S2048, tile 64 and
    // groups of 4 that is 3% less p.v work; measured 0.99x the time (within the noise).
    const int g = std::max(1, spec.row_group);
    f.rj_pv = RDom(0, chunk, 0, chunks, spec.part + "rj_pv");
    const RDom& rp = f.rj_pv;
    f.rj_pv.where(in.bottom_right || rp.y <= last_chunk);
    if (!spec.bf16_pairs) {  // (a bound on single keys would split the pairs)
      f.rj_pv.where(in.bottom_right || rp.y * chunk + rp.x <= first_row + (qi / g) * g + (g - 1));
    }
    key_pv = visited(rp.y) * chunk + rp.x;
    f.pv_loops = {rp.x, rp.y};
  } else {
    // (Keys past Skv, up to a multiple of key_multiple, have masked scores: probability 0.)
    const int m = std::max(1, spec.key_multiple);
    f.rj = RDom(0, m == 1 ? in.seq_kv : (in.seq_kv + m - 1) / m * m, spec.part + "rj");
    key = rj;
    f.rj_loops = {rj};
    f.rj_pv = f.rj;
    key_pv = key;
    f.pv_loops = f.rj_loops;
  }
  Expr row = first_row + qi;

  // A modifier's sink logit: one more term of the row's max and sum (sink_softmax_state).
  Expr sink;
  if (in.modifier != nullptr && in.modifier->sink) {
    sink = in.modifier->sink(h, modifier_params(in, f));
  }
  f.row_max = Func(spec.part + "row_max");
  f.row_max(qi, qt, h, b) = sink.defined() ? sink_softmax_state(sink)[1] : Expr(kMaskedScore);
  f.row_max(qi, qt, h, b) = max(f.row_max(qi, qt, h, b), f.scores(key, row, h, b));

  // A fully masked row has a masked max: use 0, so every term flushes to exactly 0.
  Expr m = f.row_max(i % tile, i / tile, h, b);
  Expr m_safe = select(is_masked(m), 0.0f, m);
  f.probs = Func(spec.part + "probs");
  f.probs(j, i, h, b) = spec.bf16_pairs
                            ? softmax_exp_bf16(f.scores(j, i, h, b) - m_safe, spec.native_exp)
                            : softmax_exp(f.scores(j, i, h, b) - m_safe, spec.native_exp);

  f.row_sum = Func(spec.part + "row_sum");
  if (sink.defined()) {
    const Expr sink_max = sink_softmax_state(sink)[1];
    f.row_sum(qi, qt, h, b) =
        select(is_masked(sink_max), 0.0f, softmax_exp(sink_max - f.row_max(qi, qt, h, b)));
  } else {
    f.row_sum(qi, qt, h, b) = 0.0f;
  }
  if (spec.bf16_pairs) {
    // P rounded to bf16 once, for P.V and for the row sum alike (the normalisation then matches
    // the weights P.V used).
    f.probs_bf16 = Func(spec.part + "probs_bf16");
    f.probs_bf16(j, i, h, b) = cast(BFloat(16), f.probs(j, i, h, b));
    f.row_sum(qi, qt, h, b) += cast<float>(f.probs_bf16(key, row, h, b));
  } else {
    f.row_sum(qi, qt, h, b) += f.probs(key, row, h, b);
  }

  f.acc = Func(spec.part + "acc");
  f.acc(d, qi, qt, h, b) = 0.0f;
  if (spec.bf16_pairs) {
    // (The product stays one of two bf16 values, for vdpbf16ps: pv_term's select is on V.)
    const Expr p = f.probs_bf16(key_pv, row, h, b);
    const Expr v = spec.amx ? f.v_pairs(f.rj_pv.x, d, pair_pv, h, b)
                            : f.v_pairs(key_pv % 2, d, key_pv / 2, h, b);
    if (spec.amx) {
      f.acc(d, qi, qt, h, b) += cast<float>(p) * cast<float>(v);
      f.acc_masked = Func(spec.part + "acc_masked");
      f.acc_masked(d, qi, qt, h, b) = 0.0f;
      f.acc_masked(d, qi, qt, h, b) += cast<float>(p) * cast<float>(masked_by_prob(p, v));
    } else {
      f.acc(d, qi, qt, h, b) +=
          cast<float>(p) * cast<float>(select(f.v_finite, v, masked_by_prob(p, v)));
    }
  } else {
    f.acc(d, qi, qt, h, b) += pv_term(f.probs(key_pv, row, h, b), f.v(d, key_pv, h, b), f.v_finite);
  }

  Expr l = f.row_sum(i % tile, i / tile, h, b);
  f.out = Func(spec.part + "attention");
  if (spec.amx) {
    f.out(d, h, i, b) = select(f.v_finite, normalise(f.acc(d, i % tile, i / tile, h, b), l),
                               normalise(f.acc_masked(d, i % tile, i / tile, h, b), l));
  } else {
    f.out(d, h, i, b) = normalise(f.acc(d, i % tile, i / tile, h, b), l);
  }
  define_extra_outputs(f, spec, m_safe, l);
  return f;
}

LinearFuncs define_linear(const Func& x, const Func& w, const Func& bias, const LinearShape& shape,
                          const std::string& name) {
  LinearFuncs f;
  f.shape = shape;
  const Var &e = f.e, &n = f.n, &s = f.s, &b = f.b;
  f.re = RDom(0, shape.in_features, name + "_re");
  // Clamped like the attention inputs, so schedules may round n and s tiles up.
  Expr nc = clamp(n, 0, shape.out_features - 1);
  f.x = Func(name + "_x");
  f.x(e, s, b) = x(e, clamp(s, 0, shape.rows - 1), b);
  // The weights arrive packed (the runtime packs them, once for a persistent layer): panels of
  // `panel` output features, each contiguous, pi innermost. The product's register tile then
  // reads its weights from one block of memory, and no call copies them.
  const int p = shape.panel;
  f.w = Func(name + "_w");
  f.w(e, n) = w(nc % p, e, nc / p);
  f.w_panels = Func(name + "_w_panels");
  f.w_panels(f.pi, e, f.po) = w(f.pi, e, f.po);
  f.sum = Func(name + "_sum");
  f.sum(n, s, b) = bias(nc);
  if (shape.half_chunk <= 0) {
    Expr x_re = f.x(f.re, s, b);
    if (shape.row_group > 0) {
      const int g = shape.row_group;
      f.x_groups = Func(name + "_x_groups");
      f.x_groups(f.gr, e, f.group, b) = f.x(e, f.group * g + f.gr, b);
      x_re = f.x_groups(s % g, f.re, s / g, b);
    }
    f.sum(n, s, b) += x_re * f.w_panels(n % shape.panel, f.re, n / shape.panel);
  } else {
    // Half-precision products over chunks of half_chunk input features, the last chunk padded
    // with zeros (both operands, so padding never meets a non-finite value).
    const int c = shape.half_chunk;
    const Type f16 = Float(16);
    Expr ec = min(e, shape.in_features - 1), inside = e < shape.in_features;
    Func x32 = f.x, w32 = f.w;
    f.x = Func(name + "_x_half");
    f.x(e, s, b) = select(inside, cast(f16, x32(ec, s, b)), cast(f16, 0.0f));
    f.w = Func(name + "_w_half");
    f.w(e, n) = select(inside, cast(f16, w32(ec, n)), cast(f16, 0.0f));
    f.w_panels = Func(name + "_w_panels_half");
    f.w_panels(f.pi, e, f.po) = f.w(e, f.po * shape.panel + f.pi);
    f.rx = RDom(0, c, name + "_rx");
    f.rh = RDom(0, (shape.in_features + c - 1) / c, name + "_rh");
    Var ch("ch");
    Expr feature = ch * c + f.rx;
    f.sum_half = Func(name + "_sum_half");
    f.sum_half(n, ch, s, b) = cast(f16, 0.0f);
    f.sum_half(n, ch, s, b) +=
        f.x(feature, s, b) * f.w_panels(n % shape.panel, feature, n / shape.panel);
    f.sum(n, s, b) += cast<float>(f.sum_half(n, f.rh, s, b));
  }
  f.out = Func(name);
  f.out(n, s, b) = f.sum(n, s, b);
  return f;
}

}  // namespace attngen
