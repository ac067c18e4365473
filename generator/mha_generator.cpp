// mha: the whole multi-head self-attention layer of PyTorch's nn.MultiheadAttention
// (batch_first): fused Q/K/V projection, attention per head, heads concatenated, output
// projection. The weights of a checkpoint:
//   in_w = in_proj_weight [3E, E], in_b = in_proj_bias [3E],
//   out_w = out_proj.weight [E, E], out_b = out_proj.bias [E],
// the biases as they are, the weight matrices packed in f32 panels by the runtime (per call, or
// once for a persistent layer: attngen_mha_layer).
// The head dim is compile-time; E (hence the head count E / head_dim), S and B are run-time.
#include <cmath>

#include "generator/attention_algorithm.h"
#include "generator/online_softmax.h"
#include "generator/plan.h"
#include "schedules/schedule.h"

namespace {

using namespace Halide;

class Mha : public Generator<Mha> {
 public:
  // The kernel variant (generator/variant.h), e.g. "OP mha HEAD_DIM 64 MASK causal".
  GeneratorParam<std::string> variant{"variant", "OP mha HEAD_DIM 64"};

  // Added in configure(), in this order; tensors of the variant's element type.
  Input<Buffer<>>* x = nullptr;                 // (e, s, b)
  Input<Buffer<float, 3>>* in_w = nullptr;      // (pi, e, po): 3E rows as f32 panels
  Input<Buffer<>>* in_b = nullptr;              // (3E)
  Input<Buffer<float, 3>>* out_w = nullptr;     // (pi, e, po): E rows as f32 panels
  Input<Buffer<>>* out_b = nullptr;             // (E)
  Input<Buffer<int32_t, 1>>* kv_len = nullptr;  // (b): key padding, <= S
  Input<bool>* bottom_right = nullptr;
  // Generic layers only: the causal mask and the head count at run time (head dim E / heads,
  // at most the variant's).
  Input<bool>* causal = nullptr;
  Input<int32_t>* num_heads = nullptr;
  Output<Buffer<>>* y = nullptr;  // (e, s, b)

  void configure() {
    v_ = attngen::variant_or_throw(variant, attngen::Op::kMha);
    const Type t = attngen::halide_type(v_.dtype);
    x = add_input<Buffer<>>("x", t, 3);
    in_w = add_input<Buffer<float, 3>>("in_w");
    in_b = add_input<Buffer<>>("in_b", t, 1);
    out_w = add_input<Buffer<float, 3>>("out_w");
    out_b = add_input<Buffer<>>("out_b", t, 1);
    kv_len = add_input<Buffer<int32_t, 1>>("kv_len");
    bottom_right = add_input<bool>("bottom_right");
    if (v_.generic) {
      causal = add_input<bool>("causal");
      num_heads = add_input<int32_t>("num_heads");
    }
    y = add_output<Buffer<>>("y", t, 3);
  }

  void generate() {
    const attngen::KernelVariant& v = v_;
    Expr embed = x->dim(0).extent();
    Expr seq = x->dim(1).extent();
    // A generic layer's head dim is E / num_heads (the runtime checks it is at most the
    // variant's); reads of qkv and of the heads' outputs are clamped, so their bounds are the
    // buffers' whatever the run-time values.
    const Expr dh = v.generic ? embed / *num_heads : Expr(v.head_dim_qk);
    Expr heads = v.generic ? Expr(*num_heads) : embed / v.head_dim_qk;

    attngen::LinearShape in_shape{embed, 3 * embed, seq, x->dim(2).extent()};
    in_shape.half_chunk = attngen::linear_half_chunk(v, get_target());
    // The projections' tunables (TUNABLES: the linear op's); the rows of f16 products
    // transposed (measured: see schedule_linear_simd).
    attngen::LinearTunables requested_linear = attngen::linear_tunables(v);
    requested_linear.transpose_x = 1;
    const attngen::LinearTunables linear_tunables =
        attngen::plan_linear(in_shape, requested_linear, get_target(), get_auto_schedule());
    const bool native_f16 = attngen::use_native_f16(get_externs_map(), get_target(),
                                                    attngen::target_row_of(get_target()),
                                                    v.dtype == attngen::DType::kF16);
    attngen::LinearFuncs in_proj =
        attngen::define_linear(attngen::as_f32(*x, native_f16), *in_w,
                               attngen::as_f32(*in_b, native_f16), in_shape, "in_proj");
    Func qkv = in_proj.out;

    const attngen::PlannedAttention planned = attngen::planned_attention(v, {}, get_target());
    attngen::AttentionForm form = planned.spec;
    form.native_exp = attngen::use_native_exp(get_externs_map(), get_target(),
                                              attngen::target_row_of(get_target()));
    const attngen::AttentionSpec spec(planned.spec, form);
    const attngen::AttentionTunables& tunables = planned.tunables;

    Var d("d"), h("h"), s("s"), b("b");
    attngen::AttentionInputs in;
    if (v.generic) {
      const Expr feature = clamp(h * dh + d, 0, embed - 1);
      in.q(d, h, s, b) = qkv(feature, s, b);
      in.k(d, h, s, b) = qkv(embed + feature, s, b);
      in.v(d, h, s, b) = qkv(2 * embed + feature, s, b);
    } else {
      in.q(d, h, s, b) = qkv(h * dh + d, s, b);
      in.k(d, h, s, b) = qkv(embed + h * dh + d, s, b);
      in.v(d, h, s, b) = qkv(2 * embed + h * dh + d, s, b);
    }
    in.kv_len = *kv_len;
    in.seq_q = in.seq_kv = seq;
    in.heads_q = in.heads_kv = heads;
    in.batch = x->dim(2).extent();
    in.scale = v.generic ? 1.0f / sqrt(cast<float>(dh))
                         : Expr(1.0f / std::sqrt(static_cast<float>(v.head_dim_qk)));
    in.softcap = Expr(0.0f);
    in.bottom_right = *bottom_right;
    if (v.generic) {  // no mask tensor, no soft cap: constants the generic algorithm folds
      in.dqk = in.dv = dh;
      in.causal = *causal;
      in.mask_kind = Expr(0);
      Var j("j"), i("i");
      in.bool_mask(j, i, h, b) = cast<uint8_t>(1);
      in.add_mask(j, i, h, b) = 0.0f;
    }
    attngen::AttentionFuncs attn = attngen::define_attention(spec, in);

    // Heads concatenated: feature n of the attention output is (n % dh, n / dh).
    Var n("n");
    Func concat("concat");
    if (v.generic) {
      concat(n, s, b) =
          attn.out(clamp(n % dh, 0, spec.head_dim_v - 1), clamp(n / dh, 0, heads - 1), s, b);
    } else {
      concat(n, s, b) = attn.out(n % dh, n / dh, s, b);
    }
    // Planned like in_proj (the same tunables): the same panels and row groups.
    attngen::LinearShape out_shape{embed, embed, seq, x->dim(2).extent()};
    out_shape.half_chunk = in_shape.half_chunk;
    attngen::plan_linear(out_shape, requested_linear, get_target(), get_auto_schedule());
    attngen::LinearFuncs out_proj = attngen::define_linear(
        concat, *out_w, attngen::as_f32(*out_b, native_f16), out_shape, "out_proj");
    (*y)(n, s, b) = attngen::from_f32(out_proj.out(n, s, b), y->type());

    const int p = in_shape.panel;  // the weights' panels (define_linear())
    in_w->dim(0).set_bounds(0, p).dim(1).set_bounds(0, embed);
    in_w->dim(2).set_bounds(0, (3 * embed + p - 1) / p);
    in_b->dim(0).set_bounds(0, 3 * embed);
    out_w->dim(0).set_bounds(0, p).dim(1).set_bounds(0, embed);
    out_w->dim(2).set_bounds(0, (embed + p - 1) / p);
    out_b->dim(0).set_bounds(0, embed);
    y->dim(0).set_bounds(0, embed).dim(1).set_bounds(0, seq);

    using E = attngen::Estimates;
    x->set_estimates({{0, E::kEmbed}, {0, E::kSeq}, {0, E::kBatch}});
    in_w->set_estimates({{0, p}, {0, E::kEmbed}, {0, 3 * E::kEmbed / p}});
    in_b->set_estimates({{0, 3 * E::kEmbed}});
    out_w->set_estimates({{0, p}, {0, E::kEmbed}, {0, E::kEmbed / p}});
    out_b->set_estimates({{0, E::kEmbed}});
    kv_len->set_estimates({{0, E::kBatch}});
    bottom_right->set_estimate(true);
    if (v.generic) {
      causal->set_estimate(false);
      num_heads->set_estimate(E::kEmbed / 64);
    }
    y->set_estimates({{0, E::kEmbed}, {0, E::kSeq}, {0, E::kBatch}});

    if (get_auto_schedule()) return;
    // Three stages, each with its own schedule; Q/K/V and the per-head output live in memory
    // between them (B*S*3E and B*S*E floats).
    const Target t = get_target();
    // Its tiles of output features line up with the weight panels of in_proj.
    qkv.compute_root().align_bounds(in_proj.n, in_shape.panel);
    attngen::schedule_linear(in_proj, t, false, linear_tunables);
    attn.out.compute_root();
    attngen::schedule_attention(attn, spec, t, false, tunables);
    out_proj.out.compute_inline();
    attngen::LinearFuncs outs = out_proj;
    outs.out = *y;
    attngen::schedule_linear(outs, t, false, linear_tunables);
  }

 private:
  attngen::KernelVariant v_;
};

}  // namespace

HALIDE_REGISTER_GENERATOR(Mha, mha)
