// ALiBi (Press et al., "Train Short, Test Long"; docs/semantics.md, "Modifiers"): a per-head
// linear bias of the score by the key's distance from the query position, s + m_h (j - p), or
// the symmetric s - m_h |j - p| (scalar `symmetric` = 1) of bidirectional models. The slopes are
// a tensor (attngen_alibi_slopes() gives the standard ones).
#include "generator/modifier.h"

namespace attngen {
namespace {

Modifier alibi() {
  Modifier m;
  m.layout.name = "alibi";
  m.layout.score = true;
  m.layout.tensors = 1;
  m.layout.tensor[0] = {"slopes", DType::kF32, 1, {ModifierDim::kHq}};
  m.layout.scalars = 1;
  m.layout.scalar[0] = "symmetric";
  m.score = [](const Halide::Expr& s, const ModifierIndex& at, const ModifierParams& p) {
    const Halide::Expr slope = p.tensors[0](at.h);
    const Halide::Expr distance = Halide::cast<float>(at.j - at.p);
    return Halide::select(p.scalars[0] != 0.0f, s - slope * Halide::abs(distance),
                          s + slope * distance);
  };
  return m;
}

}  // namespace

ATTNGEN_MODIFIER(alibi, alibi());

}  // namespace attngen
