#include "generator/attention_algorithm.h"

#include <limits>

namespace attngen {

using namespace Halide;

Expr softmax_exp(const Expr& x) {
  // Below -87.3, exp(x) is under FLT_MIN; the softmax row maximum contributes exp(0) = 1, so
  // flushing those terms to 0 changes nothing measurable and keeps fast_exp in its valid range.
  return select(x < -87.0f, 0.0f, fast_exp(max(x, -87.0f)));
}

AttentionFuncs define_attention(const AttentionSpec& spec, const AttentionInputs& in) {
  AttentionFuncs f;
  const Var &d = f.d, &j = f.j, &i = f.i, &h = f.h, &b = f.b;
  const float neg_inf = -std::numeric_limits<float>::infinity();

  f.rd = RDom(0, spec.head_dim_qk, "rd");
  f.rj = RDom(0, in.seq_kv, "rj");
  const RDom &rd = f.rd, &rj = f.rj;

  // Grouped-query attention: query head h reads kv head h / group.
  Expr group = in.heads_q / in.heads_kv;
  Expr hk = h / group;

  // Reads along the sequence are clamped, so a schedule may compute whole tiles past the end
  // of a sequence without reading out of bounds; the extra rows and columns are never used.
  f.q = Func("q_tile");
  f.q(d, h, i, b) = in.q(d, h, clamp(i, 0, in.seq_q - 1), b);
  Expr kj = clamp(j, 0, in.seq_kv - 1);

  f.dot = Func("dot");
  f.dot(j, i, h, b) = 0.0f;
  f.dot(j, i, h, b) += f.q(rd, h, i, b) * in.k(rd, hk, kj, b);

  Expr s = f.dot(j, i, h, b) * in.scale;
  if (spec.softcap) {
    s = in.softcap * tanh(s / in.softcap);
  }

  // Position alignment: query i sits at absolute position offset + i.
  Expr kv_len = in.kv_len(b);
  Expr offset = select(in.bottom_right, kv_len - in.seq_q, 0);
  Expr attend = j < kv_len;
  if (spec.mask == MaskKind::kCausal) {
    attend = attend && j <= offset + i;
  }
  Expr mi = clamp(i, 0, in.seq_q - 1);
  if (spec.mask_tensor == MaskTensor::kBool) {
    attend = attend && in.mask(kj, mi, h, b) != 0;
  } else if (spec.mask_tensor == MaskTensor::kAdditive) {
    s = s + in.mask(kj, mi, h, b);
  }

  f.scores = Func("scores");
  f.scores(j, i, h, b) = select(attend, s, neg_inf);

  f.row_max = Func("row_max");
  f.row_max(i, h, b) = neg_inf;
  f.row_max(i, h, b) = max(f.row_max(i, h, b), f.scores(rj, i, h, b));

  // A fully masked row has max -inf: use 0 so every term is exp(-inf) = 0, never NaN.
  Expr m = f.row_max(i, h, b);
  Expr m_safe = select(m == neg_inf, 0.0f, m);
  f.probs = Func("probs");
  f.probs(j, i, h, b) = softmax_exp(f.scores(j, i, h, b) - m_safe);

  f.row_sum = Func("row_sum");
  f.row_sum(i, h, b) = 0.0f;
  f.row_sum(i, h, b) += f.probs(rj, i, h, b);

  f.acc = Func("acc");
  f.acc(d, i, h, b) = 0.0f;
  f.acc(d, i, h, b) += f.probs(rj, i, h, b) * in.v(d, hk, rj, b);

  Expr l = f.row_sum(i, h, b);
  f.out = Func("attention");
  f.out(d, h, i, b) = f.acc(d, i, h, b) * select(l > 0.0f, 1.0f / l, 0.0f);
  return f;
}

LinearFuncs define_linear(const Func& x, const Func& w, const Func& bias, const LinearShape& shape,
                          const std::string& name) {
  LinearFuncs f;
  const Var &e = f.e, &n = f.n, &s = f.s, &b = f.b;
  f.re = RDom(0, shape.in_features, name + "_re");
  // Clamped like the attention inputs, so schedules may round n and s tiles up.
  Expr nc = clamp(n, 0, shape.out_features - 1);
  f.x = Func(name + "_x");
  f.x(e, s, b) = x(e, clamp(s, 0, shape.rows - 1), b);
  f.w = Func(name + "_w");
  f.w(e, n) = w(e, nc);
  f.sum = Func(name + "_sum");
  f.sum(n, s, b) = bias(nc);
  f.sum(n, s, b) += f.x(f.re, s, b) * f.w(f.re, n);
  f.out = Func(name);
  f.out(n, s, b) = f.sum(n, s, b);
  return f;
}

}  // namespace attngen
