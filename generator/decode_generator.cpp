// decode: Sq new queries (usually 1..16) against the K/V cache of one layer, bottom-right causal,
// grouped-query, with split-KV so that one query uses every core (generator/decode_algorithm.h).
// Head dims and the cached element type are compile-time (the variant); B, Sq, Hq, Hkv (any ratio),
// the slots, the ring capacity, the window and the split size are run-time.
#include <memory>
#include <vector>

#include "core/kv_layout.h"
#include "generator/decode_algorithm.h"
#include "generator/modifier_inputs.h"
#include "generator/native_code.h"
#include "generator/online_softmax.h"
#include "generator/plan.h"
#include "schedules/schedule.h"

namespace {

using namespace Halide;

class Decode : public Generator<Decode> {
 public:
  // The kernel variant (generator/variant.h), e.g. "OP decode HEAD_DIM 128 KV_DTYPE f32".
  GeneratorParam<std::string> variant{"variant", "OP decode HEAD_DIM 64"};

  // Added in configure(), in this order (the generated function's arguments): their element
  // types come from the variant (the cache's from KV_DTYPE).
  Input<Buffer<>>* q = nullptr;                 // (d, h, i, b)
  Input<Buffer<int32_t, 1>>* kv_len = nullptr;  // (b): positions in the cache
  Input<Buffer<int32_t, 1>>* q_len = nullptr;   // (b): real query rows, <= Sq
  Input<int32_t>* capacity = nullptr;           // ring size (>= the slots given)
  Input<int32_t>* window = nullptr;             // left window, < 0: none
  Input<float>* scale = nullptr;                // usually 1/sqrt(Dqk)
  Input<int32_t>* split_keys = nullptr;         // keys per split-KV partial, >= 1
  // The slots read, the longest sequence's, in the cache's units: slots, or a grouped cache's
  // groups of 16 slots (an opaque count of groups keeps the group of 16 keys of a vector one
  // scalar in Halide's simplification; a count of slots rounded up to groups did not).
  Input<int32_t>* units = nullptr;
  Input<int32_t>* page_shift = nullptr;  // log2 of a page's slots (>= 4)
  // (entry, b): sequence b's pages in order (one entry per sequence: sequence b is page b)
  Input<Buffer<int32_t, 2>>* block_table = nullptr;
  Input<Buffer<>>* k = nullptr;  // (d, slot of the page, hkv, page) of the cache's type
  Input<Buffer<>>* v = nullptr;  // (dv, slot of the page, hkv, page) of the cache's type
  // An i8 cache only: (e, group of the page, hkv, page), its groups' K scales, then V scales.
  Input<Buffer<float, 4>>* kv_scales = nullptr;
  // Whether no V element of the layer is NaN or infinite (the cache tracks its appends): then
  // P.V multiplies as it is (generator/online_softmax.h, pv_term).
  Input<bool>* v_finite = nullptr;
  attngen::ModifierInputs modifier;  // the variant's modifier's parameters
  Output<Buffer<>>* out = nullptr;   // (dv, h, i, b)

  void configure() {
    v_ = attngen::variant_or_throw(variant, attngen::Op::kDecode);
    const Type t = attngen::halide_type(v_.dtype), kv_type = attngen::halide_type(v_.kv_dtype);
    q = add_input<Buffer<>>("q", t, 4);
    kv_len = add_input<Buffer<int32_t, 1>>("kv_len");
    q_len = add_input<Buffer<int32_t, 1>>("q_len");
    capacity = add_input<int32_t>("capacity");
    window = add_input<int32_t>("window");
    scale = add_input<float>("scale");
    split_keys = add_input<int32_t>("split_keys");
    units = add_input<int32_t>("units");
    page_shift = add_input<int32_t>("page_shift");
    block_table = add_input<Buffer<int32_t, 2>>("block_table");
    k = add_input<Buffer<>>("k", kv_type, 4);
    v = add_input<Buffer<>>("v", kv_type, 4);
    if (v_.kv_dtype == attngen::DType::kI8) kv_scales = add_input<Buffer<float, 4>>("kv_scales");
    v_finite = add_input<bool>("v_finite");
    modifier.add(*this, v_.modifier);
    out = add_output<Buffer<>>("out", t, 4);
  }

  void generate() {
    // The form: the variant's key block, what the target's row and native operations decide,
    // then the target's planner.
    attngen::DecodeForm form = attngen::requested_decode_form(v_);
    form.flushes_subnormals = get_target().arch == Halide::Target::ARM && get_target().bits == 32;
    const attngen::TargetRow& row = attngen::target_row_of(get_target());
    form.native_f16 = attngen::use_native_f16(
        get_externs_map(), get_target(), row,
        v_.dtype == attngen::DType::kF16 || v_.kv_dtype == attngen::DType::kF16);
    form.native_exp = attngen::use_native_exp(get_externs_map(), get_target(), row);
    // i8 caches on a row with integer dot products: q.k by them (attngen::int8_dot_decode).
    if (attngen::int8_dot_decode(v_)) form.int8_dot = row.int8_dot;
    form.pv_by_group = !get_target().has_gpu_feature();
    const attngen::DecodeProblem problem = attngen::decode_problem(v_);
    const attngen::DecodePlan plan =
        attngen::plan_decode(problem, form, attngen::decode_tunables(v_), get_target());
    const attngen::DecodeSpec spec(problem, plan.form);
    const attngen::DecodeTunables& tunables = plan.tunables;

    attngen::DecodeInputs in;
    in.q = attngen::as_f32(*q, spec.native_f16);
    in.k = *k;
    in.v = *v;
    if (kv_scales != nullptr) in.kv_scales = *kv_scales;
    in.kv_len = *kv_len;
    in.q_len = *q_len;
    in.seq_q = q->dim(2).extent();
    in.heads_q = q->dim(1).extent();
    // A grouped cache's (i8, f16, bf16) k and v are (element, group, hkv, b) views of its groups
    // of slots (core/kv_layout.h), whole groups of the slots the runtime gives.
    const bool i8 = v_.kv_dtype == attngen::DType::kI8;
    const bool grouped = v_.kv_dtype != attngen::DType::kF32;
    const int pack = attngen::group_pack(spec.kv_type.bytes());
    in.slots = grouped ? *units * attngen::kSlotGroup : Expr(*units);
    in.block_table = *block_table;
    in.page_shift = *page_shift;
    in.page_extent = k->dim(1).extent();
    in.pages = k->dim(3).extent();
    in.table_pages = block_table->dim(0).extent();
    in.heads_kv = k->dim(2).extent();
    in.capacity = *capacity;
    in.window = *window;
    in.scale = *scale;
    in.split_keys = *split_keys;
    in.dqk = q->dim(0).extent();
    in.dv = grouped ? v->dim(0).extent() / attngen::kSlotGroup : v->dim(0).extent();
    in.v_finite = *v_finite;
    in.modifier = modifier.modifier;
    in.modifier_params = modifier.params();

    attngen::DecodeFuncs f = attngen::define_decode(spec, in);
    (*out)(f.d, f.h, f.i, f.b) = attngen::from_f32(f.out(f.d, f.h, f.i, f.b), out->type());

    // Head dims are compile-time, and so is the cache's slot size (its layout: K then V).
    // (A generic kernel's are run-time, at most the spec's.)
    // A grouped cache's are those of its groups of slots (core/kv_layout.h).
    const int k_extent =
        grouped ? attngen::group_k_elements(spec.head_dim_qk, pack) : spec.head_dim_qk;
    const int v_extent = grouped ? spec.head_dim_v * attngen::kSlotGroup : spec.head_dim_v;
    const int slot_stride = grouped
                                ? attngen::group_elements(spec.head_dim_qk, spec.head_dim_v, pack)
                                : spec.head_dim_qk + spec.head_dim_v;
    if (!spec.generic) {
      q->dim(0).set_bounds(0, spec.head_dim_qk);
      k->dim(0).set_bounds(0, k_extent);
      v->dim(0).set_bounds(0, v_extent);
      k->dim(1).set_stride(slot_stride);
      v->dim(1).set_stride(slot_stride);
      out->dim(0).set_bounds(0, spec.head_dim_v);
    }

    using E = attngen::Estimates;
    constexpr int kQueries = 1, kSlots = 4096, kKvHeads = 4;
    const int slot_estimate = grouped ? kSlots / attngen::kSlotGroup : kSlots;
    q->set_estimates({{0, spec.head_dim_qk}, {0, E::kHeads}, {0, kQueries}, {0, E::kBatch}});
    k->set_estimates({{0, k_extent}, {0, slot_estimate}, {0, kKvHeads}, {0, E::kBatch}});
    v->set_estimates({{0, v_extent}, {0, slot_estimate}, {0, kKvHeads}, {0, E::kBatch}});
    if (kv_scales != nullptr) {
      // Per group of slots its K scales, then its V scales (core/kv_layout.h).
      kv_scales->dim(0).set_bounds(0, attngen::kScaleGroup).set_stride(1);
      kv_scales->dim(1).set_stride(attngen::kScaleGroup);
      kv_scales->set_estimates({{0, attngen::kScaleGroup},
                                {0, kSlots / attngen::kSlotGroup},
                                {0, kKvHeads},
                                {0, E::kBatch}});
    }
    kv_len->set_estimates({{0, E::kBatch}});
    q_len->set_estimates({{0, E::kBatch}});
    capacity->set_estimate(kSlots);
    window->set_estimate(-1);
    scale->set_estimate(0.125f);
    split_keys->set_estimate(kSlots / 8);
    units->set_estimate(slot_estimate);
    page_shift->set_estimate(12);  // one page of kSlots
    block_table->set_estimates({{0, 1}, {0, E::kBatch}});
    out->set_estimates({{0, spec.head_dim_v}, {0, E::kHeads}, {0, kQueries}, {0, E::kBatch}});
    modifier.set_estimates({E::kBatch, E::kHeads, kKvHeads, kQueries, kSlots, 16});

    // The kernel writes `out` directly: schedule f.out as the output stage.
    f.out.compute_inline();
    attngen::DecodeFuncs fs = f;
    fs.out = *out;
    fs.k_cache = *k;
    fs.v_cache = *v;
    attngen::schedule_decode(fs, spec, get_target(), get_auto_schedule(), tunables);
    if (tunables.prefetch_slots > 0 && !get_auto_schedule()) {
      attngen::add_prefetch_l2(get_externs_map(), get_target());
      // Each prefetch of K's box (in q.k) takes the slot's K, each of V's box (in P.V) the part
      // of the slot's V that the P.V iteration reads (it runs once per part of Dv); an i8
      // cache's prefetch of K's box takes the whole group of slots, its K and its V (without
      // VNNI), or the lines of the group's K part q.k reads an iteration and as many at the same
      // place of its V part (VNNI); an f16 or bf16 cache's the lines of the group's K part q.k
      // reads an iteration (the storage layout, schedules/cpu_decode.cpp).
      const int bytes = spec.kv_type.bytes();
      const attngen::TargetInfo& info = attngen::target_info(get_target());
      const int line = attngen::decode_line_bytes(spec, info);
      const int v_part = attngen::decode_pv_bytes(spec, info, tunables);
      std::vector<attngen::PrefetchSpan> spans;
      if (!grouped) {
        spans = {{k->name(), bytes, k_extent * bytes}, {v->name(), bytes, v_part}};
      } else if (!i8) {
        spans = {{k->name(), bytes, line}, {v->name(), bytes, v_part}};
      } else if (spec.int8_dot != attngen::Int8Dot::kNone) {
        spans = {{k->name(), bytes, line, k_extent * bytes}};
      } else {
        spans = {{k->name(), bytes, slot_stride * bytes}};
      }
      slot_prefetch_.reset(attngen::prefetch_lines_pass(spans));
    }
  }

  void schedule() {
    if (slot_prefetch_) get_pipeline().add_custom_lowering_pass(slot_prefetch_.release());
  }

 private:
  attngen::KernelVariant v_;
  std::unique_ptr<Halide::Internal::IRMutator> slot_prefetch_;
};

}  // namespace

HALIDE_REGISTER_GENERATOR(Decode, decode)
