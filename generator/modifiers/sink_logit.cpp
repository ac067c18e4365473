// A learned sink logit per query head (gpt-oss; docs/semantics.md, "Modifiers"): z_h joins every
// row's softmax denominator only, P_ij = exp(s_ij) / (exp(z_h) + sum_j exp(s_ij)), as a key no
// value belongs to. It enters the row's max and sum once (the kernels' running state starts from
// it), so the weights of a row sum to less than 1 and a row that attends nothing still gives 0.
// The logits are a tensor [Hq] (-inf: no sink for that head).
#include "generator/modifier.h"

namespace attngen {
namespace {

Modifier sink_logit() {
  Modifier m;
  m.layout.name = "sink_logit";
  m.layout.sink = true;
  m.layout.tensors = 1;
  m.layout.tensor[0] = {"logits", DType::kF32, 1, {ModifierDim::kHq}};
  m.sink = [](const Halide::Expr& h, const ModifierParams& p) { return p.tensors[0](h); };
  return m;
}

}  // namespace

ATTNGEN_MODIFIER(sink_logit, sink_logit());

}  // namespace attngen
