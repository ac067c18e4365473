#include "generator/decode_algorithm.h"

#include "core/kv_layout.h"
#include "generator/element.h"
#include "generator/online_softmax.h"

namespace attngen {

using namespace Halide;

namespace {

// The modifier's run-time parameters, with the stages its functions define kept in f.
ModifierParams modifier_params(const DecodeInputs& in, DecodeFuncs& f) {
  ModifierParams p = in.modifier_params;
  p.stages = &f.modifier_stages;
  return p;
}

// Whether the modifier reads a tensor along Skv (at a key's position).
bool modifier_reads_keys(const Modifier* m) {
  if (m == nullptr) return false;
  for (int t = 0; t < m->layout.tensors; ++t) {
    for (int d = 0; d < m->layout.tensor[t].rank; ++d) {
      if (m->layout.tensor[t].dims[d] == ModifierDim::kSkv) return true;
    }
  }
  return false;
}

// A cached element as f32, converted where it is read. f16 by the CPU's conversion instruction
// where the kernel widens natively (x86 with F16C: generator/native_f16.h); elsewhere Halide 14's
// f16 casts are a long emulation, so f16 is converted here with vector integer and float
// arithmetic: the sign-extended bits shifted into an f32's place, exponent 31 (infinity, NaN)
// made an f32 infinity or NaN, and the exponent of the others rebased by a multiplication by
// 2^112, exact for normal and subnormal halves where subnormal f32 operands are kept. Where the
// target flushes them to zero (DecodeSpec::flushes_subnormals) a subnormal half (exponent 0:
// m * 2^-24) is converted from its integer significand instead, m << 13 exactly as f32, times
// 2^-37 (a normal f32), its sign put back, and a normal half's exponent rebased by an integer
// addition of 112 << 23 (on x86 the multiplication form is ~25% faster over an f16 cache:
// bench decode_cache/f16). bf16, i8 and f32 as every input is converted (generator/element.h).
Expr cached_as_f32(const Expr& x, const DecodeSpec& spec) {
  const Type t = x.type();
  if (t.code() != halide_type_float || t.bits() != 16 || spec.native_f16) {
    return to_f32(x, spec.native_f16);
  }
  const bool flushes_subnormals = spec.flushes_subnormals;
  const Expr bits = (cast<int32_t>(reinterpret(Int(16), x)) << 13) &
                    static_cast<int32_t>(0x8fffe000u);  // sign, exponent and mantissa
  const Expr magnitude = bits & 0x0fffe000;
  const Expr special = reinterpret(Float(32), bits | 0x7f800000);
  if (!flushes_subnormals) {
    return select(magnitude >= 0x0f800000, special,
                  reinterpret(Float(32), bits) * 5.192296858534828e33f);  // 2^112
  }
  const Expr sign = bits ^ magnitude;
  const Expr normal = reinterpret(Float(32), bits + 0x38000000);
  const Expr subnormal =
      reinterpret(Float(32), reinterpret(Int(32), cast<float>(magnitude) * 7.275957614183426e-12f) |
                                 sign);  // 2^-37
  return select(magnitude >= 0x0f800000, special, magnitude < 0x00800000, subnormal, normal);
}

// P.V over an i8 cache whose key blocks are whole groups of slots, its keys taken as (quad,
// key of the quad), so that V's bytes of a quad, 4 keys' element d side by side
// (core/kv_layout.h), are indexed without a division of a vector of keys (kb * block + 4 *
// quad is a multiple of 4, and quad / 4 the group's).
//  - Without int8_dot: the weights (probs_scaled) times V as f32, as in define_key_block_stats.
//  - With int8_dot, as 8-bit integer dot products: each weight of a key block, probs_scaled = p *
//    v_scale, in 23-bit fixed point relative to the row's largest (finite) weight W in the block,
//    round(probs_scaled * 2^23 / W), split into 3 bytes (limbs) c = 0, 1, 2 of 8, 8 and 7 bits;
//    per limb, the sum over the block's keys of limb * v_i8 exactly in 32-bit integers
//    (vpdpbusd: u8 x i8, 4 keys a lane; at most 255 * 127 * 128 keys < 2^31), then block_pv = W *
//    2^-23 * (A_2 * 2^16 + A_1 * 2^8 + A_0) in f32. A weight's error is at most half a unit,
//    2^-24 W (f32 rounds a weight to 2^-24 of itself), and unbiased. An attended key whose V
//    scale is NaN (a V row holding a NaN or an infinity, only where v_finite is false) makes the
//    block's P.V NaN, as in f32: pv_max takes the weights' magnitudes' bits, in which a NaN of
//    either sign or an infinity is above every finite value (before, a separate pass summed the
//    weights to find it: 0.98 of the time without that pass, bench/RESULTS.md, "Every call's thread
//    count read once").
void define_i8_pv(DecodeFuncs& f, int block, const Expr& v_finite, const Expr& dv, bool generic,
                  bool int8_dot) {
  const Var &d = f.d, &s = f.s, &r = f.r, &hk = f.hk, &b = f.b, &kb = f.kb;
  f.rquad = RDom(0, f.block_keys / kI8DotBytes, 0, kI8DotBytes, "rquad");
  const Expr quad = f.rquad.x, lane = f.rquad.y;
  // (A generic kernel's head dim past the cache's reads its last element again: those lanes'
  // results are never output.)
  const Expr dv_read = generic ? Halide::min(d, dv - 1) : Expr(d);
  const Expr v_byte =
      quad % (kSlotGroup / kI8DotBytes) * (dv * kI8DotBytes) + dv_read * kI8DotBytes + lane;
  const Expr v_group = kb * (block / kSlotGroup) + quad / (kSlotGroup / kI8DotBytes);
  const Expr quad_key = kb * block + quad * kI8DotBytes + lane;
  const Expr v_i8 = f.v_bytes(v_byte, v_group, hk, b);
  if (!int8_dot) {
    f.block_pv = Func("block_pv_i8");
    f.block_pv(d, kb, r, hk, b) = 0.0f;
    f.block_pv(d, kb, r, hk, b) += f.probs_scaled(quad_key, r, hk, b) * cast<float>(v_i8);
    return;
  }
  const Var c("c");
  const Expr key = kb * block + f.rk;
  // The bits of the row's largest weight's magnitude (weights are >= 0, or NaN): an infinity's or
  // a NaN's where the block has one.
  f.pv_max = Func("pv_max");
  f.pv_max(kb, r, hk, b) = Expr(uint32_t{0});
  const Expr magnitude = bits_of(f.probs_scaled(key, r, hk, b)) & Expr(uint32_t{0x7fffffff});
  const Expr infinity = Expr(uint32_t{0x7f800000});
  f.pv_max(kb, r, hk, b) = Halide::max(f.pv_max(kb, r, hk, b), magnitude);
  const Expr finite = f.pv_max(kb, r, hk, b) < infinity;
  const Expr w_max = reinterpret(Float(32), f.pv_max(kb, r, hk, b));
  f.pv_unit = Func("pv_unit");  // 2^23 / W (0 for a row without weights in the block, or a NaN)
  f.pv_unit(kb, r, hk, b) = select(finite && w_max > 0.0f, 8388608.0f / w_max, 0.0f);
  f.pv_fixed = Func("pv_fixed");
  f.pv_fixed(s, r, hk, b) =
      cast<int32_t>(Halide::round(f.probs_scaled(s, r, hk, b) * f.pv_unit(s / block, r, hk, b)));
  f.pv_limb = Func("pv_limb");
  f.pv_limb(s, c, r, hk, b) = cast<uint8_t>((f.pv_fixed(s, r, hk, b) >> (c * 8)) & 255);
  f.block_pv_i32 = Func("block_pv_i32");
  f.block_pv_i32(d, c, kb, r, hk, b) = 0;
  f.block_pv_i32(d, c, kb, r, hk, b) +=
      cast<int32_t>(f.pv_limb(quad_key, c, r, hk, b)) * cast<int32_t>(v_i8);
  const auto limb = [&](int i) { return cast<float>(f.block_pv_i32(d, i, kb, r, hk, b)); };
  const Expr sum =
      (limb(2) * 65536.0f + limb(1) * 256.0f + limb(0)) * (w_max * (1.0f / 8388608.0f));
  f.block_pv = Func("block_pv_i8");
  f.block_pv(d, kb, r, hk, b) =
      select(v_finite || finite, sum, reinterpret(Float(32), Expr(uint32_t{0x7fc00000})));
}

}  // namespace

DecodeFuncs define_decode(const DecodeSpec& spec, const DecodeInputs& in) {
  DecodeFuncs f;
  const Var &d = f.d, &s = f.s, &r = f.r, &hk = f.hk, &b = f.b, &kb = f.kb, &sp = f.sp;
  const Var &h = f.h, &i = f.i;
  const int block = spec.key_block;

  // Rows of a kv head: its g query heads (innermost, as in q's memory) times the queries.
  const Expr group = in.heads_q / in.heads_kv;
  f.rows = group * in.seq_q;
  const Expr query = r / group;
  f.q = Func("q_rows");
  // A generic kernel pads the head dims with zeros up to its own (attention_algorithm.cpp).
  const Expr dq = spec.generic ? min(d, in.dqk - 1) : Expr(d);
  const Expr dv = spec.generic ? min(d, in.dv - 1) : Expr(d);
  const auto pad = [&](const Expr& limit, const Expr& value) {
    return spec.generic ? select(d < limit, value, 0.0f) : value;
  };
  f.q(d, r, hk, b) =
      pad(in.dqk, in.q(dq, hk * group + r % group, clamp(query, 0, in.seq_q - 1), b));
  // Reads along the slots are clamped to the slots the sequence has filled, so a schedule may
  // compute whole blocks past the end, and never reads a slot that was not written (whose
  // garbage, NaN say, would turn the 0 * v of a masked key into NaN).
  const Expr len = in.kv_len(b);
  const Expr last_slot = clamp(Halide::min(len, in.slots), 1, in.slots) - 1;
  const Expr slot = clamp(s, 0, last_slot);
  // As stored first (inline unless a schedule copies a block of slots), then as f32.
  const bool quantised = spec.kv_type == Int(8);
  const bool grouped = spec.kv_type != Float(32);  // core/kv_layout.h
  const int pack = group_pack(spec.kv_type.bytes());
  f.k_stored = Func("k_stored");
  f.v_stored = Func("v_stored");
  // An i8, f16 or bf16 cache's slots come in groups (core/kv_layout.h; k and v are
  // (element, group, hkv, b) views of each group's K and V parts). K is read by whole groups,
  // the last one clamped, so that a schedule can load a group's keys as vectors: whatever its
  // elements past the filled slots hold (zeros, or what an earlier sequence left: i8 bytes are
  // finite integers, 16-bit ones may be NaN), the select of `scores` drops their scores. An i8
  // cache's V is read by whole groups too: its bytes are finite and those keys' weights in P.V
  // are 0 (probs_scaled, with their V scales 0: below). A 16-bit cache's V is read by its group
  // clamped to the last filled one, and the slots of that group past the filled ones as they
  // are: zeros (the cache clears its storage) or what earlier appends left, finite where v_finite
  // holds (the cache tracks every append), and masked by their weights, 0, in pv_term otherwise.
  const Expr last_group = in.slots / kSlotGroup - 1;
  const Expr slot_group = clamp(s / kSlotGroup, 0, last_group);
  // Where slot (an f32 cache) or group of 16 slots (a grouped one) x of sequence b is stored:
  // at x mod the page's units in page block_table(x / the page's units, b) of the pool
  // (DecodeInputs), or, where the table has one entry per sequence (one_page: a contiguous
  // cache), at x of page b. The runtime's table names a page of the pool in every entry the
  // filled slots reach, and a page's units fit the pool's dim 1 (the clamps bound a range of
  // keys' reads by the pool). one_page keeps a contiguous cache's reads as they were: no table
  // read in the inner loops, and one key's K and V bounded by that key (Halide bounds a shift or
  // mask by a run-time amount, and a table read, by a range), which the schedules' prefetches,
  // specialised on one_page, take as the key's address. An i8 cache is read as one page per
  // sequence only (the runtime pages f32, f16 and bf16 caches): with its q.k's lanes of 4 keys x
  // 4 bytes, Halide 14 computed the page per lane, or failed in FlattenNestedRamps
  // (docs/decisions/paged-kv.md).
  const Expr unit_shift = grouped ? in.page_shift - 4 : in.page_shift;  // kSlotGroup = 2^4
  f.one_page = quantised ? Expr(true) : in.table_pages == 1;
  const auto page_of = [&](const Expr& x) -> Expr {
    // (b clamped too: bounds inference takes both sides, and a pool may have fewer pages than
    // the call has sequences.)
    const Expr own = clamp(b, 0, in.pages - 1);
    if (quantised) return own;
    const Expr entry = clamp(x >> unit_shift, 0, in.table_pages - 1);
    return select(f.one_page, own, clamp(in.block_table(entry, b), 0, in.pages - 1));
  };
  const auto in_page = [&](const Expr& x) -> Expr {
    if (quantised) return x;
    return select(f.one_page, x, clamp(x & ((Expr(1) << unit_shift) - 1), 0, in.page_extent - 1));
  };
  const Expr dv_stored = spec.generic ? in.dv : Expr(spec.head_dim_v);  // V's elements a slot
  if (quantised) {
    f.k_stored(d, s, hk, b) = in.k(group_k_offset(dq, s % kSlotGroup, pack), in_page(slot_group),
                                   hk, page_of(slot_group));
    const Var e("e"), g("g");
    f.v_bytes = Func("v_bytes");
    const Expr v_group = clamp(g, 0, last_group);
    f.v_bytes(e, g, hk, b) = in.v(e, in_page(v_group), hk, page_of(v_group));
    // (The group as s / 4 / 4: for a vector of 4 keys from a multiple of 4, one scalar.)
    f.v_stored(d, s, hk, b) = f.v_bytes(group_v_offset(dv, Expr(s), dv_stored, pack),
                                        s / kI8DotBytes / (kSlotGroup / kI8DotBytes), hk, b);
  } else if (grouped) {
    f.k_stored(d, s, hk, b) = in.k(group_k_offset(dq, s % kSlotGroup, pack), in_page(slot_group),
                                   hk, page_of(slot_group));
    // V by (slot of the group, group), the group clamped to the last one filled (P.V below).
    const Var j("j"), g("g");
    f.v_rows = Func("v_rows");
    const Expr v_group = clamp(g, 0, last_slot / kSlotGroup);
    f.v_rows(d, j, g, hk, b) =
        in.v(group_v_offset(dv, Expr(j), dv_stored, pack), in_page(v_group), hk, page_of(v_group));
    f.v_stored(d, s, hk, b) = f.v_rows(d, s % kSlotGroup, s / kSlotGroup, hk, b);
  } else {
    f.k_stored(d, s, hk, b) = in.k(dq, in_page(slot), hk, page_of(slot));
    f.v_stored(d, s, hk, b) = in.v(dv, in_page(slot), hk, page_of(slot));
  }
  f.k = Func("k_slots");
  f.k(d, s, hk, b) = pad(in.dqk, cached_as_f32(f.k_stored(d, s, hk, b), spec));
  f.v = Func("v_slots");
  f.v(d, s, hk, b) = pad(in.dv, cached_as_f32(f.v_stored(d, s, hk, b), spec));
  // An i8 cache: K's scale multiplies the score (s = scale * k_scale * q.k_i8), V's the
  // probability of its key in probs.V (sum of p * v_scale * v_i8); the block sums take the
  // probabilities as they are.
  if (quantised) {
    // A group's scales are read whole (16 keys' in one load), the group clamped as K's. The V
    // scales of slots past the filled ones are 0 (stale ones may be NaN, and their keys' weights
    // are 0); their K scales are dropped with their scores.
    f.k_scale = Func("k_scale");
    f.k_scale(s, hk, b) = in.kv_scales(group_scale_offset(0, s % kSlotGroup), in_page(slot_group),
                                       hk, page_of(slot_group));
    f.v_scale = Func("v_scale");
    f.v_scale(s, hk, b) = select(s <= last_slot,
                                 in.kv_scales(group_scale_offset(1, s % kSlotGroup),
                                              in_page(slot_group), hk, page_of(slot_group)),
                                 0.0f);
  }

  // Slot s holds the newest position p < kv_len with p = s (mod capacity); with kv_len <=
  // capacity that is s itself for s < kv_len, and nothing (negative) beyond. Written with a
  // select instead of a division by the capacity per slot, so it vectorises.
  const Expr newest = (len - 1) % in.capacity;  // Euclidean: the slot of position len - 1
  f.position = Func("position");
  f.position(s, b) = (len - 1 - newest) + s - select(s > newest, in.capacity, 0);

  // Position of row r's query, or -1 for rows past q_len (they attend nothing). A Func of its
  // own, so that the division by the group is not evaluated per key.
  const Expr q_len = in.q_len(b);
  f.row_position = Func("row_position");
  f.row_position(r, b) = select(query < q_len, len - q_len + query, -1);
  const Expr p = f.position(s, b), query_position = f.row_position(r, b);
  Expr attend = s < in.slots && p >= 0 && p <= query_position;
  attend = attend && (in.window < 0 || p >= query_position - in.window);
  // (A grouped cache's slots past the capacity, in its last group, hold no position.)
  if (grouped) attend = attend && s < in.capacity;

  f.rd = RDom(0, spec.head_dim_qk, "rd");
  f.dot = Func("dot");
  Expr dot;
  if (spec.int8_dot != Int8Dot::kNone) {
    // Each query row quantised as the cache quantises a K row (runtime/src/convert.h,
    // quantise_i8): scale = max|q| / 127, q_i8 = round(q / scale) in [-127, 127]; a row of
    // zeros has scale 0, one holding a NaN or an infinity a NaN scale (every score of the row
    // NaN, as in f32). q.k = q_scale * (sum of q_i8 * k_i8), summed exactly in integers: i8 x
    // i8 products (sdot) as they are; for u8 x i8 products (vpdpbusd) K's i8 elements become u8
    // by an offset of 128 (flipping the sign bit), q.k = q_scale * (sum of q_i8 * (k_i8 + 128) -
    // 128 * sum of q_i8). Four products per 32-bit lane either way. max|q| is taken on the
    // elements' bits (sign cleared): integers order as the floats they hold, and infinities and
    // NaNs come out above every finite value (Halide's float comparisons assume neither). Both
    // divisions are strict floats: without, a q element now and then rounded the other way from
    // the runtime's quotient (DecodeKernel.QuantisedQueryRows, about 1 run in 60; which rewrite
    // of the division did it was not established).
    f.rq = RDom(0, spec.head_dim_qk, "rq");
    const Expr magnitude = reinterpret(UInt(32), f.q(f.rq, r, hk, b)) & Expr(uint32_t{0x7fffffff});
    f.q_amax = Func("q_amax");  // the bits of max|q|
    f.q_amax(r, hk, b) = Expr(uint32_t{0});
    f.q_amax(r, hk, b) = Halide::max(f.q_amax(r, hk, b), magnitude);
    const Expr amax_bits = f.q_amax(r, hk, b);
    const Expr finite = amax_bits < Expr(uint32_t{0x7f800000});
    const Expr amax = reinterpret(Float(32), amax_bits);
    f.q_scale = Func("q_scale");
    f.q_scale(r, hk, b) = select(finite, strict_float(amax / 127.0f),
                                 reinterpret(Float(32), Expr(uint32_t{0x7fc00000})));
    f.q_i8 = Func("q_i8");
    const Expr scale = f.q_scale(r, hk, b);
    f.q_i8(d, r, hk, b) = select(
        finite && amax_bits > Expr(uint32_t{0}),
        cast<int8_t>(clamp(Halide::round(strict_float(f.q(d, r, hk, b) / scale)), -127.0f, 127.0f)),
        cast<int8_t>(0));
    f.dot(s, r, hk, b) = 0;
    if (spec.int8_dot == Int8Dot::kI8ByI8) {
      f.dot(s, r, hk, b) +=
          cast<int32_t>(f.k_stored(f.rd, s, hk, b)) * cast<int32_t>(f.q_i8(f.rd, r, hk, b));
      dot = cast<float>(f.dot(s, r, hk, b)) * scale;
    } else {
      f.q_sum = Func("q_sum");
      f.q_sum(r, hk, b) = 0;
      f.q_sum(r, hk, b) += cast<int32_t>(f.q_i8(f.rq, r, hk, b));
      const Expr k_u8 = reinterpret(UInt(8), f.k_stored(f.rd, s, hk, b)) ^ cast<uint8_t>(0x80);
      f.dot(s, r, hk, b) += cast<int32_t>(k_u8) * cast<int32_t>(f.q_i8(f.rd, r, hk, b));
      dot = cast<float>(f.dot(s, r, hk, b) - 128 * f.q_sum(r, hk, b)) * scale;
    }
  } else if (quantised) {
    // q.k over an i8 cache in f32: q's row read through q_tiled, its elements 4 at a time
    // (those sharing a 32-bit lane of K's group layout) repeated for 4 adjacent keys, the same
    // values (inline, it is q itself), so that a schedule taking 4 keys x 4 elements of the
    // head dim in 16 lanes can stage q once per task as the vectors it multiplies.
    f.q_tiled = Func("q_tiled");
    const Var e("e"), dg("dg");
    f.q_tiled(e, dg, r, hk, b) = f.q(dg * kI8DotBytes + e % kI8DotBytes, r, hk, b);
    const Expr e_of = f.rd % kI8DotBytes + (s % kI8DotBytes) * kI8DotBytes;
    f.dot(s, r, hk, b) = 0.0f;
    f.dot(s, r, hk, b) += f.q_tiled(e_of, f.rd / kI8DotBytes, r, hk, b) * f.k(f.rd, s, hk, b);
    dot = f.dot(s, r, hk, b);
  } else {
    f.dot(s, r, hk, b) = 0.0f;
    f.dot(s, r, hk, b) += f.q(f.rd, r, hk, b) * f.k(f.rd, s, hk, b);
    dot = f.dot(s, r, hk, b);
  }
  f.scores = Func("scores");
  const Expr score_scale = quantised ? in.scale * f.k_scale(s, hk, b) : in.scale;
  Expr score = dot * score_scale;
  // The variant's modifier (generator/modifier.h) at query head hk * g + r % g, row `query` at
  // position len - q_len + query, and the key's position: a score modifier on the scaled score,
  // a mask modifier as one more mask. The modifier's Skv is the capacity (DecodeInputs); a key
  // position is clamped into it only for a modifier with tensors along Skv (the runtime refuses
  // those over a ring, whose positions pass the capacity), so that distances stay exact.
  const Expr offset = len - q_len;
  const Expr modifier_key = modifier_reads_keys(in.modifier) ? clamp(p, 0, in.capacity - 1) : p;
  if (in.modifier != nullptr && (in.modifier->score || in.modifier->mask)) {
    const ModifierIndex at{b,
                           hk * group + r % group,
                           clamp(query, 0, in.seq_q - 1),
                           modifier_key,
                           offset + query,
                           in.heads_q,
                           in.seq_q,
                           in.capacity,
                           offset,
                           query};
    const ModifierParams params = modifier_params(in, f);
    if (in.modifier->score) score = in.modifier->score(score, at, params);
    if (in.modifier->mask) attend = attend && in.modifier->mask(at, params);
  }
  f.scores(s, r, hk, b) = select(attend, score, kMaskedScore);

  // Per key block, as in the key-block form of attention (generator/online_softmax.h): its
  // max, exps relative to it, their sum and their product with V. Blocks start `block` keys
  // apart; where the slots the call reads are fewer than a block (whole_blocks false), the one
  // block takes only those, rounded up to whole groups of 16 (a multiple of every target's
  // vector, so that the schedules' splits of the keys stay exact): a call over 16 cached
  // positions computes 16 keys, not 128. The CPU schedules specialise on whole_blocks, so that
  // longer calls keep a constant block. A grouped cache's blocks, and a block that is not whole
  // groups, are always computed whole: a grouped cache's short block came out wrong past one
  // group (docs/decisions/decode-cpu-schedule.md, "Short calls").
  if (!grouped && block % kSlotGroup == 0) {
    f.whole_blocks = in.slots >= block;
    f.block_keys =
        select(f.whole_blocks, block, (in.slots + kSlotGroup - 1) / kSlotGroup * kSlotGroup);
  } else {
    f.block_keys = block;
  }
  f.v_finite = in.v_finite;
  f.rk = RDom(0, f.block_keys, "rk");
  const KeyBlockStats stats =
      define_key_block_stats(f.scores, f.v, block, f.rk, {d, s, kb, r, hk, b}, in.v_finite, 0,
                             f.v_scale, "", spec.native_exp);
  f.block_max = stats.block_max;
  f.probs = stats.probs;
  f.probs_scaled = stats.probs_scaled;
  f.block_sum = stats.block_sum;
  f.block_pv = stats.block_pv;
  if (quantised && block % kSlotGroup == 0) {
    define_i8_pv(f, block, in.v_finite, dv_stored, spec.generic, spec.int8_dot == Int8Dot::kU8ByI8);
  }
  // An f16 or bf16 cache: P.V with the block's keys taken as (group of the block, slot of the
  // group), so that a key's V, a row of its group's V part, is indexed without a division of the
  // key: bounds inference then finds one key's V as the box of a schedule's prefetch of it (of
  // `s % 16` it takes the whole group). The slots of the last filled group past the filled ones
  // are read as well: they hold zeros or what earlier appends left, finite where v_finite holds
  // (the cache tracks every append), and pv_term masks them by their weights, 0, otherwise.
  if (spec.pv_by_group && grouped && !quantised && block % kSlotGroup == 0) {
    f.rgroup = RDom(0, f.block_keys / kSlotGroup, 0, kSlotGroup, "rgroup");
    const Expr key = kb * block + f.rgroup.x * kSlotGroup + f.rgroup.y;
    const Expr value = pad(
        in.dv, cached_as_f32(f.v_rows(d, f.rgroup.y, kb * (block / kSlotGroup) + f.rgroup.x, hk, b),
                             spec));
    f.block_pv = Func("block_pv_grouped");
    f.block_pv(d, kb, r, hk, b) = 0.0f;
    f.block_pv(d, kb, r, hk, b) += pv_term(f.probs(key, r, hk, b), value, in.v_finite);
  }

  // Split sp folds its blocks in order into a running (acc, max, sum) with attention's online
  // merge (one exp per element and block). Blocks holding no key any
  // row may attend are skipped: past the filled slots of the sequence, and, in a plain
  // (non-ring) cache with a window, before the window of the first query.
  const Expr blocks = (in.slots + block - 1) / block;
  f.blocks_per_split = Halide::max(1, (in.split_keys + block - 1) / block);
  f.splits = (blocks + f.blocks_per_split - 1) / f.blocks_per_split;
  // The test is a Func, so that bounds inference cannot solve the RDom predicate for sp and
  // widen the per-block stages to many blocks.
  const Expr first = kb * block;
  Expr visit =
      first < Halide::min(len, in.slots) &&
      (in.window < 0 || len > in.capacity || first + (block - 1) >= len - q_len - in.window);
  f.visit = Func("visit");
  const bool mask_modifier = in.modifier != nullptr && in.modifier->mask;
  if (mask_modifier) {
    // The modifier's block test over the kv head's g query heads and the call's rows, at the
    // positions the block's slots hold where those are the slots themselves (no ring lap yet).
    ModifierBlock mb;
    mb.b = b;
    mb.h = hk * group;
    mb.heads = group;
    mb.query_tile_index = 0;
    mb.query_tile = Halide::max(in.seq_q, 1);
    mb.key_block_index = kb;
    mb.key_block = block;
    mb.offset = offset;
    mb.heads_q = in.heads_q;
    mb.seq_q = in.seq_q;
    mb.seq_kv = in.capacity;
    visit = visit &&
            (len > in.capacity || modifier_block_visit(*in.modifier, mb, modifier_params(in, f)));
    f.visit(kb, hk, b) = visit;
  } else {
    f.visit(kb, b) = visit;
  }
  f.rb = RDom(0, f.blocks_per_split, "rb");
  const Expr visited_block = sp * f.blocks_per_split + f.rb;
  f.rb.where(mask_modifier ? f.visit(visited_block, hk, b) : f.visit(visited_block, b));

  f.state = Func("split_state");
  f.state(d, r, sp, hk, b) = initial_softmax_state();
  const Expr blk = sp * f.blocks_per_split + f.rb;
  const SoftmaxState merged = online_merge(
      {f.state(d, r, sp, hk, b)[0], f.state(d, r, sp, hk, b)[1], f.state(d, r, sp, hk, b)[2]},
      {f.block_pv(d, blk, r, hk, b), f.block_max(blk, r, hk, b), f.block_sum(blk, r, hk, b)},
      spec.native_exp);
  f.state(d, r, sp, hk, b) = Tuple(merged.acc, merged.max, merged.sum);

  // Log-sum-exp merge of the splits: each partial weighs exp(its max - the overall max).
  // A modifier's sink logit z_h joins the merge once (not once per split): the max starts from
  // it, and the sum from its term exp(z_h - max) (sink_softmax_state).
  f.rs = RDom(0, f.splits, "rs");
  Tuple sink = initial_softmax_state();
  if (in.modifier != nullptr && in.modifier->sink) {
    sink = sink_softmax_state(in.modifier->sink(hk * group + r % group, modifier_params(in, f)));
  }
  f.max = Func("split_max");
  f.max(r, hk, b) = sink[1];
  f.max(r, hk, b) = Halide::max(f.max(r, hk, b), f.state(0, r, f.rs, hk, b)[1]);
  const Expr split_max = f.state(0, r, sp, hk, b)[1];
  f.weight = Func("split_weight");
  f.weight(sp, r, hk, b) =
      select(is_masked(split_max), 0.0f, softmax_exp(split_max - f.max(r, hk, b), spec.native_exp));
  f.sum = Func("split_sum");
  if (in.modifier != nullptr && in.modifier->sink) {
    const Expr sink_max = sink[1];
    f.sum(r, hk, b) =
        select(is_masked(sink_max), 0.0f, softmax_exp(sink_max - f.max(r, hk, b), spec.native_exp));
  } else {
    f.sum(r, hk, b) = 0.0f;
  }
  f.sum(r, hk, b) += f.state(0, r, f.rs, hk, b)[2] * f.weight(f.rs, r, hk, b);
  f.acc = Func("split_acc");
  f.acc(d, r, hk, b) = 0.0f;
  f.acc(d, r, hk, b) += f.state(d, r, f.rs, hk, b)[0] * f.weight(f.rs, r, hk, b);

  const Expr row = h % group + group * i, head = h / group;
  f.out = Func("decode");
  f.out(d, h, i, b) = normalise(f.acc(d, row, head, b), f.sum(row, head, b));
  return f;
}

}  // namespace attngen
