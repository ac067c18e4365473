// Adapts a generated Halide function to the uniform attngen_kernel_info::run signature.
// Included only by the glue that attngen_add_kernel() generates (cmake/kernel_glue.cpp.in).
#ifndef ATTNGEN_KERNEL_GLUE_H_
#define ATTNGEN_KERNEL_GLUE_H_

#include "attngen/kernel.h"

namespace attngen::glue {

// Argument orders follow the generators' Input declarations (generator/*_generator.cpp).
template <attngen_op Op, attngen_mask_tensor_kind MaskTensor, auto Fn>
int run(void* uc, const attngen_kernel_args* a) {
  if constexpr (Op == ATTNGEN_OP_ATTENTION) {
    if constexpr (MaskTensor == ATTNGEN_MASK_TENSOR_NONE) {
      return Fn(uc, a->q, a->k, a->v, a->kv_len, a->scale, a->softcap, a->bottom_right != 0,
                a->out);
    } else {
      return Fn(uc, a->q, a->k, a->v, a->kv_len, a->scale, a->softcap, a->bottom_right != 0,
                a->mask, a->out);
    }
  } else if constexpr (Op == ATTNGEN_OP_LINEAR) {
    return Fn(uc, a->x, a->w, a->bias, a->out);
  } else {
    return Fn(uc, a->x, a->w, a->bias, a->w2, a->bias2, a->kv_len, a->bottom_right != 0, a->out);
  }
}

}  // namespace attngen::glue

#endif  // ATTNGEN_KERNEL_GLUE_H_
