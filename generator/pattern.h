// The kinds a kernel variant is made of: mask kinds, mask tensors and sparse patterns
// (docs/semantics.md, "Masks"). Plain C++, no Halide: the variant model (generator/variant.h),
// the algorithm (generator/attention_algorithm.h) and the runtime share these definitions.
#pragma once

namespace attngen {

enum class MaskKind { kNone, kCausal };
enum class MaskTensor { kNone, kBool, kAdditive };

// Sparse attention patterns, for query position p = offset + i and key j, all combinable with
// causal:
//   kWindow       p - left <= j <= p + right (-1: unbounded side); a local window w is
//                 left = right = w - 1
//   kStrided      |p - j| < stride, or (p - j) mod stride == 0
//   kBlockSparse  layout[i / block, j / block] != 0, layout a run-time input
//   kGlobalLocal  |p - j| <= local, or j < global_tokens, or p < global_tokens
enum class Pattern { kNone, kWindow, kStrided, kBlockSparse, kGlobalLocal };

struct PatternSpec {
  Pattern kind = Pattern::kNone;
  int left = -1, right = -1;
  int stride = 0;
  int block = 0;
  int local = 0;
  int global_tokens = 0;
};

}  // namespace attngen
