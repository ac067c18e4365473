// The attention algorithm, written once and shared by every generator.
//
// Only the *what* lives here (docs/semantics.md); the
// *how* (tiling, vectorisation, where intermediates live) is in schedules/. The Funcs built here
// are returned in small structs so a schedule never re-derives the algorithm.
//
// Dimension order is Halide's innermost-first: a BSHD tensor [B, S, H, D] is (d, h, s, b).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "Halide.h"
#include "core/pattern.h"
#include "generator/modifier.h"
#include "generator/online_softmax.h"

namespace attngen {

// Compile-time shape of an attention kernel (generator params).
// What a kernel computes, as its variant says (generator/plan.h, attention_problem): fixed when
// the variant is read, never changed by a planner or a schedule.
struct AttentionProblem {
  int head_dim_qk = 64;
  int head_dim_v = 64;
  MaskKind mask = MaskKind::kNone;
  MaskTensor mask_tensor = MaskTensor::kNone;
  bool softcap = false;
  PatternSpec pattern;  // core/pattern.h
  // Generic kernel: head_dim_qk / head_dim_v are the largest head dims it takes (the call's are
  // AttentionInputs::dqk / dv, padded with zeros up to these), and the causal mask, the mask
  // tensor and the soft cap are run-time inputs (mask, softcap and mask_tensor above unused).
  bool generic = false;
  bool bf16 = false;     // q, k and v are bf16 (their conversion is the generator's)
  bool weights = false;  // also define `weights`, P (j, i, h, b)
  bool lse = false;      // also define `lse`, the row log-sum-exp (i, h, b)
  // The variant's modifier masks pairs (generator/modifier.h): its blocks are skipped in the
  // key-block form.
  bool mask_modifier = false;
};

// How a kernel computes its problem: the variant's requested form (its KEY_BLOCK or tuned
// key_block, its row: generator/plan.h, requested_attention_form) completed by the target's
// planner (schedules/schedule.h, plan_attention), which returns it; the generator adds the
// target's native operations (native_exp). The algorithm reads it where it shapes the pipeline.
struct AttentionForm {
  // 0: whole score rows (softmax over a row at once). > 0: the keys are taken in blocks of this
  // many, merged with an online softmax (FlashAttention), so no buffer grows with Sq x Skv.
  int key_block = 0;
  // Row form with a causal mask: keys per chunk (rj.x), the unit of key skipping.
  int key_chunk = 64;
  // Row form with a causal mask: query rows per register tile of probs.v (the schedule's); the
  // product stops each group's keys at its last row, past which every prob is 0.
  int row_group = 1;
  // Query rows per tile, the unit of key skipping (whole key blocks, or in the row form the keys
  // no row of the tile attends). Schedules compute the row statistics (row form) or the state
  // (key-block form) one tile at a time: it is their query tile.
  int query_tile = 64;
  // Products in pairs of bf16 (the schedule's choice, for AVX512-BF16's vdpbf16ps: each f32 lane
  // adds two bf16 products). q is read as bf16 (AttentionInputs::q is the bf16 input, k and v
  // its f32 conversion) and the scale multiplies the dot product instead of q; K and V are
  // read through pair-packed bf16 copies (k_pairs, v_pairs); P is rounded to bf16 for P.V
  // (docs/semantics.md, "Precision"). The row form only, even head dims; keys are taken in
  // multiples of key_multiple (scores past Skv are masked).
  bool bf16_pairs = false;
  // The softmax's exps by the native code of online_softmax.h (AVX-512), which the generator
  // adds to the kernel's module (use_native_exp).
  bool native_exp = false;
  int key_multiple = 1;
  // The amx row's kernels (with bf16_pairs): q.k and p.v as AMX tile products, which take a
  // product as it is, so P.V is defined twice: `acc` without a select (the kernel's branch for
  // V whose elements are all finite) and `acc_masked` with pv_term's masking of V (the other
  // branch). The keys, in whole chunks of key_chunk whatever the mask, are a multiple of it.
  bool amx = false;
  // Half-precision P.V (key-block form only; 0: all in f32). The probs of a key block are rounded
  // to f16 and V read as f16 (f16 kernels: as stored); their products are summed in f16 over
  // this many keys at a time (fmla on .8h vectors with ARMv8.2-A FP16), and those partial sums
  // are added in f32 to the block's product. Set by generator/plan.cpp for f16 kernels of
  // targets with half-precision arithmetic (neonfp16). Why it stays within the f16 tolerance:
  // each prob is in [0, 1] (relative to the block max), so rounding it costs at most 2^-11 of
  // its weight, unbiased, like rounding the score by 2^-11 whatever the score's magnitude; and a
  // sum of at most this many terms of at most max|V| each rounds with at most a few 2^-11 of it,
  // before the f32 sums take over. The q.k scores stay in f32: their error in f16 would grow
  // with the scores' magnitude (measured 1.5e-3 at score sd 4 with 8-term f16 sums, 6e-3 at
  // 64), where P.V's does not (docs/semantics.md, "Precision").
  int half_pv_chunk = 0;
  // The strided pattern in two parts, so that its cost follows the attended pairs (set by
  // plan_attention for the specialised strided kernels of CPUs, in the key-block form). A
  // strided row attends the band |p - j| < stride and the keys of its residue class,
  // j = p (mod stride); a key block of the band form visits every key block of a long sequence
  // (each holds some multiple of the stride) and computes all of it. Here the band is a window
  // kernel (strided_band_spec: |p - j| < stride, j = p left to the classes), and the classes
  // one attention problem of their own (strided_class_spec): for each batch and residue class
  // r, the queries at positions r, r + stride, ... against the keys r, r + stride, ..., gathered
  // (causal within the class, where the kernel is causal); each class row's state is merged
  // into its band state like one more key block (AttentionFuncs::classes).
  bool strided_classes = false;
  // Internal to the parts of a composed kernel: the band without its diagonal key j = p, and a
  // prefix for the names of the part's Funcs (Halide needs them distinct within a pipeline).
  bool without_diagonal = false;
  std::string part;
};

// A problem in a form: what the algorithm (define_attention) and the schedules take, read only.
struct AttentionSpec : AttentionProblem, AttentionForm {
  AttentionSpec() = default;
  AttentionSpec(const AttentionProblem& problem, const AttentionForm& form)
      : AttentionProblem(problem), AttentionForm(form) {}
};

// The parts of a kernel with strided_classes (each with strided_classes off).
AttentionSpec strided_band_spec(const AttentionSpec& spec);
AttentionSpec strided_class_spec(const AttentionSpec& spec);
// Extent along d of AttentionFuncs::class_rows: the acc's Dv elements, then the max and the sum.
inline int class_rows_extent(const AttentionSpec& spec) { return spec.head_dim_v + 2; }

// What the attention algorithm reads. Funcs are (d, h, s, b); kv_len is (b); mask is
// (j, i, h, b) and only defined when spec.mask_tensor != kNone; layout is (key block, query
// block), only for Pattern::kBlockSparse.
struct AttentionInputs {
  Halide::Func q, k, v, kv_len, mask, layout;
  Halide::Expr seq_q, seq_kv, heads_q, heads_kv, batch;
  Halide::Expr scale, softcap, bottom_right;
  // Generic kernels only (spec.generic): the call's head dims, whether it is causal, which mask
  // tensor it has (0 none, 1 bool, 2 additive: attngen_mask_tensor_kind) and both masks (the
  // one it does not have is a broadcast stand-in). softcap <= 0 means none.
  Halide::Expr dqk, dv, causal, mask_kind;
  Halide::Func bool_mask, add_mask;
  PatternValues<Halide::Expr> pattern;  // the pattern's parameters (spec.pattern.kind's)
  // Optional, for the parts of a composed kernel: the position of query 0 per batch, (b), in
  // place of the alignment's (0, or kv_len - Sq bottom-right), and whether V is finite, in
  // place of a scan of v (the whole kernel's scan, where v is a gathered view of it).
  Halide::Func offset;
  Halide::Expr v_finite;
  // The variant's modifier (generator/modifier.h) and its run-time parameters, or nullptr.
  const Modifier* modifier = nullptr;
  ModifierParams modifier_params;
};

struct AttentionFuncs {
  Halide::Var d{"d"}, j{"j"}, i{"i"}, h{"h"}, b{"b"}, kb{"kb"};
  Halide::Var qi{"qi"}, qt{"qt"};  // query row i = qt * query_tile + qi
  Halide::RDom rd;
  Halide::RDom rj;  // row form: the keys; causal: key rj.y * key_chunk + rj.x, in chunks
  std::vector<Halide::RVar> rj_loops;  // rj's loops, innermost first
  Halide::RDom rj_pv;                  // the keys of acc: rj, and causal: up to the row group
  std::vector<Halide::RVar> pv_loops;  // rj_pv's loops, innermost first
  // (d, h, i, b) the query rows as the input holds them (f32 and generic kernels, else
  // undefined; a generic kernel's over the call's Dqk): inline unless a schedule copies a tile's
  // rows before q transposes them.
  Halide::Func q_rows;
  Halide::Func q;    // (d, h, i, b) q times the scale, query index clamped (tiles round up)
  Halide::Func k;    // (d, j, h, b) the kv head of query head h, key index clamped
  Halide::Func v;    // (d, j, h, b) likewise; k and v are inline unless a schedule stages them
  Halide::Func dot;  // (j, i, h, b) raw q.k
  // () the largest exponent field of V's elements (over rv: d, kv head, key, batch), and whether
  // it is below NaN's and infinity's: the condition schedules specialise P.V on (pv_term).
  Halide::RDom rv;
  Halide::Func v_exponents;
  Halide::Expr v_finite;
  // spec.bf16_pairs: K as (l, j, rr, h, b) = k(2 rr + l, j, h, b), V as (l, d, jj, h, b) =
  // v(d, 2 jj + l, h, b), and P rounded to bf16 (j, i, h, b).
  Halide::Func k_pairs, v_pairs, probs_bf16;
  Halide::Func scores;  // (j, i, h, b) scaled, capped, masked (kMaskedScore where not attended)
  // Whole rows (spec.key_block == 0):
  Halide::Func row_max;  // (qi, qt, h, b)
  Halide::Func probs;    // (j, i, h, b) exp(scores - max of the row, or of the key block), 0 masked
  Halide::Func row_sum;  // (qi, qt, h, b)
  Halide::Func acc;      // (d, qi, qt, h, b) sum_j probs * v
  Halide::Func acc_masked;  // spec.amx: acc with V masked by the probs (pv_term)
  // Key blocks with an online softmax (spec.key_block > 0); probs is relative to block_max.
  Halide::RDom rk;         // keys of one block: j = kb * key_block + rk
  Halide::RDom rb;         // the key blocks a query tile visits, in order
  Halide::Func block_max;  // (kb, i, h, b)
  Halide::Func block_sum;  // (kb, i, h, b)
  Halide::Func block_pv;   // (d, kb, i, h, b) sum over the block of probs * v
  // spec.half_pv_chunk > 0: block_pv is the f32 sum over rh of block_pv_half (d, c, kb, i, h, b),
  // the f16 sum over rx of probs_half (probs in f16) times v (f16); generator/online_softmax.h.
  Halide::Func probs_half, block_pv_half;
  Halide::RDom rx, rh;
  Halide::Func state;     // (d, qi, qt, h, b) Tuple(acc, running max, running sum) after block rb
  Halide::Func out;       // (d, h, i, b) normalised output, 0 for fully masked rows
  Halide::Expr top_left;  // the call aligns query i with key i (offset 0): worth specialising
  Halide::Expr plain;     // generic: a call without mask tensor or soft cap, worth specialising
  Halide::Func weights;   // (j, i, h, b) softmax weights, 0 where masked (spec.weights)
  Halide::Func lse;       // (i, h, b) log sum_j exp(score), -inf for fully masked rows (spec.lse)
  // spec.strided_classes: the Funcs above are the band's (state, scores, ...; out merges the
  // two parts), classes those of the class problem, whose out is class_rows (d, h, t, c): row t
  // of class c = batch * stride + residue, its state's acc at d < Dv, its max at d = Dv and its
  // sum at Dv + 1.
  std::shared_ptr<AttentionFuncs> classes;
  Halide::Func class_rows;
  // The modifier's stages (generator/modifier.h, Modifier::visit): computed once per call,
  // before the attention.
  std::vector<Halide::Func> modifier_stages;
};

AttentionFuncs define_attention(const AttentionSpec& spec, const AttentionInputs& in);

// y(n, s, b) = sum_e x(e, s, b) * w(e, n) + bias(n): PyTorch nn.Linear with weight [N, E].
struct LinearShape {
  Halide::Expr in_features, out_features, rows;  // E, N and the extent of s
  Halide::Expr batches = 1;                      // the extent of b (for schedules)
  int panel = 1;  // output features per weight panel (plan_linear(): the schedule's choice)
  // Half-precision products (0: all in f32): x and w rounded to f16 (f16 kernels: as stored),
  // their products summed in f16 over this many input features at a time (fmla on .8h vectors
  // with ARMv8.2-A FP16), those partial sums added in f32. Set by generator/plan.cpp for f16
  // kernels of targets with half-precision arithmetic (neonfp16): 16 features per partial sum
  // give a relative error of 6e-4 (simulated against float64, E 64-768, inputs in [-1, 1]), 8x
  // within the f16 tolerance (docs/semantics.md).
  int half_chunk = 0;
  // Rows per group of the staged input (0: read in place). With groups of g rows, the product
  // reads x_groups (r, e, group, b) = x (e, group * g + r, b): per input feature a group's rows
  // side by side, every group's features in one contiguous block. Set by plan_linear() to the
  // register tile's rows, for f32 products (half_chunk 0) of SIMD targets.
  int row_group = 0;
};

struct LinearFuncs {
  Halide::Var e{"e"}, n{"n"}, s{"s"}, b{"b"};
  Halide::RDom re;
  Halide::Func x;  // (e, s, b) input rows, clamped along s
  // shape.row_group > 0: (r, e, group, b), x in groups of rows (LinearShape::row_group); what
  // the product reads.
  Halide::Var gr{"gr"}, group{"group"};
  Halide::Func x_groups;
  Halide::Var pi{"pi"}, po{"po"};
  Halide::Func w;         // (e, n) weights, clamped along n (from the panels)
  Halide::Func w_panels;  // (pi, e, po): feature po * panel + pi; what the product reads
  Halide::Func sum;       // (n, s, b) bias + x.w
  // shape.half_chunk > 0: x and w_panels are f16 (0 past the input features), and sum adds
  // over rh the f32 value of sum_half (n, chunk, s, b), the f16 sum over rx of x * w_panels.
  Halide::Func sum_half;
  Halide::RDom rx, rh;
  Halide::Func out;  // (n, s, b)
  LinearShape shape;
};

// w: the weights packed in panels, (pi, e, po) = weight row po * panel + pi at input feature e,
// f32, ceil(N / panel) panels, rows past N zeros (the runtime's pack_weights(); at panel 1 the
// nn.Linear layout itself).
LinearFuncs define_linear(const Halide::Func& x, const Halide::Func& w, const Halide::Func& bias,
                          const LinearShape& shape, const std::string& name);

}  // namespace attngen
