// attention: O = softmax(mask(scale * Q K^T)) V for BSHD tensors, one kernel per
// (head dims, mask kind, mask tensor, soft cap) combination; sizes are run-time.
#include "generator/attention_algorithm.h"
#include "generator/params.h"
#include "schedules/schedule.h"

namespace {

using namespace Halide;
using attngen::MaskKind;
using attngen::MaskTensor;

class Attention : public Generator<Attention> {
 public:
  GeneratorParam<int> head_dim_qk{"head_dim_qk", 64, 1, 4096};
  GeneratorParam<int> head_dim_v{"head_dim_v", 0, 0, 4096};  // 0: same as head_dim_qk
  GeneratorParam<MaskKind> mask_kind{"mask", MaskKind::kNone, attngen::kMaskKindNames};
  GeneratorParam<MaskTensor> mask_tensor{"mask_tensor", MaskTensor::kNone,
                                         attngen::kMaskTensorNames};
  GeneratorParam<bool> softcap{"softcap", false};
  // Schedule tunables (0: derived from the target; see schedules/schedule.cpp).
  GeneratorParam<int> query_tile{"query_tile", 0};
  GeneratorParam<int> key_tile{"key_tile", 0};
  GeneratorParam<int> pv_rows{"pv_rows", 0};
  // Algorithm form: 0 = the target's default (whole rows on CPUs, key blocks on GPUs), > 0 = key
  // blocks of this many keys merged with an online softmax.
  GeneratorParam<int> key_block{"key_block", 0, 0, 4096};

  Input<Buffer<float, 4>> q{"q"};               // (d, h, s, b)
  Input<Buffer<float, 4>> k{"k"};               // (d, hkv, s, b)
  Input<Buffer<float, 4>> v{"v"};               // (dv, hkv, s, b)
  Input<Buffer<int32_t, 1>> kv_len{"kv_len"};   // (b): valid keys per batch, <= Skv
  Input<float> scale{"scale"};                  // usually 1/sqrt(Dqk)
  Input<float> softcap_value{"softcap_value"};  // c > 0; read only by softcap kernels
  Input<bool> bottom_right{"bottom_right"};     // alignment of queries to keys
  Input<Buffer<>>* mask = nullptr;              // (j, i, h, b), only with a mask tensor
  Output<Buffer<float, 4>> out{"out"};          // (dv, h, s, b)

  void configure() {
    if (mask_tensor != MaskTensor::kNone) {
      const Type t = mask_tensor == MaskTensor::kBool ? UInt(8) : Float(32);
      mask = add_input<Buffer<>>("mask", t, 4);
    }
  }

  void generate() {
    attngen::AttentionSpec spec;
    spec.head_dim_qk = head_dim_qk;
    spec.head_dim_v = head_dim_v == 0 ? head_dim_qk : head_dim_v;
    spec.mask = mask_kind;
    spec.mask_tensor = mask_tensor;
    spec.softcap = softcap;
    spec.key_block = key_block;
    attngen::AttentionTunables requested;
    requested.query_tile = query_tile;
    requested.key_tile = key_tile;
    requested.pv_rows = pv_rows;
    const attngen::AttentionTunables tunables =
        attngen::plan_attention(spec, requested, get_target());

    attngen::AttentionInputs in;
    in.q = q;
    in.k = k;
    in.v = v;
    in.kv_len = kv_len;
    if (mask) in.mask = *mask;
    in.seq_q = q.dim(2).extent();
    in.seq_kv = k.dim(2).extent();
    in.heads_q = q.dim(1).extent();
    in.heads_kv = k.dim(1).extent();
    in.scale = scale;
    in.softcap = softcap_value;
    in.bottom_right = bottom_right;

    attngen::AttentionFuncs f = attngen::define_attention(spec, in);
    out(f.d, f.h, f.i, f.b) = f.out(f.d, f.h, f.i, f.b);

    // Head dims are compile-time: tell Halide, so vector loops over them have no tails.
    q.dim(0).set_bounds(0, spec.head_dim_qk);
    k.dim(0).set_bounds(0, spec.head_dim_qk);
    v.dim(0).set_bounds(0, spec.head_dim_v);
    out.dim(0).set_bounds(0, spec.head_dim_v);

    using E = attngen::Estimates;
    q.set_estimates({{0, spec.head_dim_qk}, {0, E::kHeads}, {0, E::kSeq}, {0, E::kBatch}});
    k.set_estimates({{0, spec.head_dim_qk}, {0, E::kHeads}, {0, E::kSeq}, {0, E::kBatch}});
    v.set_estimates({{0, spec.head_dim_v}, {0, E::kHeads}, {0, E::kSeq}, {0, E::kBatch}});
    kv_len.set_estimates({{0, E::kBatch}});
    // A mask broadcast along the keys has innermost stride 0.
    if (mask) mask->dim(0).set_stride(Expr());
    if (mask) mask->set_estimates({{0, E::kSeq}, {0, E::kSeq}, {0, E::kHeads}, {0, E::kBatch}});
    scale.set_estimate(0.125f);
    softcap_value.set_estimate(50.0f);
    bottom_right.set_estimate(true);
    out.set_estimates({{0, spec.head_dim_v}, {0, E::kHeads}, {0, E::kSeq}, {0, E::kBatch}});

    // The kernel writes `out` directly: schedule f.out as the output stage.
    f.out.compute_inline();
    attngen::AttentionFuncs fs = f;
    fs.out = out;
    attngen::schedule_attention(fs, spec, get_target(), get_auto_schedule(), tunables);
  }
};

}  // namespace

HALIDE_REGISTER_GENERATOR(Attention, attention)
