/* attngen: a thin C API over ahead-of-time generated attention kernels.
 *
 * Tensors are described, not owned: a pointer, a dtype, a shape (outermost first, as in
 * PyTorch) and strides in elements. Every call validates every argument before any kernel
 * runs; on bad input it returns a named status, leaves the outputs untouched, and
 * attngen_last_error() says which argument was wrong and what was expected. Nothing in the
 * library prints or aborts.
 *
 * The exact semantics of every kernel are in docs/semantics.md.
 */
#ifndef ATTNGEN_ATTNGEN_H_
#define ATTNGEN_ATTNGEN_H_

#include <stddef.h>
#include <stdint.h>

#include "attngen/dtype.h" /* attngen_dtype */

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Versions and the ABI rule ----
 *
 * The library's version is attngen_version(); this header's is ATTNGEN_VERSION_*. Within a major
 * version (while the major is 0: within a minor version) the ABI only grows: functions keep their
 * signatures, enum values keep their numbers (new ones are added last), and structs keep their
 * fields in place. An options struct (attngen_*_options) begins with `struct_size`, which its
 * attngen_*_options_default() sets to sizeof the struct as the caller's header declares it: start
 * from the default, then set fields. Fields added later go at a struct's end, so a library reads
 * the fields that lie within struct_size and gives the others their defaults (an older caller's
 * smaller struct); where struct_size is larger than the library's struct, every byte past the
 * fields the library knows must be 0 (a newer caller that sets no option this library lacks).
 * Anything else (struct_size 0, as from `= {0}`, or below the struct's first published size, or
 * a non-zero field this library does not know) is ATTNGEN_ERROR_INVALID_ARGUMENT, naming
 * struct_size. Kernel descriptors (attngen/kernel.h) follow the same rule with their own
 * abi_version. */
#define ATTNGEN_VERSION_MAJOR 0
#define ATTNGEN_VERSION_MINOR 2
#define ATTNGEN_VERSION_PATCH 0
/* MAJOR * 10000 + MINOR * 100 + PATCH, as attngen_version() returns it. */
#define ATTNGEN_VERSION \
  (ATTNGEN_VERSION_MAJOR * 10000 + ATTNGEN_VERSION_MINOR * 100 + ATTNGEN_VERSION_PATCH)

/* The library's version, MAJOR * 10000 + MINOR * 100 + PATCH (compare it with ATTNGEN_VERSION, the
 * header's, to find a library older than the header an application was built with). */
int32_t attngen_version(void);

/* The library's version as "MAJOR.MINOR.PATCH". */
const char* attngen_version_string(void);

typedef enum attngen_status {
  ATTNGEN_OK = 0,
  ATTNGEN_ERROR_NULL_POINTER,       /* a required tensor or data pointer is NULL */
  ATTNGEN_ERROR_DTYPE,              /* dtype not the one expected */
  ATTNGEN_ERROR_RANK,               /* wrong number of dimensions */
  ATTNGEN_ERROR_SHAPE,              /* sizes that must agree do not */
  ATTNGEN_ERROR_HEADS,              /* query heads not a multiple of kv heads, or E % heads */
  ATTNGEN_ERROR_EMPTY,              /* a size of 0 */
  ATTNGEN_ERROR_TOO_LARGE,          /* a size, stride or extent in memory too large to index */
  ATTNGEN_ERROR_STRIDE,             /* unsupported stride (innermost must be 1, none negative,
                                       no two elements of an output at one address) or float
                                       data not aligned to its element size */
  ATTNGEN_ERROR_ALIAS,              /* the output shares a byte with an input (or a decode's
                                       input one with the cache storage the call writes) */
  ATTNGEN_ERROR_MASK,               /* mask tensor of the wrong dtype or shape */
  ATTNGEN_ERROR_INVALID_ARGUMENT,   /* a bad scalar option (scale, softcap, kv_len values, enum) */
  ATTNGEN_ERROR_NO_KERNEL,          /* no kernel was generated for this configuration */
  ATTNGEN_ERROR_UNSUPPORTED_TARGET, /* the kernel needs an ISA this machine lacks */
  ATTNGEN_ERROR_KERNEL,             /* the kernel itself failed (e.g. out of memory) */
  ATTNGEN_ERROR_CAPACITY,           /* a KV cache cannot hold what is appended or attended */
  ATTNGEN_ERROR_OUT_OF_MEMORY,      /* the library could not allocate memory it needs */
  ATTNGEN_ERROR_ABI,                /* a kernel descriptor of an incompatible attngen build */
  ATTNGEN_ERROR_WORKSPACE,          /* the bound workspace is too small for the call, or no size
                                       query was made for the call's configuration */
  /* Enums are int-sized; values from C callers are checked, never trusted. */
  ATTNGEN_STATUS_FORCE_32BIT = 0x7fffffff
} attngen_status;

#define ATTNGEN_MAX_RANK 5

typedef struct attngen_tensor {
  void* data;
  attngen_dtype dtype;
  int32_t rank;
  int64_t shape[ATTNGEN_MAX_RANK];   /* outermost first */
  int64_t strides[ATTNGEN_MAX_RANK]; /* in elements, outermost first */
} attngen_tensor;

/* A densely packed (row-major) tensor of the given shape. A stride past int64 (shapes whose
 * product overflows) is INT64_MAX, and so is every stride outside it: every call rejects such a
 * tensor with ATTNGEN_ERROR_TOO_LARGE. The dtype is stored as given (any int), and checked by the
 * call that takes the tensor. */
attngen_tensor attngen_tensor_contiguous(void* data, attngen_dtype dtype, int32_t rank,
                                         const int64_t* shape);

typedef enum attngen_mask_kind {
  ATTNGEN_MASK_NONE = 0,
  ATTNGEN_MASK_CAUSAL = 1,
  ATTNGEN_MASK_KIND_FORCE_32BIT = 0x7fffffff
} attngen_mask_kind;

/* Where query i sits among the keys (docs/semantics.md, "Masks"). */
typedef enum attngen_alignment {
  ATTNGEN_ALIGN_BOTTOM_RIGHT = 0, /* offset Skv - Sq (kv_len[b] - Sq with key padding) */
  ATTNGEN_ALIGN_TOP_LEFT = 1,     /* offset 0: PyTorch SDPA is_causal=True */
  ATTNGEN_ALIGN_FORCE_32BIT = 0x7fffffff
} attngen_alignment;

/* Sparse attention patterns (docs/semantics.md), for query position p (= i + the alignment
 * offset) and key j; each combines with causal. Kernels specialised for a pattern and its
 * parameters, and generic ones per pattern kind that take any parameters
 * (generated/variants.cmake), skip the key blocks a pattern masks entirely. */
typedef enum attngen_pattern_kind {
  ATTNGEN_PATTERN_NONE = 0,
  ATTNGEN_PATTERN_WINDOW = 1,       /* p - window_left <= j <= p + window_right */
  ATTNGEN_PATTERN_STRIDED = 2,      /* |p - j| < stride or (p - j) mod stride == 0 */
  ATTNGEN_PATTERN_BLOCK_SPARSE = 3, /* layout[i / block][j / block] != 0 */
  ATTNGEN_PATTERN_GLOBAL_LOCAL = 4, /* |p - j| <= local or j < global_tokens or p < global_tokens */
  ATTNGEN_PATTERN_FORCE_32BIT = 0x7fffffff
} attngen_pattern_kind;

typedef struct attngen_pattern {
  attngen_pattern_kind kind;
  int32_t window_left, window_right; /* WINDOW: -1 = unbounded on that side */
  int32_t stride;                    /* STRIDED */
  int32_t block;                     /* BLOCK_SPARSE: block size */
  const attngen_tensor* layout;      /* BLOCK_SPARSE: BOOL [ceil(Sq / block), ceil(Skv / block)] */
  int32_t local, global_tokens;      /* GLOBAL_LOCAL */
} attngen_pattern;

/* The local window of width w: |p - j| < w, i.e. WINDOW with left = right = w - 1. */
attngen_pattern attngen_pattern_local(int32_t w);

/* Whether query i (at position p) attends key j under the pattern alone (no causal, no
 * padding); for tools that draw or count patterns. Defined for every p, i and j (no overflow at
 * the int64 extremes). Returns 0 for a malformed pattern: one whose kind or parameters a call
 * rejects, or a block-sparse layout that is no valid BOOL rank-2 tensor (sizes >= 1, strides
 * >= 0 with the inner one 1, spanning below 2^31 bytes) or that (i / block, j / block) falls
 * outside. */
int attngen_pattern_attends(const attngen_pattern* pattern, int64_t p, int64_t i, int64_t j);

/* ---- Modifiers: score and mask variants compiled into kernels (docs/semantics.md) ----
 *
 * A modifier is generated into kernels at build time (a variant's MODIFIER name:
 * docs/variants.md, "Modifiers"); a call names it and gives its run-time parameters: its tensors
 * in the modifier's order, each of the dtype and shape its layout declares in the call's dims
 * (B, Hq, Hkv, Sq, Skv), and its f32 scalars. A score modifier maps each score s of (b, h, i, j)
 * after the scale and the soft cap, before the masks; a mask modifier removes pairs as a mask
 * does (kernels skip the key blocks it rules out); a sink logit z_h joins every row's softmax
 * denominator, exp(z_h) + sum_j exp(s_j), with no value (the weights then sum to less than 1;
 * the log-sum-exp includes it). A call with a modifier runs on a kernel generated with it (none
 * built: ATTNGEN_ERROR_NO_KERNEL; the library's take the log-sum-exp output, and the weights on
 * AVX2 and NEON); parameters that do not match its layout are named errors, with nothing
 * written. The library's (generator/modifiers/):
 *  - "alibi": tensors slopes F32 [Hq] (attngen_alibi_slopes() gives the standard ones); scalar 0:
 *    0 for s + m_h (j - p) (keys behind the query position p get a negative bias: causal
 *    models), 1 for the symmetric s - m_h |j - p| (bidirectional ones).
 *  - "document" (a mask): tensors ids I32 [B, Skv], the document of each key position of a
 *    packed sequence; a query at position p attends the keys j with ids[b][j] == ids[b][p] (p
 *    clamped to [0, Skv)); with the causal mask, causal inside each document.
 *  - "prefix" (a mask): tensors lengths I32 [B]; key j is attended where j < lengths[b] or
 *    j <= p (prefix-LM; without the causal mask).
 *  - "sinks" (a mask): scalars sinks, window; key j is attended where j < sinks or
 *    p - window <= j (StreamingLLM), every key where window < 0; both rounded down.
 *  - "sink_logit": tensors logits F32 [Hq], z_h per query head (-inf: none).
 *  - "t5_bias": tensors table F32 [num_buckets, Hq] (Hugging Face's relative_attention_bias
 *    weight); scalars bidirectional (0 or 1), max_distance; s + table[bucket(j - p)][h] with T5's
 *    buckets. */
#define ATTNGEN_MAX_MODIFIER_TENSORS 4
#define ATTNGEN_MAX_MODIFIER_SCALARS 4

typedef struct attngen_modifier {
  const char* name; /* the modifier's name, as its kernels were generated with */
  const attngen_tensor* tensors[ATTNGEN_MAX_MODIFIER_TENSORS]; /* its tensors; NULL past them */
  float scalars[ATTNGEN_MAX_MODIFIER_SCALARS];                 /* its scalars; 0 past them */
} attngen_modifier;

/* The standard ALiBi slopes of `heads` heads into slopes[0 .. heads): 2^(-8 (h + 1) / H) for
 * H a power of two; otherwise, with n the largest power of two below H, the n slopes of n heads
 * followed by every other slope of 2n heads (the ALiBi paper's code, as BLOOM uses it).
 * ATTNGEN_ERROR_NULL_POINTER, or ATTNGEN_ERROR_INVALID_ARGUMENT for heads < 1. */
attngen_status attngen_alibi_slopes(int64_t heads, float* slopes);

/* ---- Rotary position embeddings (RoPE), applied by the calls (docs/semantics.md) ----
 *
 * A vector x at position t is rotated in its first r = rotary_dim dims (the others pass through),
 * pair by pair: (a, c) -> (a cos(t f_i) - c sin(t f_i), a sin(t f_i) + c cos(t f_i)) with f =
 * inv_freq [r / 2]; the pairs are (x[i], x[i + r / 2]) for ATTNGEN_ROPE_HALF (rotate-half: Llama,
 * Mistral, Qwen, Gemma, GPT-NeoX) and (x[2i], x[2i + 1]) for ATTNGEN_ROPE_INTERLEAVED (GPT-J).
 * The angles t f_i are those of double precision (no float32 rounding of t f_i, whose error grows
 * with the position), the rotation itself is F32. inv_freq carries any frequency scaling: plain
 * (attngen_rope_inv_freq()), linear (divided by the factor), Llama-3's and YaRN's per-frequency
 * ones; YaRN's attention factor m, which scales cos and sin, folds into the call's scale (m^2 /
 * sqrt(Dqk)). Where a rope applies:
 *  - a KV cache created with one (attngen_kv_cache_options.rope) stores every key it is given
 *    rotated at its position (its index in its sequence: the sequence's length before the append
 *    plus its row; keys stay as rotated at append, also once a window has moved past older
 *    ones), and every decode over it (attngen_decode(), its plans, attngen_mha_decode()) rotates
 *    each query at its position, n_b - counts[b] + i: the caller gives q, k and v as projected.
 *  - attngen_attention() with options.rope rotates q and k (into scratch; the caller's tensors
 *    are not written) at their positions: given (options.q_positions, k_positions), or by
 *    default key j at j and query i at the alignment's offset plus i (bottom-right: kv_len[b] -
 *    Sq + i, or Skv - Sq + i without key padding; top-left: i). F16 and BF16 q and k are rotated
 *    in F32 and rounded back to their dtype.
 * A rope is validated where it is given (named errors: rotary_dim, inv_freq, pairs) and its
 * frequencies are copied where it is kept (a cache, a plan): the caller's may go afterwards. */
typedef enum attngen_rope_pairs {
  ATTNGEN_ROPE_HALF = 0,        /* (x[i], x[i + r / 2]) */
  ATTNGEN_ROPE_INTERLEAVED = 1, /* (x[2i], x[2i + 1]) */
  ATTNGEN_ROPE_PAIRS_FORCE_32BIT = 0x7fffffff
} attngen_rope_pairs;

typedef struct attngen_rope {
  size_t struct_size;             /* sizeof(attngen_rope): the ABI rule above */
  int64_t rotary_dim;             /* r: even, 2 <= r <= Dqk; 0: Dqk */
  attngen_rope_pairs pairs;       /* default ATTNGEN_ROPE_HALF */
  const attngen_tensor* inv_freq; /* F32 [r / 2], finite: f_i */
} attngen_rope;

/* struct_size set, rotary_dim 0 (Dqk), rotate-half pairs, inv_freq NULL (to be set). */
attngen_rope attngen_rope_default(void);

/* The inverse frequencies of plain RoPE, freq[i] = base^(-2i / rotary_dim) for i < rotary_dim /
 * 2 (computed in double), into freq[0 .. rotary_dim / 2). ATTNGEN_ERROR_NULL_POINTER, or
 * ATTNGEN_ERROR_INVALID_ARGUMENT for a rotary_dim that is odd or below 2, or a base that is not
 * a finite number above 1. */
attngen_status attngen_rope_inv_freq(double base, int64_t rotary_dim, float* freq);

typedef struct attngen_attention_options {
  size_t struct_size;           /* sizeof(attngen_attention_options): the ABI rule above */
  float scale;                  /* 0: 1 / sqrt(Dqk) */
  float softcap;                /* 0: none; c > 0: scores become c * tanh(s / c) */
  attngen_mask_kind mask;       /* ATTNGEN_MASK_NONE or ATTNGEN_MASK_CAUSAL */
  attngen_alignment alignment;  /* for causal and key-padding offsets */
  const attngen_tensor* kv_len; /* optional: I32 [B], valid keys per batch, 0 <= kv_len <= Skv */
  /* optional: BOOL (true = attend) or F32 (added to the scores) mask, broadcastable to
   * [B, Hq, Sq, Skv] (rank 1 to 4, aligned to the right, each size equal or 1) */
  const attngen_tensor* mask_tensor;
  const char* kernel;      /* optional: run the kernel of this name instead of choosing one */
  attngen_pattern pattern; /* default ATTNGEN_PATTERN_NONE */
  /* Optional extra outputs, for inspection (kernels generated with them; slower):
   * the attention weights P, F32 [B, Hq, Sq, Skv] (0 where masked; rows sum to 1, or are all 0
   * for fully masked rows), and the row log-sum-exp of the scores, F32 [B, Hq, Sq] (-inf for
   * fully masked rows). */
  attngen_tensor* weights;
  attngen_tensor* lse;
  const attngen_modifier* modifier; /* optional: a modifier and its parameters (above) */
  const attngen_rope* rope;         /* optional: q and k rotated (RoPE, above) */
  /* optional with a rope: I32 [B, Sq] and [B, Skv], the positions of the queries and of the keys
   * (NULL: the default positions, above) */
  const attngen_tensor* q_positions;
  const attngen_tensor* k_positions;
} attngen_attention_options;

/* struct_size set, no mask, bottom-right alignment, everything else 0 or NULL. */
attngen_attention_options attngen_attention_options_default(void);

/* O = softmax(mask(scale * Q K^T)) V, BSHD layout:
 * q [B, Sq, Hq, Dqk], k [B, Skv, Hkv, Dqk], v [B, Skv, Hkv, Dv], out [B, Sq, Hq, Dv],
 * innermost stride 1, any other stride. Hq must be a multiple of Hkv (grouped-query).
 * Element types: q, k and v share one of F32, F16, BF16; out has theirs or F32 (f16 / bf16
 * inputs with an f32 output); any other combination is ATTNGEN_ERROR_DTYPE. Scores, softmax and
 * the weighted sum are computed in F32 whatever the storage; mask tensors stay BOOL or F32, the
 * weights and lse outputs F32. A call runs on a kernel of its own dtypes wherever one fits; where
 * none does (a pattern, the extra outputs or head dims no kernel of that dtype was built for),
 * the runtime converts q, k and v into F32 scratch, runs the F32 kernel (the one
 * attngen_last_kernel() then names) and rounds its output into out (to nearest even; f16
 * overflow to infinity), so every valid call runs (docs/semantics.md, "Precision and tolerance").
 * options may be NULL for the defaults. */
attngen_status attngen_attention(const attngen_tensor* q, const attngen_tensor* k,
                                 const attngen_tensor* v, attngen_tensor* out,
                                 const attngen_attention_options* options);

/* ---- Packed sequences of different lengths (FlashAttention's varlen convention) ----
 *
 * n sequences packed along one token dimension, without padding: q [Tq, Hq, Dqk], k [Tk, Hkv,
 * Dqk], v [Tk, Hkv, Dv], out [Tq, Hq, Dv] (dtypes and strides as attngen_attention()'s);
 * cu_seqlens_q, I32 [n + 1] with 0 = cu[0] <= cu[1] <= ... <= cu[n] = Tq, puts the queries of
 * sequence i in rows cu_seqlens_q[i] .. cu_seqlens_q[i + 1] - 1, and cu_seqlens_k likewise its
 * keys and values (NULL: cu_seqlens_q, packed prompts attending to themselves). Sequence i is one
 * attngen_attention() of its rows with the options: causal and the alignment within the
 * sequence (bottom-right by default: the last query against the last key, FlashAttention's
 * convention where a sequence has more keys than queries), scale, soft cap, a pattern (not
 * block-sparse), a rope (positions from 0 in each sequence), `kernel`; the options that take
 * tensors shaped by the batch (kv_len, mask_tensor, weights, lse, q_positions, k_positions,
 * modifier) are ATTNGEN_ERROR_INVALID_ARGUMENT here. Sequences of no queries take no time; the
 * queries of a sequence of no keys are rows of zeros. Everything is validated before anything is
 * written, in a bound workspace every sequence's run too (one a size query with other cu_seqlens
 * did not measure is ATTNGEN_ERROR_WORKSPACE, nothing written); a kernel that fails on sequence i
 * leaves the rows of the sequences before it written. */
attngen_status attngen_attention_varlen(const attngen_tensor* q, const attngen_tensor* k,
                                        const attngen_tensor* v, attngen_tensor* out,
                                        const attngen_tensor* cu_seqlens_q,
                                        const attngen_tensor* cu_seqlens_k,
                                        const attngen_attention_options* options);

/* Workspace bytes of that call (the most any of its sequences needs), each sequence's
 * configuration measured. */
attngen_status attngen_attention_varlen_workspace_size(
    const attngen_tensor* q, const attngen_tensor* k, const attngen_tensor* v,
    const attngen_tensor* out, const attngen_tensor* cu_seqlens_q,
    const attngen_tensor* cu_seqlens_k, const attngen_attention_options* options, size_t* bytes);

/* ---- Attention plans: validate and choose once, run many times ----
 *
 * A plan is made from one call's arguments (XNNPACK's create and reshape, cuDNN's plan): it
 * validates them as attngen_attention() does, chooses the kernel (or the F32 kernel and the
 * conversion), and measures the workspace its runs need, as attngen_attention_workspace_size()
 * does (the inputs are read, nothing is written). It keeps copies of the descriptions (shapes,
 * strides, dtypes and options; not the data), so the caller's tensors and options may go once it
 * is made. Each run gives the data pointers of one call of that configuration: the run checks
 * what depends on them (NULL, alignment, overlap of outputs with inputs, kv_len's values) and
 * runs the plan's kernel, with the results of attngen_attention() on the same arguments, bit for
 * bit. The kernel is fixed at creation (a later attngen_set_isa() does not change it). Runs of one
 * plan may be concurrent (each thread binds its own workspace, if any). */
typedef struct attngen_attention_plan attngen_attention_plan;

/* The data of one run: each pointer where the plan's call had that tensor (the options' kv_len,
 * mask_tensor, pattern.layout, weights, lse and the modifier's tensors), NULL where it had none. */
typedef struct attngen_attention_data {
  size_t struct_size; /* sizeof(attngen_attention_data): the ABI rule above */
  const void* q;
  const void* k;
  const void* v;
  void* out;
  const void* kv_len;
  const void* mask_tensor;
  const void* layout;
  void* weights;
  void* lse;
  const void* modifier_tensors[ATTNGEN_MAX_MODIFIER_TENSORS]; /* the modifier's tensors' data */
  const void* q_positions; /* the options' q_positions and k_positions (a rope's frequencies are */
  const void* k_positions; /* the plan's copy) */
} attngen_attention_data;

/* struct_size set, every pointer NULL. */
attngen_attention_data attngen_attention_data_default(void);

/* Makes a plan for calls like attngen_attention(q, k, v, out, options) in *plan (NULL on any
 * error, which is the call's: the same statuses and messages). */
attngen_status attngen_attention_plan_create(const attngen_tensor* q, const attngen_tensor* k,
                                             const attngen_tensor* v, const attngen_tensor* out,
                                             const attngen_attention_options* options,
                                             attngen_attention_plan** plan);

/* Workspace bytes a run of the plan needs (attngen_set_workspace()) at the thread count set when
 * the plan was made, or fewer threads: measured once, when it was made. */
attngen_status attngen_attention_plan_workspace_size(const attngen_attention_plan* plan,
                                                     size_t* bytes);

/* The name of the plan's kernel (an F32 kernel where the call's tensors are converted), or "" for
 * NULL. */
const char* attngen_attention_plan_kernel(const attngen_attention_plan* plan);

/* One call of the plan's configuration on `data`. */
attngen_status attngen_attention_plan_run(const attngen_attention_plan* plan,
                                          const attngen_attention_data* data);

/* Frees the plan. NULL is a no-op. */
void attngen_attention_plan_destroy(attngen_attention_plan* plan);

/* y = x W^T + b, PyTorch nn.Linear layout: x [B, S, E], w [N, E], bias [N] or NULL,
 * y [B, S, N], all of one dtype: F32, F16 or BF16 (the bias too), computed in F32. Converted
 * through F32 like attngen_attention() where no kernel of that dtype is built. */
attngen_status attngen_linear(const attngen_tensor* x, const attngen_tensor* w,
                              const attngen_tensor* bias, attngen_tensor* y);

/* Weights of a PyTorch nn.MultiheadAttention, as stored in its state dict. */
typedef struct attngen_mha_weights {
  const attngen_tensor* in_proj_weight;  /* [3E, E] */
  const attngen_tensor* in_proj_bias;    /* [3E], or NULL */
  const attngen_tensor* out_proj_weight; /* [E, E] */
  const attngen_tensor* out_proj_bias;   /* [E], or NULL */
} attngen_mha_weights;

typedef struct attngen_mha_options {
  size_t struct_size;           /* sizeof(attngen_mha_options): the ABI rule above */
  int64_t num_heads;            /* H; E must be a multiple of it */
  attngen_mask_kind mask;       /* ATTNGEN_MASK_NONE or ATTNGEN_MASK_CAUSAL */
  attngen_alignment alignment;  /* with key padding and causal */
  const attngen_tensor* kv_len; /* optional: I32 [B] key padding */
  const char* kernel;           /* optional: run the kernel of this name */
} attngen_mha_options;

/* struct_size set, num_heads 0 (to be set), no mask, bottom-right alignment. */
attngen_mha_options attngen_mha_options_default(void);

/* Self-attention layer: y = MHA(x, x, x) as nn.MultiheadAttention(batch_first=True) in
 * inference, x and y [B, S, E]. x, y and every weight and bias share one dtype: F32, F16 or
 * BF16 (projections, attention and softmax computed in F32). Converted through F32 like
 * attngen_attention() where no kernel of that dtype fits (e.g. head dims past its buckets). */
attngen_status attngen_mha(const attngen_tensor* x, const attngen_mha_weights* weights,
                           attngen_tensor* y, const attngen_mha_options* options);

/* ---- Linear and MHA plans: attngen_linear() and attngen_mha() validated and chosen once ----
 *
 * As attention plans (above): made from one call's arguments (validated as the call does, with
 * its statuses and messages; the kernel chosen; the workspace measured as the call's size query
 * does: the inputs are read, nothing is written). A plan keeps copies of the descriptions
 * (shapes, strides, dtypes; an MHA plan's options and its four weights' descriptions), not the
 * data. A run gives the data pointers of one call of that configuration: it checks what depends
 * on them (NULL, alignment, overlap of the output with the inputs, kv_len's values) and runs the
 * plan's kernel, with the call's results on the same arguments bit for bit. A run packs the
 * weights it is given, as the call does (their data may change between runs); an
 * attngen_mha_layer keeps them packed. Runs of one plan may be concurrent. */
typedef struct attngen_linear_plan attngen_linear_plan;
typedef struct attngen_mha_plan attngen_mha_plan;

/* The data of one linear run: bias where the plan's call had a bias, NULL where it had none. */
typedef struct attngen_linear_data {
  size_t struct_size; /* sizeof(attngen_linear_data): the ABI rule above */
  const void* x;
  const void* w;
  const void* bias;
  void* y;
} attngen_linear_data;

/* The data of one MHA run: each bias where the plan's weights had it, kv_len where the plan's
 * options had it; NULL where they had none. */
typedef struct attngen_mha_data {
  size_t struct_size; /* sizeof(attngen_mha_data): the ABI rule above */
  const void* x;
  void* y;
  const void* in_proj_weight;
  const void* in_proj_bias;
  const void* out_proj_weight;
  const void* out_proj_bias;
  const void* kv_len;
} attngen_mha_data;

/* struct_size set, every pointer NULL. */
attngen_linear_data attngen_linear_data_default(void);
attngen_mha_data attngen_mha_data_default(void);

/* Makes a plan for calls like attngen_linear(x, w, bias, y) or attngen_mha(x, weights, y,
 * options) in *plan (NULL on any error, which is the call's). */
attngen_status attngen_linear_plan_create(const attngen_tensor* x, const attngen_tensor* w,
                                          const attngen_tensor* bias, const attngen_tensor* y,
                                          attngen_linear_plan** plan);
attngen_status attngen_mha_plan_create(const attngen_tensor* x, const attngen_mha_weights* weights,
                                       const attngen_tensor* y, const attngen_mha_options* options,
                                       attngen_mha_plan** plan);

/* Workspace bytes a run needs, as attngen_attention_plan_workspace_size(). */
attngen_status attngen_linear_plan_workspace_size(const attngen_linear_plan* plan, size_t* bytes);
attngen_status attngen_mha_plan_workspace_size(const attngen_mha_plan* plan, size_t* bytes);

/* The name of the plan's kernel, or "" for NULL. */
const char* attngen_linear_plan_kernel(const attngen_linear_plan* plan);
const char* attngen_mha_plan_kernel(const attngen_mha_plan* plan);

/* One call of the plan's configuration on `data`. */
attngen_status attngen_linear_plan_run(const attngen_linear_plan* plan,
                                       const attngen_linear_data* data);
attngen_status attngen_mha_plan_run(const attngen_mha_plan* plan, const attngen_mha_data* data);

/* Frees the plan. NULL is a no-op. */
void attngen_linear_plan_destroy(attngen_linear_plan* plan);
void attngen_mha_plan_destroy(attngen_mha_plan* plan);

/* ---- Incremental decoding: a KV cache, and attention of new tokens over it ----
 *
 * A cache holds, per layer and per sequence of a batch, the K and V of the positions appended
 * so far (docs/semantics.md, "Incremental decoding"), in its dtype: F32, F16, BF16 (rounded to
 * nearest even by the append) or I8 (symmetric quantisation, one F32 scale per slot and kv head
 * for K and one for V). Its storage layout is what the decode kernels read, in that dtype: F32
 * per layer [B, Hkv, capacity, Dqk + Dv] elements, densely packed, layers one after the other,
 * each slot holding its K (Dqk elements) and then its V (Dv elements), so that attending
 * streams through one contiguous range per kv head (F16, BF16 and I8: below):
 *   K[d] of (layer, b, h, s) at element ((((layer * B + b) * Hkv + h) * capacity + s) * (Dqk +
 *   Dv) + d, V[d] at the same element + Dqk.
 * An F16 or BF16 cache keeps each kv head's slots in groups of 16 (its capacity rounded up to
 * G = ceil(capacity / 16) groups), each group 16 * (Dqk + Dv) elements: first K of its 16 slots
 * as [Dqk][16] (element d of the 16 slots side by side: a vector whose lanes are keys, so that
 * q.k needs no horizontal sum per key), then V of its 16 slots as [16][Dv] (each slot's V in a
 * row). With n = (layer * B + b) * Hkv + h and g = (n * G + s / 16) * 16 * (Dqk + Dv) the
 * group's first element:
 *   K[d] of slot s at element g + d * 16 + s % 16, V[d] at element g + 16 * Dqk + (s % 16) * Dv
 *   + d.
 * An I8 cache keeps each kv head's slots in groups of 16 (its capacity rounded up to G = ceil(
 * capacity / 16) groups; Dqk4 = Dqk rounded up to a multiple of 4), each group 16 * (Dqk4 + Dv)
 * bytes: first K of its 16 slots as [Dqk4 / 4][16][4] (4 adjacent elements of the head dim of
 * each slot side by side: the operand of 32-bit-lane integer dot products whose lanes are keys;
 * bytes past Dqk zero), then V of its 16 slots as [4][Dv][4] (element d of 4 adjacent slots side
 * by side: lanes of the head dim, 4 keys each). With n = (layer * B + b) * Hkv + h and g = (n *
 * G + s / 16) * 16 * (Dqk4 + Dv) the group's first byte:
 *   K[d] of slot s at byte g + (d / 4) * 64 + (s % 16) * 4 + d % 4,
 *   V[d] at byte g + 16 * Dqk4 + (s % 16 / 4) * Dv * 4 + d * 4 + s % 4.
 * It then holds its scales, from the first 64-byte boundary after every layer's K and V, as F32
 * [layers, B, Hkv, G, 2, 16], in the same groups: per group the 16 slots' K scales, then their V
 * scales; K's scale of slot s at float (n * G + s / 16) * 32 + s % 16, V's 16 floats after it.
 * Element d of K is q[d] * scale (q the stored int8, scale = max|K row| / 127, q = round(K /
 * scale) in [-127, 127]; a row of zeros has scale 0, a row holding an infinity or NaN a NaN
 * scale); the kernels apply K's scale to the score and fold V's into the attention weight of its
 * position, and never dequantise the cache into a copy.
 * Position p of a sequence is in slot p; in ring-buffer mode (a window) in slot p % capacity.
 *
 * A paged cache (options.page_slots = P, a power of two from 16 to 256; F32, F16 or BF16: an I8
 * cache is contiguous, paging it is ATTNGEN_ERROR_DTYPE) keeps every sequence's positions in
 * pages of P slots taken from a pool of options.pages pages per layer, the same
 * page index in every layer, so that sequences of any length share one pool (vLLM's and
 * FlashInfer's block tables). Its storage is the layout above with pages in place of sequences
 * and P in place of the capacity: per layer [pages, Hkv, P, Dqk + Dv] (F32; F16 and BF16 in
 * groups of 16 slots of each page); position p
 * of a sequence is slot p % P of its (p / P)-th page. A sequence holds no page until an append
 * reaches it (the first layer's append takes the page for all layers), attngen_kv_cache_reset()
 * gives its pages back, and attngen_kv_cache_fork() makes a sequence share another's pages (a
 * shared page is copied when one of them first appends into it). An append that finds no free
 * page is ATTNGEN_ERROR_CAPACITY, with nothing appended. capacity is the most positions one
 * sequence holds; a window masks (the cache is no ring buffer). The decode kernels read the
 * pages where they are, through each sequence's block table: a contiguous cache is one page of
 * the capacity's slots per sequence, read by the same kernels.
 * A cache is not synchronised: calls on one cache must not run concurrently. */
typedef struct attngen_kv_cache attngen_kv_cache;

typedef struct attngen_kv_cache_options {
  size_t struct_size; /* sizeof(attngen_kv_cache_options): the ABI rule above */
  int64_t layers;
  int64_t batch;       /* B: sequences */
  int64_t heads_kv;    /* Hkv */
  int64_t head_dim_qk; /* Dqk */
  int64_t head_dim_v;  /* Dv; 0: Dqk */
  int64_t capacity;    /* slots per layer and sequence */
  attngen_dtype dtype; /* of the stored K and V: ATTNGEN_F32, F16, BF16 or I8 (see above) */
  /* -1: no window; the cache holds positions 0 .. capacity - 1, and appending beyond is
   * ATTNGEN_ERROR_CAPACITY. L >= 0: a sliding-window model whose query at position p attends
   * positions p - L .. p; the cache is a ring buffer keeping the last `capacity` positions
   * (capacity >= L + 1, e.g. exactly L + 1), and one append, like one decode call, takes at
   * most capacity - L tokens per sequence (so every query still finds its whole window). */
  int64_t window;
  /* Optional caller-provided storage of attngen_kv_cache_storage_size() bytes (64-byte aligned
   * recommended), outliving the cache. NULL: the cache owns its storage. Either way the cache
   * clears it (zeros) when created; K and V then get into it through appends (values written
   * into it otherwise must be finite: the decode kernels know of NaN and infinities in V only
   * from the appends, docs/semantics.md). */
  void* storage;
  /* Optional: the cache holds keys rotated by this rope, and decoding over it rotates the
   * queries (RoPE, above); its frequencies are copied. NULL: keys as given. */
  const attngen_rope* rope;
  /* 0: a contiguous cache (capacity slots reserved per sequence). 16, 32, 64, 128 or 256: a
   * paged cache of pages of this many slots (above). */
  int64_t page_slots;
  /* A paged cache's pool, pages per layer; 0: B * ceil(capacity / page_slots), every sequence's
   * capacity. */
  int64_t pages;
} attngen_kv_cache_options;

/* struct_size set, window = -1, dtype = ATTNGEN_F32, everything else 0 (to be set). */
attngen_kv_cache_options attngen_kv_cache_options_default(void);

/* Bytes of storage (K and V, and an I8 cache's scales) that a cache with these options needs. */
attngen_status attngen_kv_cache_storage_size(const attngen_kv_cache_options* options,
                                             size_t* bytes);

/* Creates an empty cache (every sequence of every layer holds 0 positions) in *cache. */
attngen_status attngen_kv_cache_create(const attngen_kv_cache_options* options,
                                       attngen_kv_cache** cache);

/* Frees the cache (and its storage, if it owns it). NULL is a no-op. */
void attngen_kv_cache_destroy(attngen_kv_cache* cache);

/* Appends t new tokens of one layer: k [B, t, Hkv, Dqk], v [B, t, Hkv, Dv], each F32, F16 or
 * BF16 (converted to the cache's dtype as above; another dtype is ATTNGEN_ERROR_DTYPE), innermost
 * stride 1 (views into a fused QKV buffer work). counts, optional I32 [B] with values in
 * [0, t]: sequence b appends only its first counts[b] rows (NULL: all t), so a batch may hold
 * sequences of different lengths. On any error nothing is appended. */
attngen_status attngen_kv_cache_append(attngen_kv_cache* cache, int64_t layer,
                                       const attngen_tensor* k, const attngen_tensor* v,
                                       const attngen_tensor* counts);

/* Positions appended so far to one sequence of one layer (in ring-buffer mode including those
 * no longer kept). */
attngen_status attngen_kv_cache_length(const attngen_kv_cache* cache, int64_t layer,
                                       int64_t sequence, int64_t* length);

/* Empties one sequence (in every layer), or every sequence with sequence = -1; a paged cache's
 * pages go back to its pool. */
attngen_status attngen_kv_cache_reset(attngen_kv_cache* cache, int64_t sequence);

/* Makes sequence `to`, which must hold no position in any layer, a copy of sequence `from`
 * (every layer's positions): a paged cache shares `from`'s pages (no page taken, nothing
 * copied until one of the two appends into a shared page), a contiguous one copies the slots. */
attngen_status attngen_kv_cache_fork(attngen_kv_cache* cache, int64_t from, int64_t to);

/* A paged cache's pages not held by any sequence (a contiguous cache: 0). */
attngen_status attngen_kv_cache_free_pages(const attngen_kv_cache* cache, int64_t* pages);

typedef struct attngen_decode_options {
  size_t struct_size; /* sizeof(attngen_decode_options): the ABI rule above */
  float scale;        /* 0: 1 / sqrt(Dqk) */
  /* optional I32 [B], values in [0, t]: the real query rows of each sequence, its first
   * counts[b] rows (NULL: all t). The same tensor as given to the append. */
  const attngen_tensor* counts;
  /* split-KV: each (sequence, kv head) splits its cached keys into this many parts, processed
   * in parallel and merged (0: chosen from the sizes and the thread count; 1: no split). */
  int32_t kv_splits;
  const char* kernel; /* optional: run the decode kernel of this name */
  /* optional: a modifier and its parameters ("Modifiers", above), over the cached keys: query i
   * of sequence b at position p = n_b - counts[b] + i, each key at its position j. Its dims: B,
   * Hq of q, Hkv of the cache, Sq = t, and Skv = the cache's capacity; a modifier with a tensor
   * along Skv over a contiguous cache with a window (a ring, whose positions pass the capacity)
   * is ATTNGEN_ERROR_INVALID_ARGUMENT. A sink logit joins each row's denominator once, whatever the
   * split. Where no kernel with the modifier takes the cache's dtype (the built-in ones take F32
   * caches: generated/variants.cmake), each call reads the layer through an F32 copy of it in
   * its workspace (B * Hkv * capacity * (Dqk + Dv) floats), same results, slower. */
  const attngen_modifier* modifier;
} attngen_decode_options;

/* struct_size set, everything else 0 or NULL. */
attngen_decode_options attngen_decode_options_default(void);

/* Attention of t new queries q [B, t, Hq, Dqk] over the positions the cache holds for `layer`
 * (append the new tokens' K and V first), bottom-right causal: query i of sequence b sits at
 * position n_b - counts[b] + i, n_b being the sequence's length, and attends positions up to
 * its own (and no further back than the cache's window). out [B, t, Hq, Dv], F32; rows
 * i >= counts[b] are 0. Hq must be a multiple of the cache's Hkv (grouped-query). q and out are
 * F32 with a cache of any dtype (the kernels read the cache in its dtype); a dtype of q, out or
 * the cache that no generated kernel takes for the cache's head dims is ATTNGEN_ERROR_DTYPE,
 * naming it. */
attngen_status attngen_decode(const attngen_tensor* q, const attngen_kv_cache* cache, int64_t layer,
                              attngen_tensor* out, const attngen_decode_options* options);

/* ---- Decode plans: attngen_decode() validated and chosen once ----
 *
 * As attention plans (above): made from one call's arguments (validated as attngen_decode()
 * does; the kernel of each form chosen, for every length the cache may hold; the workspace
 * measured over every such length, as attngen_decode_workspace_size() does: nothing is written or
 * appended, and the cache need not hold the queries yet). A run takes a cache of the same options
 * but its layer count (batch, heads_kv, head dims, capacity, window, dtype; another cache, or
 * another layer, than the one the plan was made with), a layer, and the data pointers; it checks
 * what depends on them (the cache's lengths, NULL, alignment, overlaps) and runs the kernel of the
 * form the cache's length calls for, with the results of attngen_decode() bit for bit. */
typedef struct attngen_decode_plan attngen_decode_plan;

/* The data of one decode run: q and out, counts where the plan's call had counts, and the
 * modifier's tensors where it had a modifier. */
typedef struct attngen_decode_data {
  size_t struct_size; /* sizeof(attngen_decode_data): the ABI rule above */
  const void* q;
  void* out;
  const void* counts;
  const void* modifier_tensors[ATTNGEN_MAX_MODIFIER_TENSORS]; /* the modifier's tensors' data */
} attngen_decode_data;

/* struct_size set, every pointer NULL. */
attngen_decode_data attngen_decode_data_default(void);

attngen_status attngen_decode_plan_create(const attngen_tensor* q, const attngen_kv_cache* cache,
                                          int64_t layer, const attngen_tensor* out,
                                          const attngen_decode_options* options,
                                          attngen_decode_plan** plan);

/* Workspace bytes a run needs, at any length the cache may hold (at the thread count set when
 * the plan was made, or fewer). */
attngen_status attngen_decode_plan_workspace_size(const attngen_decode_plan* plan, size_t* bytes);

attngen_status attngen_decode_plan_run(const attngen_decode_plan* plan,
                                       const attngen_kv_cache* cache, int64_t layer,
                                       const attngen_decode_data* data);

/* Frees the plan. NULL is a no-op. */
void attngen_decode_plan_destroy(attngen_decode_plan* plan);

typedef struct attngen_mha_decode_options {
  size_t struct_size;           /* sizeof(attngen_mha_decode_options): the ABI rule above */
  int64_t num_heads;            /* H; the cache must have Hkv = H and Dqk = Dv = E / H */
  const attngen_tensor* counts; /* optional I32 [B]: tokens of each sequence in x */
  int32_t kv_splits;            /* as in attngen_decode_options */
} attngen_mha_decode_options;

/* struct_size set, num_heads 0 (to be set), everything else 0 or NULL. */
attngen_mha_decode_options attngen_mha_decode_options_default(void);

/* One decode step of the nn.MultiheadAttention layer of attngen_mha() (self-attention,
 * causal): x [B, t, E] holds each sequence's next tokens; projects them (in_proj), appends
 * their K and V to `layer` of the cache, attends their queries over the cache, and projects
 * the result (out_proj) into y [B, t, E]. Over a whole sequence, step by step, y equals
 * attngen_mha() with ATTNGEN_MASK_CAUSAL. Rows i >= counts[b] of y are out_proj of zeros (the
 * bias). Validation happens before anything is appended; a kernel failure after the append
 * leaves the tokens appended. */
attngen_status attngen_mha_decode(const attngen_tensor* x, const attngen_mha_weights* weights,
                                  attngen_kv_cache* cache, int64_t layer, attngen_tensor* y,
                                  const attngen_mha_decode_options* options);

/* ---- A persistent MHA layer: the weights packed once ----
 *
 * The linear and MHA kernels read their weight matrices packed (panels of output features,
 * each contiguous, in F32); attngen_mha() and attngen_mha_decode() pack the caller's weights into
 * scratch on every call (for a decode step of one token that costs more than the step's
 * products). A layer copies the weights of one nn.MultiheadAttention once, packed, and its calls
 * read them from there: attngen_mha_layer_forward() is attngen_mha() and
 * attngen_mha_layer_decode() is attngen_mha_decode() with the layer's weights, with the same
 * results (bitwise, for the same kernel). The layer keeps 4 bytes per weight (F32 whatever the
 * weights' dtype) and its biases; the caller's tensors may be freed once it is created. A call
 * whose kernel reads panels of another width than those packed (another ISA by
 * attngen_set_isa(), a kernel named in the options) packs the weights for it once, allocating
 * (its size query does it first, so that calls in a workspace never allocate). Calls on one
 * layer may run concurrently (not in an ATTNGEN_SINGLE_THREADED build, whose calls come from
 * one thread at a time); destroying it must wait for them. */
typedef struct attngen_mha_layer attngen_mha_layer;

/* Creates a layer with H = num_heads heads in *layer from the weights of an
 * nn.MultiheadAttention (as attngen_mha_weights: in_proj_weight [3E, E] F32, F16 or BF16, the
 * others of its dtype, biases optional). ATTNGEN_ERROR_OUT_OF_MEMORY if the packed copy does not
 * fit; on any error *layer is NULL. */
attngen_status attngen_mha_layer_create(const attngen_mha_weights* weights, int64_t num_heads,
                                        attngen_mha_layer** layer);

/* Frees the layer. NULL is a no-op. */
void attngen_mha_layer_destroy(attngen_mha_layer* layer);

/* attngen_mha() with the layer's weights: x and y [B, S, E] of the layer's dtype. options may be
 * NULL (no mask); its num_heads is 0 or the layer's. */
attngen_status attngen_mha_layer_forward(attngen_mha_layer* layer, const attngen_tensor* x,
                                         attngen_tensor* y, const attngen_mha_options* options);

/* attngen_mha_decode() with the layer's weights (an F32 layer: x and y F32). options may be
 * NULL (every row of x, kv_splits chosen); its num_heads is 0 or the layer's. */
attngen_status attngen_mha_layer_decode(attngen_mha_layer* layer, const attngen_tensor* x,
                                        attngen_kv_cache* cache, int64_t cache_layer,
                                        attngen_tensor* y,
                                        const attngen_mha_decode_options* options);

/* ---- A persistent linear layer: the weights packed once ----
 *
 * attngen_linear() packs its weight matrix into its kernel's layout (panels of output features)
 * on every call: for a decode step, whose x has a few rows, that costs more than the products. A
 * linear layer copies w [N, E] (F32, F16 or BF16) and its optional bias [N] once, packed (4
 * bytes a weight, F32 whatever w's dtype), and attngen_linear_layer_forward(layer, x, y) is
 * attngen_linear(x, w, bias, y) with the same results (bitwise, for the same kernel): x [B, S, E]
 * and y [B, S, N] of the layer's dtype. The caller's tensors may be freed once it is created. A
 * call whose kernel reads panels of another width (attngen_set_isa()) packs the weights for it
 * once, allocating (its size query does it first). Calls on one layer may run concurrently
 * (not in an ATTNGEN_SINGLE_THREADED build); destroying it must wait for them. */
typedef struct attngen_linear_layer attngen_linear_layer;

/* ATTNGEN_ERROR_OUT_OF_MEMORY if the packed copy does not fit; on any error *layer is NULL. */
attngen_status attngen_linear_layer_create(const attngen_tensor* w, const attngen_tensor* bias,
                                           attngen_linear_layer** layer);
void attngen_linear_layer_destroy(attngen_linear_layer* layer);
attngen_status attngen_linear_layer_forward(attngen_linear_layer* layer, const attngen_tensor* x,
                                            attngen_tensor* y);
attngen_status attngen_linear_layer_forward_workspace_size(attngen_linear_layer* layer,
                                                           const attngen_tensor* x,
                                                           const attngen_tensor* y, size_t* bytes);

/* ---- Workspaces: calls that never allocate ----
 *
 * A call made while a workspace is bound on its thread takes all its scratch memory from it:
 * the runtime's own buffers (key padding, zero biases, F32 copies of F16 / BF16 tensors, an
 * MHA decode step's projections) and every block its kernels allocate, on whichever thread of
 * the pool runs them. It makes no heap allocation (docs/semantics.md, "Resources": the thread
 * pool's start, and a KV cache layer's first append, do allocate once). The workflow:
 *
 *   size_t bytes = 0;
 *   attngen_attention_workspace_size(&q, &k, &v, &o, &opt, &bytes);  // once per configuration
 *   void* ws = malloc(bytes);                                         // any alignment
 *   attngen_set_workspace(ws, bytes);
 *   attngen_attention(&q, &k, &v, &o, &opt);                          // no allocation
 *
 * A size query takes the arguments of its call (which it validates as the call does, returning
 * the same errors) and writes no output: it runs the call's kernel on scratch outputs with its
 * allocations measured (with full key lengths, every block of a block-sparse layout, both
 * alignments' offsets; a decode at every cache length up to the capacity), and the runtime keeps
 * the measurement for the call's configuration: the kernel, every tensor's shape and strides,
 * and the options (scale, soft cap, pattern parameters, num_heads); not the data, kv_len or
 * counts values, or a cache's length. The size covers any call of that configuration at the
 * thread count set when it was asked (attngen_set_num_threads()) or fewer. A program that makes
 * calls of several configurations binds the largest size asked (one workspace serves calls one
 * at a time, on one thread).
 *
 * A call in a workspace that is too small for it, or of a configuration no size query of this
 * process measured, returns ATTNGEN_ERROR_WORKSPACE before writing anything (the message says
 * how many bytes it needs) and never falls back to the heap. Outputs are bitwise those of the
 * call without a workspace; a parallel loop that a kernel starts inside a task holding scratch
 * (attention's query tiles of one head) runs on that task's thread, so that the scratch stays
 * one stack per thread: such calls use at most batch x heads threads. */

/* Binds `bytes` of memory at `memory` (any alignment; kept by the caller, not touched between
 * calls) as the workspace of the calling thread's calls, until unbound by
 * attngen_set_workspace(NULL, 0) or replaced. Concurrent calls need a workspace each (each
 * thread binds its own). ATTNGEN_ERROR_NULL_POINTER for NULL with bytes > 0. */
attngen_status attngen_set_workspace(void* memory, size_t bytes);

/* Workspace bytes the call with these arguments needs, in *bytes (and the measurement kept for
 * its configuration); attngen_last_kernel() then names the kernel measured. Nothing is written:
 * the outputs only need to be valid descriptions (their data is not touched). */
attngen_status attngen_attention_workspace_size(const attngen_tensor* q, const attngen_tensor* k,
                                                const attngen_tensor* v, const attngen_tensor* out,
                                                const attngen_attention_options* options,
                                                size_t* bytes);
attngen_status attngen_linear_workspace_size(const attngen_tensor* x, const attngen_tensor* w,
                                             const attngen_tensor* bias, const attngen_tensor* y,
                                             size_t* bytes);
attngen_status attngen_mha_workspace_size(const attngen_tensor* x,
                                          const attngen_mha_weights* weights,
                                          const attngen_tensor* y,
                                          const attngen_mha_options* options, size_t* bytes);
/* For every length the cache's layer may hold (1 to its capacity), whatever it holds now. */
attngen_status attngen_decode_workspace_size(const attngen_tensor* q, const attngen_kv_cache* cache,
                                             int64_t layer, const attngen_tensor* out,
                                             const attngen_decode_options* options, size_t* bytes);
/* Appends nothing; covers every length, as attngen_decode_workspace_size(). */
attngen_status attngen_mha_decode_workspace_size(const attngen_tensor* x,
                                                 const attngen_mha_weights* weights,
                                                 const attngen_kv_cache* cache, int64_t layer,
                                                 const attngen_tensor* y,
                                                 const attngen_mha_decode_options* options,
                                                 size_t* bytes);
/* The layer calls' size queries (the second appends nothing and covers every length). */
attngen_status attngen_mha_layer_forward_workspace_size(attngen_mha_layer* layer,
                                                        const attngen_tensor* x,
                                                        const attngen_tensor* y,
                                                        const attngen_mha_options* options,
                                                        size_t* bytes);
attngen_status attngen_mha_layer_decode_workspace_size(attngen_mha_layer* layer,
                                                       const attngen_tensor* x,
                                                       const attngen_kv_cache* cache,
                                                       int64_t cache_layer, const attngen_tensor* y,
                                                       const attngen_mha_decode_options* options,
                                                       size_t* bytes);
/* Appends nothing. */
attngen_status attngen_kv_cache_append_workspace_size(const attngen_kv_cache* cache, int64_t layer,
                                                      const attngen_tensor* k,
                                                      const attngen_tensor* v,
                                                      const attngen_tensor* counts, size_t* bytes);

/* Message of the last call made on this thread ("" after success). */
const char* attngen_last_error(void);

/* Name of the kernel that the last successful call on this thread ran (an F32 kernel when the
 * call's F16 / BF16 tensors were converted for it). */
const char* attngen_last_kernel(void);

/* Stable name of a status, e.g. "ATTNGEN_ERROR_SHAPE". */
const char* attngen_status_name(attngen_status status);

/* The most threads attngen_set_num_threads() accepts (Halide's thread pool holds no more). */
#define ATTNGEN_MAX_THREADS 256

/* Threads used by the kernels, 1 to ATTNGEN_MAX_THREADS (0: HL_NUM_THREADS if set, else one per
 * core, the default; both read once per process, when a call first needs them, as Halide's pool
 * reads them once); ATTNGEN_ERROR_INVALID_ARGUMENT outside 0 .. ATTNGEN_MAX_THREADS. Each call
 * runs on its calling thread plus up to threads - 1 workers of a pool shared by all calls of the
 * process; the count goes down as well as up: lowering it stops the pool's threads (it restarts
 * at the new size), after waiting for the kernels running on other threads to finish, and calls
 * starting meanwhile wait for it. A kernel's results do not depend on the count (bitwise),
 * except attngen_decode()'s with kv_splits = 0, whose automatic split follows it. Process-wide
 * (the pool is Halide's: other Halide code of the process shares it). */
attngen_status attngen_set_num_threads(int threads);

/* Gives back the memory attngen keeps for reuse: the calling thread's cache of scratch blocks
 * (every thread keeps at most 16 blocks and 16 MiB, freed when the thread exits), and those of
 * the kernels' worker threads, by stopping the thread pool as lowering the thread count does
 * (it restarts with the next call); then asks malloc to return its free pages to the system.
 * Other threads' caches stay (each frees its own on exit, or by calling this). Always
 * ATTNGEN_OK. */
attngen_status attngen_release_memory(void);

/* Restricts automatic kernel choice to one instruction set ("avx512", "avx2", "sse41", "neon",
 * "cuda"), e.g. to compare variants; NULL or "" restores the default: the best CPU ISA this
 * machine runs. CUDA kernels take host tensors, copy them to the GPU and back on every call,
 * and are chosen automatically only while "cuda" is set here (or when named in the options).
 * ATTNGEN_ERROR_UNSUPPORTED_TARGET if this machine cannot run that ISA,
 * ATTNGEN_ERROR_INVALID_ARGUMENT for an unknown name; the setting is process-wide. */
attngen_status attngen_set_isa(const char* isa);

/* The ISA automatic dispatch prefers on this machine (the forced one, if set): the best CPU ISA
 * it runs among those the build has kernels of (or a caller registered). */
const char* attngen_isa(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ATTNGEN_ATTNGEN_H_ */
