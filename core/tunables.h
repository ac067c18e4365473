// The schedules' tunables: the structs the schedules read and, for each, the one table of the
// names a variant's TUNABLES and the tuning files use (generator/variant.cpp derives an op's
// tunable names from it, generator/plan.cpp sets the fields through it). Plain C++, no Halide:
// the variant tool that CMake builds at configure time includes it. 0 means "derive from the
// target" (resolve() in schedules/schedule.cpp).
#pragma once

namespace attngen {

// Besides these, key_block (the algorithm's form, AttentionSpec/DecodeSpec::key_block) is
// tunable for attention and decode where the variant does not fix it.
struct AttentionTunables {
  int query_tile = 0;      // query rows per parallel task (CPU) or per thread block (GPU)
  int key_tile = 0;        // keys per register tile of the q.k product (CPU)
  int pv_rows = 0;         // query rows per register tile of the probs.v product (CPU)
  int parallel_grain = 0;  // query tiles per parallel work item (CPU; default 1)
  int threads_x = 0;       // threads along the fastest dimension of a block (GPU; default 32)
  int stage_kv = -1;       // K/V copied contiguous once per head (2), per key block (1), or read in
                           // place (0) (CPU; 1 is for the key-block form only)
  int pv_chunk = 0;    // whole-row form: keys per pass of the probs.v product over the tile (CPU)
  int pv_vectors = 0;  // vectors of Dv per register tile of the probs.v product (CPU; default all)
};

struct LinearTunables {
  int n_vectors = 0;  // output-feature vectors per register tile (CPU)
  int rows = 0;       // rows per register tile (CPU)
  int row_block = 0;  // rows sharing one pass over a weight panel (CPU cache blocking)
  int e_chunk = 0;    // input features per pass over a row block's tile (CPU cache blocking)
  int threads_x = 0;  // threads per block along the output features (GPU; default 32)
  int threads_y = 0;  // threads per block along the rows (GPU; default 8)
  // f16 products (LinearShape::half_chunk; f32 products stage their rows in groups, row_group):
  // the row block's inputs staged as rows (0, the default) or transposed (1: per input feature
  // the block's rows side by side, at a compile-time stride) (CPU). See schedule_linear_simd.
  int transpose_x = -1;
};

struct DecodeTunables {
  int key_tile = 0;  // keys per iteration of the q.k loop (CPU; default 1; not the VNNI i8 kernels)
  int pv_rows = 0;   // rows per register tile of the probs.v product (CPU; divides row_tile)
  int row_tile = 0;  // rows per tile of a key block, sharing each converted vector of K (CPU)
  int stage_block = -1;     // copy each key block's slots as stored before use: 1, or not: 0 (CPU)
  int prefetch_slots = -1;  // K (in q.k) and V (in P.V) prefetched this many keys ahead (an i8
                            // cache: its groups, K and V, in q.k); 0: none (CPU)
};

template <typename T>
struct TunableField {
  const char* name;
  int T::*field;
};

inline constexpr TunableField<AttentionTunables> kAttentionTunables[] = {
    {"query_tile", &AttentionTunables::query_tile},
    {"key_tile", &AttentionTunables::key_tile},
    {"pv_rows", &AttentionTunables::pv_rows},
    {"parallel_grain", &AttentionTunables::parallel_grain},
    {"threads_x", &AttentionTunables::threads_x},
    {"stage_kv", &AttentionTunables::stage_kv},
    {"pv_chunk", &AttentionTunables::pv_chunk},
    {"pv_vectors", &AttentionTunables::pv_vectors}};

// (transpose_x is the MHA generator's choice, not a tunable of tuning files.)
inline constexpr TunableField<LinearTunables> kLinearTunables[] = {
    {"n_vectors", &LinearTunables::n_vectors}, {"rows", &LinearTunables::rows},
    {"row_block", &LinearTunables::row_block}, {"e_chunk", &LinearTunables::e_chunk},
    {"threads_x", &LinearTunables::threads_x}, {"threads_y", &LinearTunables::threads_y}};

inline constexpr TunableField<DecodeTunables> kDecodeTunables[] = {
    {"key_tile", &DecodeTunables::key_tile},
    {"pv_rows", &DecodeTunables::pv_rows},
    {"row_tile", &DecodeTunables::row_tile},
    {"stage_block", &DecodeTunables::stage_block},
    {"prefetch_slots", &DecodeTunables::prefetch_slots}};

}  // namespace attngen
