// The kernel variant model: what one generated kernel is, written once. A variant is a string of
// the attngen_add_kernel() arguments ("OP attention HEAD_DIM 64 MASK causal"; docs/variants.md);
// this file parses it and derives from it the kernel's name, its tuning class, its description,
// the generator's params and the extra arguments of its generated function. CMake, the
// generators, the descriptors, the tests' tools and bench/autotune all ask this model (through
// the generator's --variant-* modes, generator/variant_cli.cpp) instead of re-deriving it.
//
// Plain C++ (no Halide): CMake compiles it into a small tool at configure time.
#pragma once

#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/pattern.h"
#include "core/targets.h"

namespace attngen {

enum class Op { kAttention, kLinear, kMha, kDecode };

// Element types of tensors: core/dtype.h. Kernels compute in f32 whatever they store
// (docs/semantics.md, "Precision"): f16 and bf16 tensors are converted where they are read and
// written; kI8 is for KV caches only (symmetric, with f32 scales).

struct Tunable {
  std::string name;
  int value = 0;
};

struct KernelVariant {
  Op op = Op::kAttention;
  // Q, K, V and O (attention); x, the weights and y (linear, mha); the queries and O (decode).
  DType dtype = DType::kF32;
  DType kv_dtype = DType::kF32;         // decode: the cached K and V; the others: dtype
  DType out_dtype = DType::kF32;        // OUT_DTYPE (attention): O; the others: dtype
  int head_dim_qk = 0, head_dim_v = 0;  // 0 for linear
  MaskKind mask = MaskKind::kNone;      // decode: always causal (bottom-right)
  MaskTensor mask_tensor = MaskTensor::kNone;
  bool softcap = false;
  // MODIFIER (attention): a modifier's name (core/modifier.h, generator/modifiers/); "" none.
  std::string modifier;
  PatternSpec pattern;
  bool weights = false, lse = false;  // extra outputs
  // GENERIC (attention): head dims up to HEAD_DIM / HEAD_DIM_V, the causal mask, a mask tensor
  // (bool or additive) and the soft cap are run-time inputs; serves any call a specialised
  // kernel does not (docs/variants.md, "Generic kernels").
  bool generic = false;
  int key_block = 0;   // KEY_BLOCK: the key-block form asked for (0: the target's default form)
  int query_tile = 0;  // QUERY_TILE: query rows per task asked for (0: the schedule's choice)
  std::vector<Tunable> tunables;       // TUNABLES name=value: schedule tunables given explicitly
  std::string isa = "host";            // ISA as given (host: the build machine's best)
  std::vector<std::string> only_isas;  // ONLY_ISAS: the ISAs a list entry is built for
};

const char* op_name(Op op);           // "attention": also the generator's name
const char* dtype_name(DType dtype);  // "f32"
int dtype_bytes(DType dtype);

// Parses a variant string: KEY value pairs and flags in any order (docs/variants.md). Fills
// the defaults (HEAD_DIM_V = HEAD_DIM, decode is causal, ...) and checks the combination.
// Returns false with a message naming the offending word.
bool parse_variant(const std::string& text, KernelVariant* v, std::string* error);

// The variant as a canonical string (fixed order, defaults left out, no ISA or TUNABLES):
// equal for equal kernels, and what the generators take as their `variant` param.
std::string canonical(const KernelVariant& v);

// attn_f32_d64_causal__x86_64_avx512 (docs/variants.md, "Names").
std::string kernel_name(const KernelVariant& v, const TargetRow& target);

// The shape class that tuning files key on (schedules/tuned/README.md): "attention d64 causal",
// "linear"; "" for ops without tunables in tuning files (mha, decode). A modifier kernel's is
// its base variant's (a modifier changes the score tile's arithmetic, not the schedule's
// shape). The inverse, variant_of_class(), gives the variant a class stands for.
std::string tuning_class(const KernelVariant& v);
bool variant_of_class(const std::string& cls, KernelVariant* v, std::string* error);

// One line of prose: "attention, f32, head dim 64, causal, window [-31, +31]".
std::string description(const KernelVariant& v);

// Schedule tunables of an op (the generator params tuning files may set). key_block and
// query_tile are tunable only where the variant does not fix them (KEY_BLOCK, QUERY_TILE).
std::vector<std::string> tunable_names(const KernelVariant& v);

// The variant's own tunables merged with `more` (from a tuning file): a name given twice, a
// name the op does not know, or a value contradicting KEY_BLOCK/QUERY_TILE is an error.
bool merge_tunables(const KernelVariant& v, const std::vector<Tunable>& more,
                    std::vector<Tunable>* out, std::string* error);

// Whether a kernel of the variant for target row t is worth building: always for a base ISA;
// for an extension row (core/targets.h) only where its instructions serve the variant, so
// that it does not duplicate the base ISA's kernel. avx512bf16: the row form of bf16 attention
// (specialised, no extra outputs, no pattern, even head dims), where the schedule takes bf16
// products in pairs (schedules/cpu_bf16.cpp), and the decode kernels of int8_dot_decode (every
// AVX512-BF16 CPU has AVX512-VNNI, and the row's Halide target enables both); amx: the same
// attention with head dims in whole AMX tiles (q.k's a multiple of 32, p.v's of 16). neonfp16:
// every f16 kernel.
bool extension_applies(const KernelVariant& v, const TargetRow& t);

// A decode kernel over an i8 cache whose q.k the avx512bf16 row computes as VNNI dot products
// (vpdpbusd: u8 x i8, four products summed per 32-bit lane; generator/decode_algorithm.h,
// DecodeSpec::int8_dot): q.k's head dim (a generic kernel's largest) in whole 64-byte vectors.
bool int8_dot_decode(const KernelVariant& v);

// The ISA `host` means: the best row of the target table this machine runs (cross builds pass
// the processor they build for; its best ISA is assumed).
const TargetRow& host_target(const std::string& cross_processor);

}  // namespace attngen
