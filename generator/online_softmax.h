// The softmax pieces shared by attention (generator/attention_algorithm.cpp) and decode
// (generator/decode_algorithm.cpp): the masked-score sentinel, exp, the per-key-block
// statistics and FlashAttention's online merge of them into a running (acc, max, sum).
#pragma once

#include <string>

#include "Halide.h"
#include "core/targets.h"
#include "generator/native_code.h"

namespace attngen {

// Masked scores hold the lowest finite float, never -inf: Halide compiles float code with
// fast-math flags (no NaNs, no infinities), under which a comparison with -inf may be folded
// away (seen on NEON: NaN rows). Real scores, however negative, stay above it (a score of -inf,
// from an infinite K, counts as masked); its exp relative to any real maximum flushes to exactly 0.
constexpr float kMaskedScore = -3.40282347e38f;  // -FLT_MAX
// An additive mask value at or below this masks its key (models write the float minimum or -inf).
constexpr float kAdditiveMaskBelow = -1e29f;

// Tests on a float's bits, which fast-math flags cannot fold away (a float comparison with a NaN
// may be assumed false, or true, under them).
inline Halide::Expr bits_of(const Halide::Expr& x) {
  return Halide::reinterpret(Halide::UInt(x.type().bits()), x);
}
inline Halide::Expr is_nan_bits(const Halide::Expr& x) {
  const int bits = x.type().bits();
  const uint64_t magnitude = bits == 32 ? 0x7fffffffu : 0x7fffu;
  const uint64_t infinity =
      bits == 32 ? 0x7f800000u : (x.type() == Halide::Float(16) ? 0x7c00u : 0x7f80u);
  const Halide::Type u = Halide::UInt(bits);
  return (bits_of(x) & Halide::Internal::make_const(u, magnitude)) >
         Halide::Internal::make_const(u, infinity);
}
// A max (of a row, key block or split) with nothing attended: exactly kMaskedScore. On the bits:
// Halide's simplifier rewrites select(x <= c, 0, y) as select(c < x, y, 0), which turns a NaN
// into "masked" (seen: a NaN block max dropped its block).
inline Halide::Expr is_masked(const Halide::Expr& score) {
  return bits_of(score) == Halide::Internal::make_const(Halide::UInt(32), 0xff7fffff);
}
// x == +0.0 exactly (what softmax_exp gives for masked and underflowing terms).
inline Halide::Expr is_plus_zero(const Halide::Expr& x) {
  return bits_of(x) == Halide::Internal::make_zero(Halide::UInt(x.type().bits()));
}

// `value`, or 0 where prob is exactly +0 (a masked key, or a weight that underflowed): a term of
// P.V is prob * masked_by_prob(prob, value), so keys a row does not attend never reach its output,
// whatever V holds there (0 * NaN or 0 * Inf would be NaN). The value's bits are ANDed with a mask
// made once per prob: a select on the prob's test (a scalar where one prob multiplies a vector of
// V) became branches in LLVM's code, where the AND keeps the FMA, with a vpandd beside it.
inline Halide::Expr masked_by_prob(const Halide::Expr& prob, const Halide::Expr& value) {
  const Halide::Type t = value.type(), u = Halide::UInt(t.bits());
  const Halide::Expr keep = Halide::select(is_plus_zero(prob), Halide::Internal::make_zero(u),
                                           Halide::Internal::make_const(u, -1));
  return Halide::reinterpret(t, bits_of(value) & keep);
}
// A term of P.V. v_finite says that no element of V (of any key, attended or not) is NaN or
// infinite: then a masked key's prob of exactly 0 adds exactly 0, and the product is taken as it
// is. Otherwise the value is masked first (masked_by_prob: a vpandd per FMA, +10-25% measured on
// AVX-512). Schedules specialise the P.V stage on v_finite (schedules/schedule.cpp), so the
// fast form costs nothing but the scan of V that decides it.
inline Halide::Expr pv_term(const Halide::Expr& prob, const Halide::Expr& value,
                            const Halide::Expr& v_finite) {
  return prob * Halide::select(v_finite, value, masked_by_prob(prob, value));
}

// exp(x) for x <= 0 as used by softmax: a polynomial of degree 5 (relative error 3.8e-7 over
// [-87, 0]), with arguments that would underflow (x <= -88, -inf) exactly 0, and NaN for NaN (a
// NaN score reaches its row). native: by the native code that use_native_exp adds (AVX-512's
// vscalefps applies 2^n; 10 vector ops against 16): the same polynomial, exactly 0 below -87;
// values differ from the portable form's by rounding only (how 2^n is applied).
Halide::Expr softmax_exp(const Halide::Expr& x, bool native = false);
// exp(x) for x <= 0 where the result is rounded to bf16 next (relative error 2^-9): a cubic
// (relative error 1.0e-4) and the power of two's exponent by adding 1.5 * 2^23, which rounds to
// an integer without a round instruction (AVX-512 has none on 16 lanes in Halide 14's x86
// codegen: vroundps on two halves). Also 0 for x <= -88, NaN for NaN.
// native: by the native code that use_native_exp adds: the same cubic, 0 below -87 and NaN for
// NaN; values differ from the portable form's by the rounding of the reduction only (an FMA
// there).
Halide::Expr softmax_exp_bf16(const Halide::Expr& x, bool native = false);
// For a generator whose kernel computes a softmax: adds the native exps' code to its externs
// (get_externs_map()) and returns true where the target's row (the target table's, passed in by
// the generator) has it (row_scales_exp in core/targets.h: the x86 rows with AVX-512); the kernel's
// softmax_exp and softmax_exp_bf16 calls may then pass native.
bool use_native_exp(const ExternsMap& externs, const Halide::Target& target, const TargetRow& row);

// acc / sum, or 0 where nothing was attended (sum exactly +0); NaN sums stay NaN.
inline Halide::Expr normalise(const Halide::Expr& acc, const Halide::Expr& sum) {
  return acc * Halide::select(is_plus_zero(sum), 0.0f, 1.0f / sum);
}

// Per key block of `block` keys: its max, exps relative to it, their sum and their product with
// V (pv_term, with v_finite). scores is (key, row, head, batch) and v (d, key, head, batch); the
// Funcs defined are
//   block_max (kb, row, head, batch), probs (key, row, head, batch) = exp(score - block max)
//   (0 where masked), block_sum (kb, row, head, batch), block_pv (d, kb, row, head, batch),
// summing over the keys kb * block + rk. With v_scale (key, head, batch) defined (a quantised V,
// whose values are finite: integers as f32), block_pv sums probs_scaled * v instead, the scale
// folded into the probability of its key: probs_scaled (key, row, head, batch) = probs * v_scale,
// or 0 where probs is +0, so that a key not attended adds 0 whatever its scale (NaN say).
// A stage of its own, one multiply per key and row a schedule may vectorise over the keys, where
// folded into P.V it is a scalar multiply and broadcast per (key, row) beside the FMAs.
struct KeyBlockVars {
  Halide::Var d, key, kb, row, head, batch;
};

struct KeyBlockStats {
  Halide::Func block_max, probs, block_sum, block_pv;
  Halide::Func probs_scaled;  // with v_scale only
  // Half-precision P.V only (half_chunk > 0): block_pv sums over rh (the half chunks of the
  // block, in order) the f32 value of block_pv_half (d, half chunk, kb, row, head, batch), the
  // f16 sum over rx (the keys of one half chunk) of probs_half * v, probs_half (key, row, head,
  // batch) being probs rounded to f16.
  Halide::Func probs_half, block_pv_half;
  Halide::RDom rx, rh;
};

// half_chunk > 0 (a divisor of block; v must then be Float(16)): P.V in half precision, with
// products and sums of half_chunk keys at a time in f16 and those partial sums added in f32
// (AttentionSpec::half_pv_chunk says why this stays within the f16 tolerance). prefix begins
// the Funcs' names; native_exp: softmax_exp's native form.
KeyBlockStats define_key_block_stats(const Halide::Func& scores, const Halide::Func& v, int block,
                                     const Halide::RDom& rk, const KeyBlockVars& vars,
                                     const Halide::Expr& v_finite, int half_chunk = 0,
                                     const Halide::Func& v_scale = Halide::Func(),
                                     const std::string& prefix = "", bool native_exp = false);

// A running softmax state, or one key block's statistics: the sum of exp(score - max) * v, the
// max and the sum of exp(score - max). A state with nothing attended yet has a masked max.
struct SoftmaxState {
  Halide::Expr acc, max, sum;
};

// The state before any block: Tuple(acc 0, max kMaskedScore, sum 0).
Halide::Tuple initial_softmax_state();
// The state before any block with a sink logit z (a term of the denominator no value belongs
// to): Tuple(acc 0, max z, sum 1), or the state above where z is -inf (or masked).
Halide::Tuple sink_softmax_state(const Halide::Expr& z);

// FlashAttention's merge of a key block into the running state, under the larger max: the
// larger side weighs 1 and the other exp(-|difference|), one exp per element; a side with
// nothing attended weighs 0. native_exp: softmax_exp's native form.
SoftmaxState online_merge(const SoftmaxState& running, const SoftmaxState& block,
                          bool native_exp = false);

}  // namespace attngen
