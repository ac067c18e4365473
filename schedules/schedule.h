// Schedules for the algorithms in generator/attention_algorithm.h and decode_algorithm.h. The
// generators call plan_*() (which fix the algorithm's units for a target: form, query tile, key
// chunk) and then schedule_attention(), schedule_linear() and schedule_decode(); which schedule
// a target gets is decided once, in schedule.cpp: autoscheduler -> CUDA -> SIMD CPU (AVX-512,
// AVX2, SSE4.1, NEON) -> generic, by the target's row of the table (core/targets.h).
#pragma once

#include <string>
#include <vector>

#include "Halide.h"
#include "core/tunables.h"
#include "generator/attention_algorithm.h"
#include "generator/decode_algorithm.h"
#include "schedules/target_info.h"

namespace attngen {

// The tunables (AttentionTunables, LinearTunables, DecodeTunables) are in core/tunables.h;
// a variant names them (TUNABLES name=value), so a tuned set (schedules/tuned/<target>.json,
// written by bench/autotune) reaches the schedule through attngen_add_kernel().

// The algorithm form a target's schedule uses (AttentionSpec::key_block). `requested` 0 means the
// target's default: whole score rows on CPUs, key blocks sized to shared memory on GPUs.
int resolve_key_block(int requested, int head_dim_qk, int head_dim_v, const Halide::Target& target);

AttentionTunables resolve(AttentionTunables t, const AttentionSpec& spec, const TargetInfo& info);

// The target's planner: the form in which a kernel of `problem` computes on the target, from the
// variant's requested form (key_block 0 = the target's default; the amx row; the half-precision
// P.V) and tunables: the key block, query tile, key chunk and row group the schedule's tiles
// need, the bf16 pair products, the strided pattern's parts; and the resolved tunables, to pass
// on to schedule_attention() with the spec AttentionSpec(problem, form).
struct AttentionPlan {
  AttentionForm form;
  AttentionTunables tunables;
};
AttentionPlan plan_attention(const AttentionProblem& problem, const AttentionForm& requested,
                             const AttentionTunables& tunables, const Halide::Target& target);
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
// The output stage of the CPU row form: query tiles of t.query_tile rows (the loop renamed
// `task`, parallel in work items of t.parallel_grain tiles), Dv vectorised, batches and heads
// one parallel loop, which it returns (what per-head stages are computed at).
Halide::Var schedule_row_form_output(const AttentionFuncs& f, const AttentionSpec& spec,
                                     const TargetInfo& info, const AttentionTunables& t,
                                     const Halide::Var& task);
// The row form with bf16 products in pairs (AttentionSpec::bf16_pairs), AVX512-BF16.
void schedule_attention_bf16_pairs(AttentionFuncs f, const AttentionSpec& spec,
                                   const TargetInfo& info, const AttentionTunables& t);
// Halide 14 has no instruction selection for vdpbf16ps: this lowering pass rewrites the
// pair products the bf16 schedule vectorises (acc + the sum of adjacent lanes of f32(bf16) *
// f32(bf16), 32 lanes into 16) into calls of its runtime's dpbf16ps wrapper. Add it to the
// pipeline of a kernel whose spec has bf16_pairs; returns the pass (owned by the pipeline).
Halide::Internal::IRMutator* bf16_pair_dots_pass();
// The row form with bf16 pair products as AMX tile products (AttentionSpec::amx): q.k and p.v
// in 16 x 16 f32 tiles, the softmax between them as in schedule_attention_bf16_pairs.
void schedule_attention_amx(AttentionFuncs f, const AttentionSpec& spec, const TargetInfo& info,
                            const AttentionTunables& t);
// Halide 14 recognises a tile product 2 bf16 deep only (one pair a step of the reduction): this
// lowering pass merges a loop of 16k such steps into k steps 32 deep (tdpbf16ps at full depth).
// Add it to the pipeline of a kernel whose spec has amx; returns the pass (owned by the
// pipeline).
Halide::Internal::IRMutator* amx_full_depth_pass();
void schedule_attention_simd_blocked(AttentionFuncs f, const AttentionSpec& spec,
                                     const TargetInfo& info, const AttentionTunables& t);
// The half-precision P.V of a key-block schedule (AttentionSpec::half_pv_chunk > 0): f.block_pv
// is computed per key block already; this schedules its update and the f16 Funcs under it.
void schedule_half_pv(AttentionFuncs f, const AttentionSpec& spec, const TargetInfo& info,
                      const AttentionTunables& t);
void schedule_attention_cuda(AttentionFuncs f, const AttentionSpec& spec, const TargetInfo& info,
                             const AttentionTunables& t);
void schedule_linear_cuda(LinearFuncs f, const TargetInfo& info, const LinearTunables& t);
void schedule_attention_inspect(AttentionFuncs f, const AttentionSpec& spec,
                                const TargetInfo& info);
void schedule_attention_generic(AttentionFuncs f, const TargetInfo& info);
void schedule_linear_generic(LinearFuncs f, const TargetInfo& info);

// Decode (generator/decode_algorithm.h).
// Rows (query heads x queries of a kv head) per CUDA thread block of the decode schedule.
constexpr int kCudaDecodeRowTile = 16;

// The target's planner for decode: the requested form with its key_block resolved (0 = the
// target's default), and the resolved tunables for schedule_decode().
struct DecodePlan {
  DecodeForm form;
  DecodeTunables tunables;
};
DecodePlan plan_decode(const DecodeProblem& problem, const DecodeForm& requested,
                       const DecodeTunables& tunables, const Halide::Target& target);

void schedule_decode(DecodeFuncs f, const DecodeSpec& spec, const Halide::Target& target,
                     bool autoscheduled, const DecodeTunables& tunables);
// Prefetches into L2 where a schedule prefetches an input (Stage::prefetch): Halide 14 emits
// prefetchnta for every 4th cache line of the box the loop reads (f32), which this lowering pass
// replaces by a prefetch into L2 (generator/native_code.h) of every line of `bytes` from the box's
// start, for each listed input buffer (by name). The decode kernels prefetch a slot's K and V
// from K's box this way (the storage layout, decode_algorithm.h). The generator adds the native
// code and the pass (owned by the pipeline).
struct PrefetchSpan {
  std::string buffer;
  int element_bytes = 4;
  int bytes = 0;
  int again_at = 0;  // > 0: the same span again, this many bytes after the first
};
Halide::Internal::IRMutator* prefetch_lines_pass(const std::vector<PrefetchSpan>& spans);

void schedule_decode_simd(DecodeFuncs f, const DecodeSpec& spec, const TargetInfo& info,
                          const DecodeTunables& t);
// Bytes of a grouped cache's K part (core/kv_layout.h) that one iteration of the decode's
// q.k reads on a SIMD CPU (schedules/cpu_decode.cpp): the span of each of its prefetches of K
// (and, for an i8 cache on the VNNI row, of V).
int decode_line_bytes(const DecodeSpec& spec, const TargetInfo& info);
// Bytes of a key's V that one iteration of the decode's P.V reads on a SIMD CPU (its part of Dv,
// pv_vectors vectors, as stored): the span of each of its prefetches of V, an f32, f16 or bf16
// cache's (schedules/cpu_decode.cpp).
int decode_pv_bytes(const DecodeSpec& spec, const TargetInfo& info, const DecodeTunables& t);
void schedule_decode_cuda(DecodeFuncs f, const DecodeSpec& spec, const TargetInfo& info);
void schedule_decode_generic(DecodeFuncs f, const TargetInfo& info);

}  // namespace attngen
