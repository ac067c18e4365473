#include "schedules/schedule.h"

#include <algorithm>

#include "core/kv_layout.h"

namespace attngen {

namespace {

// Shared memory of one CUDA thread block of schedule_attention_cuda (bytes): the running state
// (3 floats per output element), the staged q rows, K and V blocks, scores and probs.
int cuda_shared_bytes(int query_tile, int key_block, int dqk, int dv) {
  return 4 * (3 * query_tile * dv + query_tile * dqk + key_block * (dqk + dv) +
              2 * query_tile * key_block + 2 * query_tile);
}

// Kept under the 48 KiB a block gets without opting in, with room for occupancy.
constexpr int kCudaSharedBudget = 40 * 1024;
constexpr int kCudaQueryTile = 16;
// Query rows per parallel task of the CPU attention schedules, in vectors of f32 lanes: 64 rows
// on AVX-512, 32 on AVX2, 16 on SSE4.1 and NEON (measured: schedules/cpu_simd.cpp). Kernels'
// descriptors carry the resolved tile, which the runtime's dispatch compares.
constexpr int kCpuQueryTileVectors = 4;
// Key block of causal and sparse-pattern kernels on CPUs: small enough that block skipping
// follows the mask closely, large enough for the register-blocked loops. (Dense kernels keep
// whole score rows by default: faster while a tile's rows stay in L2, see registry.cpp.)
constexpr int kSkippingKeyBlock = 64;

// The schedule's units that the algorithm's definitions follow (AttentionSpec).
AttentionTunables fix_units(AttentionSpec& spec, const AttentionTunables& t) {
  spec.query_tile = t.query_tile;
  spec.key_chunk = t.pv_chunk;
  spec.row_group = std::max(1, t.pv_rows);
  return t;
}

}  // namespace

int resolve_key_block(int requested, int head_dim_qk, int head_dim_v,
                      const Halide::Target& target) {
  if (!target.has_gpu_feature()) return requested;
  // On GPUs a block of K and V lives in shared memory: at most 32 keys, fewer when the head
  // dims would not fit next to a full query tile (a larger request, tuned for CPUs, is capped).
  int block = requested > 0 ? std::min(requested, 32) : 32;
  while (block > 8 &&
         cuda_shared_bytes(kCudaQueryTile, block, head_dim_qk, head_dim_v) > kCudaSharedBudget) {
    block /= 2;
  }
  return block;
}

AttentionTunables resolve(AttentionTunables t, const AttentionSpec& spec, const TargetInfo& info) {
  if (t.parallel_grain <= 0) t.parallel_grain = 1;
  if (t.threads_x <= 0) t.threads_x = 32;  // a warp
  if (info.isa == Isa::kCuda) {
    if (t.pv_chunk <= 0) t.pv_chunk = 64;  // keys per chunk of the row form (inspection only)
    if (t.query_tile <= 0) {
      t.query_tile = kCudaQueryTile;
      while (t.query_tile > 1 && cuda_shared_bytes(t.query_tile, spec.key_block, spec.head_dim_qk,
                                                   spec.head_dim_v) > kCudaSharedBudget) {
        t.query_tile /= 2;
      }
    }
    return t;
  }
  const int lanes = info.f32_lanes;
  if (t.stage_kv < 0) t.stage_kv = 2;  // measured: see cpu_simd.cpp
  if (t.query_tile <= 0) t.query_tile = kCpuQueryTileVectors * lanes;
  // Round to whole vectors: producers vectorise along the query rows.
  t.query_tile = (t.query_tile + lanes - 1) / lanes * lanes;
  const int q_vectors = t.query_tile / lanes;
  if (t.key_tile <= 0) t.key_tile = std::max(1, info.accumulators / q_vectors);
  const int dv_vectors = vectors_covering(spec.head_dim_v, info);
  if (t.pv_rows <= 0) t.pv_rows = rows_for_accumulators(dv_vectors, t.query_tile, info);
  // A register tile of p.v takes a part of Dv, the largest divisor of its vectors not above the
  // request; the default, all of them.
  if (t.pv_vectors <= 0 || t.pv_vectors > dv_vectors) t.pv_vectors = dv_vectors;
  while (dv_vectors % t.pv_vectors != 0) --t.pv_vectors;
  // A chunk of V (Dv floats a key) and of probs (query_tile floats a key) in L1: 64 keys at D64
  // on AVX-512, the best of 32-256 measured (cpu_simd.cpp).
  if (t.pv_chunk <= 0) t.pv_chunk = chunk_for_l1(4 * (spec.head_dim_v + t.query_tile), info);
  return t;
}

namespace {

// plan_attention's decisions, made in a copy of the problem in its requested form.
AttentionTunables complete_form(AttentionSpec& spec, const AttentionTunables& requested,
                                const Halide::Target& target) {
  const PatternSpec& ps = spec.pattern;
  const TargetInfo info = target_info(target);
  // The weights need whole score rows: the inspection schedule (inspect.cpp). So does the
  // log-sum-exp alone where the SIMD key-block schedule, which writes it from each row's final
  // state (cpu_simd.cpp), does not run.
  if (spec.weights || (spec.lse && family_of(info) != Family::kSimd)) {
    spec.key_block = 0;
    return fix_units(spec, resolve(requested, spec, info));
  }
  AttentionTunables want = requested;
  // The row form skips the keys past the causal diagonal of a query tile; patterns and mask
  // modifiers skip whole key blocks, in the key-block form, whose final state also gives the
  // log-sum-exp. Generic kernels take causal at run time: key blocks skip what it masks.
  if ((ps.kind != Pattern::kNone || spec.generic || spec.mask_modifier || spec.lse) &&
      spec.key_block == 0 && !target.has_gpu_feature()) {
    spec.key_block = kSkippingKeyBlock;
  }
  if (ps.kind == Pattern::kBlockSparse && !spec.generic && !target.has_gpu_feature()) {
    // One layout entry per (query tile, key block): both are the layout's block.
    spec.key_block = ps.block;
    want.query_tile = ps.block;
  }
  spec.key_block = resolve_key_block(spec.key_block, spec.head_dim_qk, spec.head_dim_v, target);
  const AttentionTunables t = resolve(want, spec, info);
  // The strided pattern in two parts whose cost follows the attended pairs (the band a window,
  // the residue classes dense problems of their own), merged per row.
  spec.strided_classes = ps.kind == Pattern::kStrided && !spec.generic && spec.key_block > 0 &&
                         spec.mask_tensor == MaskTensor::kNone && !spec.lse &&
                         !target.has_gpu_feature();
  if (ps.kind == Pattern::kBlockSparse && !spec.generic &&
      (ps.block % spec.key_block != 0 || ps.block % t.query_tile != 0)) {
    throw Halide::CompileError("attngen: block-sparse block " + std::to_string(ps.block) +
                               " must be a multiple of the " + "key block (" +
                               std::to_string(spec.key_block) + ") and of the query tile (" +
                               std::to_string(t.query_tile) + ") of this target");
  }
  // AVX512-BF16: bf16 products in pairs (vdpbf16ps) for the row form of the specialised
  // kernels; the keys are taken in whole vectors (scores past Skv masked).
  spec.bf16_pairs = info.isa == Isa::kAvx512Bf16 && spec.bf16 && spec.key_block == 0 &&
                    !spec.generic && spec.head_dim_qk % 2 == 0 && t.pv_chunk % 2 == 0;
  if (spec.bf16_pairs) spec.key_multiple = info.f32_lanes;
  // AMX (the amx row, same target): keys in chunks of whole 32-key tile products.
  spec.amx = spec.amx && spec.bf16_pairs && spec.head_dim_qk % kAmxPairs == 0 &&
             spec.head_dim_v % kAmxColumns == 0 && t.query_tile % kAmxRows == 0;
  if (spec.amx) {
    AttentionTunables ta = t;
    ta.pv_chunk = (t.pv_chunk + kAmxPairs - 1) / kAmxPairs * kAmxPairs;
    spec.key_multiple = ta.pv_chunk;
    return fix_units(spec, ta);
  }
  return fix_units(spec, t);
}

}  // namespace

AttentionPlan plan_attention(const AttentionProblem& problem, const AttentionForm& requested,
                             const AttentionTunables& tunables, const Halide::Target& target) {
  AttentionSpec spec(problem, requested);
  const AttentionTunables t = complete_form(spec, tunables, target);
  return {spec, t};
}

LinearTunables resolve(LinearTunables t, const TargetInfo& info) {
  if (t.n_vectors <= 0) t.n_vectors = 3;
  if (t.rows <= 0) t.rows = std::max(1, info.accumulators / t.n_vectors);
  // 128 rows on AVX-512, 1.04x faster than 64 in the MHA layer and 1.02x slower at 256 (B4 S512
  // E768, 2 threads; its staged rows are 384 KiB at E 768, in L2); elsewhere not measured: 8 tiles.
  if (t.row_block <= 0) t.row_block = (info.f32_lanes >= 16 ? 16 : 8) * t.rows;
  t.row_block = (t.row_block + t.rows - 1) / t.rows * t.rows;
  // A chunk of the weight panel (n_tile floats a feature) and of the rows in L1: 128 features on
  // AVX-512, the best of 64-256 measured (cpu_simd.cpp).
  if (t.e_chunk <= 0) t.e_chunk = chunk_for_l1(4 * (t.n_vectors * info.f32_lanes + t.rows), info);
  if (t.threads_x <= 0) t.threads_x = 32;  // a warp
  if (t.threads_y <= 0) t.threads_y = 8;
  if (t.transpose_x < 0) t.transpose_x = 0;
  return t;
}

LinearTunables plan_linear(LinearShape& shape, const LinearTunables& requested,
                           const Halide::Target& target, bool autoscheduled) {
  const TargetInfo info = target_info(target);
  const LinearTunables t = resolve(requested, info);
  const bool simd = family_of(info) == Family::kSimd;
  // One panel per register tile's output features (schedule_linear_simd()).
  // Half-precision products (shape.half_chunk) take vectors of f16 lanes.
  const int lanes = shape.half_chunk > 0 ? lanes_of(target_row(info.isa), 2) : info.f32_lanes;
  shape.panel = simd && !autoscheduled ? t.n_vectors * lanes : 1;
  shape.row_group = simd && !autoscheduled && shape.half_chunk <= 0 ? t.rows : 0;
  return t;
}

namespace {

// The scan that decides pv_term's form (generator/online_softmax.h): V's largest exponent field,
// computed first, once, on the CPU (a CUDA kernel's V is a host buffer too), a vector of the head
// dim at a time (tail lanes guarded: generic head dims), chunks of keys in parallel: a pass over
// V at memory speed.
void schedule_v_scan(AttentionFuncs f, const TargetInfo& info) {
  Halide::RVar xo("v_xo"), xi("v_xi"), zo("v_zo"), zi("v_zi");
  Halide::Var u("v_u"), c("v_c");
  const bool simd = family_of(info) == Family::kSimd;
  const int lanes = simd ? info.f32_lanes : 1;
  f.v_exponents.compute_root();
  // Partial maxima per chunk of 64 keys, in parallel, a vector of the head dim at a time.
  Halide::Func partial = f.v_exponents.update()
                             .split(f.rv.x, xo, xi, lanes, Halide::TailStrategy::GuardWithIf)
                             .split(f.rv.z, zo, zi, 64, Halide::TailStrategy::GuardWithIf)
                             .rfactor({{xi, u}, {zo, c}});
  partial.compute_root().parallel(c);
  partial.update().reorder(u, xo, f.rv.y, zi, f.rv.w, c).parallel(c);
  if (lanes > 1) {
    partial.vectorize(u);
    partial.update().vectorize(u);
  }
}

// The P.V stage, specialised on V being finite: the branch a call with finite V takes multiplies
// as it is (the select in pv_term folds away), the other masks V by the probs. Called once the
// stage is scheduled, so both branches carry its schedule.
void specialise_pv(AttentionFuncs f, const AttentionSpec& spec) {
  if (spec.key_block > 0 && spec.half_pv_chunk > 0) {
    f.block_pv_half.update().specialize(f.v_finite);
  } else if (spec.key_block > 0) {
    f.block_pv.update().specialize(f.v_finite);
  } else if (!spec.amx) {  // (amx: two products, and the output specialised on v_finite)
    f.acc.update().specialize(f.v_finite);
  }
}

void schedule_attention_for(AttentionFuncs f, const AttentionSpec& spec, const TargetInfo& info,
                            const AttentionTunables& tunables) {
  if (spec.weights || (spec.lse && spec.key_block == 0)) {
    schedule_attention_inspect(f, spec, info);
    return;
  }
  switch (family_of(info)) {
    case Family::kGpu:
      if (spec.key_block <= 0) {
        throw Halide::CompileError("attngen: the CUDA schedule needs key blocks (key_block > 0)");
      }
      schedule_attention_cuda(f, spec, info, resolve(tunables, spec, info));
      return;
    case Family::kSimd:
      if (spec.amx) {
        schedule_attention_amx(f, spec, info, resolve(tunables, spec, info));
      } else if (spec.bf16_pairs) {
        schedule_attention_bf16_pairs(f, spec, info, resolve(tunables, spec, info));
      } else if (spec.key_block > 0) {
        schedule_attention_simd_blocked(f, spec, info, resolve(tunables, spec, info));
      } else {
        schedule_attention_simd(f, spec, info, resolve(tunables, spec, info));
      }
      return;
    case Family::kPortable:
      if (spec.key_block > 0) {
        throw Halide::CompileError("attngen: key blocks need a SIMD or CUDA target");
      }
      schedule_attention_generic(f, info);
      return;
  }
}

}  // namespace

void schedule_attention(AttentionFuncs f, const AttentionSpec& spec, const Halide::Target& target,
                        bool autoscheduled, const AttentionTunables& tunables) {
  if (autoscheduled) return;  // the generator's estimates drive the autoscheduler
  const TargetInfo info = target_info(target);
  schedule_attention_for(f, spec, info, tunables);
  // A modifier's stages (per-block ranges of its tensors, say): small, once per call, on the CPU
  // (a CUDA kernel's modifier tensors are host buffers too).
  for (Halide::Func stage : f.modifier_stages) stage.compute_root();
  schedule_v_scan(f, info);
  specialise_pv(f, spec);
  if (f.classes) specialise_pv(*f.classes, strided_class_spec(spec));
}

void schedule_linear(LinearFuncs f, const Halide::Target& target, bool autoscheduled,
                     const LinearTunables& tunables) {
  if (autoscheduled) return;
  const TargetInfo info = target_info(target);
  switch (family_of(info)) {
    case Family::kGpu:
      schedule_linear_cuda(f, info, resolve(tunables, info));
      return;
    case Family::kSimd:
      schedule_linear_simd(f, info, resolve(tunables, info));
      return;
    case Family::kPortable:
      schedule_linear_generic(f, info);
      return;
  }
}

}  // namespace attngen

namespace attngen {

namespace {

// Keys per block of the decode kernels' online softmax. CPU: see schedules/cpu_decode.cpp. CUDA:
// at most this, within the shared-memory budget (schedules/cuda.cpp stages a block of K and V).
constexpr int kCpuDecodeKeyBlock = 128;
constexpr int kCudaDecodeKeyBlock = 32;
constexpr int kCpuDecodeRowTile = 4;

}  // namespace

DecodePlan plan_decode(const DecodeProblem& problem, const DecodeForm& requested_form,
                       const DecodeTunables& requested, const Halide::Target& target) {
  DecodeSpec spec(problem, requested_form);
  const TargetInfo info = target_info(target);
  if (spec.key_block <= 0 && info.isa == Isa::kCuda) {
    // Shared memory of a thread block: K and V blocks, the tile's q rows, scores and probs.
    spec.key_block = kCudaDecodeKeyBlock;
    while (spec.key_block > 8 &&
           4 * (spec.key_block * (spec.head_dim_qk + spec.head_dim_v) +
                kCudaDecodeRowTile * spec.head_dim_qk + 2 * spec.key_block * kCudaDecodeRowTile) >
               kCudaSharedBudget) {
      spec.key_block /= 2;
    }
  }
  // CPU: blocks of 128 keys for every cache type (cpu_decode.cpp: against 64 for f32, paired on
  // a Sapphire-Rapids-class VM, part of the 1.1-1.6x below; 5% faster for f16 and i8 earlier).
  if (spec.key_block <= 0) spec.key_block = kCpuDecodeKeyBlock;
  DecodeTunables t = requested;
  // CPU: see schedules/cpu_decode.cpp (rows of a tile = Llama's g = 4 query heads per kv head).
  if (t.row_tile <= 0) t.row_tile = kCpuDecodeRowTile;
  if (t.key_tile <= 0) t.key_tile = 1;
  if (t.pv_rows <= 0 || t.row_tile % t.pv_rows != 0) t.pv_rows = t.row_tile;
  // Blocks are read where they are in the cache (cpu_decode.cpp: the copy of each block before
  // use, once faster for f32 caches, measured 1.1-1.6x slower on a Sapphire-Rapids-class VM).
  if (t.stage_block < 0) t.stage_block = 0;
  // x86 CPUs: q.k prefetches each slot's K and P.V its V into L2 one key block ahead (an i8
  // cache: q.k its groups of slots, K and V, one group ahead) (cpu_decode.cpp); unmeasured on
  // ARM, where the hardware's prefetchers are left alone.
  if (t.prefetch_slots < 0) {
    const bool x86 = target.arch == Halide::Target::X86 && info.isa != Isa::kCuda;
    t.prefetch_slots = !x86 ? 0 : spec.kv_type == Halide::Int(8) ? kSlotGroup : spec.key_block;
  }
  return {spec, t};
}

namespace {

void schedule_decode_for(DecodeFuncs f, const DecodeSpec& spec, const TargetInfo& info,
                         const DecodeTunables& tunables) {
  // A modifier's stages: small, once per call, on the CPU (as for attention).
  for (Halide::Func stage : f.modifier_stages) stage.compute_root();
  switch (family_of(info)) {
    case Family::kGpu:
      schedule_decode_cuda(f, spec, info);
      break;
    case Family::kSimd:
      // (with its own finite-V branches: cpu_decode.cpp)
      schedule_decode_simd(f, spec, info, tunables);
      return;
    case Family::kPortable:
      schedule_decode_generic(f, info);
      break;
  }
  // As for attention: the P.V of a layer whose V is finite multiplies as it is. (A quantised V's
  // P.V takes its probabilities scaled, 0 where not attended, and needs no test.)
  if (!f.probs_scaled.defined()) f.block_pv.update().specialize(f.v_finite);
}

}  // namespace

void schedule_decode(DecodeFuncs f, const DecodeSpec& spec, const Halide::Target& target,
                     bool autoscheduled, const DecodeTunables& tunables) {
  if (autoscheduled) return;
  const TargetInfo info = target_info(target);
  schedule_decode_for(f, spec, info, tunables);
}

}  // namespace attngen
