// From a kernel variant (generator/variant.h) to what the algorithm and the schedules take: the
// generators build their pipelines from these, and the descriptor of a kernel
// (generator/variant_cli.cpp) is computed by the same calls, so it says what the kernel does.
#pragma once

#include <string>
#include <vector>

#include "Halide.h"
#include "generator/attention_algorithm.h"
#include "generator/decode_algorithm.h"
#include "generator/element.h"
#include "generator/variant.h"
#include "schedules/schedule.h"

namespace attngen {

// Parses a generator's `variant` param, which must be of `op`; a malformed variant, or one of
// another op, is a Halide::CompileError.
KernelVariant variant_or_throw(const std::string& text, Op op);

// The Halide type of a dtype.
Halide::Type halide_type(DType dtype);

// An input as the f32 the algorithm computes in: the Func itself when it is f32, else a
// conversion of it (inlined where the input is read, or staged); f16 by the CPU's instruction
// where the kernel widens it natively (generator/native_f16.h, use_native_f16).
Halide::Func as_f32(const Halide::Func& input, bool native_f16);

// What a variant's attention computes (the problem), and the form it asks for on a target before
// the target's planner completes it (schedules/schedule.h, plan_attention): its key block, its
// row (amx), and where the target decides the arithmetic of its dtype the half-precision P.V
// (AttentionForm::half_pv_chunk).
AttentionProblem attention_problem(const KernelVariant& v);
AttentionForm requested_attention_form(const KernelVariant& v, const Halide::Target& target);
// The variant's problem in the form the target's planner returns, and the resolved tunables.
struct PlannedAttention {
  AttentionSpec spec;
  AttentionTunables tunables;
};
PlannedAttention planned_attention(const KernelVariant& v, const AttentionTunables& tunables,
                                   const Halide::Target& target);
// LinearShape::half_chunk of a variant's projections on a target (f16 on neonfp16).
int linear_half_chunk(const KernelVariant& v, const Halide::Target& target);
AttentionTunables attention_tunables(const KernelVariant& v);
LinearTunables linear_tunables(const KernelVariant& v);
// A variant's decode problem, and its requested form (its key block; 0 = the target's).
DecodeProblem decode_problem(const KernelVariant& v);
DecodeForm requested_decode_form(const KernelVariant& v);
DecodeTunables decode_tunables(const KernelVariant& v);

// What a kernel of the variant does on a target once the schedule has resolved it: the units
// that tests and dispatch need, and every tunable's value ("query_tile=64 key_tile=6 ...").
struct ResolvedVariant {
  int key_block = 0;     // keys per block of the online softmax, 0 for whole score rows
  int query_tile = 0;    // query rows per parallel task (attention)
  int key_chunk = 0;     // keys per chunk of the row form's passes (attention)
  int weight_panel = 0;  // output features per panel of the packed weights (linear, mha)
  std::vector<Tunable> schedule;
};
ResolvedVariant resolve_variant(const KernelVariant& v, const Halide::Target& target);

// Representative sizes for estimates (BERT-base-like); bounds that are compile-time constants
// (head dims) come from the variant itself.
struct Estimates {
  static constexpr int kBatch = 1;
  static constexpr int kHeads = 16;
  static constexpr int kSeq = 1024;
  static constexpr int kEmbed = 768;
};

}  // namespace attngen
