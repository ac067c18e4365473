#include "generator/online_softmax.h"

#include <string>

#include "generator/native_code.h"

namespace attngen {

using namespace Halide;

namespace {

// exp(x) = 2^n e^r, n = round(x / ln 2), |r| <= ln 2 / 2. e^r by a polynomial fitted for least
// maximum relative error on that interval, with p(0) = 1 exactly: degree 5 for f32 (1.5e-7 in f32
// arithmetic, where Taylor's degree 6, one FMA more, gives 2.1e-7; 3.8e-7 over [-87, 0] with the
// reduction), a cubic where the result is rounded to bf16 next (1.0e-4). Highest degree first.
constexpr float kExpQuintic[] = {0.008290315f, 0.04189793f, 0.16667636f,
                                 0.4999915f,   0.9999997f,  1.0f};
constexpr float kExpCubic[] = {0.16517978f, 0.50413046f, 1.00019584f, 1.0f};
constexpr float kLog2e = 1.44269504f, kLn2 = 0.693147181f;
// 1.5 * 2^23: y + kMagic holds round(y) (to nearest even, |y| < 2^22) in its low mantissa bits.
constexpr float kMagic = 12582912.0f;

constexpr char kExpF32Name[] = "attngen_exp_f32";
constexpr char kExpBf16Name[] = "attngen_exp_bf16";
constexpr char kExpCode[] = "org.attngen.exp";

// The native exps on AVX-512 (x86 with AVX512VL for the 4- and 8-lane forms), in LLVM IR, both
// applying 2^n by vscalefps; NaN passes through every step. Arguments below -87 give exactly +0,
// as softmax_exp's do, by a zero polynomial (the last FMA zero-masked), never by an underflow: a
// subnormal or underflowing result of vscalefps takes a microcode assist (measured: with arguments
// below -104 underflowing to 0 instead, the causal amx kernels, whose masked scores all took that
// path, ran 1.07-1.10x slower than with the bit-pattern form). Above -87 the result is a normal
// float (e^-87 > 2^-126).
//  - f32 (the quintic): n by the magic number (an FMA and a subtraction; the IR has no fast-math
//    flags, so nothing folds (t - M) back), r = x - n ln 2 by one FMA, five FMAs, a compare and
//    vscalefps: 10 vector ops where the bit-pattern form takes 16 (the clamp, the NaN test and
//    blend, the conversion of n and the building of 2^n among them). No clamp: below about -6e37,
//    or at -inf, n and r overflow to infinities or NaN in lanes whose polynomial is zeroed anyway
//    (and vscalefps(0, -inf) is 0).
//  - bf16 (the cubic): the argument clamped at -88 (`-88 > x ? -88 : x` is vmaxps with x
//    second, which keeps NaN), n = roundeven(x log2 e) (vrndscaleps), r by one FMA, the cubic:
//    9 vector ops where the portable bf16 form takes 14.
std::string exp_ir(const char* name, bool f32) {
  std::string ir;
  const auto splat = [](int lanes, float value) {
    std::string v = "<";
    for (int l = 0; l < lanes; ++l) v += (l ? ", float " : "float ") + ir_float(value);
    return v + ">";
  };
  for (int lanes : {4, 8, 16}) {
    const std::string n = std::to_string(lanes);
    const std::string vt = "<" + n + " x float>", suffix = "v" + n + "f32";
    const auto fma = [&](const std::string& a, const std::string& b, const std::string& c) {
      return "call " + vt + " @llvm.fma." + suffix + "(" + vt + " " + a + ", " + vt + " " + b +
             ", " + vt + " " + c + ")";
    };
    const std::string scalef =
        lanes == 16
            ? "call <16 x float> @llvm.x86.avx512.mask.scalef.ps.512(<16 x float> %pk, "
              "<16 x float> %n, <16 x float> zeroinitializer, i16 -1, i32 4)"
            : "call " + vt + " @llvm.x86.avx512.mask.scalef.ps." + std::to_string(lanes * 32) +
                  "(" + vt + " %pk, " + vt + " %n, " + vt + " zeroinitializer, i8 -1)";
    ir += "define weak_odr hidden " + vt + " @" + name + "x" + n + "(" + vt + " %x) #0 {\n";
    std::string poly;
    const std::string arg = f32 ? "%x" : "%xc";  // what the -87 test takes
    if (f32) {
      ir += "  %t = " + fma("%x", splat(lanes, kLog2e), splat(lanes, kMagic)) + "\n";
      ir += "  %n = fsub " + vt + " %t, " + splat(lanes, kMagic) + "\n";
      ir += "  %r = " + fma("%n", splat(lanes, -kLn2), "%x") + "\n";
      poly = "%p0";
      ir +=
          "  %p0 = " + fma("%r", splat(lanes, kExpQuintic[0]), splat(lanes, kExpQuintic[1])) + "\n";
      for (int c = 2; c < 6; ++c) {
        const std::string next = "%p" + std::to_string(c - 1);
        ir += "  " + next + " = " + fma(poly, "%r", splat(lanes, kExpQuintic[c])) + "\n";
        poly = next;
      }
    } else {
      const std::string floor = splat(lanes, -88.0f);
      ir += "  %below = fcmp ogt " + vt + " " + floor + ", %x\n";
      ir += "  %xc = select <" + n + " x i1> %below, " + vt + " " + floor + ", " + vt + " %x\n";
      ir += "  %t = fmul " + vt + " %xc, " + splat(lanes, kLog2e) + "\n";
      ir += "  %n = call " + vt + " @llvm.roundeven." + suffix + "(" + vt + " %t)\n";
      ir += "  %r = " + fma("%n", splat(lanes, -kLn2), "%xc") + "\n";
      ir += "  %p2 = " + fma("%r", splat(lanes, kExpCubic[0]), splat(lanes, kExpCubic[1])) + "\n";
      ir += "  %p1 = " + fma("%p2", "%r", splat(lanes, kExpCubic[2])) + "\n";
      ir += "  %p = " + fma("%p1", "%r", splat(lanes, kExpCubic[3])) + "\n";
      poly = "%p";
    }
    // Not below -87 (NaN included: unordered).
    ir += "  %keep = fcmp uge " + vt + " " + arg + ", " + splat(lanes, -87.0f) + "\n";
    ir += "  %pk = select <" + n + " x i1> %keep, " + vt + " " + poly + ", " + vt +
          " zeroinitializer\n";
    ir += "  %e = " + scalef + "\n  ret " + vt + " %e\n}\n";
  }
  // The scalar form through the 4-lane one; 32 lanes as two halves of 16.
  ir += "define weak_odr hidden float @" + std::string(name) + "(float %x) #0 {\n";
  ir += "  %v = insertelement <4 x float> undef, float %x, i32 0\n";
  ir += "  %e = call <4 x float> @" + std::string(name) + "x4(<4 x float> %v)\n";
  ir += "  %r = extractelement <4 x float> %e, i32 0\n  ret float %r\n}\n";
  std::string lo, hi, all;
  for (int l = 0; l < 32; ++l) {
    const std::string sep = l ? ", " : "";
    if (l < 16) {
      lo += sep + "i32 " + std::to_string(l);
      hi += sep + "i32 " + std::to_string(l + 16);
    }
    all += sep + "i32 " + std::to_string(l);
  }
  ir += "define weak_odr hidden <32 x float> @" + std::string(name) + "x32(<32 x float> %x) #0 {\n";
  ir += "  %lo = shufflevector <32 x float> %x, <32 x float> undef, <16 x i32> <" + lo + ">\n";
  ir += "  %hi = shufflevector <32 x float> %x, <32 x float> undef, <16 x i32> <" + hi + ">\n";
  ir += "  %elo = call <16 x float> @" + std::string(name) + "x16(<16 x float> %lo)\n";
  ir += "  %ehi = call <16 x float> @" + std::string(name) + "x16(<16 x float> %hi)\n";
  ir += "  %e = shufflevector <16 x float> %elo, <16 x float> %ehi, <32 x i32> <" + all + ">\n";
  ir += "  ret <32 x float> %e\n}\n";
  return ir;
}

std::string exp_module_ir() {
  std::string ir = exp_ir(kExpF32Name, true) + exp_ir(kExpBf16Name, false);
  for (int lanes : {4, 8, 16}) {
    const std::string vt = "<" + std::to_string(lanes) + " x float>";
    const std::string suffix = "v" + std::to_string(lanes) + "f32";
    ir += "declare " + vt + " @llvm.roundeven." + suffix + "(" + vt + ")\n";
    ir += "declare " + vt + " @llvm.fma." + suffix + "(" + vt + ", " + vt + ", " + vt + ")\n";
  }
  ir +=
      "declare <16 x float> @llvm.x86.avx512.mask.scalef.ps.512(<16 x float>, <16 x float>, "
      "<16 x float>, i16, i32)\n"
      "declare <8 x float> @llvm.x86.avx512.mask.scalef.ps.256(<8 x float>, <8 x float>, "
      "<8 x float>, i8)\n"
      "declare <4 x float> @llvm.x86.avx512.mask.scalef.ps.128(<4 x float>, <4 x float>, "
      "<4 x float>, i8)\n"
      "attributes #0 = { alwaysinline nounwind readnone }\n";
  return ir;
}

Expr native_exp_call(const char* name, const Expr& x) {
  return Internal::Call::make(x.type(), name, {x}, Internal::Call::PureExtern);
}

}  // namespace

Expr softmax_exp(const Expr& x, bool native) {
  if (native) return native_exp_call(kExpF32Name, x);
  // x is clamped at -88: there n = -127, whose power of two is built as the bit pattern 0, so
  // every x <= -88 (masked scores, terms far below the maximum) gives exactly 0 with no compare
  // or select, and 2^n is a normal float everywhere else. Valid for x <= 88; softmax calls it
  // with x <= 0. (Against Halide's fast_exp behind a select: 12 vector ops instead of 19.)
  // n by the magic number: t = xc / ln 2 + magic holds round(xc / ln 2) in its low mantissa
  // bits, read back as an integer. Through the integer domain neither Halide's simplifier nor
  // LLVM's fast-math can fold (y + M) - M into y, so the float ops keep their contraction (one
  // FMA for t, one for r) without strict_float; against round() and a truncating conversion
  // that saves 3 of the exp's ops on AVX-512, where Halide 14 rounds a vector of 16 as two
  // halves (4 ops).
  Expr xc = max(x, -88.0f);
  Expr n = reinterpret(Int(32), xc * kLog2e + kMagic) - reinterpret(Int(32), Expr(kMagic));
  Expr r = xc - cast<float>(n) * kLn2;
  Expr p = kExpQuintic[0];
  for (int c = 1; c < 6; ++c) p = p * r + kExpQuintic[c];
  Expr two_n = reinterpret(Float(32), (n + 127) << 23);
  return select(is_nan_bits(x), x, two_n * p);
}

bool use_native_exp(const ExternsMap& externs, const Target& target, const TargetRow& row) {
  // The table decides (row_scales_exp, which the assembly tests also ask); the feature guards a
  // target that names fewer features than its row.
  if (row_scales_exp(row) == nullptr || !target.has_feature(Target::AVX512_Skylake)) {
    return false;
  }
  add_native_code(externs, target, kExpCode, exp_module_ir());
  return true;
}

Expr softmax_exp_bf16(const Expr& x, bool native) {
  if (native) return native_exp_call(kExpBf16Name, x);
  Expr xc = max(x, -88.0f);
  // t's low mantissa bits hold round(xc / ln 2) (to nearest even, |xc / ln 2| < 2^22). Strict,
  // so that neither Halide nor LLVM reassociates (y + M) - M into y or r into t * ln 2 - M * ln 2
  // (which cancels catastrophically).
  Expr t = strict_float(xc * kLog2e + kMagic);
  Expr r = strict_float(xc - (t - kMagic) * kLn2);
  Expr p = ((kExpCubic[0] * r + kExpCubic[1]) * r + kExpCubic[2]) * r + kExpCubic[3];
  // 2^n as a bit pattern: n + 127 in the exponent field; the magic's own bits cancel.
  Expr two_n = reinterpret(
      Float(32), (reinterpret(Int(32), t) - reinterpret(Int(32), Expr(kMagic)) + 127) << 23);
  return select(is_nan_bits(x), x, two_n * p);
}

KeyBlockStats define_key_block_stats(const Func& scores, const Func& v, int block, const RDom& rk,
                                     const KeyBlockVars& vars, const Expr& v_finite, int half_chunk,
                                     const Func& v_scale, const std::string& prefix,
                                     bool native_exp) {
  const Var &d = vars.d, &j = vars.key, &kb = vars.kb, &i = vars.row, &h = vars.head,
            &b = vars.batch;
  KeyBlockStats f;
  Expr key = kb * block + rk;

  f.block_max = Func(prefix + "block_max");
  f.block_max(kb, i, h, b) = kMaskedScore;
  f.block_max(kb, i, h, b) = max(f.block_max(kb, i, h, b), scores(key, i, h, b));

  // A fully masked block has a masked max: use 0, so its terms flush to exactly 0.
  Expr bm = f.block_max(j / block, i, h, b);
  f.probs = Func(prefix + "probs");
  f.probs(j, i, h, b) =
      softmax_exp(scores(j, i, h, b) - select(is_masked(bm), 0.0f, bm), native_exp);

  f.block_sum = Func(prefix + "block_sum");
  f.block_sum(kb, i, h, b) = 0.0f;
  f.block_sum(kb, i, h, b) += f.probs(key, i, h, b);

  f.block_pv = Func(prefix + "block_pv");
  f.block_pv(d, kb, i, h, b) = 0.0f;
  if (v_scale.defined()) {
    if (half_chunk > 0) {
      throw CompileError("attngen: half-precision P.V takes no quantised V");
    }
    const Expr p = f.probs(j, i, h, b);
    f.probs_scaled = Func(prefix + "probs_scaled");
    f.probs_scaled(j, i, h, b) = select(is_plus_zero(p), 0.0f, p * v_scale(j, h, b));
    f.block_pv(d, kb, i, h, b) += f.probs_scaled(key, i, h, b) * v(d, key, h, b);
    return f;
  }
  if (half_chunk <= 0) {
    f.block_pv(d, kb, i, h, b) += pv_term(f.probs(key, i, h, b), v(d, key, h, b), v_finite);
    return f;
  }
  if (block % half_chunk != 0 || v.output_types().at(0) != Float(16)) {
    throw CompileError("attngen: half-precision P.V needs f16 V and chunks (" +
                       std::to_string(half_chunk) + ") dividing the key block (" +
                       std::to_string(block) + ")");
  }
  f.probs_half = Func(prefix + "probs_half");
  f.probs_half(j, i, h, b) = cast(Float(16), f.probs(j, i, h, b));
  f.rx = RDom(0, half_chunk, prefix + "rx");
  f.rh = RDom(0, block / half_chunk, prefix + "rh");
  Var c("c");
  Expr half_key = kb * block + c * half_chunk + f.rx;
  f.block_pv_half = Func(prefix + "block_pv_half");
  f.block_pv_half(d, c, kb, i, h, b) = cast(Float(16), 0.0f);
  f.block_pv_half(d, c, kb, i, h, b) +=
      pv_term(f.probs_half(half_key, i, h, b), v(d, half_key, h, b), v_finite);
  f.block_pv(d, kb, i, h, b) += cast<float>(f.block_pv_half(d, f.rh, kb, i, h, b));
  return f;
}

Tuple initial_softmax_state() { return Tuple(0.0f, kMaskedScore, 0.0f); }

Tuple sink_softmax_state(const Expr& z) {
  // (A NaN logit is kept: its rows become NaN.)
  const Expr none = z <= kMaskedScore;
  return Tuple(0.0f, select(none, kMaskedScore, z), select(none, 0.0f, 1.0f));
}

SoftmaxState online_merge(const SoftmaxState& running, const SoftmaxState& block, bool native_exp) {
  const Expr &m = running.max, &bmax = block.max;
  Expr e = softmax_exp(-abs(m - bmax), native_exp);
  Expr old_wins = m >= bmax;
  Expr alpha = select(is_masked(m), 0.0f, old_wins, 1.0f, e);
  Expr beta = select(is_masked(bmax), 0.0f, old_wins, e, 1.0f);
  return {running.acc * alpha + block.acc * beta, max(m, bmax),
          running.sum * alpha + block.sum * beta};
}

}  // namespace attngen
