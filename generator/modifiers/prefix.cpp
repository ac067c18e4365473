// Prefix-LM (docs/semantics.md, "Modifiers"): each sequence's first prefix[b] keys are attended
// by every query (the prompt, bidirectional), the rest causally, j < prefix[b] or j <= p; with
// prefix lengths a tensor [B] (0: causal, Skv or more: bidirectional). Used without the causal
// mask, which would cut the prefix. Its blocks are skipped by the test derived from the mask.
#include "generator/modifier.h"

namespace attngen {
namespace {

Modifier prefix() {
  Modifier m;
  m.layout.name = "prefix";
  m.layout.mask = true;
  m.layout.tensors = 1;
  m.layout.tensor[0] = {"lengths", DType::kI32, 1, {ModifierDim::kB}};
  m.mask = [](const ModifierIndex& at, const ModifierParams& p) {
    return at.j < p.tensors[0](at.b) || at.j <= at.p;
  };
  return m;
}

}  // namespace

ATTNGEN_MODIFIER(prefix, prefix());

}  // namespace attngen
