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
// extents), and the query's position p (the row plus the alignment's offset, docs/semantics.md:
// it may lie outside [0, Skv)); the call's Hq, Sq and Skv; the offset itself (within [-Sq, Skv]
// for any valid call), and the row before it is clamped into the call (p = offset + row; a
// schedule computes rows past Sq - 1 up to a whole tile, never read), bounded for bounds
// inference without a clamp: an index affine in it stays a vector load where one in i is a
// gather.
struct ModifierIndex {
  Halide::Expr b, h, i, j, p, heads_q, seq_q, seq_kv, offset, row;
};

// A modifier's run-time parameters in its layout's order: its tensors as Funcs over their
// dimensions innermost first (a [Hq] tensor is slopes(h)) with their extents (innermost first),
// and its scalars. A modifier's functions may define stages, Funcs that the kernel computes once
// per call before the attention (a table by distance, per-block ranges of a tensor), and add them
// to `stages`.
struct ModifierParams {
  std::vector<Halide::Func> tensors;
  std::vector<std::vector<Halide::Expr>> extents;
  std::vector<Halide::Expr> scalars;
  std::vector<Halide::Func>* stages = nullptr;
};

// A (query tile, key block) pair of a key-block kernel (generator/attention_algorithm.h): batch
// b, the query heads h .. h + heads - 1 (attention: the one head h; decode: the query heads of a
// kv head), the tile's query_tile rows from query_tile_index * query_tile, at positions offset +
// row, and the block's key_block keys from key_block_index * key_block. The last tile and block
// may pass Sq - 1 and Skv - 1 (those rows are never read, those keys never attended). b is the
// enclosing Func's Var: offset is in terms of it, and a modifier's stages may be defined over it.
// A block test holds for the whole range: false only where no pair of any of its heads attends.
struct ModifierBlock {
  Halide::Var b;
  Halide::Expr h, heads = 1;
  Halide::Expr query_tile_index, key_block_index;
  Halide::Expr query_tile = 1;
  int key_block = 1;
  Halide::Expr offset;
  Halide::Expr heads_q, seq_q, seq_kv;

  Halide::Expr first_row() const { return query_tile_index * query_tile; }
  Halide::Expr last_row() const { return first_row() + (query_tile - 1); }
  Halide::Expr first_position() const { return offset + first_row(); }
  Halide::Expr last_position() const { return offset + last_row(); }
  Halide::Expr first_key() const { return key_block_index * key_block; }
  Halide::Expr last_key() const { return first_key() + (key_block - 1); }
};

struct Modifier {
  ModifierLayout layout;
  // The score after the modifier (layout.score), whether the pair may attend (layout.mask).
  std::function<Halide::Expr(const Halide::Expr& score, const ModifierIndex&,
                             const ModifierParams&)>
      score;
  std::function<Halide::Expr(const ModifierIndex&, const ModifierParams&)> mask;
  // A mask modifier's block test (optional): whether some pair of the block may attend, false
  // only where none does; kernels skip the blocks it rules out. Without it, modifier_block_visit
  // derives the test from `mask`.
  std::function<Halide::Expr(const ModifierBlock&, const ModifierParams&)> visit;
  // A sink logit (layout.sink): the logit z_h of query head h that joins every row's softmax
  // denominator, exp(z_h) + sum_j exp(s_j), as a key no value belongs to.
  std::function<Halide::Expr(const Halide::Expr& h, const ModifierParams&)> sink;
};

// Whether some pair of `block` may attend under the modifier's mask: its own block test, or
// else one derived from its mask by interval arithmetic over the block's rows, positions and
// keys (tensor reads at indices that do not vary over the block are single values; reads that
// do are unknown, and the pair may attend; over several heads, reads at indices involving h
// too). True for a modifier without a mask.
Halide::Expr modifier_block_visit(const Modifier& modifier, const ModifierBlock& block,
                                  const ModifierParams& params);

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
