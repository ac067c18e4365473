// The attention algorithm, written once and shared by every generator.
//
// Only the *what* lives here (see ../shared/design/semantics.md and docs/semantics.md); the
// *how* (tiling, vectorisation, where intermediates live) is in schedules/. The Funcs built here
// are returned in small structs so a schedule never re-derives the algorithm.
//
// Dimension order is Halide's innermost-first: a BSHD tensor [B, S, H, D] is (d, h, s, b).
#pragma once

#include "Halide.h"

namespace attngen {

enum class MaskKind { kNone, kCausal };
enum class MaskTensor { kNone, kBool, kAdditive };

// Compile-time shape of an attention kernel (generator params).
struct AttentionSpec {
  int head_dim_qk = 64;
  int head_dim_v = 64;
  MaskKind mask = MaskKind::kNone;
  MaskTensor mask_tensor = MaskTensor::kNone;
  bool softcap = false;
};

// What the attention algorithm reads. Funcs are (d, h, s, b); kv_len is (b); mask is
// (j, i, h, b) and only defined when spec.mask_tensor != kNone.
struct AttentionInputs {
  Halide::Func q, k, v, kv_len, mask;
  Halide::Expr seq_q, seq_kv, heads_q, heads_kv;
  Halide::Expr scale, softcap, bottom_right;
};

struct AttentionFuncs {
  Halide::Var d{"d"}, j{"j"}, i{"i"}, h{"h"}, b{"b"};
  Halide::RDom rd, rj;
  Halide::Func q;        // q with the query index clamped: schedules may round tiles up.
  Halide::Func dot;      // (j, i, h, b) raw q.k
  Halide::Func scores;   // (j, i, h, b) scaled, capped, masked (-inf where not attended)
  Halide::Func row_max;  // (i, h, b)
  Halide::Func probs;    // (j, i, h, b) unnormalised exp(scores - row_max), 0 where masked
  Halide::Func row_sum;  // (i, h, b)
  Halide::Func acc;      // (d, i, h, b) sum_j probs * v
  Halide::Func out;      // (d, h, i, b) normalised output, 0 for fully masked rows
};

AttentionFuncs define_attention(const AttentionSpec& spec, const AttentionInputs& in);

// y(n, s, b) = sum_e x(e, s, b) * w(e, n) + bias(n): PyTorch nn.Linear with weight [N, E].
struct LinearShape {
  Halide::Expr in_features, out_features, rows;  // E, N and the extent of s
};

struct LinearFuncs {
  Halide::Var e{"e"}, n{"n"}, s{"s"}, b{"b"};
  Halide::RDom re;
  Halide::Func x;    // (e, s, b) input rows, clamped along s
  Halide::Func w;    // (e, n) weights as read by the product; schedules stage it transposed
  Halide::Func sum;  // (n, s, b) bias + x.w
  Halide::Func out;  // (n, s, b)
};

LinearFuncs define_linear(const Halide::Func& x, const Halide::Func& w, const Halide::Func& bias,
                          const LinearShape& shape, const std::string& name);

// exp(x) for x <= 0 as used by softmax: Halide's vectorisable polynomial, with arguments that
// would underflow flushed to exactly 0 (fast_exp returns garbage there).
Halide::Expr softmax_exp(const Halide::Expr& x);

}  // namespace attngen
