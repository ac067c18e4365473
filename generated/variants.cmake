# THE list of kernel variants attngen builds. Everything else derives from it: the build rules
# (attngen_add_kernel), the runtime's dispatch table (attngen_write_registry), and through that
# table the test cases and benchmark registrations, which iterate over the built-in kernels.
#
# Each entry is the arguments of one attngen_add_kernel() call (cmake/AttngenKernels.cmake
# documents every one; names follow docs/variants.md), generated for every ISA in
# ATTNGEN_KERNEL_ISAS, or only for those after ONLY_ISAS; a generic-only row (SSE4.1:
# row_generic_only(), core/targets.h) builds the GENERIC entries, linear, and those naming it.
# When two kernels fit a call equally well, the runtime takes the one listed first.
set(ATTNGEN_VARIANTS
    # Dense attention: head dims, masks, mask tensors, soft cap.
    "OP attention HEAD_DIM 64"
    "OP attention HEAD_DIM 64 MASK causal"
    "OP attention HEAD_DIM 80 MASK causal"
    "OP attention HEAD_DIM 40 HEAD_DIM_V 24"
    "OP attention HEAD_DIM 64 MASK_TENSOR bool"
    "OP attention HEAD_DIM 64 MASK causal MASK_TENSOR additive"
    "OP attention HEAD_DIM 64 MASK causal SOFTCAP"
    "OP attention HEAD_DIM 128"
    "OP attention HEAD_DIM 128 MASK causal"
    # The head dims of widespread models (MiniLM 32, Phi-2 80, Phi-3 96, Gemma 256); other
    # head dims run on the generic kernels below.
    "OP attention HEAD_DIM 32"
    "OP attention HEAD_DIM 32 MASK causal"
    "OP attention HEAD_DIM 80"
    "OP attention HEAD_DIM 96"
    "OP attention HEAD_DIM 96 MASK causal"
    "OP attention HEAD_DIM 256 MASK causal"
    # (No short-sequence QUERY_TILE kernel: AVX-512's tuned D64 tile, schedules/tuned/, pads
    # ViT's rows less than the QUERY_TILE 32 kernel did; bench/RESULTS.md, "Tiles of 16 query rows for AVX-512's D64 attention".)
    # The key-block (online softmax) form asked for explicitly: the runtime prefers these for
    # long key sequences (runtime/src/registry.cpp). Blocks of 512 keys dense and 256 causal
    # (a causal tile's last block is partly masked): 0.89-0.95 and 0.95-0.98 of the time of
    # blocks of 128 at S4608-S8192 on AVX-512, 0.96-0.97 dense on AVX2 (bench/RESULTS.md).
    "OP attention HEAD_DIM 64 KEY_BLOCK 512"
    "OP attention HEAD_DIM 64 MASK causal KEY_BLOCK 256"
    "OP attention HEAD_DIM 40 HEAD_DIM_V 24 MASK causal MASK_TENSOR bool KEY_BLOCK 32"
    # Sparse patterns (docs/semantics.md), alone and with causal.
    "OP attention HEAD_DIM 64 PATTERN window WINDOW_LEFT 31 WINDOW_RIGHT 31"
    "OP attention HEAD_DIM 64 MASK causal PATTERN window WINDOW_LEFT 31 WINDOW_RIGHT 31"
    "OP attention HEAD_DIM 64 MASK causal PATTERN window WINDOW_LEFT 255 WINDOW_RIGHT 0"
    "OP attention HEAD_DIM 64 PATTERN strided STRIDE 16"
    "OP attention HEAD_DIM 64 MASK causal PATTERN strided STRIDE 16"
    # The Sparse Transformer's own (Child et al. 2019: stride 128, causal).
    "OP attention HEAD_DIM 64 MASK causal PATTERN strided STRIDE 128"
    "OP attention HEAD_DIM 64 PATTERN block_sparse BLOCK 64"
    "OP attention HEAD_DIM 64 MASK causal PATTERN block_sparse BLOCK 64"
    "OP attention HEAD_DIM 64 PATTERN global_local GLOBAL_TOKENS 4 LOCAL 16"
    "OP attention HEAD_DIM 64 MASK causal PATTERN global_local GLOBAL_TOKENS 4 LOCAL 16"
    # Inspection: attention weights and row log-sum-exp as extra outputs.
    "OP attention HEAD_DIM 64 WEIGHTS LSE"
    "OP attention HEAD_DIM 64 MASK causal LSE"
    "OP attention HEAD_DIM 64 MASK causal PATTERN window WINDOW_LEFT 31 WINDOW_RIGHT 31 WEIGHTS"
    # Generic kernels: any head dims up to the bucket's, the causal mask, a mask tensor and the
    # soft cap at run time. Dispatch takes them only where no specialised kernel fits (the
    # smallest bucket that does), so every valid call runs (docs/variants.md).
    "OP attention HEAD_DIM 64 GENERIC"
    "OP attention HEAD_DIM 128 GENERIC"
    "OP attention HEAD_DIM 256 GENERIC"
    "OP attention HEAD_DIM 512 GENERIC"
    # Generic pattern kernels: the pattern's kind built in, its parameters at run time (one
    # window kernel serves Mistral's 4096 and Longformer's 256), with the generic options.
    "OP attention HEAD_DIM 128 GENERIC PATTERN window"
    "OP attention HEAD_DIM 256 GENERIC PATTERN window"
    "OP attention HEAD_DIM 128 GENERIC PATTERN strided"
    "OP attention HEAD_DIM 128 GENERIC PATTERN block_sparse"
    "OP attention HEAD_DIM 128 GENERIC PATTERN global_local"
    # Modifiers (docs/variants.md, "Modifiers"): the library's on a generic kernel each (head
    # dims up to 128, the masks, the soft cap and the alignment at run time), which writes the
    # row log-sum-exp where a call asks for it (from the online softmax's final state, with the
    # output: bench/RESULTS.md, "The log-sum-exp from the key-block form").
    "OP attention HEAD_DIM 128 GENERIC MODIFIER alibi LSE"
    "OP attention HEAD_DIM 128 GENERIC MODIFIER document LSE"
    "OP attention HEAD_DIM 128 GENERIC MODIFIER prefix LSE"
    "OP attention HEAD_DIM 128 GENERIC MODIFIER sinks LSE"
    "OP attention HEAD_DIM 128 GENERIC MODIFIER sink_logit LSE"
    # T5's relative position bias at T5's and MPNet's head dim (a D64 call on the D128 kernel
    # would compute twice the products).
    "OP attention HEAD_DIM 64 GENERIC MODIFIER t5_bias LSE"
    # The attention weights with a modifier (heatmaps of the inspection form: whole score rows),
    # on AVX2 and NEON (an AVX-512 machine runs the AVX2 kernel; an SSE4.1-only or ARMv7 build
    # names the variant in its own list).
    "OP attention HEAD_DIM 128 GENERIC MODIFIER alibi WEIGHTS LSE ONLY_ISAS avx2 neon"
    "OP attention HEAD_DIM 128 GENERIC MODIFIER document WEIGHTS LSE ONLY_ISAS avx2 neon"
    "OP attention HEAD_DIM 128 GENERIC MODIFIER prefix WEIGHTS LSE ONLY_ISAS avx2 neon"
    "OP attention HEAD_DIM 128 GENERIC MODIFIER sinks WEIGHTS LSE ONLY_ISAS avx2 neon"
    "OP attention HEAD_DIM 128 GENERIC MODIFIER sink_logit WEIGHTS LSE ONLY_ISAS avx2 neon"
    "OP attention HEAD_DIM 64 GENERIC MODIFIER t5_bias WEIGHTS LSE ONLY_ISAS avx2 neon"
    # ALiBi's causal decoders (BLOOM, MPT) at their head dim, specialised: bench/RESULTS.md,
    # "Modifiers".
    "OP attention HEAD_DIM 128 MASK causal MODIFIER alibi"
    # Generic inspection kernels: the attention weights and log-sum-exp of any call up to D128.
    "OP attention HEAD_DIM 128 GENERIC WEIGHTS LSE"
    "OP attention HEAD_DIM 128 GENERIC PATTERN window WEIGHTS LSE"
    "OP attention HEAD_DIM 128 GENERIC PATTERN strided WEIGHTS LSE"
    "OP attention HEAD_DIM 128 GENERIC PATTERN block_sparse WEIGHTS LSE"
    "OP attention HEAD_DIM 128 GENERIC PATTERN global_local WEIGHTS LSE"
    # Generic log-sum-exp kernels: the row log-sum-exp alone of any call up to D128 (a call
    # without the weights never runs a kernel that writes them into O(Sq x Skv) scratch).
    "OP attention HEAD_DIM 128 GENERIC LSE"
    "OP attention HEAD_DIM 128 GENERIC PATTERN window LSE"
    "OP attention HEAD_DIM 128 GENERIC PATTERN strided LSE"
    "OP attention HEAD_DIM 128 GENERIC PATTERN block_sparse LSE"
    "OP attention HEAD_DIM 128 GENERIC PATTERN global_local LSE"
    # Layers.
    "OP linear"
    "OP mha HEAD_DIM 32"
    "OP mha HEAD_DIM 64"
    "OP mha HEAD_DIM 64 MASK causal"
    "OP mha HEAD_DIM 128"
    "OP mha HEAD_DIM 128 MASK causal"
    # Generic layer: any head dim up to 128 (E / num_heads), causal or not at run time.
    "OP mha HEAD_DIM 128 GENERIC"
    "OP mha HEAD_DIM 512 GENERIC"
    # f16 and bf16 tensors (docs/semantics.md, "Precision"): stored in the dtype, computed in
    # f32; the avx512bf16 and neonfp16 rows of the target table add kernels whose products use
    # the dtype's own instructions. Calls in these dtypes that no kernel here takes (patterns,
    # inspection, head dims above 256) run on the f32 kernels through a conversion in the
    # runtime, a copy of the inputs.
    "OP attention DTYPE bf16 HEAD_DIM 64"
    "OP attention DTYPE bf16 HEAD_DIM 64 MASK causal"
    "OP attention DTYPE bf16 HEAD_DIM 128"
    "OP attention DTYPE bf16 HEAD_DIM 128 MASK causal"
    "OP attention DTYPE bf16 HEAD_DIM 128 GENERIC"
    "OP attention DTYPE bf16 HEAD_DIM 256 GENERIC"
    "OP attention DTYPE bf16 OUT_DTYPE f32 HEAD_DIM 128 GENERIC"
    "OP attention DTYPE f16 HEAD_DIM 64"
    "OP attention DTYPE f16 HEAD_DIM 64 MASK causal"
    "OP attention DTYPE f16 HEAD_DIM 128"
    "OP attention DTYPE f16 HEAD_DIM 128 MASK causal"
    "OP attention DTYPE f16 HEAD_DIM 128 GENERIC"
    "OP attention DTYPE f16 HEAD_DIM 256 GENERIC"
    "OP attention DTYPE f16 OUT_DTYPE f32 HEAD_DIM 128 GENERIC"
    "OP linear DTYPE bf16"
    "OP linear DTYPE f16"
    "OP mha DTYPE bf16 HEAD_DIM 64"
    "OP mha DTYPE bf16 HEAD_DIM 128 GENERIC"
    "OP mha DTYPE f16 HEAD_DIM 64"
    "OP mha DTYPE f16 HEAD_DIM 128 GENERIC"
    # Decode against a KV cache: few queries, split-KV, grouped-query of any ratio at run time.
    "OP decode HEAD_DIM 32"
    "OP decode HEAD_DIM 64"
    "OP decode HEAD_DIM 80"
    "OP decode HEAD_DIM 96"
    "OP decode HEAD_DIM 128"
    "OP decode HEAD_DIM 256"
    # Generic decode: any head dims up to the bucket's (zero-padded), for the caches no
    # specialised kernel takes. (D512 on CUDA would need 64 KiB of shared memory a block.)
    "OP decode HEAD_DIM 128 GENERIC"
    "OP decode HEAD_DIM 512 GENERIC ONLY_ISAS avx512 avx2 sse41 neon neon32"
    # Caches in f16, bf16 and i8 (docs/semantics.md, "Incremental decoding"), read in their type
    # and converted in registers (i8: per-slot scales on the score and the probability), with
    # f32 queries: Llama-like head dims, and a generic bucket each so that every head dim up to
    # 128 runs.
    "OP decode KV_DTYPE f16 HEAD_DIM 64"
    "OP decode KV_DTYPE f16 HEAD_DIM 128"
    "OP decode KV_DTYPE bf16 HEAD_DIM 128"
    "OP decode KV_DTYPE i8 HEAD_DIM 64"
    "OP decode KV_DTYPE i8 HEAD_DIM 128"
    "OP decode KV_DTYPE f16 HEAD_DIM 128 GENERIC"
    "OP decode KV_DTYPE bf16 HEAD_DIM 128 GENERIC"
    "OP decode KV_DTYPE i8 HEAD_DIM 128 GENERIC"
    # Modifiers over the cache (attngen_decode_options::modifier): ALiBi's decoders (BLOOM,
    # MPT), attention sinks with a window (StreamingLLM), a learned sink logit (gpt-oss); a
    # generic kernel each over an F32 cache, on the generic rows of each architecture (an
    # AVX-512 machine runs the AVX2 one, a GPU build's call the CPU's): an AVX-512 kernel took
    # 18 s to generate against AVX2's 10 (bench/RESULTS.md, "Modifiers in decode").
    "OP decode HEAD_DIM 128 GENERIC MODIFIER alibi ONLY_ISAS avx2 sse41 neon neon32"
    "OP decode HEAD_DIM 128 GENERIC MODIFIER sinks ONLY_ISAS avx2 sse41 neon neon32"
    "OP decode HEAD_DIM 128 GENERIC MODIFIER sink_logit ONLY_ISAS avx2 sse41 neon neon32"
    # Document masking over a cache (positions indexed along Skv: the capacity), on one x86 and
    # one ARM row (the x86 suite runs AVX2 kernels on an AVX-512 machine too): what every
    # modifier reading a tensor by key position takes.
    "OP decode HEAD_DIM 128 GENERIC MODIFIER document ONLY_ISAS avx2 neon"
    # The key-block form of decode asked for explicitly: the runtime prefers it from 512 cached
    # keys (core/targets.h, kDecodeLongKeys). Blocks of 256 keys for the i8 cache at D128:
    # 0.93 of the time of blocks of 128 at Skv 8192 on AVX512-VNNI, 0.95 on AVX-512 without it
    # (bench/RESULTS.md, "Every call's thread count read once"); on the AVX-512 rows only, where measured (CUDA's blocks
    # are bounded by shared memory: 256 keys would take 152 KiB).
    "OP decode KV_DTYPE i8 HEAD_DIM 128 KEY_BLOCK 256 ONLY_ISAS avx512 avx512bf16"
)
