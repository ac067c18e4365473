// A modifier of this application's own, compiled into its kernels by its own generator
// (CMakeLists.txt): a distance-decayed bias with a horizon. Each score s of query position p and
// key j becomes s - m_h log(1 + |p - j|), with a slope m_h per query head (a tensor F32 [Hq]), and
// keys farther than `horizon` from p (a scalar; < 0: none) are masked. The kernels skip the key
// blocks the horizon rules out: the generator derives that test from the mask below by interval
// arithmetic, so the modifier needs no block test of its own (attngen's docs/variants.md, "A
// modifier of your own").
#include "generator/modifier.h"

namespace {

attngen::Modifier decay() {
  attngen::Modifier m;
  m.layout.name = "decay";
  m.layout.score = true;
  m.layout.mask = true;
  m.layout.tensors = 1;
  m.layout.tensor[0] = {"slopes", attngen::DType::kF32, 1, {attngen::ModifierDim::kHq}};
  m.layout.scalars = 1;
  m.layout.scalar[0] = "horizon";
  m.score = [](const Halide::Expr& s, const attngen::ModifierIndex& at,
               const attngen::ModifierParams& params) {
    const Halide::Expr distance = Halide::cast<float>(Halide::abs(at.p - at.j));
    return s - params.tensors[0](at.h) * Halide::log(1.0f + distance);
  };
  m.mask = [](const attngen::ModifierIndex& at, const attngen::ModifierParams& params) {
    const Halide::Expr horizon = params.scalars[0];
    // Two one-sided distances: Halide 14's interval arithmetic bounds |p - j| <= horizon as
    // always true over a block, which would skip nothing.
    return horizon < 0.0f || (Halide::cast<float>(at.p - at.j) <= horizon &&
                              Halide::cast<float>(at.j - at.p) <= horizon);
  };
  return m;
}

}  // namespace

ATTNGEN_MODIFIER(decay, decay());
