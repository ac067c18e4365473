// decode: Sq new queries (usually 1..16) against the K/V cache of one layer, bottom-right causal,
// grouped-query, with split-KV so that one query uses every core (generator/decode_algorithm.h).
// Head dims and the cached element type are compile-time; B, Sq, Hq, Hkv (any ratio), the slots,
// the ring capacity, the window and the split size are run-time.
#include "generator/decode_algorithm.h"
#include "generator/params.h"
#include "schedules/schedule.h"

namespace {

using namespace Halide;

class Decode : public Generator<Decode> {
 public:
  GeneratorParam<int> head_dim_qk{"head_dim_qk", 64, 1, 4096};
  GeneratorParam<int> head_dim_v{"head_dim_v", 0, 0, 4096};  // 0: same as head_dim_qk
  // Element type of the cached K and V; the queries, the arithmetic and the output are f32.
  GeneratorParam<Type> kv_type{"kv_type", Float(32)};
  // Keys per block of the online softmax (0: the target's default, schedules/schedule.cpp).
  GeneratorParam<int> key_block{"key_block", 0, 0, 4096};
  // Schedule tunables (0: derived from the target).
  GeneratorParam<int> key_tile{"key_tile", 0};
  GeneratorParam<int> pv_rows{"pv_rows", 0};

  Input<Buffer<float, 4>> q{"q"};              // (d, h, i, b)
  Input<Buffer<int32_t, 1>> kv_len{"kv_len"};  // (b): positions in the cache
  Input<Buffer<int32_t, 1>> q_len{"q_len"};    // (b): real query rows, <= Sq
  Input<int32_t> capacity{"capacity"};         // ring size (>= the slots given)
  Input<int32_t> window{"window"};             // left window, < 0: none
  Input<float> scale{"scale"};                 // usually 1/sqrt(Dqk)
  Input<int32_t> split_keys{"split_keys"};     // keys per split-KV partial, >= 1
  Input<Buffer<>>* k = nullptr;                // (d, s, hkv, b) of kv_type
  Input<Buffer<>>* v = nullptr;                // (dv, s, hkv, b) of kv_type
  Output<Buffer<float, 4>> out{"out"};         // (dv, h, i, b)

  void configure() {
    k = add_input<Buffer<>>("k", kv_type, 4);
    v = add_input<Buffer<>>("v", kv_type, 4);
  }

  void generate() {
    attngen::DecodeSpec spec;
    spec.head_dim_qk = head_dim_qk;
    spec.head_dim_v = head_dim_v == 0 ? head_dim_qk : head_dim_v;
    spec.kv_type = kv_type;
    spec.key_block = key_block;
    attngen::DecodeTunables requested;
    requested.key_tile = key_tile;
    requested.pv_rows = pv_rows;
    const attngen::DecodeTunables tunables = attngen::plan_decode(spec, requested, get_target());

    attngen::DecodeInputs in;
    in.q = q;
    in.k = *k;
    in.v = *v;
    in.kv_len = kv_len;
    in.q_len = q_len;
    in.seq_q = q.dim(2).extent();
    in.heads_q = q.dim(1).extent();
    in.slots = k->dim(1).extent();
    in.heads_kv = k->dim(2).extent();
    in.capacity = capacity;
    in.window = window;
    in.scale = scale;
    in.split_keys = split_keys;

    attngen::DecodeFuncs f = attngen::define_decode(spec, in);
    out(f.d, f.h, f.i, f.b) = f.out(f.d, f.h, f.i, f.b);

    // Head dims are compile-time, and so is the cache's slot size (its layout: K then V).
    q.dim(0).set_bounds(0, spec.head_dim_qk);
    k->dim(0).set_bounds(0, spec.head_dim_qk);
    v->dim(0).set_bounds(0, spec.head_dim_v);
    k->dim(1).set_stride(spec.head_dim_qk + spec.head_dim_v);
    v->dim(1).set_stride(spec.head_dim_qk + spec.head_dim_v);
    out.dim(0).set_bounds(0, spec.head_dim_v);

    using E = attngen::Estimates;
    constexpr int kQueries = 1, kSlots = 4096, kKvHeads = 4;
    q.set_estimates({{0, spec.head_dim_qk}, {0, E::kHeads}, {0, kQueries}, {0, E::kBatch}});
    k->set_estimates({{0, spec.head_dim_qk}, {0, kSlots}, {0, kKvHeads}, {0, E::kBatch}});
    v->set_estimates({{0, spec.head_dim_v}, {0, kSlots}, {0, kKvHeads}, {0, E::kBatch}});
    kv_len.set_estimates({{0, E::kBatch}});
    q_len.set_estimates({{0, E::kBatch}});
    capacity.set_estimate(kSlots);
    window.set_estimate(-1);
    scale.set_estimate(0.125f);
    split_keys.set_estimate(kSlots / 8);
    out.set_estimates({{0, spec.head_dim_v}, {0, E::kHeads}, {0, kQueries}, {0, E::kBatch}});

    // The kernel writes `out` directly: schedule f.out as the output stage.
    f.out.compute_inline();
    attngen::DecodeFuncs fs = f;
    fs.out = out;
    attngen::schedule_decode(fs, spec, get_target(), get_auto_schedule(), tunables);
  }
};

}  // namespace

HALIDE_REGISTER_GENERATOR(Decode, decode)
