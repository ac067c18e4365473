// Builders of attngen_attention (with its plan), attngen_attention_varlen, attngen_linear and
// attngen_mha calls, and of the sparse patterns and ropes they take (tests/fuzz/calls.h).
#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "attngen/attngen.h"
#include "tests/fuzz/calls.h"
#include "tests/fuzz/oracle.h"
#include "tests/reference.h"
#include "tests/tensor.h"

namespace attngen::fuzz {

using attngen::test::RefAttention;
using attngen::test::Tolerance;

// A pattern for a call of Sq queries and Skv keys; its layout tensor (block-sparse) in layout_t.
PatternSpec make_pattern(Input& in, int64_t sq, int64_t skv, GuardTensor& layout_t, Fill& fill) {
  PatternSpec s;
  attngen_pattern& p = s.p;
  s.kind = enum_value(in, 5);
  put_enum(p.kind, s.kind);
  p.window_left = in.chance(40) ? -1 : small_param(in, 40);
  p.window_right = in.chance(40) ? -1 : small_param(in, 40);
  p.stride = small_param(in, 20);
  p.block = small_param(in, 20);
  p.local = small_param(in, 20);
  p.global_tokens = small_param(in, 10);
  if (s.kind == ATTNGEN_PATTERN_BLOCK_SPARSE || in.chance(10)) {
    if (in.chance(10)) return s;  // no layout
    const int64_t bs = p.block > 0 ? p.block : 1;
    int64_t rows = sq > 0 ? sat_add(sq, bs - 1) / bs : 1,
            cols = skv > 0 ? sat_add(skv, bs - 1) / bs : 1;
    if (in.chance(20)) rows = dim(in, 4);
    if (in.chance(20)) cols = dim(in, 4);
    std::vector<int64_t> shape{rows, cols};
    if (in.chance(8)) shape.push_back(1);
    if (in.chance(8)) shape.pop_back();
    layout_t.make(dtype_near(in, ATTNGEN_BOOL), layout_for(in, shape), 0, in.chance(4));
    layout_t.poison();
    const uint8_t density = in.u8();
    layout_t.for_each(
        [&](int64_t, int64_t off) { layout_t.set(off, (fill.rng() & 255) < density ? 1 : 0); });
    p.layout = in.chance(4) ? nullptr : &layout_t.t;
    s.has_layout = true;
    if (layout_t.t.rank == 2 && layout_t.small()) {
      s.rows = rows;
      s.cols = cols;
      for (double x : layout_t.dense()) s.layout.push_back(x != 0);
    }
  }
  return s;
}

// ---------------------------------------------------------------------------------------------
// Rotary embeddings

void make_rope(Input& in, int64_t dqk, RopeSpec& s, Fill& fill) {
  s.r = attngen_rope_default();
  if (in.chance(3)) s.r.struct_size = 0;  // the ABI rule: refused
  // rotary_dim: even, 0 .. dqk mostly (0 is dqk, itself invalid for an odd head dim); else odd,
  // past the head dim, negative or huge.
  const uint8_t b = in.u8();
  const int64_t half_max = dqk > 0 && dqk < 4096 ? dqk / 2 : 4;
  if (b < 230) {
    s.r.rotary_dim = 2 * (b % (half_max + 1));
  } else {
    const int64_t bad[] = {1,  3,         sat_add(dqk, -1), sat_add(dqk, 1), sat_add(dqk, 2),
                           -2, INT64_MIN, INT64_MAX};
    s.r.rotary_dim = in.pick(bad);
  }
  s.pairs = enum_value(in, 2);
  put_enum(s.r.pairs, s.pairs);
  s.dim = s.r.rotary_dim == 0 ? dqk : s.r.rotary_dim;
  // inv_freq: F32 [dim / 2] mostly; else another size, rank or dtype, a layout of its own, NULL.
  int64_t n = s.dim >= 2 && s.dim <= 8192 ? s.dim / 2 : dim(in, 8);
  if (in.chance(8)) n = dim(in, 8);
  std::vector<int64_t> shape{n};
  if (in.chance(4)) shape.push_back(1);
  const int d = dtype_near(in, ATTNGEN_F32);
  s.freq.make(d, layout_for(in, shape), misalign(in, d), in.chance(3));
  s.freq.poison();
  // Plain RoPE's frequencies (attngen_rope_inv_freq(), checked against base^(-2i / dim) in
  // double) or random ones in [-1, 1]: |f| <= 1 keeps t f exact enough in double at any int32
  // position for the reference's angles to be the runtime's (docs/semantics.md).
  const uint8_t mode = in.u8();
  static constexpr double kBases[] = {10000.0, 500000.0, 1e6, 2.0, 100.0};
  const double base = in.pick(kBases);
  std::vector<float> plain;
  if (mode < 128 && s.freq.small() && s.dim >= 2 && s.dim % 2 == 0 && s.freq.logical() == n &&
      n == s.dim / 2) {
    plain.resize(static_cast<size_t>(n));
    if (note(attngen_rope_inv_freq(base, s.dim, plain.data())) != ATTNGEN_OK) {
      fail("attngen_rope_inv_freq(%g, %" PRId64 ") failed", base, s.dim);
    }
    for (int64_t i = 0; i < n; ++i) {
      const double want =
          std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(s.dim));
      if (std::abs(plain[i] - want) > 1e-6 * want) {
        fail("attngen_rope_inv_freq(%g, %" PRId64 ")[%" PRId64 "] is %g, expected %g", base, s.dim,
             i, plain[i], want);
      }
    }
  }
  s.freq.for_each([&](int64_t e, int64_t off) {
    s.freq.set(off, plain.empty() ? static_cast<double>(fill.rng() % 2049) / 1024.0 - 1.0
                                  : plain[static_cast<size_t>(e)]);
  });
  if (in.chance(8) && s.freq.small() && s.freq.logical() > 0) {  // one non-finite frequency
    static constexpr double kBad[] = {std::numeric_limits<double>::quiet_NaN(),
                                      std::numeric_limits<double>::infinity(),
                                      -std::numeric_limits<double>::infinity()};
    const int64_t at = static_cast<int64_t>(fill.rng() % static_cast<uint64_t>(s.freq.logical()));
    s.freq.for_each([&](int64_t e, int64_t off) {
      if (e == at) s.freq.set(off, in.pick(kBad));
    });
  }
  s.inv_freq = s.freq.dense();  // as stored (elements may share memory)
  s.r.inv_freq = in.chance(4) ? nullptr : &s.freq.t;
}

void check_rope_accepted(const RopeSpec& s, int64_t dqk) {
  if (s.r.struct_size != sizeof(attngen_rope))
    fail("a rope of struct_size %zu accepted", s.r.struct_size);
  if (s.pairs != ATTNGEN_ROPE_HALF && s.pairs != ATTNGEN_ROPE_INTERLEAVED) {
    fail("rope pairs %d accepted", s.pairs);
  }
  if (s.dim < 2 || s.dim > dqk || s.dim % 2 != 0) {
    fail("rope rotary_dim %" PRId64 " accepted for head dim %" PRId64, s.r.rotary_dim, dqk);
  }
  if (s.r.inv_freq == nullptr) fail("a rope without inv_freq accepted");
  check_accepted({&s.freq});
  if (s.freq.dtype() != ATTNGEN_F32 || !has_shape(s.freq, {s.dim / 2})) {
    fail("rope inv_freq of dtype %d and shape %s accepted for rotary_dim %" PRId64, s.freq.dtype(),
         shape_of(s.freq).c_str(), s.dim);
  }
  for (double f : s.inv_freq) {
    if (!std::isfinite(f)) fail("a rope with a non-finite frequency accepted");
  }
}

std::vector<double> rope_dense(const RopeSpec& s, const std::vector<double>& x, int64_t B,
                               int64_t S, int64_t H, int64_t D,
                               const std::vector<int64_t>& positions) {
  const Dense d = dense_from(x, {B, S, H, D});
  return attngen::test::reference_rope(d.view, s.dim, s.pairs == ATTNGEN_ROPE_INTERLEAVED,
                                       s.inv_freq, positions);
}

// ---------------------------------------------------------------------------------------------
// attngen_attention

namespace {

// The mask tensor of an attention call as drawn: its kind, shape and values.
struct MaskInfo {
  bool present = false, is_bool = false;
  std::vector<int64_t> shape;  // aligned right against [B, Hq, Sq, Skv]
  std::vector<double> values;  // dense
};

// An I32 [B, S] positions tensor (q_positions, k_positions), sometimes of another shape or dtype:
// any int32 values, mostly consecutive from a base (0, small, near the int32 limits), else
// unordered and repeated, or random. Its values as stored (dense) in `values`.
void make_positions(Input& in, GuardTensor& g, int64_t B, int64_t S, std::vector<int64_t>& values,
                    Fill& fill) {
  std::vector<int64_t> shape{B, S};
  if (in.chance(8)) {
    const size_t d = in.u8() % 2;
    shape[d] = sat_add(shape[d], 1);
  }
  if (in.chance(4)) shape.pop_back();
  const int d = dtype_near(in, ATTNGEN_I32);
  g.make(d, layout_for(in, shape), misalign(in, d), in.chance(3));
  g.poison();
  const uint8_t mode = in.u8();
  static constexpr int64_t kBases[] = {0, 1, 7, 1000, 1 << 20, INT32_MAX - 40, INT32_MIN, -5};
  const int64_t base = in.pick(kBases);
  g.for_each([&](int64_t e, int64_t off) {
    int64_t x = static_cast<int32_t>(fill.rng());
    if (mode < 160) x = base + (S > 0 ? e % S : 0);
    if (mode >= 160 && mode < 220) x = base + static_cast<int64_t>(fill.rng() % 64);
    g.set(off, static_cast<double>(as_i32(static_cast<double>(x))));
  });
  if (g.small()) {
    for (double x : g.dense()) values.push_back(static_cast<int64_t>(as_i32(x)));
  }
}

}  // namespace

void fuzz_attention(Input& in, Fill& fill) {
  const int64_t B = dim(in, 3);
  int64_t Sq = dim(in, 20), Skv = dim(in, 20);
  const int64_t Hkv = dim(in, 3);
  int64_t Hq = Hkv > 0 && Hkv < 8 ? Hkv * (1 + in.u8() % 3) : dim(in, 4);
  if (in.chance(8)) Hq = dim(in, 6);
  const int64_t Dqk = head_dim(in), Dv = !in.chance(96) ? Dqk : head_dim(in);
  if ((Dqk > 130 || Dv > 130) && Sq > 0 && Skv > 0) {  // keep the reference cheap
    Sq = std::min<int64_t>(Sq, 6);
    Skv = std::min<int64_t>(Skv, 6);
  }
  const int dt = in.u8() % 3;  // F32, F16, BF16
  const int out_dt = in.chance(60) ? ATTNGEN_F32 : dt;

  GuardTensor q, k, v, out, kv_len, mask, layout, weights, lse;
  auto shape4 = [&](int64_t a, int64_t b, int64_t c, int64_t d) {
    std::vector<int64_t> s{a, b, c, d};
    // One change or none: a dimension dropped, or one of size 1 added (both would be valid).
    if (in.chance(4)) {
      s.pop_back();
    } else if (in.chance(3)) {
      s.push_back(1);
    }
    return s;
  };
  const int qd = dtype_near(in, dt), kd = dtype_near(in, dt), vd = dtype_near(in, dt);
  const int od = dtype_near(in, out_dt);
  q.make(qd, layout_for(in, shape4(B, Sq, Hq, Dqk)), misalign(in, qd), in.chance(3));
  k.make(kd, layout_for(in, shape4(B, Skv, Hkv, Dqk)), misalign(in, kd), in.chance(3));
  v.make(vd, layout_for(in, shape4(B, Skv, Hkv, Dv)), misalign(in, vd), in.chance(3));
  out.make(od, layout_for(in, shape4(B, Sq, Hq, Dv)), misalign(in, od), in.chance(3));
  fill_input(q, fill);
  fill_input(k, fill);
  fill_input(v, fill);

  attngen_attention_options o = attngen_attention_options_default();
  bool wild = false;
  o.scale = scale_value(in, Dqk, wild);
  if (in.chance(50)) {
    const uint8_t b = in.u8();
    static constexpr float kBadCaps[] = {-1.0f, std::numeric_limits<float>::quiet_NaN(),
                                         std::numeric_limits<float>::infinity(), 1e-30f};
    o.softcap = b < 220 ? 0.5f + b / 8.0f : in.pick(kBadCaps);
    if (b >= 220) wild = true;
  }
  const int mask_kind = enum_value(in, 2), alignment = enum_value(in, 2);
  put_enum(o.mask, mask_kind);
  put_enum(o.alignment, alignment);

  // Key padding.
  std::vector<int32_t> lens;
  if (in.chance(70)) {
    std::vector<int64_t> s{B};
    if (in.chance(6)) s = {B, 1};
    const int d = dtype_near(in, ATTNGEN_I32);
    kv_len.make(d, layout_for(in, s), misalign(in, d), in.chance(3));
    kv_len.poison();
    kv_len.for_each([&](int64_t, int64_t off) {
      const uint8_t b = in.u8();
      int64_t x = Skv > 0 ? b % sat_add(Skv, 1) : 0;
      if (b >= 248) {
        const int64_t bad[] = {-1, sat_add(Skv, 1), INT32_MIN, INT32_MAX};
        x = in.pick(bad);
      }
      lens.push_back(as_i32(kv_len.set(off, static_cast<double>(x))));
    });
    // What memory holds (elements may share it: zero or overlapping strides).
    if (kv_len.small()) {
      lens.clear();
      for (double x : kv_len.dense()) lens.push_back(as_i32(x));
    }
    if (!in.chance(3)) o.kv_len = &kv_len.t;
  }

  // Mask tensor.
  MaskInfo mi;
  if (in.chance(70)) {
    mi.present = true;
    mi.is_bool = in.chance(128);
    const int rank = 1 + in.u8() % 4;
    const int64_t full[4] = {B, Hq, Sq, Skv};
    for (int d = 4 - rank; d < 4; ++d) {
      int64_t s = in.chance(100) ? 1 : full[d];
      if (in.chance(6)) s = dim(in, 5);
      mi.shape.push_back(s);
    }
    const int md = dtype_near(in, mi.is_bool ? ATTNGEN_BOOL : ATTNGEN_F32);
    // The runtime reads a mask by its dtype: the values and the reference follow the dtype drawn
    // (found by a 30-minute run: an additive mask drawn as BOOL was modelled as additive).
    if (md == ATTNGEN_BOOL || md == ATTNGEN_F32) mi.is_bool = md == ATTNGEN_BOOL;
    mask.make(md, layout_for(in, mi.shape), misalign(in, md), in.chance(3));
    mask.poison();
    const uint8_t density = in.u8();
    mask.for_each([&](int64_t, int64_t off) {
      const uint64_t r = fill.rng();
      if (mi.is_bool) {
        mi.values.push_back(mask.set(off, (r & 255) < density ? 1 : 0));
      } else {
        static constexpr double kAdd[] = {0.0,   -1e30,   -std::numeric_limits<double>::infinity(),
                                          -1e29, -3.4e38, 0.5};
        const double x = (r & 255) < density ? (static_cast<double>((r >> 8) & 1023) / 256.0 - 3.0)
                                             : kAdd[(r >> 20) % 6];
        mi.values.push_back(mask.set(off, x));
      }
    });
    if (mask.small()) mi.values = mask.dense();  // elements may share memory (zero strides)
    o.mask_tensor = &mask.t;
  }

  o.kernel = kernel_name(in);
  PatternSpec ps;
  if (in.chance(90)) {
    ps = make_pattern(in, Sq, Skv, layout, fill);
    o.pattern = ps.p;
  }
  if (in.chance(40)) {
    std::vector<int64_t> s{B, Hq, Sq, Skv};
    if (in.chance(6)) {
      const size_t d = in.u8() % 4;
      s[d] = sat_add(s[d], 1);
    }
    weights.make(dtype_near(in, ATTNGEN_F32), layout_for(in, s), 0, in.chance(3));
    o.weights = in.chance(4) ? nullptr : &weights.t;
  }
  if (in.chance(40)) {
    std::vector<int64_t> s{B, Hq, Sq};
    if (in.chance(6)) {
      const size_t d = in.u8() % 3;
      s[d] = sat_add(s[d], 1);
    }
    lse.make(dtype_near(in, ATTNGEN_F32), layout_for(in, s), 0, in.chance(3));
    o.lse = in.chance(4) ? nullptr : &lse.t;
  }

  // Aliasing: the output placed on an input.
  attngen_tensor out_t = out.t;
  const bool aliased = in.chance(5) && q.mapped();
  if (aliased) out_t.data = in.chance(128) ? q.t.data : v.t.data;

  // Non-finite mode: keys beyond kv_len (padding) hold NaN and infinities too; no row may see them.
  if (g_nonfinite && o.kv_len != nullptr && k.small() && v.small() && k.t.rank == 4 &&
      v.t.rank == 4 && lens.size() == static_cast<size_t>(std::max<int64_t>(B, 0))) {
    for (GuardTensor* g : {&k, &v}) {
      g->for_each([&](int64_t e, int64_t off) {
        const int64_t per_b = g->logical() / B, per_j = per_b / Skv;
        const int64_t b = e / per_b, j = (e % per_b) / per_j;
        if (j >= lens[static_cast<size_t>(b)] && (fill.rng() & 1)) {
          g->set(off, std::numeric_limits<double>::quiet_NaN());
        }
      });
    }
  }

  const bool null_q = in.chance(3), null_out = in.chance(3), null_opts = in.chance(8);

  // Rotary embeddings, drawn after the rest (the saved inputs decode as before): a rope, and
  // positions, also without a rope (refused).
  RopeSpec rope;
  GuardTensor q_pos, k_pos;
  std::vector<int64_t> q_pos_v, k_pos_v;
  if (in.chance(60)) {
    make_rope(in, Dqk, rope, fill);
    o.rope = &rope.r;
  }
  const int pos_chance = o.rope != nullptr ? 100 : 12;
  if (in.chance(pos_chance)) {
    make_positions(in, q_pos, B, Sq, q_pos_v, fill);
    o.q_positions = &q_pos.t;
  }
  if (in.chance(pos_chance)) {
    make_positions(in, k_pos, B, Skv, k_pos_v, fill);
    o.k_positions = &k_pos.t;
  }

  g_call = "attention" +
           dims_string({{"B", B},
                        {"Sq", Sq},
                        {"Skv", Skv},
                        {"Hq", Hq},
                        {"Hkv", Hkv},
                        {"Dqk", Dqk},
                        {"Dv", Dv},
                        {"q", qd},
                        {"k", kd},
                        {"v", vd},
                        {"out", od},
                        {"mask", mask_kind},
                        {"align", alignment},
                        {"pattern", ps.kind},
                        {"kv_len", o.kv_len != nullptr},
                        {"mask_tensor", mi.present},
                        {"weights", o.weights != nullptr},
                        {"lse", o.lse != nullptr},
                        {"rope_dim", o.rope ? rope.r.rotary_dim : -1},
                        {"rope_pairs", o.rope ? rope.pairs : -1},
                        {"q_positions", o.q_positions != nullptr},
                        {"k_positions", o.k_positions != nullptr}}) +
           " scale=" + std::to_string(o.scale) + " softcap=" + std::to_string(o.softcap) +
           " kernel=" + (o.kernel ? o.kernel : "-");

  Call c;
  c.inputs = {&q, &k, &v};
  if (o.kv_len) c.inputs.push_back(&kv_len);
  if (o.mask_tensor) c.inputs.push_back(&mask);
  if (ps.has_layout) c.inputs.push_back(&layout);
  if (!aliased) c.outputs.push_back(&out);
  if (o.weights) c.outputs.push_back(&weights);
  if (o.lse) c.outputs.push_back(&lse);
  if (o.rope) c.inputs.push_back(&rope.freq);
  if (o.q_positions) c.inputs.push_back(&q_pos);
  if (o.k_positions) c.inputs.push_back(&k_pos);
  c.before();
  if (aliased) c.inputs.clear();  // an accepted alias writes an input; reported below
  const attngen_status s = note(attngen_attention(
      null_q ? nullptr : &q.t, &k.t, &v.t, null_out ? nullptr : &out_t, null_opts ? nullptr : &o));
  if (!null_opts && o.rope) note_kind("attention with a rope", s);
  if (!null_opts && !o.rope && (o.q_positions || o.k_positions)) {
    note_kind("attention with positions, no rope", s);
  }
  c.after(s);
  check_plan(c, s, null_q ? nullptr : &q.t, &k.t, &v.t, null_out ? nullptr : &out_t,
             null_opts ? nullptr : &o);
  if (s != ATTNGEN_OK) return;

  // A successful call: the arguments were valid. Check what the contract says of them.
  if (aliased) fail("an output aliasing an input was accepted");
  if (null_opts) {  // the defaults were used: none of the optional tensors was passed
    o = attngen_attention_options_default();
    wild = false;
    ps = PatternSpec{};
    mi = MaskInfo{};
  }
  check_accepted({&q, &k, &v, &out});
  if (!has_shape(q, {B, Sq, Hq, Dqk}) || !has_shape(k, {B, Skv, Hkv, Dqk}) ||
      !has_shape(v, {B, Skv, Hkv, Dv}) || !has_shape(out, {B, Sq, Hq, Dv})) {
    fail("attention accepted q %s, k %s, v %s, out %s", shape_of(q).c_str(), shape_of(k).c_str(),
         shape_of(v).c_str(), shape_of(out).c_str());
  }
  if (o.weights && !has_shape(weights, {B, Hq, Sq, Skv})) {
    fail("attention accepted weights %s", shape_of(weights).c_str());
  }
  if (o.lse && !has_shape(lse, {B, Hq, Sq}))
    fail("attention accepted lse %s", shape_of(lse).c_str());
  if (o.weights) check_accepted({&weights});
  if (o.lse) check_accepted({&lse});
  if (!o.rope && (o.q_positions || o.k_positions)) fail("positions without a rope accepted");
  if (o.rope) check_rope_accepted(rope, Dqk);
  if (o.q_positions) check_accepted({&q_pos});
  if (o.k_positions) check_accepted({&k_pos});
  if ((o.q_positions && (q_pos.dtype() != ATTNGEN_I32 || !has_shape(q_pos, {B, Sq}))) ||
      (o.k_positions && (k_pos.dtype() != ATTNGEN_I32 || !has_shape(k_pos, {B, Skv})))) {
    fail("attention accepted q_positions %s, k_positions %s", shape_of(q_pos).c_str(),
         shape_of(k_pos).c_str());
  }
  if (Dqk <= 0 || Dv <= 0 || Hkv <= 0 || Hq % Hkv != 0) fail("invalid head sizes accepted");
  if (!(std::isfinite(o.scale) && std::isfinite(o.softcap) && o.softcap >= 0)) {
    fail("a non-finite scale or a bad soft cap accepted");
  }

  g_call += describe("q", q) + describe("k", k) + describe("v", v) + describe("out", out);
  if (o.kv_len) g_call += describe("kv_len", kv_len);
  if (o.rope) g_call += describe("inv_freq", rope.freq);
  if (o.q_positions) g_call += describe("q_positions", q_pos);
  if (o.k_positions) g_call += describe("k_positions", k_pos);
  if (mi.present) g_call += describe(mi.is_bool ? "bool_mask" : "add_mask", mask);
  RefAttention r;
  r.scale = o.scale;
  r.softcap = o.softcap;
  r.causal = !null_opts && mask_kind == ATTNGEN_MASK_CAUSAL;
  r.bottom_right = null_opts || alignment == ATTNGEN_ALIGN_BOTTOM_RIGHT;
  if (o.kv_len) {
    for (int32_t x : lens) {
      if (x < 0 || x > Skv) fail("kv_len value %d outside [0, %" PRId64 "] accepted", x, Skv);
    }
    r.kv_len = lens;
  }
  if (mi.present) {
    const auto index = [&](int64_t b, int64_t h, int64_t i, int64_t j) {
      const int64_t full[4] = {b, h, i, j};
      const size_t rank = mi.shape.size();
      int64_t e = 0;
      for (size_t d = 0; d < rank; ++d) {
        const int64_t x = mi.shape[d] == 1 ? 0 : full[4 - rank + d];
        e = e * mi.shape[d] + x;
      }
      return static_cast<size_t>(e);
    };
    if (mi.is_bool) {
      r.keep = [&, index](int64_t b, int64_t h, int64_t i, int64_t j) {
        return mi.values[index(b, h, i, j)] != 0;
      };
    } else {
      // The values as stored: the reference masks a key whose value is <= -1e29 (on values of
      // a float type that agrees with the runtime's comparison in float).
      r.add = [&, index](int64_t b, int64_t h, int64_t i, int64_t j) {
        return mi.values[index(b, h, i, j)];
      };
    }
  }
  if (ps.kind != ATTNGEN_PATTERN_NONE) {
    if (ps.kind == ATTNGEN_PATTERN_BLOCK_SPARSE && ps.layout.empty()) {
      fail("a block-sparse pattern without a usable layout accepted");
    }
    r.pattern = [&](int64_t p, int64_t i, int64_t j) {
      return attngen::test::reference_pattern_attends(ps, p, i, j);
    };
  }
  std::vector<double> ref_w, ref_lse, mag;
  if (o.weights) r.weights = &ref_w;
  if (o.lse) r.lse = &ref_lse;
  r.magnitude = &mag;
  Dense dq = dense_of(q), dk = dense_of(k);
  const Dense dv = dense_of(v);
  if (o.rope) {
    // q and k rotated at the given positions, else the default ones: key j at j, query i at i
    // (top-left) or kv_len[b] - Sq + i (bottom-right; Skv without kv_len).
    std::vector<int64_t> qp(static_cast<size_t>(B * Sq)), kp(static_cast<size_t>(B * Skv));
    for (int64_t b = 0; b < B; ++b) {
      const int64_t len = o.kv_len ? lens[static_cast<size_t>(b)] : Skv;
      for (int64_t i = 0; i < Sq; ++i) {
        const size_t e = static_cast<size_t>(b * Sq + i);
        qp[e] = o.q_positions ? q_pos_v[e] : r.bottom_right ? len - Sq + i : i;
      }
      for (int64_t j = 0; j < Skv; ++j) {
        const size_t e = static_cast<size_t>(b * Skv + j);
        kp[e] = o.k_positions ? k_pos_v[e] : j;
      }
    }
    dq = dense_from(rope_dense(rope, q.dense(), B, Sq, Hq, Dqk, qp), {B, Sq, Hq, Dqk});
    dk = dense_from(rope_dense(rope, k.dense(), B, Skv, Hkv, Dqk, kp), {B, Skv, Hkv, Dqk});
  }
  const std::vector<double> want = attngen::test::reference_attention(dq.view, dk.view, dv.view, r);
  ++g_ok_checked;
  if (wild) return;  // scores too large for the tolerance to mean anything
  const Tolerance& tol = tolerance(qd != ATTNGEN_F32 ? qd : od);  // the storage dtype
  check_close("out", out, want, mag, max_abs(v.dense()), tol);
  if (o.weights) check_close("weights", weights, ref_w, {}, 1.0, tol);
  if (o.lse) {
    const std::vector<double> got = lse.dense();
    for (size_t i = 0; i < got.size(); ++i) {
      const double w = ref_lse[i];
      const bool bad = std::isinf(w)   ? got[i] != w
                       : std::isnan(w) ? !std::isnan(got[i])
                                       : !(std::abs(got[i] - w) <= tol.rel_l2 * (1 + std::abs(w)));
      if (bad) fail("lse[%zu] is %g, reference %g", i, got[i], w);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// attngen_attention_varlen

namespace {

// A cu_seqlens tensor for sequences of these lengths: I32 [n + 1], their offsets, mostly; else of
// another size (so n differs from the other one's), rank or dtype, or with one offset moved (not
// starting at 0, decreasing, not ending at the packed rows' count). Its values as stored (dense)
// in `cu`.
void make_cu_seqlens(Input& in, GuardTensor& g, const std::vector<int64_t>& lengths,
                     std::vector<int64_t>& cu) {
  std::vector<int64_t> offsets{0};
  for (int64_t l : lengths) offsets.push_back(offsets.back() + l);
  std::vector<int64_t> shape{static_cast<int64_t>(offsets.size())};
  if (in.chance(6)) shape[0] += in.chance(128) ? 1 : -1;
  if (in.chance(4)) shape.push_back(1);
  const int d = dtype_near(in, ATTNGEN_I32);
  g.make(d, layout_for(in, shape), misalign(in, d), in.chance(3));
  g.poison();
  if (in.chance(12)) {
    static constexpr int64_t kMoves[] = {1, -1, 2, -3, INT32_MAX, INT32_MIN};
    const size_t at = in.u8() % offsets.size();
    offsets[at] += in.pick(kMoves);
  }
  g.for_each([&](int64_t e, int64_t off) {
    const size_t i = std::min(static_cast<size_t>(e), offsets.size() - 1);
    g.set(off, static_cast<double>(as_i32(static_cast<double>(offsets[i]))));
  });
  if (g.small()) {
    for (double x : g.dense()) cu.push_back(as_i32(x));
  }
}

// Whether cu holds n + 1 >= 2 valid offsets of `total` packed rows: 0 = cu[0] <= ... <= cu[n].
bool valid_offsets(const std::vector<int64_t>& cu, int64_t total) {
  if (cu.size() < 2 || cu.front() != 0 || cu.back() != total) return false;
  return std::is_sorted(cu.begin(), cu.end());
}

}  // namespace

void fuzz_attention_varlen(Input& in, Fill& fill) {
  // n sequences of their own query and key counts, 0 included; self: the keys are the queries'
  // rows (cu_seqlens_k NULL).
  const int64_t n = 1 + in.u8() % 5;
  const bool self = in.chance(80);
  const int64_t Hkv = dim(in, 3);
  int64_t Hq = Hkv > 0 && Hkv < 8 ? Hkv * (1 + in.u8() % 3) : dim(in, 4);
  if (in.chance(8)) Hq = dim(in, 6);
  const int64_t Dqk = head_dim(in), Dv = !in.chance(96) ? Dqk : head_dim(in);
  const int64_t most = Dqk > 130 || Dv > 130 ? 4 : 12;  // rows per sequence: a cheap reference
  std::vector<int64_t> lq, lk;
  const auto length = [most](uint8_t b) -> int64_t { return b >= 216 ? 0 : 1 + b % most; };
  for (int64_t i = 0; i < n; ++i) {
    lq.push_back(length(in.u8()));
    lk.push_back(self ? lq.back() : length(in.u8()));
  }
  int64_t Tq = 0, Tk = 0;
  for (int64_t i = 0; i < n; ++i) {
    Tq += lq[static_cast<size_t>(i)];
    Tk += lk[static_cast<size_t>(i)];
  }
  const int dt = in.u8() % 3;  // F32, F16, BF16
  const int out_dt = in.chance(60) ? ATTNGEN_F32 : dt;
  auto shape3 = [&](int64_t a, int64_t b, int64_t c) {
    std::vector<int64_t> s{a, b, c};
    if (in.chance(4)) {
      s.pop_back();
    } else if (in.chance(3)) {
      s.push_back(1);
    }
    return s;
  };
  GuardTensor q, k, v, out, cu_q, cu_k, layout, refused_t;
  const int qd = dtype_near(in, dt), kd = dtype_near(in, dt), vd = dtype_near(in, dt);
  const int od = dtype_near(in, out_dt);
  q.make(qd, layout_for(in, shape3(Tq, Hq, Dqk)), misalign(in, qd), in.chance(3));
  k.make(kd, layout_for(in, shape3(Tk, Hkv, Dqk)), misalign(in, kd), in.chance(3));
  v.make(vd, layout_for(in, shape3(Tk, Hkv, Dv)), misalign(in, vd), in.chance(3));
  out.make(od, layout_for(in, shape3(Tq, Hq, Dv)), misalign(in, od), in.chance(3));
  fill_input(q, fill);
  fill_input(k, fill);
  fill_input(v, fill);
  std::vector<int64_t> cq, ck;
  make_cu_seqlens(in, cu_q, lq, cq);
  if (!self) make_cu_seqlens(in, cu_k, lk, ck);

  attngen_attention_options o = attngen_attention_options_default();
  bool wild = false;
  o.scale = scale_value(in, Dqk, wild);
  if (in.chance(40)) {
    const uint8_t b = in.u8();
    o.softcap = b < 230 ? 0.5f + b / 8.0f : std::numeric_limits<float>::quiet_NaN();
    wild = wild || b >= 230;
  }
  const int mask_kind = enum_value(in, 2);
  put_enum(o.mask, mask_kind);
  o.kernel = kernel_name(in);
  PatternSpec ps;
  if (in.chance(60)) {
    ps = make_pattern(in, most, most, layout, fill);
    o.pattern = ps.p;
  }
  // An option shaped by the batch, which a packed call refuses (a placeholder tensor).
  static constexpr const char* kRefused[] = {"kv_len",      "mask_tensor", "weights", "lse",
                                             "q_positions", "k_positions", "modifier"};
  int refused = -1;
  attngen_modifier modifier{};
  if (in.chance(20)) {
    refused = in.u8() % 7;
    refused_t.make(refused == 0 || refused == 4 || refused == 5 ? ATTNGEN_I32 : ATTNGEN_F32,
                   {{1}, {1}}, 0, false);
    refused_t.poison();
    modifier.name = "alibi";
    switch (refused) {
      case 0:
        o.kv_len = &refused_t.t;
        break;
      case 1:
        o.mask_tensor = &refused_t.t;
        break;
      case 2:
        o.weights = &refused_t.t;
        break;
      case 3:
        o.lse = &refused_t.t;
        break;
      case 4:
        o.q_positions = &refused_t.t;
        break;
      case 5:
        o.k_positions = &refused_t.t;
        break;
      default:
        o.modifier = &modifier;
        break;
    }
  }
  RopeSpec rope;
  if (in.chance(60)) {
    make_rope(in, Dqk, rope, fill);
    o.rope = &rope.r;
  }
  // cu_seqlens_k NULL although the keys have lengths of their own (valid where they agree).
  const bool null_cu_k = !self && in.chance(6);
  const bool null_q = in.chance(3), null_out = in.chance(3), null_cu_q = in.chance(3),
             null_opts = in.chance(8), size_query = in.chance(60), null_bytes = in.chance(6);
  attngen_tensor out_t = out.t;
  const bool aliased = in.chance(5) && q.mapped();
  if (aliased) out_t.data = q.t.data;

  std::string lengths;
  for (int64_t i = 0; i < n; ++i) {
    lengths += " " + std::to_string(lq[static_cast<size_t>(i)]) + "/" +
               std::to_string(lk[static_cast<size_t>(i)]);
  }
  g_call = "attention_varlen" +
           dims_string({{"n", n},
                        {"Tq", Tq},
                        {"Tk", Tk},
                        {"Hq", Hq},
                        {"Hkv", Hkv},
                        {"Dqk", Dqk},
                        {"Dv", Dv},
                        {"q", qd},
                        {"k", kd},
                        {"v", vd},
                        {"out", od},
                        {"self", self},
                        {"mask", mask_kind},
                        {"pattern", ps.kind},
                        {"rope_dim", o.rope ? rope.r.rotary_dim : -1},
                        {"rope_pairs", o.rope ? rope.pairs : -1}}) +
           " refused=" + (refused >= 0 ? kRefused[refused] : "-") + " lengths q/k:" + lengths +
           " scale=" + std::to_string(o.scale) + " softcap=" + std::to_string(o.softcap) +
           " kernel=" + (o.kernel ? o.kernel : "-");

  Call c;
  c.inputs = {&q, &k, &v, &cu_q};
  if (!self) c.inputs.push_back(&cu_k);
  if (ps.has_layout) c.inputs.push_back(&layout);
  if (refused >= 0) c.inputs.push_back(&refused_t);  // refused: never written
  if (o.rope) c.inputs.push_back(&rope.freq);
  if (!aliased) c.outputs.push_back(&out);
  c.before();
  if (aliased) c.inputs.clear();  // an accepted alias writes an input; reported below
  const attngen_tensor *q_arg = null_q ? nullptr : &q.t, *cu_q_arg = null_cu_q ? nullptr : &cu_q.t,
                       *cu_k_arg = self || null_cu_k ? nullptr : &cu_k.t;
  attngen_tensor* out_arg = null_out ? nullptr : &out_t;
  const attngen_attention_options* opts = null_opts ? nullptr : &o;
  // The size query validates as the call does and writes nothing but *bytes.
  attngen_status sized = ATTNGEN_OK;
  if (size_query) {
    size_t bytes = 12345;
    sized = note_kind(
        "attention_varlen_workspace_size",
        note(attngen_attention_varlen_workspace_size(q_arg, &k.t, &v.t, out_arg, cu_q_arg, cu_k_arg,
                                                     opts, null_bytes ? nullptr : &bytes)));
    if (sized != ATTNGEN_OK && bytes != 12345) fail("a failed size query wrote *bytes");
    for (size_t i = 0; i < c.inputs.size(); ++i) {
      if (!c.inputs[i]->unchanged(c.in_before[i])) fail("the size query wrote input %zu", i);
    }
    for (size_t i = 0; i < c.outputs.size(); ++i) {
      if (!c.outputs[i]->unchanged(c.out_before[i])) fail("the size query wrote output %zu", i);
    }
  }
  const attngen_status s = note_kind(
      "attention_varlen",
      note(attngen_attention_varlen(q_arg, &k.t, &v.t, out_arg, cu_q_arg, cu_k_arg, opts)));
  c.after(s);
  if (size_query && !null_bytes && s != sized && s != ATTNGEN_ERROR_KERNEL &&
      s != ATTNGEN_ERROR_OUT_OF_MEMORY) {
    fail("the size query returned %s, the call %s", attngen_status_name(sized),
         attngen_status_name(s));
  }
  if (s != ATTNGEN_OK) return;

  // A successful call: the arguments were valid. Check what the contract says of them.
  if (aliased) fail("an output aliasing an input was accepted");
  int mask_used = mask_kind;
  if (null_opts) {  // the defaults were used
    o = attngen_attention_options_default();
    wild = false;
    ps = PatternSpec{};
    refused = -1;
    mask_used = ATTNGEN_MASK_NONE;
  }
  check_accepted({&q, &k, &v, &out, &cu_q});
  if (cu_k_arg != nullptr) check_accepted({&cu_k});  // NULL: cu_k was never passed
  if (!has_shape(q, {Tq, Hq, Dqk}) || !has_shape(k, {Tk, Hkv, Dqk}) ||
      !has_shape(v, {Tk, Hkv, Dv}) || !has_shape(out, {Tq, Hq, Dv})) {
    fail("varlen accepted q %s, k %s, v %s, out %s", shape_of(q).c_str(), shape_of(k).c_str(),
         shape_of(v).c_str(), shape_of(out).c_str());
  }
  // The key offsets: cu_seqlens_k's, or the queries' where it is NULL (then Tk must be Tq).
  const std::vector<int64_t>& kc = cu_k_arg != nullptr ? ck : cq;
  if (cu_q.dtype() != ATTNGEN_I32 || cu_q.t.rank != 1 || !valid_offsets(cq, Tq) ||
      (cu_k_arg != nullptr && (cu_k.dtype() != ATTNGEN_I32 || cu_k.t.rank != 1)) ||
      !valid_offsets(kc, Tk) || kc.size() != cq.size()) {
    fail("varlen accepted cu_seqlens_q %s, cu_seqlens_k %s (or offsets that are not valid)",
         shape_of(cu_q).c_str(), cu_k_arg ? shape_of(cu_k).c_str() : "NULL");
  }
  if (refused >= 0) fail("varlen accepted options.%s", kRefused[refused]);
  if (ps.kind == ATTNGEN_PATTERN_BLOCK_SPARSE) fail("varlen accepted a block-sparse pattern");
  // Head counts and options are validated whatever the sequences (found by this builder: Hq not a
  // multiple of Hkv, and a NaN scale, were accepted where no sequence has both queries and keys;
  // regressions/fixed15-*, fixed16-*).
  if (Hkv <= 0 || Hq % Hkv != 0) {
    fail("invalid head counts (Hq %" PRId64 ", Hkv %" PRId64 ") accepted", Hq, Hkv);
  }
  if (o.rope) check_rope_accepted(rope, Dqk);
  if (!(std::isfinite(o.scale) && std::isfinite(o.softcap) && o.softcap >= 0) ||
      (mask_used != ATTNGEN_MASK_NONE && mask_used != ATTNGEN_MASK_CAUSAL)) {
    fail("a non-finite scale, a bad soft cap or mask kind accepted");
  }

  // Each sequence against the reference of its own rows as a batch of one (causal bottom-right,
  // a rope at positions from 0: key j at j, query i at sk - sq + i); the rows of a sequence
  // without keys exactly 0.
  const int64_t nseq = static_cast<int64_t>(cq.size()) - 1;
  const std::vector<double> qv = q.dense(), kv = k.dense(), vv = v.dense(), got = out.dense();
  std::vector<double> want(got.size(), 0.0), mag(got.size(), 0.0);
  const int64_t qrow = Hq * Dqk, krow = Hkv * Dqk, vrow = Hkv * Dv, orow = Hq * Dv;
  for (int64_t i = 0; i < nseq; ++i) {
    const int64_t q0 = cq[static_cast<size_t>(i)], sq = cq[static_cast<size_t>(i + 1)] - q0;
    const int64_t k0 = kc[static_cast<size_t>(i)], sk = kc[static_cast<size_t>(i + 1)] - k0;
    if (sq == 0) continue;
    if (sk == 0) {
      for (int64_t e = q0 * orow; e < (q0 + sq) * orow; ++e) {
        if (got[static_cast<size_t>(e)] != 0.0) {
          fail("sequence %" PRId64 " has no keys: out element %" PRId64 " is %g, not 0", i, e,
               got[static_cast<size_t>(e)]);
        }
      }
      continue;
    }
    std::vector<double> sq_v(qv.begin() + q0 * qrow, qv.begin() + (q0 + sq) * qrow),
        sk_v(kv.begin() + k0 * krow, kv.begin() + (k0 + sk) * krow);
    if (o.rope) {
      std::vector<int64_t> qp, kp;
      for (int64_t r = 0; r < sq; ++r) qp.push_back(sk - sq + r);
      for (int64_t j = 0; j < sk; ++j) kp.push_back(j);
      sq_v = rope_dense(rope, sq_v, 1, sq, Hq, Dqk, qp);
      sk_v = rope_dense(rope, sk_v, 1, sk, Hkv, Dqk, kp);
    }
    const Dense dq = dense_from(sq_v, {1, sq, Hq, Dqk}), dk = dense_from(sk_v, {1, sk, Hkv, Dqk});
    const Dense dv =
        dense_from(std::vector<double>(vv.begin() + k0 * vrow, vv.begin() + (k0 + sk) * vrow),
                   {1, sk, Hkv, Dv});
    RefAttention r;
    r.scale = o.scale;
    r.softcap = o.softcap;
    r.causal = mask_used == ATTNGEN_MASK_CAUSAL;
    r.bottom_right = true;
    if (ps.kind != ATTNGEN_PATTERN_NONE) {
      r.pattern = [&](int64_t p, int64_t qi, int64_t j) {
        return attngen::test::reference_pattern_attends(ps, p, qi, j);
      };
    }
    std::vector<double> m;
    r.magnitude = &m;
    const std::vector<double> w = attngen::test::reference_attention(dq.view, dk.view, dv.view, r);
    std::copy(w.begin(), w.end(), want.begin() + q0 * orow);
    std::copy(m.begin(), m.end(), mag.begin() + q0 * orow);
  }
  ++g_ok_checked;
  if (wild) return;  // scores too large for the tolerance to mean anything
  g_call += describe("q", q) + describe("k", k) + describe("v", v) + describe("out", out) +
            describe("cu_seqlens_q", cu_q);
  if (cu_k_arg != nullptr) g_call += describe("cu_seqlens_k", cu_k);
  if (o.rope) g_call += describe("inv_freq", rope.freq);
  check_close("varlen out", out, want, mag, max_abs(vv), tolerance(qd != ATTNGEN_F32 ? qd : od));
}

// ---------------------------------------------------------------------------------------------
// attngen_linear

void fuzz_linear(Input& in, Fill& fill) {
  const int64_t B = dim(in, 3), S = dim(in, 8), E = head_dim(in), N = head_dim(in);
  const int dt = in.u8() % 3;
  GuardTensor x, w, bias, y;
  auto shaped = [&](std::vector<int64_t> s) {
    if (in.chance(5)) {
      s.pop_back();
    } else if (in.chance(4)) {
      s.push_back(1);
    }
    return s;
  };
  const int xd = dtype_near(in, dt), wd = dtype_near(in, dt), bd = dtype_near(in, dt),
            yd = dtype_near(in, dt);
  x.make(xd, layout_for(in, shaped({B, S, E})), misalign(in, xd), in.chance(3));
  w.make(wd, layout_for(in, shaped({N, E})), misalign(in, wd), in.chance(3));
  bias.make(bd, layout_for(in, shaped({N})), misalign(in, bd), in.chance(3));
  y.make(yd, layout_for(in, shaped({B, S, N})), misalign(in, yd), in.chance(3));
  fill_input(x, fill);
  fill_input(w, fill);
  fill_input(bias, fill);
  const bool with_bias = !in.chance(86), null_x = in.chance(3), null_y = in.chance(3);
  attngen_tensor y_t = y.t;
  const bool aliased = in.chance(5) && x.mapped();
  if (aliased) y_t.data = x.t.data;
  g_call = "linear" + dims_string({{"B", B},
                                   {"S", S},
                                   {"E", E},
                                   {"N", N},
                                   {"x", xd},
                                   {"w", wd},
                                   {"bias", with_bias ? bd : -100},
                                   {"y", yd}});
  Call c;
  c.inputs = {&x, &w, &bias};
  if (!aliased) c.outputs = {&y};
  c.before();
  if (aliased) c.inputs.clear();
  const attngen_status s = note(attngen_linear(
      null_x ? nullptr : &x.t, &w.t, with_bias ? &bias.t : nullptr, null_y ? nullptr : &y_t));
  c.after(s);
  if (s != ATTNGEN_OK) return;
  if (aliased) fail("an output aliasing an input was accepted");
  check_accepted({&x, &w, &y});
  if (with_bias) check_accepted({&bias});
  if (!has_shape(x, {B, S, E}) || !has_shape(w, {N, E}) || !has_shape(y, {B, S, N}) ||
      (with_bias && !has_shape(bias, {N}))) {
    fail("linear accepted x %s, w %s, bias %s, y %s", shape_of(x).c_str(), shape_of(w).c_str(),
         with_bias ? shape_of(bias).c_str() : "NULL", shape_of(y).c_str());
  }
  const std::vector<double> want = attngen::test::reference_linear(
      x.dense(), B * S, E, w.dense(), N, with_bias ? bias.dense() : std::vector<double>{});
  const std::vector<double> mag =
      attngen::test::reference_linear(abs_of(x.dense()), B * S, E, abs_of(w.dense()), N,
                                      with_bias ? abs_of(bias.dense()) : std::vector<double>{});
  ++g_ok_checked;
  check_close("y", y, want, mag, max_abs(mag), tolerance(xd));
}

// ---------------------------------------------------------------------------------------------
// attngen_mha

void fuzz_mha(Input& in, Fill& fill) {
  const int64_t B = dim(in, 2), S = dim(in, 10), H = dim(in, 4);
  int64_t dh = !in.chance(26) ? in.pick({1, 2, 3, 8, 16, 24, 32, 64, 5}) : head_dim(in);
  if (H > 0 && H < 8 && dh > 0 && dh < 1000 && dh * H > 520) dh = std::max<int64_t>(1, 520 / H);
  int64_t E = H > 0 && H < 8 && dh > 0 && dh < 600 ? H * dh : dim(in, 64);
  if (in.chance(8)) E = dim(in, 64);
  const int dt = in.u8() % 3;
  GuardTensor x, in_w, in_b, out_w, out_b, y, kv_len;
  const int xd = dtype_near(in, dt);
  const int64_t E3 = E > 0 && E < (1LL << 40) ? 3 * E : E;
  x.make(xd, layout_for(in, {B, S, E}), misalign(in, xd), in.chance(3));
  in_w.make(dtype_near(in, dt), layout_for(in, {E3, E}), 0, in.chance(3));
  in_b.make(dtype_near(in, dt), layout_for(in, {E3}), 0, in.chance(3));
  out_w.make(dtype_near(in, dt), layout_for(in, {E, E}), 0, in.chance(3));
  out_b.make(dtype_near(in, dt), layout_for(in, {in.chance(6) ? dim(in, 8) : E}), 0, in.chance(3));
  y.make(dtype_near(in, dt), layout_for(in, {B, S, E}), misalign(in, dt), in.chance(3));
  fill_input(x, fill);
  fill_mha_weights({&in_w, &in_b, &out_w, &out_b}, E, fill);

  attngen_mha_weights wts{&in_w.t, in.chance(128) ? &in_b.t : nullptr, &out_w.t,
                          in.chance(128) ? &out_b.t : nullptr};
  if (in.chance(4)) wts.in_proj_weight = nullptr;
  if (in.chance(4)) wts.out_proj_weight = nullptr;
  attngen_mha_options o = attngen_mha_options_default();
  o.num_heads = !in.chance(16) ? H : in.pick(kHostile);
  const int mask_kind = enum_value(in, 2), alignment = enum_value(in, 2);
  put_enum(o.mask, mask_kind);
  put_enum(o.alignment, alignment);
  std::vector<int32_t> lens;
  if (in.chance(60)) {
    const int d = dtype_near(in, ATTNGEN_I32);
    kv_len.make(d, layout_for(in, {B}), misalign(in, d), in.chance(3));
    kv_len.poison();
    kv_len.for_each([&](int64_t, int64_t off) {
      const uint8_t b = in.u8();
      int64_t v = S > 0 ? b % sat_add(S, 1) : 0;
      if (b >= 250) v = -1;
      lens.push_back(as_i32(kv_len.set(off, static_cast<double>(v))));
    });
    if (kv_len.small()) {  // elements may share memory (zero strides)
      lens.clear();
      for (double x : kv_len.dense()) lens.push_back(as_i32(x));
    }
    o.kv_len = &kv_len.t;
  }
  o.kernel = kernel_name(in);
  const bool null_w = in.chance(3), null_o = in.chance(3);
  g_call = "mha" +
           dims_string({{"B", B},
                        {"S", S},
                        {"E", E},
                        {"H", H},
                        {"num_heads", o.num_heads},
                        {"dtype", dt},
                        {"x", xd},
                        {"mask", mask_kind},
                        {"align", alignment},
                        {"kv_len", o.kv_len != nullptr}}) +
           " kernel=" + (o.kernel ? o.kernel : "-");
  Call c;
  c.inputs = {&x, &in_w, &in_b, &out_w, &out_b};
  if (o.kv_len) c.inputs.push_back(&kv_len);
  c.outputs = {&y};
  c.before();
  const attngen_status s =
      note(attngen_mha(&x.t, null_w ? nullptr : &wts, &y.t, null_o ? nullptr : &o));
  c.after(s);
  if (s != ATTNGEN_OK) return;
  if (null_w || null_o || o.num_heads <= 0 || E % o.num_heads != 0) {
    fail("an MHA call without weights, options or a valid head count accepted");
  }
  for (int32_t l : lens) {
    if (l < 0 || l > S) fail("kv_len value %d outside [0, %" PRId64 "] accepted", l, S);
  }
  check_accepted({&x, &in_w, &out_w, &y});
  if (wts.in_proj_bias) check_accepted({&in_b});
  if (wts.out_proj_bias) check_accepted({&out_b});
  std::vector<double> mag;
  const std::vector<double> want = attngen::test::reference_mha(
      x.dense(), B, S, E, o.num_heads, in_w.dense(),
      wts.in_proj_bias ? in_b.dense() : std::vector<double>{}, out_w.dense(),
      wts.out_proj_bias ? out_b.dense() : std::vector<double>{}, mask_kind == ATTNGEN_MASK_CAUSAL,
      lens, alignment == ATTNGEN_ALIGN_BOTTOM_RIGHT, &mag);
  ++g_ok_checked;
  check_close("y", y, want, mag, max_abs(mag), tolerance(xd));
}

}  // namespace attngen::fuzz
