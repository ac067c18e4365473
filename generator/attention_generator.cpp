// attention: O = softmax(mask(scale * Q K^T)) V for BSHD tensors. One kernel per combination of
// head dims, mask kind, mask tensor, soft cap, sparse pattern and its parameters, extra outputs
// (weights, log-sum-exp) and algorithm form (whole rows or key blocks), with schedule tunables;
// sizes are run-time.
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
  // Sparse pattern (generator/pattern.h) and its parameters.
  GeneratorParam<attngen::Pattern> pattern{"pattern", attngen::Pattern::kNone,
                                           attngen::kPatternNames};
  GeneratorParam<int> window_left{"window_left", -1, -1, 1 << 30};
  GeneratorParam<int> window_right{"window_right", -1, -1, 1 << 30};
  GeneratorParam<int> stride{"stride", 0, 0, 1 << 30};
  GeneratorParam<int> block{"block", 0, 0, 1 << 30};
  GeneratorParam<int> local{"local", 0, 0, 1 << 30};
  GeneratorParam<int> global_tokens{"global_tokens", 0, 0, 1 << 30};
  // Extra outputs for inspection (a slower schedule that keeps the scores).
  GeneratorParam<bool> weights_output{"weights", false};
  GeneratorParam<bool> lse_output{"lse", false};
  // Schedule tunables (0: derived from the target; see schedules/schedule.h and
  // schedules/tuned/README.md).
  GeneratorParam<int> query_tile{"query_tile", 0, 0, 4096};
  GeneratorParam<int> key_tile{"key_tile", 0, 0, 256};
  GeneratorParam<int> pv_rows{"pv_rows", 0, 0, 256};
  GeneratorParam<int> parallel_grain{"parallel_grain", 0, 0, 4096};
  GeneratorParam<int> threads_x{"threads_x", 0, 0, 1024};
  GeneratorParam<int> stage_kv{"stage_kv", -1, -1, 2};  // -1: the schedule's default
  GeneratorParam<int> pv_chunk{"pv_chunk", 0, 0, 1 << 20};
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
  Input<Buffer<uint8_t, 2>>* layout = nullptr;  // (key block, query block), block-sparse only
  Output<Buffer<float, 4>> out{"out"};          // (dv, h, s, b)
  Output<Buffer<float, 4>>* weights = nullptr;  // (j, i, h, b): P [B, Hq, Sq, Skv]
  Output<Buffer<float, 3>>* lse = nullptr;      // (i, h, b): [B, Hq, Sq]

  void configure() {
    if (mask_tensor != MaskTensor::kNone) {
      const Type t = mask_tensor == MaskTensor::kBool ? UInt(8) : Float(32);
      mask = add_input<Buffer<>>("mask", t, 4);
    }
    if (pattern == attngen::Pattern::kBlockSparse) {
      layout = add_input<Buffer<uint8_t, 2>>("layout");
    }
    if (weights_output) weights = add_output<Buffer<float, 4>>("weights");
    if (lse_output) lse = add_output<Buffer<float, 3>>("lse");
  }

  attngen::PatternSpec pattern_spec() const {
    attngen::PatternSpec ps;
    ps.kind = pattern;
    ps.left = window_left;
    ps.right = window_right;
    ps.stride = stride;
    ps.block = block;
    ps.local = local;
    ps.global_tokens = global_tokens;
    const auto require = [&](bool ok, const char* what) {
      if (!ok) throw CompileError(std::string("attention: pattern needs ") + what);
    };
    switch (ps.kind) {
      case attngen::Pattern::kWindow:
        require(ps.left >= 0 || ps.right >= 0, "window_left and/or window_right >= 0");
        break;
      case attngen::Pattern::kStrided:
        require(ps.stride > 0, "stride > 0");
        break;
      case attngen::Pattern::kBlockSparse:
        require(ps.block > 0, "block > 0");
        break;
      case attngen::Pattern::kGlobalLocal:
        require(ps.local >= 0 && ps.global_tokens >= 0, "local >= 0 and global_tokens >= 0");
        break;
      case attngen::Pattern::kNone:
        break;
    }
    return ps;
  }

  void generate() {
    attngen::AttentionSpec spec;
    spec.head_dim_qk = head_dim_qk;
    spec.head_dim_v = head_dim_v == 0 ? head_dim_qk : head_dim_v;
    spec.mask = mask_kind;
    spec.mask_tensor = mask_tensor;
    spec.softcap = softcap;
    spec.pattern = pattern_spec();
    spec.weights = weights_output;
    spec.lse = lse_output;
    spec.key_block = key_block;
    attngen::AttentionTunables requested;
    requested.query_tile = query_tile;
    requested.key_tile = key_tile;
    requested.pv_rows = pv_rows;
    requested.stage_kv = stage_kv;
    requested.pv_chunk = pv_chunk;
    requested.parallel_grain = parallel_grain;
    requested.threads_x = threads_x;
    const attngen::AttentionTunables tunables =
        attngen::plan_attention(spec, requested, get_target());

    attngen::AttentionInputs in;
    in.q = q;
    in.k = k;
    in.v = v;
    in.kv_len = kv_len;
    if (mask) in.mask = *mask;
    if (layout) in.layout = *layout;
    in.seq_q = q.dim(2).extent();
    in.seq_kv = k.dim(2).extent();
    in.heads_q = q.dim(1).extent();
    in.heads_kv = k.dim(1).extent();
    in.scale = scale;
    in.softcap = softcap_value;
    in.bottom_right = bottom_right;

    attngen::AttentionFuncs f = attngen::define_attention(spec, in);
    out(f.d, f.h, f.i, f.b) = f.out(f.d, f.h, f.i, f.b);
    if (weights) (*weights)(f.j, f.i, f.h, f.b) = f.weights(f.j, f.i, f.h, f.b);
    if (lse) (*lse)(f.i, f.h, f.b) = f.lse(f.i, f.h, f.b);

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
    if (layout) layout->set_estimates({{0, E::kSeq / 64}, {0, E::kSeq / 64}});
    scale.set_estimate(0.125f);
    softcap_value.set_estimate(50.0f);
    bottom_right.set_estimate(true);
    out.set_estimates({{0, spec.head_dim_v}, {0, E::kHeads}, {0, E::kSeq}, {0, E::kBatch}});
    if (weights) {
      weights->set_estimates({{0, E::kSeq}, {0, E::kSeq}, {0, E::kHeads}, {0, E::kBatch}});
    }
    if (lse) lse->set_estimates({{0, E::kSeq}, {0, E::kHeads}, {0, E::kBatch}});

    // The kernel writes `out` directly: schedule f.out as the output stage.
    f.out.compute_inline();
    attngen::AttentionFuncs fs = f;
    fs.out = out;
    if (weights) {
      f.weights.compute_inline();
      fs.weights = *weights;
    }
    if (lse) {
      f.lse.compute_inline();
      fs.lse = *lse;
    }
    attngen::schedule_attention(fs, spec, get_target(), get_auto_schedule(), tunables);
  }
};

}  // namespace

HALIDE_REGISTER_GENERATOR(Attention, attention)
