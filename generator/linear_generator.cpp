// linear: y = x W^T + b with W in PyTorch nn.Linear layout [N, E]. Used for the fused Q/K/V
// projection (W = nn.MultiheadAttention.in_proj_weight, [3E, E]: one pass over x) and the
// output projection.
#include "generator/attention_algorithm.h"
#include "generator/plan.h"
#include "schedules/schedule.h"

namespace {

using namespace Halide;

class Linear : public Generator<Linear> {
 public:
  // The kernel variant (generator/variant.h): "OP linear", with its schedule's TUNABLES.
  GeneratorParam<std::string> variant{"variant", "OP linear"};

  // Added in configure(), in this order, of the variant's element type.
  Input<Buffer<>>* x = nullptr;          // (e, s, b)
  Input<Buffer<float, 3>>* w = nullptr;  // (pi, e, po): f32 panels (define_linear())
  Input<Buffer<>>* bias = nullptr;       // (n)
  Output<Buffer<>>* y = nullptr;         // (n, s, b)

  void configure() {
    v_ = attngen::variant_or_throw(variant, attngen::Op::kLinear);
    const Type t = attngen::halide_type(v_.dtype);
    x = add_input<Buffer<>>("x", t, 3);
    w = add_input<Buffer<float, 3>>("w");
    bias = add_input<Buffer<>>("bias", t, 1);
    y = add_output<Buffer<>>("y", t, 3);
  }

  void generate() {
    const attngen::LinearTunables requested = attngen::linear_tunables(v_);
    attngen::LinearShape shape{x->dim(0).extent(), bias->dim(0).extent(), x->dim(1).extent(),
                               x->dim(2).extent()};
    shape.half_chunk = attngen::linear_half_chunk(v_, get_target());
    const attngen::LinearTunables t =
        attngen::plan_linear(shape, requested, get_target(), get_auto_schedule());
    const bool native_f16 = attngen::use_native_f16(get_externs_map(), get_target(),
                                                    attngen::target_row_of(get_target()),
                                                    v_.dtype == attngen::DType::kF16);
    attngen::LinearFuncs f = attngen::define_linear(
        attngen::as_f32(*x, native_f16), *w, attngen::as_f32(*bias, native_f16), shape, "linear");
    (*y)(f.n, f.s, f.b) = attngen::from_f32(f.out(f.n, f.s, f.b), y->type());
    // Output features and rows start at 0 (the runtime's buffers do), so a schedule's tiles of
    // n line up with the weight panels and its tiles of rows with the groups of staged rows.
    y->dim(0).set_min(0).dim(1).set_min(0);
    const int p = shape.panel;
    w->dim(0).set_bounds(0, p).dim(1).set_bounds(0, shape.in_features);
    w->dim(2).set_bounds(0, (shape.out_features + p - 1) / p);

    using E = attngen::Estimates;
    x->set_estimates({{0, E::kEmbed}, {0, E::kSeq}, {0, E::kBatch}});
    w->set_estimates({{0, p}, {0, E::kEmbed}, {0, 3 * E::kEmbed / p}});
    bias->set_estimates({{0, 3 * E::kEmbed}});
    y->set_estimates({{0, 3 * E::kEmbed}, {0, E::kSeq}, {0, E::kBatch}});

    f.out.compute_inline();
    attngen::LinearFuncs fs = f;
    fs.out = *y;
    attngen::schedule_linear(fs, get_target(), get_auto_schedule(), t);
  }

 private:
  attngen::KernelVariant v_;
};

}  // namespace

HALIDE_REGISTER_GENERATOR(Linear, linear)
