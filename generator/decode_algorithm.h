// The decode algorithm: a few new queries against a KV cache (docs/semantics.md, "Incremental
// decoding"), written once for every target; schedules are in schedules/.
//
// The cache layout the kernel reads is the runtime's storage layout (runtime/src/kv_cache.cpp):
// per layer a pool of pages [pages, Hkv, page slots, Dqk + Dv] (a contiguous cache: one page
// of `capacity` slots per sequence), each slot's K then its V, so a kv head's keys and
// values are one contiguous stream (measured on the 2-core dev machine, paired runs: 0.83 of a
// plain streaming read, against 0.76 with K and V in separate arrays; bench/RESULTS.md). k and
// v are views of it, (d, s, hkv, b) in Halide's innermost-first order with slots Dqk + Dv apart
// (an i8, f16 or bf16 cache's: (element, group, hkv, b) of its groups of 16 slots,
// core/kv_layout.h).
// Slot s holds the latest position p < kv_len[b] with p = s (mod capacity): with kv_len <= capacity
// that is p = s (a plain cache), beyond it the cache is a ring buffer of the last `capacity`
// positions. Queries are aligned bottom-right: query i of sequence b sits at position
// kv_len[b] - q_len[b] + i and attends the positions p <= that (and >= it - window with a
// window); rows i >= q_len[b] attend nothing and give 0.
//
// Work is split three ways so that a single query still uses every core:
//  - grouped-query attention: the g = Hq / Hkv query heads of a kv head and the Sq queries form
//    the rows r = hg + g * i of one kv head, so K and V are read once per kv head;
//  - split-KV: a kv head's slots are cut into splits of `split_keys` keys (a run-time value,
//    rounded up to whole key blocks); each split folds its blocks into a partial (acc, max, sum)
//    with an online softmax;
//  - the partials of all splits are merged with a log-sum-exp merge.
#pragma once

#include <vector>

#include "Halide.h"
#include "core/targets.h"
#include "generator/modifier.h"

namespace attngen {

// What a decode kernel computes, as its variant says (generator/plan.h, decode_problem): fixed
// when the variant is read.
struct DecodeProblem {
  int head_dim_qk = 64;
  int head_dim_v = 64;
  // Element type of the cached K and V: f32, f16 and bf16 are converted to f32 where they are
  // read; i8 is symmetric-quantised with one f32 scale per (slot, kv head) for K and one for V
  // (DecodeInputs::kv_scales), applied to the score and folded into the probabilities.
  Halide::Type kv_type = Halide::Float(32);
  // Generic kernel: head_dim_qk / head_dim_v are the largest head dims it takes (the cache's
  // are DecodeInputs::dqk / dv, padded with zeros up to these).
  bool generic = false;
};

// How a decode kernel computes it: the variant's key block (0: the target's) completed by the
// target's planner (schedules/schedule.h, plan_decode), and what the target's row and native
// operations decide (the generator sets those).
struct DecodeForm {
  int key_block = 64;  // keys per block of the online softmax
  // The target flushes subnormal f32 operands to zero (32-bit NEON always does): f16 K/V are
  // then widened without f32 arithmetic on subnormals.
  bool flushes_subnormals = false;
  // f16 (K/V, q) widened by the CPU's conversion instruction (generator/native_f16.h).
  bool native_f16 = false;
  // The softmax's exps by the native code of online_softmax.h (use_native_exp).
  bool native_exp = false;
  // An i8 cache's q.k as 8-bit integer dot products, the target row's (core/targets.h): each
  // query row is quantised to i8 with one f32 scale per row (max|q| / 127); u8 x i8 (x86 VNNI's
  // vpdpbusd) takes K's i8 elements offset by 128 into u8, the row's sum times 128 taken off,
  // and P.V as such products too; i8 x i8 (ARM's sdot) takes K as it is.
  Int8Dot int8_dot = Int8Dot::kNone;
  // An f16 or bf16 cache's P.V takes a block's keys as (group, slot of the group)
  // (decode_algorithm.cpp): the CPU schedules, whose prefetch of a key's V needs it; the CUDA
  // schedule stages each block's V through `v` instead.
  bool pv_by_group = false;
};

// A problem in a form: what define_decode and the schedules take, read only.
struct DecodeSpec : DecodeProblem, DecodeForm {
  DecodeSpec() = default;
  DecodeSpec(const DecodeProblem& problem, const DecodeForm& form)
      : DecodeProblem(problem), DecodeForm(form) {}
};

struct DecodeInputs {
  Halide::Func q;  // (d, h, i, b) the new queries, BSHD
  // The cache's pages of one layer, of spec.kv_type: (d, slot of the page, hkv, page); an i8,
  // f16 or bf16 cache's (element, group of the page, hkv, page), its groups' K and V parts
  // (core/kv_layout.h). Slot s of sequence b lives at s mod 2^page_shift of page
  // block_table(s >> page_shift, b); a contiguous cache is one page per sequence
  // (docs/decisions/paged-kv.md).
  Halide::Func k, v;
  // (e, group of the page, hkv, page) i8 caches only: a group's K scales, then its V scales
  // (core/kv_layout.h, group_scale_offset)
  Halide::Func kv_scales;
  // (entry, b) I32: sequence b's pages in order; of one entry: sequence b is page b
  Halide::Func block_table;
  Halide::Expr page_shift;   // log2 of a page's slots (>= 4: whole groups of 16)
  Halide::Expr page_extent;  // extent of k's dim 1: the slots (groups) a page's storage holds
  Halide::Expr pages;        // extent of k's dim 3: the pool's pages
  Halide::Expr table_pages;  // extent of block_table's dim 0
  Halide::Func kv_len;       // (b) positions in the cache (after the append of the new tokens)
  Halide::Func q_len;        // (b) real query rows of sequence b (<= seq_q)
  // slots: the slots the call reads, the same for every sequence (a grouped cache: whole groups
  // of slots, padding past the capacity included)
  Halide::Expr seq_q, slots, heads_q, heads_kv;
  Halide::Expr capacity;  // ring size: slot of position p is p mod capacity (>= slots)
  Halide::Expr window;    // left window L (p - L <= key position), or < 0 for none
  Halide::Expr scale;
  Halide::Expr split_keys;  // keys per split-KV partial (>= 1; rounded up to whole key blocks)
  Halide::Expr dqk, dv;     // generic kernels only: the cache's head dims
  Halide::Expr v_finite;    // no V element of the layer is NaN or infinite (pv_term)
  // The variant's modifier (generator/modifier.h) and its run-time parameters, or nullptr. Its
  // dims: B, Hq, Hkv, Sq the new queries, Skv the capacity (a sequence's positions); it sees
  // query i of sequence b at position kv_len - q_len + i and each key at its position.
  const Modifier* modifier = nullptr;
  ModifierParams modifier_params;
};

struct DecodeFuncs {
  Halide::Var d{"d"}, s{"s"}, r{"r"}, hk{"hk"}, b{"b"}, kb{"kb"}, sp{"sp"};
  Halide::Var h{"h"}, i{"i"};
  Halide::RDom rd;                // Dqk
  Halide::RDom rq;                // Dqk, spec.int8_dot: q's quantisation
  Halide::RDom rk;                // keys of one block: s = kb * key_block + rk, rk < block_keys
  Halide::RDom rb;                // the key blocks of one split: kb = sp * blocks_per_split + rb
  Halide::RDom rs;                // the splits, in the merge
  Halide::Func q;                 // (d, r, hk, b) query row r of kv head hk, row index clamped
  Halide::Func k, v;              // (d, s, hk, b) as float, slot clamped; inline unless staged
  Halide::Func k_stored;          // (d, s, hk, b) k's elements as stored (kv_type); inline unless
  Halide::Func v_stored;          // copied by the schedule; v's
  Halide::Func k_scale, v_scale;  // (s, hk, b) an i8 cache's scales, slot clamped (else undefined)
  Halide::Func position;          // (s, b) position held by slot s, negative when it holds none
  Halide::Func row_position;      // (r, b) position of row r's query, -1 for padding rows
  Halide::Func dot;               // (s, r, hk, b) raw q.k (spec.int8_dot: i32, of q_i8 and K)
  // spec.int8_dot only: (r, hk, b) the bits of max|q| of a row, its scale and (u8 x i8 only) the
  // sum of its quantised elements; (d, r, hk, b) the quantised row.
  Halide::Func q_amax, q_scale, q_sum, q_i8;
  // An i8 cache without int8_dot: (e, dg, r, hk, b) = q (dg * 4 + e % 4, r, hk, b), e < 16: q.k
  // reads q's row through it (inline unless a schedule stages it: schedules/cpu_decode.cpp).
  Halide::Func q_tiled;
  Halide::Func scores;        // (s, r, hk, b) scaled, masked
  Halide::Func block_max;     // (kb, r, hk, b)
  Halide::Func probs;         // (s, r, hk, b) exp(scores - block max), 0 masked
  Halide::Func probs_scaled;  // (s, r, hk, b) probs * v_scale (an i8 cache, else undefined)
  Halide::Func block_sum;     // (kb, r, hk, b)
  Halide::Func block_pv;      // (d, kb, r, hk, b)
  // spec.int8_dot: P.V as integer dot products (decode_algorithm.cpp, define_i8_pv): the bits of
  // a row's largest weight's magnitude in a block (kb, r, hk, b; a NaN's where an attended V
  // scale is NaN), 2^23 over it, each weight (s, r, hk, b) in fixed point and its bytes (s, c, r,
  // hk, b), and their sums with V per byte (d, c, kb, r, hk, b).
  Halide::Func pv_max, pv_unit, pv_fixed, pv_limb, block_pv_i32;
  Halide::Func v_bytes;  // an i8 cache: (byte, group, hk, b) V's part of a group, group clamped
  Halide::RDom rquad;    // an i8 cache's P.V: a key block's keys as (quad, key of the quad)
  // An f16 or bf16 cache: (d, j, g, hk, b) V of slot j of group g (the group clamped to the last
  // filled one), as stored; its P.V's keys of a block as (group of the block, slot of the group).
  Halide::Func v_rows;
  Halide::RDom rgroup;
  Halide::Func visit;  // (kb, b) whether block kb may hold a key some row attends;
                       // (kb, hk, b) with a mask modifier (its test per kv head)
  // The modifier's stages (generator/modifier.h): computed once per call, before the rest.
  std::vector<Halide::Func> modifier_stages;
  Halide::Func state;             // (d, r, sp, hk, b) Tuple(acc, max, sum) of split sp
  Halide::Func max;               // (r, hk, b) over the splits
  Halide::Func weight;            // (sp, r, hk, b) exp(split max - max), 0 for an empty split
  Halide::Func sum;               // (r, hk, b)
  Halide::Func acc;               // (d, r, hk, b)
  Halide::Func out;               // (d, h, i, b) normalised, 0 for rows that attend nothing
  Halide::Expr one_page;          // every sequence one page (a contiguous cache): what the
                                  // schedules' prefetches specialise on (decode_algorithm.cpp)
  Halide::Expr rows;              // g * seq_q: extent of r
  Halide::Expr whole_blocks;      // the slots read fill at least one key block (undefined where
                                  // every block is whole)
  Halide::Expr block_keys;        // keys of a block: extent of rk (key_block where whole_blocks)
  Halide::Expr blocks_per_split;  // key blocks per split
  Halide::Expr splits;            // extent of sp
  Halide::Expr v_finite;          // DecodeInputs::v_finite: what schedules specialise P.V on
  // The cache's K and V buffers (set by the generator), whose boxes a schedule's prefetches take
  // as the start of a slot's K and of its V (an i8 cache: K's as the start of a group's K and V,
  // or with VNNI of the lines of K q.k reads an iteration, and of as many of V; an f16 or bf16
  // cache: K's as the lines q.k reads an iteration) (schedules/cpu_decode.cpp).
  Halide::ImageParam k_cache;
  Halide::ImageParam v_cache;
};

DecodeFuncs define_decode(const DecodeSpec& spec, const DecodeInputs& in);

}  // namespace attngen
