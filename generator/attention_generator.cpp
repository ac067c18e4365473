// attention: O = softmax(mask(scale * Q K^T)) V for BSHD tensors, one kernel per variant (head
// dims, masks, soft cap, sparse pattern, extra outputs, form: generator/variant.h); batch,
// sequence lengths and head counts are run-time.
#include "generator/attention_algorithm.h"
#include "generator/modifier_inputs.h"
#include "generator/plan.h"
#include "schedules/schedule.h"

namespace {

using namespace Halide;
using attngen::MaskKind;
using attngen::MaskTensor;

class Attention : public Generator<Attention> {
 public:
  // The kernel variant (generator/variant.h, docs/variants.md), e.g. "OP attention HEAD_DIM 64
  // MASK causal TUNABLES query_tile=32": everything compile-time about the kernel.
  GeneratorParam<std::string> variant{"variant", "OP attention HEAD_DIM 64"};

  // Added in configure(), in this order (the generated function's arguments): their element
  // types come from the variant.
  Input<Buffer<>>* q = nullptr;                 // (d, h, s, b)
  Input<Buffer<>>* k = nullptr;                 // (d, hkv, s, b)
  Input<Buffer<>>* v = nullptr;                 // (dv, hkv, s, b)
  Input<Buffer<int32_t, 1>>* kv_len = nullptr;  // (b): valid keys per batch, <= Skv
  Input<float>* scale = nullptr;                // usually 1/sqrt(Dqk)
  Input<float>* softcap_value = nullptr;        // c > 0; read only by softcap kernels
  Input<bool>* bottom_right = nullptr;          // alignment of queries to keys
  Input<Buffer<>>* mask = nullptr;              // (j, i, h, b), only with a mask tensor
  Input<Buffer<uint8_t, 2>>* layout = nullptr;  // (key block, query block), block-sparse only
  // Generic kernels only: the run-time options (AttentionInputs).
  Input<bool>* causal = nullptr;
  Input<int32_t>* mask_kind = nullptr;             // 0 none, 1 bool, 2 additive
  Input<Buffer<uint8_t, 4>>* bool_mask = nullptr;  // (j, i, h, b), broadcast where unused
  Input<Buffer<float, 4>>* add_mask = nullptr;     // (j, i, h, b), broadcast where unused
  // Generic pattern kernels only: the pattern's parameters (PatternSpec's, in its order).
  std::vector<Input<int32_t>*> pattern_values;
  attngen::ModifierInputs modifier;             // the variant's modifier's parameters
  Output<Buffer<>>* out = nullptr;              // (dv, h, s, b)
  Output<Buffer<float, 4>>* weights = nullptr;  // (j, i, h, b): P [B, Hq, Sq, Skv]
  Output<Buffer<float, 3>>* lse = nullptr;      // (i, h, b): [B, Hq, Sq]

  void configure() {
    v_ = attngen::variant_or_throw(variant, attngen::Op::kAttention);
    const Type t = attngen::halide_type(v_.dtype);
    q = add_input<Buffer<>>("q", t, 4);
    k = add_input<Buffer<>>("k", t, 4);
    v = add_input<Buffer<>>("v", t, 4);
    kv_len = add_input<Buffer<int32_t, 1>>("kv_len");
    scale = add_input<float>("scale");
    softcap_value = add_input<float>("softcap_value");
    bottom_right = add_input<bool>("bottom_right");
    if (v_.mask_tensor != MaskTensor::kNone) {
      const Type mt = v_.mask_tensor == MaskTensor::kBool ? UInt(8) : Float(32);
      mask = add_input<Buffer<>>("mask", mt, 4);
    }
    if (v_.pattern.kind == attngen::Pattern::kBlockSparse) {
      layout = add_input<Buffer<uint8_t, 2>>("layout");
    }
    if (v_.generic) {
      causal = add_input<bool>("causal");
      mask_kind = add_input<int32_t>("mask_kind");
      bool_mask = add_input<Buffer<uint8_t, 4>>("bool_mask");
      add_mask = add_input<Buffer<float, 4>>("add_mask");
      if (v_.pattern.kind != attngen::Pattern::kNone) {
        for (const char* name :
             {"window_left", "window_right", "stride", "block", "local", "global_tokens"}) {
          pattern_values.push_back(add_input<int32_t>(name));
        }
      }
    }
    modifier.add(*this, v_.modifier);
    out = add_output<Buffer<>>("out", attngen::halide_type(v_.out_dtype), 4);
    if (v_.weights) weights = add_output<Buffer<float, 4>>("weights");
    if (v_.lse) lse = add_output<Buffer<float, 3>>("lse");
  }

  void generate() {
    // The problem in the form the target's planner returns, plus the target's native exp.
    const attngen::PlannedAttention planned =
        attngen::planned_attention(v_, attngen::attention_tunables(v_), get_target());
    const attngen::AttentionTunables& tunables = planned.tunables;
    attngen::AttentionForm form = planned.spec;

    // The algorithm computes in f32: other element types convert where Q, K and V are read
    // (and K/V staged), the output where it is written.
    // (The bf16 pair products of AVX512-BF16 read q's bf16 values themselves.)
    const bool native_f16 = attngen::use_native_f16(get_externs_map(), get_target(),
                                                    attngen::target_row_of(get_target()),
                                                    v_.dtype == attngen::DType::kF16);
    form.native_exp = attngen::use_native_exp(get_externs_map(), get_target(),
                                              attngen::target_row_of(get_target()));
    const attngen::AttentionSpec spec(planned.spec, form);
    attngen::AttentionInputs in;
    in.q = spec.bf16_pairs ? Func(*q) : attngen::as_f32(*q, native_f16);
    in.k = attngen::as_f32(*k, native_f16);
    in.v = attngen::as_f32(*v, native_f16);
    in.kv_len = *kv_len;
    if (mask) in.mask = *mask;
    if (layout) in.layout = *layout;
    in.seq_q = q->dim(2).extent();
    in.seq_kv = k->dim(2).extent();
    in.heads_q = q->dim(1).extent();
    in.heads_kv = k->dim(1).extent();
    in.batch = q->dim(3).extent();
    in.scale = *scale;
    in.softcap = *softcap_value;
    in.bottom_right = *bottom_right;
    if (v_.generic) {
      in.dqk = q->dim(0).extent();
      in.dv = v->dim(0).extent();
      in.causal = *causal;
      in.mask_kind = *mask_kind;
      in.bool_mask = *bool_mask;
      in.add_mask = *add_mask;
      if (!pattern_values.empty()) {
        in.pattern = {*pattern_values[0], *pattern_values[1], *pattern_values[2],
                      *pattern_values[3], *pattern_values[4], *pattern_values[5]};
      }
    }

    in.modifier = modifier.modifier;
    in.modifier_params = modifier.params();

    attngen::AttentionFuncs f = attngen::define_attention(spec, in);
    (*out)(f.d, f.h, f.i, f.b) = attngen::from_f32(f.out(f.d, f.h, f.i, f.b), out->type());
    if (weights) (*weights)(f.j, f.i, f.h, f.b) = f.weights(f.j, f.i, f.h, f.b);
    if (lse) {
      (*lse)(f.i, f.h, f.b) = f.lse(f.i, f.h, f.b);
      // Its rows are out's (a call's [B, Hq, Sq] both): said to Halide, a schedule that writes
      // both in one loop nest (compute_with) has one version of it, not one per way their bounds
      // could differ (bench/RESULTS.md, "The log-sum-exp from the key-block form").
      lse->dim(0).set_bounds(out->dim(2).min(), out->dim(2).extent());
      lse->dim(1).set_bounds(out->dim(1).min(), out->dim(1).extent());
      lse->dim(2).set_bounds(out->dim(3).min(), out->dim(3).extent());
    }

    // Head dims are compile-time: tell Halide, so vector loops over them have no tails. (A
    // generic kernel's are run-time, at most the spec's.)
    if (!v_.generic) {
      q->dim(0).set_bounds(0, spec.head_dim_qk);
      k->dim(0).set_bounds(0, spec.head_dim_qk);
      v->dim(0).set_bounds(0, spec.head_dim_v);
      out->dim(0).set_bounds(0, spec.head_dim_v);
    } else {
      // Broadcast masks have innermost stride 0.
      bool_mask->dim(0).set_stride(Expr());
      add_mask->dim(0).set_stride(Expr());
      bool_mask->set_estimates({{0, attngen::Estimates::kSeq},
                                {0, attngen::Estimates::kSeq},
                                {0, attngen::Estimates::kHeads},
                                {0, attngen::Estimates::kBatch}});
      add_mask->set_estimates({{0, attngen::Estimates::kSeq},
                               {0, attngen::Estimates::kSeq},
                               {0, attngen::Estimates::kHeads},
                               {0, attngen::Estimates::kBatch}});
      causal->set_estimate(false);
      mask_kind->set_estimate(0);
      for (Input<int32_t>* p : pattern_values) p->set_estimate(64);
    }

    using E = attngen::Estimates;
    q->set_estimates({{0, spec.head_dim_qk}, {0, E::kHeads}, {0, E::kSeq}, {0, E::kBatch}});
    k->set_estimates({{0, spec.head_dim_qk}, {0, E::kHeads}, {0, E::kSeq}, {0, E::kBatch}});
    v->set_estimates({{0, spec.head_dim_v}, {0, E::kHeads}, {0, E::kSeq}, {0, E::kBatch}});
    kv_len->set_estimates({{0, E::kBatch}});
    // A mask broadcast along the keys has innermost stride 0.
    if (mask) mask->dim(0).set_stride(Expr());
    if (mask) mask->set_estimates({{0, E::kSeq}, {0, E::kSeq}, {0, E::kHeads}, {0, E::kBatch}});
    if (layout) layout->set_estimates({{0, E::kSeq / 64}, {0, E::kSeq / 64}});
    modifier.set_estimates({E::kBatch, E::kHeads, E::kHeads, E::kSeq, E::kSeq, 16});
    scale->set_estimate(0.125f);
    softcap_value->set_estimate(50.0f);
    bottom_right->set_estimate(true);
    out->set_estimates({{0, spec.head_dim_v}, {0, E::kHeads}, {0, E::kSeq}, {0, E::kBatch}});
    if (weights) {
      weights->set_estimates({{0, E::kSeq}, {0, E::kSeq}, {0, E::kHeads}, {0, E::kBatch}});
    }
    if (lse) lse->set_estimates({{0, E::kSeq}, {0, E::kHeads}, {0, E::kBatch}});

    // The kernel writes `out` directly: schedule f.out as the output stage.
    f.out.compute_inline();
    attngen::AttentionFuncs fs = f;
    fs.out = *out;
    if (weights) {
      f.weights.compute_inline();
      fs.weights = *weights;
    }
    if (lse) {
      f.lse.compute_inline();
      fs.lse = *lse;
    }
    attngen::schedule_attention(fs, spec, get_target(), get_auto_schedule(), tunables);
    bf16_pairs_ = spec.bf16_pairs && !spec.amx && !get_auto_schedule();
    amx_ = spec.amx && !get_auto_schedule();
  }

  void schedule() {
    if (bf16_pairs_) get_pipeline().add_custom_lowering_pass(attngen::bf16_pair_dots_pass());
    if (amx_) {
      // The pass zeroes tiles by a function of the kernel's native code (native_code.h).
      attngen::add_amx_tile_zero(get_externs_map(), get_target());
      get_pipeline().add_custom_lowering_pass(attngen::amx_full_depth_pass());
    }
  }

 private:
  attngen::KernelVariant v_;
  bool bf16_pairs_ = false;
  bool amx_ = false;
};

}  // namespace

HALIDE_REGISTER_GENERATOR(Attention, attention)
