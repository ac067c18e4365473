// Attention sinks (StreamingLLM; docs/semantics.md, "Modifiers"): the first `sinks` keys are
// attended by every query, the others within the left window, p - window <= j, where `window`
// is >= 0 (a negative window: no window, every key). With the causal mask the keys past the
// query stay masked. Both are scalars, their values rounded down to whole keys. Its blocks are
// skipped by the test derived from the mask: a long sequence's tile visits the sink block and
// its window's.
#include "generator/modifier.h"

namespace attngen {
namespace {

Modifier sinks() {
  Modifier m;
  m.layout.name = "sinks";
  m.layout.mask = true;
  m.layout.scalars = 2;
  m.layout.scalar[0] = "sinks";
  m.layout.scalar[1] = "window";
  m.mask = [](const ModifierIndex& at, const ModifierParams& p) {
    // (Rounded down in f32 and clamped into int range: any f32 scalar is a valid call.)
    const auto whole = [](const Halide::Expr& x) {
      return Halide::cast<int>(Halide::clamp(Halide::floor(x), -1.0f, 1073741824.0f));
    };
    const Halide::Expr n = whole(p.scalars[0]), window = whole(p.scalars[1]);
    return at.j < n || window < 0 || at.p - window <= at.j;
  };
  return m;
}

}  // namespace

ATTNGEN_MODIFIER(sinks, sinks());

}  // namespace attngen
