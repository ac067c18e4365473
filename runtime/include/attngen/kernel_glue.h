// Adapts a generated Halide function to the uniform attngen_kernel_info::run signature.
// Included only by the glue that attngen_add_kernel() generates (cmake/kernel_glue.cpp.in).
#ifndef ATTNGEN_KERNEL_GLUE_H_
#define ATTNGEN_KERNEL_GLUE_H_

#include "HalideRuntime.h"
#include "attngen/kernel.h"

namespace attngen::glue {

// Argument orders follow the generators' Input declarations (generator/*_generator.cpp).
template <attngen_op Op, attngen_mask_tensor_kind MaskTensor, auto Fn>
int call(void* uc, const attngen_kernel_args* a) {
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

// The runtime hands kernels host buffers. A GPU kernel copies its inputs to the device itself;
// here its output comes back to the host and every device allocation of the call is released.
template <attngen_op Op, attngen_mask_tensor_kind MaskTensor, bool Gpu, auto Fn>
int run(void* uc, const attngen_kernel_args* a) {
  int result = call<Op, MaskTensor, Fn>(uc, a);
  if constexpr (Gpu) {
    if (result == 0) result = halide_copy_to_host(uc, a->out);
    halide_buffer_t* const buffers[] = {a->q, a->k,  a->v,    a->kv_len, a->mask, a->x,
                                        a->w, a->w2, a->bias, a->bias2,  a->out};
    for (halide_buffer_t* buf : buffers) {
      if (buf != nullptr && buf->device != 0) {
        const int freed = halide_device_free(uc, buf);
        if (result == 0) result = freed;
      }
    }
  }
  return result;
}

}  // namespace attngen::glue

#endif  // ATTNGEN_KERNEL_GLUE_H_
