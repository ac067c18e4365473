#include "generator/plan.h"

#include "generator/modifier.h"

namespace attngen {

namespace {

// Sets the fields of `t` the variant's tunables name (through the table of core/tunables.h).
template <typename T, size_t N>
void apply(const KernelVariant& v, T& t, const TunableField<T> (&table)[N]) {
  for (const Tunable& tunable : v.tunables) {
    for (const TunableField<T>& f : table) {
      if (tunable.name == f.name) t.*f.field = tunable.value;
    }
  }
}

}  // namespace

KernelVariant variant_or_throw(const std::string& text, Op op) {
  KernelVariant v;
  std::string error;
  if (!parse_variant(text, &v, &error)) throw Halide::CompileError("attngen: " + error);
  if (v.op != op) {
    throw Halide::CompileError(std::string("attngen: the ") + op_name(op) +
                               " generator got variant '" + text + "'");
  }
  return v;
}

Halide::Type halide_type(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return Halide::Float(32);
    case DType::kF16:
      return Halide::Float(16);
    case DType::kBF16:
      return Halide::BFloat(16);
    case DType::kI8:
      return Halide::Int(8);
    case DType::kBool:
      return Halide::UInt(8);
    case DType::kI32:
      return Halide::Int(32);
  }
  return Halide::Float(32);
}

Halide::Func as_f32(const Halide::Func& input, bool native_f16) {
  if (input.output_types().at(0) == Halide::Float(32)) return input;
  Halide::Func f(input.name() + "_f32");
  f(Halide::_) = to_f32(input(Halide::_), native_f16);
  return f;
}

// Keys per f16 partial sum of the half-precision P.V (AttentionSpec::half_pv_chunk). Simulated
// against float64 (f16 fma, inputs N(0, s^2) rounded to f16, D64-128, 512-4096 keys): relative
// L2 error 4.7e-4 with 8, 6.2e-4 with 16, 8.4e-4 with 32, 1.2e-3 with 64, whatever the number of
// keys or the scores' magnitude; 16 leaves 8x the f16 tolerance (5e-3) and costs one conversion
// and add per 16 half-precision FMAs.
constexpr int kHalfPvChunk = 16;
// Their key block where the variant asks for the default form (whole rows, which the
// half-precision P.V does not take): the block the CPU schedules skip causal keys with.
constexpr int kHalfPvKeyBlock = 64;

AttentionProblem attention_problem(const KernelVariant& v) {
  AttentionProblem p;
  p.head_dim_qk = v.head_dim_qk;
  p.head_dim_v = v.head_dim_v;
  p.mask = v.mask;
  p.mask_tensor = v.mask_tensor;
  p.softcap = v.softcap;
  p.pattern = v.pattern;
  p.weights = v.weights;
  p.lse = v.lse;
  p.generic = v.generic;
  p.bf16 = v.dtype == DType::kBF16;
  const Modifier* modifier = v.modifier.empty() ? nullptr : find_modifier(v.modifier);
  p.mask_modifier = modifier != nullptr && modifier->layout.mask;
  return p;
}

AttentionForm requested_attention_form(const KernelVariant& v, const Halide::Target& target) {
  AttentionForm form;
  const TargetRow* row = find_target(v.isa.c_str());
  form.amx = row != nullptr && row->isa == Isa::kAmx;
  form.key_block = v.key_block;
  for (const Tunable& t : v.tunables) {
    if (t.name == "key_block") form.key_block = t.value;  // a tuned form
  }
  // f16 kernels on a target with half-precision arithmetic (neonfp16): P.V in f16, which the
  // key-block form takes (the inspection kernels keep whole rows, in f32).
  if (v.dtype == DType::kF16 && target_info(target).isa == Isa::kNeonFp16 && !v.weights && !v.lse) {
    form.half_pv_chunk = kHalfPvChunk;
    if (form.key_block == 0) form.key_block = kHalfPvKeyBlock;
  }
  return form;
}

PlannedAttention planned_attention(const KernelVariant& v, const AttentionTunables& tunables,
                                   const Halide::Target& target) {
  const AttentionProblem problem = attention_problem(v);
  const AttentionPlan plan =
      plan_attention(problem, requested_attention_form(v, target), tunables, target);
  return {AttentionSpec(problem, plan.form), plan.tunables};
}

int linear_half_chunk(const KernelVariant& v, const Halide::Target& target) {
  return v.dtype == DType::kF16 && target_info(target).isa == Isa::kNeonFp16 ? kHalfPvChunk : 0;
}

AttentionTunables attention_tunables(const KernelVariant& v) {
  AttentionTunables t;
  t.query_tile = v.query_tile;
  apply(v, t, kAttentionTunables);
  return t;
}

LinearTunables linear_tunables(const KernelVariant& v) {
  LinearTunables t;
  apply(v, t, kLinearTunables);
  return t;
}

DecodeProblem decode_problem(const KernelVariant& v) {
  DecodeProblem p;
  p.head_dim_qk = v.head_dim_qk;
  p.head_dim_v = v.head_dim_v;
  p.kv_type = halide_type(v.kv_dtype);
  p.generic = v.generic;
  return p;
}

DecodeForm requested_decode_form(const KernelVariant& v) {
  DecodeForm form;
  form.key_block = v.key_block;
  for (const Tunable& t : v.tunables) {
    if (t.name == "key_block") form.key_block = t.value;
  }
  return form;
}

DecodeTunables decode_tunables(const KernelVariant& v) {
  DecodeTunables t;
  apply(v, t, kDecodeTunables);
  return t;
}

ResolvedVariant resolve_variant(const KernelVariant& v, const Halide::Target& target) {
  ResolvedVariant r;
  const auto add = [&](const char* name, int value) { r.schedule.push_back({name, value}); };
  switch (v.op) {
    case Op::kAttention: {
      const PlannedAttention planned = planned_attention(v, attention_tunables(v), target);
      const AttentionSpec& spec = planned.spec;
      const AttentionTunables& t = planned.tunables;
      r.key_block = spec.key_block;
      r.query_tile = spec.query_tile;
      r.key_chunk = spec.key_block > 0 ? spec.key_block : spec.key_chunk;
      add("key_block", spec.key_block);
      add("query_tile", t.query_tile);
      add("key_tile", t.key_tile);
      add("pv_rows", t.pv_rows);
      add("parallel_grain", t.parallel_grain);
      add("threads_x", t.threads_x);
      add("stage_kv", t.stage_kv);
      add("pv_chunk", t.pv_chunk);
      add("pv_vectors", t.pv_vectors);
      break;
    }
    case Op::kMha:
    case Op::kLinear: {
      if (v.op == Op::kMha) {  // the attention between the projections (mha_generator.cpp)
        const AttentionSpec spec = planned_attention(v, {}, target).spec;
        r.key_block = spec.key_block;
        r.query_tile = spec.query_tile;
        r.key_chunk = spec.key_block > 0 ? spec.key_block : spec.key_chunk;
      }
      LinearShape shape;
      shape.half_chunk = linear_half_chunk(v, target);
      const LinearTunables t = plan_linear(shape, linear_tunables(v), target, false);
      r.weight_panel = shape.panel;
      add("n_vectors", t.n_vectors);
      add("rows", t.rows);
      add("row_block", t.row_block);
      add("e_chunk", t.e_chunk);
      add("threads_x", t.threads_x);
      add("threads_y", t.threads_y);
      break;
    }
    case Op::kDecode: {
      const DecodePlan plan =
          plan_decode(decode_problem(v), requested_decode_form(v), decode_tunables(v), target);
      const DecodeTunables& t = plan.tunables;
      r.key_block = plan.form.key_block;
      add("key_block", plan.form.key_block);
      add("key_tile", t.key_tile);
      add("pv_rows", t.pv_rows);
      add("row_tile", t.row_tile);
      add("prefetch_slots", t.prefetch_slots);
      break;
    }
  }
  return r;
}

}  // namespace attngen
