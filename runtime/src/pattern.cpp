// Sparse attention patterns on the host side: the definitions of docs/semantics.md, for tools
// that draw or count them (the kernels evaluate the same definitions in generated code).
#include <cstdlib>

#include "attngen/attngen.h"

extern "C" {

attngen_pattern attngen_pattern_local(int32_t w) {
  attngen_pattern p{};
  p.kind = ATTNGEN_PATTERN_WINDOW;
  p.window_left = p.window_right = w > 0 ? w - 1 : 0;
  return p;
}

int attngen_pattern_attends(const attngen_pattern* p, int64_t pos, int64_t i, int64_t j) {
  if (p == nullptr) return 0;
  switch (p->kind) {
    case ATTNGEN_PATTERN_NONE:
      return 1;
    case ATTNGEN_PATTERN_WINDOW:
      return (p->window_left < 0 || j >= pos - p->window_left) &&
             (p->window_right < 0 || j <= pos + p->window_right);
    case ATTNGEN_PATTERN_STRIDED:
      return p->stride > 0 && (std::llabs(pos - j) < p->stride || (pos - j) % p->stride == 0);
    case ATTNGEN_PATTERN_BLOCK_SPARSE: {
      const attngen_tensor* l = p->layout;
      if (p->block <= 0 || l == nullptr || l->data == nullptr || l->rank != 2 || i < 0 || j < 0) {
        return 0;
      }
      const int64_t r = i / p->block, c = j / p->block;
      if (r >= l->shape[0] || c >= l->shape[1]) return 0;
      return static_cast<const uint8_t*>(l->data)[r * l->strides[0] + c * l->strides[1]] != 0;
    }
    case ATTNGEN_PATTERN_GLOBAL_LOCAL:
      return std::llabs(pos - j) <= p->local || j < p->global_tokens || pos < p->global_tokens;
    default:
      return 0;
  }
}

}  // extern "C"
