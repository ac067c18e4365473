// Adapts a generated Halide function to the uniform attngen_kernel_info::run signature.
// Included only by the glue that attngen_add_kernel() generates (cmake/kernel_glue.cpp.in).
#ifndef ATTNGEN_KERNEL_GLUE_H_
#define ATTNGEN_KERNEL_GLUE_H_

#include <tuple>
#include <utility>

#include "HalideRuntime.h"
#include "attngen/kernel.h"

namespace attngen::glue {

// What a generated attention function takes beyond the common arguments.
enum Feature : int {
  kMaskTensor = 1,      // a mask input after bottom_right
  kLayout = 2,          // a block-sparse layout input after it
  kWeights = 4,         // a weights output after out
  kLse = 8,             // a log-sum-exp output after that
  kGpu = 16,            // a GPU kernel: see run()
  kGeneric = 32,        // a generic attention kernel: run-time options before out
  kPatternValues = 64,  // a generic pattern kernel: the pattern's parameters after them
  kKvScales = 128,      // a decode kernel over an I8 cache: its scales after v
};

// A modifier kernel's parameters before out (attention, decode): `tensors` tensors, then `scalars`
// scalars (attngen_kernel_info::modifier), in the features' bits 8-10 and 11-13.
constexpr int modifier_features(int tensors, int scalars) { return tensors << 8 | scalars << 11; }
constexpr int modifier_tensor_count(int features) { return (features >> 8) & 7; }
constexpr int modifier_scalar_count(int features) { return (features >> 11) & 7; }

template <size_t... T, size_t... S>
auto modifier_args(const attngen_kernel_args* a, std::index_sequence<T...>,
                   std::index_sequence<S...>) {
  return std::make_tuple(a->modifier_tensors[T]..., a->modifier_scalars[S]...);
}

template <int Features>
auto modifier_args(const attngen_kernel_args* a) {
  return modifier_args(a, std::make_index_sequence<modifier_tensor_count(Features)>(),
                       std::make_index_sequence<modifier_scalar_count(Features)>());
}

template <bool Present, typename T>
auto optional_arg(T value) {
  if constexpr (Present) {
    return std::make_tuple(value);
  } else {
    return std::tuple<>();
  }
}

// Argument orders follow the generators' Input declarations (generator/*_generator.cpp); inputs
// and outputs added in configure() follow the declared ones.
template <attngen_op Op, int Features, auto Fn>
int call(void* uc, const attngen_kernel_args* a) {
  if constexpr (Op == ATTNGEN_OP_ATTENTION && (Features & kGeneric) != 0) {
    const attngen_pattern& p = a->pattern;
    return std::apply(
        Fn, std::tuple_cat(
                std::make_tuple(uc, a->q, a->k, a->v, a->kv_len, a->scale, a->softcap,
                                a->bottom_right != 0),
                optional_arg<(Features & kLayout) != 0>(a->layout),
                std::make_tuple(a->causal != 0, static_cast<int32_t>(a->mask_kind), a->bool_mask,
                                a->add_mask),
                std::tuple_cat(optional_arg<(Features & kPatternValues) != 0>(p.window_left),
                               optional_arg<(Features & kPatternValues) != 0>(p.window_right),
                               optional_arg<(Features & kPatternValues) != 0>(p.stride),
                               optional_arg<(Features & kPatternValues) != 0>(p.block),
                               optional_arg<(Features & kPatternValues) != 0>(p.local),
                               optional_arg<(Features & kPatternValues) != 0>(p.global_tokens)),
                modifier_args<Features>(a), std::make_tuple(a->out),
                optional_arg<(Features & kWeights) != 0>(a->weights),
                optional_arg<(Features & kLse) != 0>(a->lse)));
  } else if constexpr (Op == ATTNGEN_OP_ATTENTION) {
    return std::apply(Fn, std::tuple_cat(std::make_tuple(uc, a->q, a->k, a->v, a->kv_len, a->scale,
                                                         a->softcap, a->bottom_right != 0),
                                         optional_arg<(Features & kMaskTensor) != 0>(a->mask),
                                         optional_arg<(Features & kLayout) != 0>(a->layout),
                                         modifier_args<Features>(a), std::make_tuple(a->out),
                                         optional_arg<(Features & kWeights) != 0>(a->weights),
                                         optional_arg<(Features & kLse) != 0>(a->lse)));
  } else if constexpr (Op == ATTNGEN_OP_LINEAR) {
    return Fn(uc, a->x, a->w, a->bias, a->out);
  } else if constexpr (Op == ATTNGEN_OP_DECODE) {
    return std::apply(
        Fn, std::tuple_cat(
                std::make_tuple(uc, a->q, a->kv_len, a->q_len, a->capacity, a->window, a->scale,
                                a->split_keys, a->units, a->page_shift, a->block_table, a->k, a->v),
                optional_arg<(Features & kKvScales) != 0>(a->kv_scales),
                std::make_tuple(a->v_finite != 0), modifier_args<Features>(a),
                std::make_tuple(a->out)));
  } else if constexpr ((Features & kGeneric) != 0) {
    return Fn(uc, a->x, a->w, a->bias, a->w2, a->bias2, a->kv_len, a->bottom_right != 0,
              a->causal != 0, a->num_heads, a->out);
  } else {
    return Fn(uc, a->x, a->w, a->bias, a->w2, a->bias2, a->kv_len, a->bottom_right != 0, a->out);
  }
}

// The runtime hands kernels host buffers. A GPU kernel copies its inputs to the device itself,
// but Halide copies only a buffer marked host-dirty (an unmarked one gets an uninitialised device
// allocation: every CUDA kernel computed on garbage in its first run on a GPU), so the inputs are
// marked here; its outputs come back to the host and every device allocation of the call is
// released.
template <attngen_op Op, int Features, auto Fn>
int run(void* uc, const attngen_kernel_args* a) {
  if constexpr ((Features & kGpu) == 0) {
    return call<Op, Features, Fn>(uc, a);
  } else {
    halide_buffer_t* const inputs[] = {a->q,
                                       a->k,
                                       a->v,
                                       a->kv_len,
                                       a->mask,
                                       a->layout,
                                       a->x,
                                       a->w,
                                       a->w2,
                                       a->bias,
                                       a->bias2,
                                       a->q_len,
                                       a->bool_mask,
                                       a->add_mask,
                                       a->kv_scales,
                                       a->block_table,
                                       a->modifier_tensors[0],
                                       a->modifier_tensors[1],
                                       a->modifier_tensors[2],
                                       a->modifier_tensors[3]};
    halide_buffer_t* const outputs[] = {a->out, a->weights, a->lse};
    for (halide_buffer_t* in : inputs) {
      if (in != nullptr && in->device == 0) in->flags |= halide_buffer_flag_host_dirty;
    }
    int result = call<Op, Features, Fn>(uc, a);
    for (halide_buffer_t* out : outputs) {
      if (result == 0 && out != nullptr) result = halide_copy_to_host(uc, out);
    }
    const auto release = [&](halide_buffer_t* buf) {
      if (buf != nullptr && buf->device != 0) {
        const int freed = halide_device_free(uc, buf);
        if (result == 0) result = freed;
      }
    };
    for (halide_buffer_t* buf : inputs) release(buf);
    for (halide_buffer_t* buf : outputs) release(buf);
    return result;
  }
}

}  // namespace attngen::glue

#endif  // ATTNGEN_KERNEL_GLUE_H_
