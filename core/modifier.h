// Modifiers (docs/semantics.md, "Modifiers"): what a modifier declares of itself, Halide-free, so
// that the generator, the kernels' descriptors and the runtime read one layout. A score modifier
// maps (s, b, h, i, j) to a new score after the scale and the soft cap; a mask modifier says
// whether (b, h, i, j) may attend; a sink logit z_h joins every row's softmax denominator. Its
// run-time parameters are tensors, each of one dtype and a shape in the call's dims, and f32
// scalars, passed by name order (attngen_modifier). The expressions live with the algorithm
// (generator/modifier.h); the library's modifiers each in their own file (generator/modifiers/).
#pragma once

#include <cstring>

#include "core/dtype.h"

namespace attngen {

inline constexpr int kMaxModifierTensors = 4;  // ATTNGEN_MAX_MODIFIER_TENSORS
inline constexpr int kMaxModifierScalars = 4;  // ATTNGEN_MAX_MODIFIER_SCALARS
inline constexpr int kMaxModifierRank = 4;

// A dimension of a modifier's tensor, in the call's dims (or any extent >= 1).
enum class ModifierDim : int32_t { kB, kHq, kHkv, kSq, kSkv, kAny };

inline const char* modifier_dim_name(ModifierDim d) {
  static const char* const kNames[] = {"B", "Hq", "Hkv", "Sq", "Skv", "any"};
  return kNames[static_cast<int>(d)];
}

struct ModifierTensor {
  const char* name = "";
  DType dtype = DType::kF32;
  int rank = 1;
  ModifierDim dims[kMaxModifierRank] = {};  // outermost first
};

struct ModifierLayout {
  const char* name = "";  // in variants (MODIFIER name), kernel names and attngen_modifier
  bool score = false;     // has a score modifier
  bool mask = false;      // has a mask modifier
  bool sink = false;      // has a sink logit (a term of every row's softmax denominator)
  int tensors = 0;
  ModifierTensor tensor[kMaxModifierTensors];
  int scalars = 0;
  const char* scalar[kMaxModifierScalars] = {};
};

// A modifier's name: letters, digits and '_', starting with a letter, at most 31 characters (it
// becomes part of kernel and function names).
inline bool valid_modifier_name(const char* name) {
  const size_t n = std::strlen(name);
  if (n == 0 || n > 31) return false;
  for (size_t i = 0; i < n; ++i) {
    const char c = name[i];
    const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    if (!(letter || c == '_' || (i > 0 && c >= '0' && c <= '9'))) return false;
  }
  return true;
}

}  // namespace attngen
