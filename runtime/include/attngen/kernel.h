/* The interface between the attngen runtime and generated kernels.
 *
 * Each kernel library made by attngen_add_kernel() defines one descriptor,
 * `const attngen_kernel_info attngen_kernel_<name>`. The runtime dispatches over its built-in
 * table (generated from generated/variants.cmake) and over kernels registered at run time.
 */
#ifndef ATTNGEN_KERNEL_H_
#define ATTNGEN_KERNEL_H_

#include "attngen/attngen.h"

#ifdef __cplusplus
extern "C" {
#endif

struct halide_buffer_t;

typedef enum attngen_op {
  ATTNGEN_OP_ATTENTION = 0,
  ATTNGEN_OP_LINEAR = 1,
  ATTNGEN_OP_MHA = 2,
  ATTNGEN_OP_DECODE = 3
} attngen_op;

typedef enum attngen_mask_tensor_kind {
  ATTNGEN_MASK_TENSOR_NONE = 0,
  ATTNGEN_MASK_TENSOR_BOOL = 1,
  ATTNGEN_MASK_TENSOR_ADDITIVE = 2
} attngen_mask_tensor_kind;

/* Arguments of one kernel call, already validated, as Halide buffers. Each op reads its own:
 * attention: q, k, v, kv_len, mask, layout, scale, softcap, bottom_right -> out, weights, lse
 * linear:    x, w, bias -> out
 * mha:       x, w (in_proj), bias, w2 (out_proj), bias2, kv_len, bottom_right -> out
 *            (linear and mha weights packed: F32 [ceil(N / panel), E, panel], element
 *            [n / panel, e, n % panel] the weight of output feature n and input feature e,
 *            rows past N zero, panel = the kernel's weight_panel; the biases in the kernel's
 *            dtype, as given)
 * decode:    q, k, v (one layer of a KV cache as a pool of pages: an F32 cache's [pages, Hkv,
 *            page slots, D] views whose slots are Dqk + Dv apart, K and V interleaved; an I8,
 *            F16 or BF16 cache's [pages, Hkv, groups of the page, elements of a group's K or V
 *            part] views of its groups of 16 slots in its dtype, attngen.h; a contiguous cache
 *            is one page per sequence), block_table, page_shift, units, kv_len, q_len, capacity,
 *            window, scale, split_keys, kv_scales (an I8 cache's), v_finite -> out */
typedef struct attngen_kernel_args {
  struct halide_buffer_t *q, *k, *v, *kv_len, *mask, *layout;
  struct halide_buffer_t *x, *w, *bias, *w2, *bias2;
  struct halide_buffer_t *out, *weights, *lse;
  float scale, softcap;
  int bottom_right;
  /* decode only */
  struct halide_buffer_t* q_len; /* I32 [B]: real query rows per sequence */
  int32_t capacity;              /* ring size of the cache (slot = position mod capacity) */
  int32_t window;                /* left window, -1: none */
  int32_t split_keys;            /* split-KV: keys per partial (rounded up to key blocks) */
  int32_t units;      /* slots read, the longest sequence's (at most the capacity), in the cache's
                       * units: slots, or an I8, F16 or BF16 cache's groups of 16 slots */
  int32_t page_shift; /* log2 of a page's slots (>= 4) */
  /* I32 [B, entries]: sequence b's slot s is at slot s % 2^page_shift of page
   * block_table[b][s >> page_shift] of k, v and kv_scales; one entry per sequence: at slot s of
   * page b (a contiguous cache; the kernels then read no table) */
  struct halide_buffer_t* block_table;
  /* generic kernels only: the call's causal mask (attention, mha) and mask tensor kind, and
   * both masks (the one of the other kind, or both, broadcast stand-ins that mask nothing) */
  int32_t causal;
  attngen_mask_tensor_kind mask_kind;
  struct halide_buffer_t *bool_mask, *add_mask;
  attngen_pattern pattern; /* a generic pattern kernel's parameters (its layout: `layout`) */
  int32_t num_heads;       /* a generic mha kernel's head count (its head dim E / num_heads) */
  /* decode over an I8 cache: F32 [B, Hkv, groups, 32], per group of 16 slots (as k and v) their
   * K scales, then their V scales */
  struct halide_buffer_t* kv_scales;
  /* decode: 1 if no V element of the layer is NaN or infinite (the cache knows from its appends):
   * the kernel's P.V then multiplies as it is; 0 (always correct) masks V by the probabilities
   * first, so that keys a row does not attend never reach it (docs/semantics.md) */
  int32_t v_finite;
  /* a modifier kernel (attngen_kernel_info::modifier): the modifier's tensors in its layout's
   * order, then its scalars */
  struct halide_buffer_t* modifier_tensors[ATTNGEN_MAX_MODIFIER_TENSORS];
  float modifier_scalars[ATTNGEN_MAX_MODIFIER_SCALARS];
} attngen_kernel_args;

/* The version of attngen_kernel_info and attngen_kernel_args (5: packed linear and mha weights,
 * weight_panel; 6: an I8 cache's groups of 16 slots in the decode's k, v and kv_scales; 7: an F16
 * or BF16 cache's groups of 16 slots in the decode's k and v, attngen.h; 8: an I8 cache's scales
 * by group, 16 K scales then 16 V scales; 9: modifiers, their parameters in the arguments and
 * their layout in the descriptor; 10: the decode's cache as pages through a block table). A
 * descriptor carries the version and the struct size
 * of the build that wrote it; the runtime refuses one from an incompatible build
 * (ATTNGEN_ERROR_ABI) instead of misreading it. */
#define ATTNGEN_KERNEL_ABI_VERSION 10

/* Element types of a kernel's tensors. attention: q, k, v, out; linear and mha: q is the input
 * x, k the weights, out the output; decode: q, out, and cache the stored K and V; mask: the
 * mask tensor's (BOOL or F32) where the kernel takes one. */
typedef struct attngen_kernel_dtypes {
  attngen_dtype q, k, v, out, mask, cache;
} attngen_kernel_dtypes;

/* One tensor of a modifier's layout (core/modifier.h): its name, dtype and shape, each
 * dimension one of the call's (0 B, 1 Hq, 2 Hkv, 3 Sq, 4 Skv) or 5 (any extent). */
typedef struct attngen_modifier_tensor_info {
  const char* name;
  attngen_dtype dtype;
  int32_t rank;
  int32_t dims[4];
} attngen_modifier_tensor_info;

/* A kernel, as its generator describes it (generator/variant_cli.cpp writes this next to each
 * kernel object): what the variant asked for and what the schedule resolved. */
typedef struct attngen_kernel_info {
  uint32_t struct_size; /* sizeof(attngen_kernel_info) of the build that wrote it */
  uint32_t abi_version; /* ATTNGEN_KERNEL_ABI_VERSION of that build */
  const char* name;
  const char* variant; /* the canonical variant string (docs/variants.md) */
  const char* description;
  attngen_op op;
  const char* isa;           /* a row of the target table: "avx512", "neon", "cuda", ... */
  const char* halide_target; /* the Halide target it was generated for */
  attngen_kernel_dtypes dtypes;
  int32_t head_dim_qk;
  int32_t head_dim_v;
  attngen_mask_kind mask;
  attngen_mask_tensor_kind mask_tensor;
  int32_t softcap; /* 1: applies c * tanh(s / c) */
  /* attention only: the pattern (layout NULL: a run-time input) and the extra outputs */
  attngen_pattern pattern;
  int32_t weights, lse; /* 1: writes the attention weights / the row log-sum-exp */
  /* attention: 1 for a generic kernel (GENERIC): any head dims up to head_dim_qk/head_dim_v,
   * and the causal mask, a mask tensor and the soft cap at run time (mask, mask_tensor and
   * softcap above are then 0). Dispatch prefers a specialised kernel that fits. */
  int32_t generic;
  /* attention: the variant's KEY_BLOCK (0: the target's default form). Among equally good fits
   * the runtime prefers a kernel built with KEY_BLOCK for long key sequences and a default one
   * for short. */
  int32_t requested_key_block;
  /* What the kernel does, as its schedule resolved it: keys per block of the online softmax (0:
   * whole score rows), query rows per tile (attention, mha; the last tile of a sequence is
   * computed whole), keys per chunk of the row form's passes (or the key block). 0 where an op
   * has no such unit. */
  int32_t key_block;
  int32_t query_tile;
  int32_t key_chunk;
  /* linear, mha: output features per panel of the packed weights the kernel reads (1: the
   * nn.Linear layout, in F32); 0 for the other ops. */
  int32_t weight_panel;
  /* The schedule tunables given ("query_tile=48 key_tile=8"; "" for none) and where they came
   * from: "" (defaults), "TUNABLES" (the variant's) or "<tuning file>#<shape class>"
   * (schedules/tuned/README.md); the kernel's tuning class ("" for ops without); every tunable's
   * resolved value. */
  const char* tunables;
  const char* tuning;
  const char* tuning_class;
  const char* schedule;
  int (*run)(void* user_context, const attngen_kernel_args* args);
  /* attention: the modifier generated in ("" none), whether it modifies scores and masks pairs,
   * and the layout of its parameters (attngen_modifier) */
  const char* modifier;
  int32_t modifier_score, modifier_mask;
  int32_t modifier_tensors;
  attngen_modifier_tensor_info modifier_tensor[ATTNGEN_MAX_MODIFIER_TENSORS];
  int32_t modifier_scalars;
  const char* modifier_scalar[ATTNGEN_MAX_MODIFIER_SCALARS];
} attngen_kernel_info;

/* All kernels the runtime can dispatch to: registered ones first, then built-in ones. */
size_t attngen_kernel_count(void);
const attngen_kernel_info* attngen_kernel_at(size_t index);
const attngen_kernel_info* attngen_find_kernel(const char* name);

/* 1 if this machine can run the kernel's ISA. */
int attngen_kernel_supported(const attngen_kernel_info* kernel);

/* Adds a kernel (e.g. one generated by a user's own attngen_add_kernel()). Among kernels that
 * fit a call the best ISA wins, then the form and query tile that suit the call's lengths
 * (requested_key_block, query_tile above), and where those tie a registered kernel wins over a
 * built-in one. The descriptor must outlive its use. ATTNGEN_ERROR_ABI for a descriptor of
 * another ABI version or struct size. */
attngen_status attngen_register_kernel(const attngen_kernel_info* kernel);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ATTNGEN_KERNEL_H_ */
