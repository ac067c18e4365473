// Document masking (packed batches; docs/semantics.md, "Modifiers"): a query attends only the
// keys of its own document, doc[b, p] == doc[b, j], with the document ids of the packed sequence
// a tensor [B, Skv] and p the query's position (clamped to the sequence). With the causal mask,
// causal inside each document.
//
// Blocks are classified per call: each key block's and each query tile's smallest and largest
// id (small stages, one pass over the ids), then one byte per (block, tile) saying whether their
// id ranges meet; a tile visits those blocks only, so a packed batch costs about the pairs inside
// its documents (bench/RESULTS.md, "Modifiers: block skipping").
#include <limits>

#include "generator/modifier.h"

namespace attngen {
namespace {

using Halide::Expr;
using Halide::Func;

// (first, count) of ids' values: Tuple(min, max) over the indices first + r, r < count, clamped
// into the sequence.
Func id_range(const Func& ids, const Halide::Var& x, const Halide::Var& b, const Expr& first,
              const Expr& count, const Expr& seq_kv, const std::string& name) {
  Halide::RDom r(0, count, name + "_r");
  Func range(name);
  range(x, b) =
      Halide::Tuple(std::numeric_limits<int32_t>::max(), std::numeric_limits<int32_t>::min());
  const Expr id = ids(Halide::clamp(first + r, 0, seq_kv - 1), b);
  range(x, b) = Halide::Tuple(Halide::min(range(x, b)[0], id), Halide::max(range(x, b)[1], id));
  return range;
}

Modifier document() {
  Modifier m;
  m.layout.name = "document";
  m.layout.mask = true;
  m.layout.tensors = 1;
  m.layout.tensor[0] = {"ids", DType::kI32, 2, {ModifierDim::kB, ModifierDim::kSkv}};
  m.mask = [](const ModifierIndex& at, const ModifierParams& p) {
    const Func& ids = p.tensors[0];  // (j, b)
    return ids(at.j, at.b) == ids(Halide::clamp(at.p, 0, at.seq_kv - 1), at.b);
  };
  m.visit = [](const ModifierBlock& at, const ModifierParams& p) {
    const Func& ids = p.tensors[0];
    Halide::Var x("document_x");
    const Func keys =
        id_range(ids, x, at.b, x * at.key_block, at.key_block, at.seq_kv, "document_key_ids");
    const Func rows = id_range(ids, x, at.b, at.offset + x * at.query_tile, at.query_tile,
                               at.seq_kv, "document_row_ids");
    // Each (block, tile)'s answer as a byte, so that the kernel's test of a block is one load.
    Halide::Var kb("document_kb"), qt("document_qt");
    Func visits("document_visits");
    visits(kb, qt, at.b) = Halide::cast<uint8_t>(keys(kb, at.b)[0] <= rows(qt, at.b)[1] &&
                                                 rows(qt, at.b)[0] <= keys(kb, at.b)[1]);
    p.stages->push_back(keys);
    p.stages->push_back(rows);
    p.stages->push_back(visits);
    return visits(at.key_block_index, at.query_tile_index, at.b) != 0;
  };
  return m;
}

}  // namespace

ATTNGEN_MODIFIER(document, document());

}  // namespace attngen
