// Document masking (packed batches; docs/semantics.md, "Modifiers"): a query attends only the
// keys of its own document, doc[b, p] == doc[b, j], with the document ids of the packed sequence
// a tensor [B, Skv] and p the query's position (clamped to the sequence). With the causal mask,
// causal inside each document.
#include "generator/modifier.h"

namespace attngen {
namespace {

Modifier document() {
  Modifier m;
  m.layout.name = "document";
  m.layout.mask = true;
  m.layout.tensors = 1;
  m.layout.tensor[0] = {"ids", DType::kI32, 2, {ModifierDim::kB, ModifierDim::kSkv}};
  m.mask = [](const ModifierIndex& at, const ModifierParams& p) {
    const Halide::Func& ids = p.tensors[0];  // (j, b)
    return ids(at.j, at.b) == ids(Halide::clamp(at.p, 0, at.seq_kv - 1), at.b);
  };
  return m;
}

}  // namespace

ATTNGEN_MODIFIER(document, document());

}  // namespace attngen
