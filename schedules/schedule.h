// Schedules for the algorithms in generator/attention_algorithm.h and decode_algorithm.h. The
// generators call plan_*() (which fix the algorithm's units for a target: form, query tile, key
// chunk) and then schedule_attention(), schedule_linear() and schedule_decode(); which schedule
// a target gets is decided once, in schedule.cpp: autoscheduler -> CUDA -> SIMD CPU (AVX-512,
// AVX2, SSE4.1, NEON) -> generic, by the target's row of the table (schedules/targets.h).
#pragma once

#include "Halide.h"
#include "generator/attention_algorithm.h"
#include "generator/decode_algorithm.h"
#include "schedules/target_info.h"

namespace attngen {

// Tunables of the schedules; 0 means "derive from the target" (see resolve()). A variant names
// them (TUNABLES name=value, generator/plan.cpp sets the fields), so a tuned set
// (schedules/tuned/<target>.json, written by bench/autotune) reaches the schedule through
// attngen_add_kernel(). The algorithm's form, key_block, is tunable too (AttentionSpec::key_block,
// resolve_key_block()) where the variant does not fix it.
struct AttentionTunables {
  int query_tile = 0;      // query rows per parallel task (CPU) or per thread block (GPU)
  int key_tile = 0;        // keys per register tile of the q.k product (CPU)
  int pv_rows = 0;         // query rows per register tile of the probs.v product (CPU)
  int parallel_grain = 0;  // query tiles per parallel work item (CPU; default 1)
  int threads_x = 0;       // threads along the fastest dimension of a block (GPU; default 32)
  int stage_kv = -1;       // K/V copied contiguous once per head (2), per key block (1), or read in
                           // place (0) (CPU; 1 is for the key-block form only)
  int pv_chunk = 0;  // whole-row form: keys per pass of the probs.v product over the tile (CPU)
};

struct LinearTunables {
  int n_vectors = 0;  // output-feature vectors per register tile (CPU)
  int rows = 0;       // rows per register tile (CPU)
  int row_block = 0;  // rows sharing one pass over a weight panel (CPU cache blocking)
  int e_chunk = 0;    // input features per pass over a row block's tile (CPU cache blocking)
  int threads_x = 0;  // threads per block along the output features (GPU; default 32)
  int threads_y = 0;  // threads per block along the rows (GPU; default 8)
  // The row block's inputs staged as rows (0, the default) or transposed (1: per input feature
  // the block's rows side by side, at a compile-time stride) (CPU). See schedule_linear_simd.
  int transpose_x = -1;
};

// The algorithm form a target's schedule uses (AttentionSpec::key_block). `requested` 0 means the
// target's default: whole score rows on CPUs, key blocks sized to shared memory on GPUs.
int resolve_key_block(int requested, int head_dim_qk, int head_dim_v, const Halide::Target& target);

AttentionTunables resolve(AttentionTunables t, const AttentionSpec& spec, const TargetInfo& info);

// Fixes the algorithm's form for a target before it is defined: spec.key_block (0 = the
// target's default) and, in the key-block form, spec.query_tile = the schedule's query tile.
// Returns the resolved tunables, to pass on to schedule_attention().
AttentionTunables plan_attention(AttentionSpec& spec, const AttentionTunables& requested,
                                 const Halide::Target& target);
LinearTunables resolve(LinearTunables t, const TargetInfo& info);

// Fixes the algorithm's weight panels (shape.panel) for a target before define_linear(); returns
// the resolved tunables, to pass on to schedule_linear().
LinearTunables plan_linear(LinearShape& shape, const LinearTunables& requested,
                           const Halide::Target& target, bool autoscheduled);

void schedule_attention(AttentionFuncs f, const AttentionSpec& spec, const Halide::Target& target,
                        bool autoscheduled, const AttentionTunables& tunables = {});

void schedule_linear(LinearFuncs f, const Halide::Target& target, bool autoscheduled,
                     const LinearTunables& tunables = {});

// Per-ISA implementations, chosen by the two functions above.
void schedule_attention_simd(AttentionFuncs f, const AttentionSpec& spec, const TargetInfo& info,
                             const AttentionTunables& t);
void schedule_linear_simd(LinearFuncs f, const TargetInfo& info, const LinearTunables& t);
void schedule_attention_simd_blocked(AttentionFuncs f, const AttentionSpec& spec,
                                     const TargetInfo& info, const AttentionTunables& t);
void schedule_attention_cuda(AttentionFuncs f, const AttentionSpec& spec, const TargetInfo& info,
                             const AttentionTunables& t);
void schedule_linear_cuda(LinearFuncs f, const TargetInfo& info, const LinearTunables& t);
void schedule_attention_inspect(AttentionFuncs f, const AttentionSpec& spec,
                                const TargetInfo& info);
void schedule_attention_generic(AttentionFuncs f, const TargetInfo& info);
void schedule_linear_generic(LinearFuncs f, const TargetInfo& info);

// Decode (generator/decode_algorithm.h). Tunables: 0 = derived from the target.
struct DecodeTunables {
  int key_tile = 0;  // keys whose q.k products are in flight together (CPU)
  int pv_rows = 0;   // rows per register tile of the probs.v product (CPU)
};

// Rows (query heads x queries of a kv head) per CUDA thread block of the decode schedule.
constexpr int kCudaDecodeRowTile = 16;

// Fixes spec.key_block (0 = the target's default) before the algorithm is defined; returns the
// resolved tunables for schedule_decode().
DecodeTunables plan_decode(DecodeSpec& spec, const DecodeTunables& requested,
                           const Halide::Target& target);

void schedule_decode(DecodeFuncs f, const DecodeSpec& spec, const Halide::Target& target,
                     bool autoscheduled, const DecodeTunables& tunables);

void schedule_decode_simd(DecodeFuncs f, const DecodeSpec& spec, const TargetInfo& info,
                          const DecodeTunables& t);
void schedule_decode_cuda(DecodeFuncs f, const DecodeSpec& spec, const TargetInfo& info);
void schedule_decode_generic(DecodeFuncs f, const TargetInfo& info);

}  // namespace attngen
