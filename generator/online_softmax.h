// The softmax pieces shared by attention (generator/attention_algorithm.cpp) and decode
// (generator/decode_algorithm.cpp): the masked-score sentinel, exp, the per-key-block
// statistics and FlashAttention's online merge of them into a running (acc, max, sum).
#pragma once

#include "Halide.h"

namespace attngen {

// Masked scores hold a large finite negative value, never -inf: Halide compiles float code with
// fast-math flags (no NaNs, no infinities), under which a comparison with -inf may be folded
// away (seen on NEON: NaN rows). Anything at or below kMaskedBelow counts as masked; its exp
// relative to any real maximum flushes to exactly 0.
constexpr float kMaskedScore = -1e30f;
constexpr float kMaskedBelow = -1e29f;

inline Halide::Expr is_masked(const Halide::Expr& score) { return score <= kMaskedBelow; }

// exp(x) for x <= 0 as used by softmax: Halide's vectorisable polynomial, with arguments that
// would underflow (x <= -88) exactly 0.
Halide::Expr softmax_exp(const Halide::Expr& x);
// exp(x) for x <= 0 where the result is rounded to bf16 next (relative error 2^-9): a cubic
// (relative error 1.0e-4) and the power of two's exponent by adding 1.5 * 2^23, which rounds to
// an integer without a round instruction (AVX-512 has none on 16 lanes in Halide 14's x86
// codegen: vroundps on two halves). Also 0 for x <= -88.
Halide::Expr softmax_exp_bf16(const Halide::Expr& x);

// acc / sum, or 0 where nothing was attended (sum 0).
inline Halide::Expr normalise(const Halide::Expr& acc, const Halide::Expr& sum) {
  return acc * Halide::select(sum > 0.0f, 1.0f / sum, 0.0f);
}

// Per key block of `block` keys: its max, exps relative to it, their sum and their product with
// V. scores is (key, row, head, batch) and v (d, key, head, batch); the Funcs defined are
//   block_max (kb, row, head, batch), probs (key, row, head, batch) = exp(score - block max)
//   (0 where masked), block_sum (kb, row, head, batch), block_pv (d, kb, row, head, batch),
// summing over the keys kb * block + rk. With v_scale (key, head, batch) defined (a quantised V),
// block_pv sums probs * v_scale * v instead: the scale is folded into the probability of its key.
struct KeyBlockVars {
  Halide::Var d, key, kb, row, head, batch;
};

struct KeyBlockStats {
  Halide::Func block_max, probs, block_sum, block_pv;
  // Half-precision P.V only (half_chunk > 0): block_pv sums over rh (the half chunks of the
  // block, in order) the f32 value of block_pv_half (d, half chunk, kb, row, head, batch), the
  // f16 sum over rx (the keys of one half chunk) of probs_half * v, probs_half (key, row, head,
  // batch) being probs rounded to f16.
  Halide::Func probs_half, block_pv_half;
  Halide::RDom rx, rh;
};

// half_chunk > 0 (a divisor of block; v must then be Float(16)): P.V in half precision, with
// products and sums of half_chunk keys at a time in f16 and those partial sums added in f32
// (AttentionSpec::half_pv_chunk says why this stays within the f16 tolerance).
KeyBlockStats define_key_block_stats(const Halide::Func& scores, const Halide::Func& v, int block,
                                     const Halide::RDom& rk, const KeyBlockVars& vars,
                                     int half_chunk = 0,
                                     const Halide::Func& v_scale = Halide::Func());

// A running softmax state, or one key block's statistics: the sum of exp(score - max) * v, the
// max and the sum of exp(score - max). A state with nothing attended yet has a masked max.
struct SoftmaxState {
  Halide::Expr acc, max, sum;
};

// The state before any block: Tuple(acc 0, max kMaskedScore, sum 0).
Halide::Tuple initial_softmax_state();

// FlashAttention's merge of a key block into the running state, under the larger max: the
// larger side weighs 1 and the other exp(-|difference|), one exp per element; a side with
// nothing attended weighs 0.
SoftmaxState online_merge(const SoftmaxState& running, const SoftmaxState& block);

}  // namespace attngen
