// Sparse attention patterns on the host side, for tools that draw or count them: the
// definitions of generator/pattern.h, which the kernels evaluate in generated code.
#include "generator/pattern.h"
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
      return attngen::window_attends(pos, j, p->window_left, p->window_right);
    case ATTNGEN_PATTERN_STRIDED:
      return p->stride > 0 && attngen::strided_attends(pos, j, p->stride);
    case ATTNGEN_PATTERN_BLOCK_SPARSE: {
      const attngen_tensor* l = p->layout;
      if (p->block <= 0 || l == nullptr || l->data == nullptr || l->rank != 2 || i < 0 || j < 0) {
        return 0;
      }
      return attngen::block_sparse_attends(i, j, p->block, [l](int64_t r, int64_t c) {
        if (r >= l->shape[0] || c >= l->shape[1]) return false;
        return static_cast<const uint8_t*>(l->data)[r * l->strides[0] + c * l->strides[1]] != 0;
      });
    }
    case ATTNGEN_PATTERN_GLOBAL_LOCAL:
      return attngen::global_local_attends(pos, j, p->local, p->global_tokens);
    default:
      return 0;
  }
}

}  // extern "C"
