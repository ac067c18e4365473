#include "generator/online_softmax.h"

#include <string>

namespace attngen {

using namespace Halide;

Expr softmax_exp(const Expr& x) {
  // exp(x) = 2^n e^r with n = round(x / ln 2) and |r| <= ln 2 / 2, e^r by a polynomial of
  // degree 5 fitted for least maximum relative error on that interval, with p(0) = 1 exactly
  // (1.5e-7 in f32 arithmetic, where Taylor's degree 6, one FMA more, gives 2.1e-7; 3.8e-7 over
  // [-87, 0] with the reduction). x is clamped at -88:
  // there n = -127, whose power of two is built as the bit pattern 0, so every x <= -88 (masked
  // scores, terms far below the maximum) gives exactly 0 with no compare or select, and 2^n is a
  // normal float everywhere else. Valid for x <= 88; softmax calls it with x <= 0.
  // (Against Halide's fast_exp behind a select: 12 vector ops instead of 19.)
  // n by the magic number 1.5 * 2^23: t = xc / ln 2 + magic holds round(xc / ln 2) (to nearest
  // even) in its low mantissa bits, read back as an integer. Through the integer domain neither
  // Halide's simplifier nor LLVM's fast-math can fold (y + M) - M into y, so the float ops keep
  // their contraction (one FMA for t, one for r) without strict_float; against round() and a
  // truncating conversion that saves 3 of the exp's ops on AVX-512, where Halide 14 rounds a
  // vector of 16 as two halves (4 ops).
  Expr xc = max(x, -88.0f);
  const float magic = 12582912.0f;
  Expr n = reinterpret(Int(32), xc * 1.44269504f + magic) - reinterpret(Int(32), Expr(magic));
  Expr r = xc - cast<float>(n) * 0.693147181f;
  Expr p = 0.008290315f;
  for (float c : {0.04189793f, 0.16667636f, 0.4999915f, 0.9999997f, 1.0f}) p = p * r + c;
  Expr two_n = reinterpret(Float(32), (n + 127) << 23);
  return select(is_nan_bits(x), x, two_n * p);
}

Expr softmax_exp_bf16(const Expr& x) {
  Expr xc = max(x, -88.0f);
  // t's low mantissa bits hold round(xc / ln 2) (to nearest even, |xc / ln 2| < 2^22). Strict,
  // so that neither Halide nor LLVM reassociates (y + M) - M into y or r into t * ln 2 - M * ln 2
  // (which cancels catastrophically).
  const float magic = 12582912.0f;  // 1.5 * 2^23
  Expr t = strict_float(xc * 1.44269504f + magic);
  Expr r = strict_float(xc - (t - magic) * 0.693147181f);
  // Fitted on [-ln 2 / 2, ln 2 / 2] for least maximum relative error, p(0) = 1.
  Expr p = ((0.16517978f * r + 0.50413046f) * r + 1.00019584f) * r + 1.0f;
  // 2^n as a bit pattern: n + 127 in the exponent field; the magic's own bits cancel.
  Expr two_n = reinterpret(
      Float(32), (reinterpret(Int(32), t) - reinterpret(Int(32), Expr(magic)) + 127) << 23);
  return select(is_nan_bits(x), x, two_n * p);
}

KeyBlockStats define_key_block_stats(const Func& scores, const Func& v, int block, const RDom& rk,
                                     const KeyBlockVars& vars, const Expr& v_finite, int half_chunk,
                                     const Func& v_scale, const std::string& prefix) {
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
  f.probs(j, i, h, b) = softmax_exp(scores(j, i, h, b) - select(is_masked(bm), 0.0f, bm));

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

SoftmaxState online_merge(const SoftmaxState& running, const SoftmaxState& block) {
  const Expr &m = running.max, &bmax = block.max;
  Expr e = softmax_exp(-abs(m - bmax));
  Expr old_wins = m >= bmax;
  Expr alpha = select(is_masked(m), 0.0f, old_wins, 1.0f, e);
  Expr beta = select(is_masked(bmax), 0.0f, old_wins, e, 1.0f);
  return {running.acc * alpha + block.acc * beta, max(m, bmax),
          running.sum * alpha + block.sum * beta};
}

}  // namespace attngen
