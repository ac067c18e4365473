// Modifiers in the algorithm (docs/semantics.md, "Modifiers"; their layouts: core/modifier.h):
// a score modifier's and a mask modifier's Halide expressions over the indices, the score and
// the run-time parameters, registered by name. The library's are in generator/modifiers/, one
// file each; the attention algorithm applies the one its variant names (MODIFIER) in the score
// tile of every form, where the soft cap is.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "Halide.h"
#include "core/modifier.h"

namespace attngen {

// Where a score sits: batch b, query head h, query row i, key j (both within the call's
// extents), and the query's position p (i plus the alignment's offset, docs/semantics.md: it may
// lie outside [0, Skv)); the call's Hq, Sq and Skv.
struct ModifierIndex {
  Halide::Expr b, h, i, j, p, heads_q, seq_q, seq_kv;
};

// A modifier's run-time parameters in its layout's order: its tensors as Funcs over their
// dimensions innermost first (a [Hq] tensor is slopes(h)), and its scalars.
struct ModifierParams {
  std::vector<Halide::Func> tensors;
  std::vector<Halide::Expr> scalars;
};

struct Modifier {
  ModifierLayout layout;
  // The score after the modifier (layout.score), whether the pair may attend (layout.mask).
  std::function<Halide::Expr(const Halide::Expr& score, const ModifierIndex&,
                             const ModifierParams&)>
      score;
  std::function<Halide::Expr(const ModifierIndex&, const ModifierParams&)> mask;
};

// Adds a modifier to the generator's registry (at static initialisation: ATTNGEN_MODIFIER);
// throws on a name given twice or a layout that does not match its functions.
bool register_modifier(const Modifier& modifier);

// The modifier of that name, or nullptr.
const Modifier* find_modifier(const std::string& name);

// The registered names, for messages.
std::string modifier_names();

}  // namespace attngen

// Registers `modifier` (a Modifier) when the generator starts.
#define ATTNGEN_MODIFIER(id, modifier) \
  static const bool attngen_modifier_registered_##id = ::attngen::register_modifier(modifier)
