// The target table: one row per ISA with everything attngen knows about it. Plain C++ (no
// Halide), included by the schedules (schedules/target_info.cpp: vector width, registers), the
// variant model (generator/variant.cpp: names, Halide target strings, the ISAs CMake builds) and
// the runtime (runtime/src/registry.cpp: the CPU check and the dispatch preference). Adding an
// ISA is a row here, plus a schedule where the existing ones do not fit (docs/variants.md).
#pragma once

#include <cstring>

namespace attngen {

enum class Isa {
  kGeneric,
  kSse41,
  kAvx2,
  kAvx512,
  kAvx512Bf16,
  kAmx,
  kNeon,
  kNeonFp16,
  kNeonDot,
  kNeon32,
  kCuda
};

// The integer dot products by which a row's decode kernels over i8 caches take q.k (each query
// row quantised as the cache quantises a K row: generator/decode_algorithm.cpp), if any.
enum class Int8Dot {
  kNone,
  // u8 x i8, 4 products summed into each 32-bit lane (AVX512-VNNI's vpdpbusd): K's bytes offset
  // into u8; P.V by these products too (the weights in fixed point, as u8 limbs).
  kU8ByI8,
  // i8 x i8, 4 products summed into each 32-bit lane (ARMv8.2-A DotProd's sdot); P.V in f32.
  kI8ByI8,
};

struct TargetRow {
  Isa isa;
  const char* name;  // in kernel names, descriptors and attngen_set_isa(): "avx512"
  const char* arch;  // in kernel names and tuning file names: "x86_64"
  // Halide target the kernels are generated for; the Halide runtime shared by the kernels of
  // the architecture (one per build, cmake/AttngenKernels.cmake).
  const char* halide_target;
  const char* runtime_target;
  int vector_bytes;      // one native vector register (lanes of a type = vector_bytes / size)
  int vector_registers;  // architectural vector registers
  // Vector registers a register-blocked loop may use for accumulators, leaving room for the
  // operands it loads and broadcasts each step.
  int accumulators;
  // What this machine must have to run the kernels, space separated: x86 CPU features as
  // __builtin_cpu_supports spells them, "aarch64" for any 64-bit ARM, "arm" for any 32-bit ARM
  // process (never an aarch64 one), ARM features as Linux's /proc/cpuinfo spells them ("asimdhp",
  // "neon"), "cuda" for a CUDA device, "" for anything.
  const char* requires_features;
  // Dispatch preference among the ISAs a machine runs (higher wins); -1: never chosen on its own,
  // only when forced (a GPU kernel copies host buffers on every call).
  int preference;
  // An instruction pattern (CMake regex) the generated assembly must contain, proof that the
  // schedule vectorised for this ISA (tests/check_asm.cmake); "" for none.
  const char* asm_signature;
  // An extension row: the ISA whose kernels it adds to (its own are for `dtypes` only, and
  // attngen_set_isa() of it also admits the base's kernels), "" for a base ISA.
  const char* extends = "";
  // The element types (DTYPE) this row builds kernels for, space separated; "" for all.
  const char* dtypes = "";
  // Instructions (CMake regex) the generated assembly must not contain: the row's Halide target
  // lets LLVM use more than the CPU check asks for ("" for none; tests/check_asm.cmake).
  const char* asm_forbidden = "";
  // The decode kernels' integer dot products over i8 caches, and the instruction (a CMake regex)
  // by which their assembly shows them (tests/check_asm.cmake).
  Int8Dot int8_dot = Int8Dot::kNone;
  const char* int8_dot_asm = "";
};

#define ATTNGEN_X86_64 "x86-64-linux"
// Halide's Sapphire Rapids target (LLVM's sapphirerapids CPU) and the CPU features it implies.
#define ATTNGEN_X86_64_SPR                                            \
  ATTNGEN_X86_64                                                      \
  "-sse41-avx-f16c-fma-avx2-avx512-avx512_skylake-avx512_cannonlake-" \
  "avx512_sapphirerapids"
#define ATTNGEN_SPR_FEATURES                                                         \
  "avx512f avx512cd avx512bw avx512dq avx512vl avx2 fma f16c avx512ifma avx512vbmi " \
  "avx512vnni avx512bf16"
inline constexpr TargetRow kTargets[] = {
    {Isa::kGeneric, "generic", "host", "host", "host", 16, 16, 12, "", 0, ""},
    {Isa::kSse41, "sse41", "x86_64", ATTNGEN_X86_64 "-sse41", ATTNGEN_X86_64, 16, 16, 12, "sse4.1",
     1, ""},
    {Isa::kAvx2, "avx2", "x86_64", ATTNGEN_X86_64 "-sse41-avx-f16c-fma-avx2", ATTNGEN_X86_64, 32,
     16, 12, "avx2 fma f16c", 2, "vfmadd[0-9]+ps[^\n]*ymm"},
    {Isa::kNeon, "neon", "aarch64", "arm-64-linux", "arm-64-linux", 16, 32, 24, "aarch64", 3,
     "fmla[^\n]*v[0-9]+\\.4s"},
    // f16 kernels with ARMv8.2-A half-precision arithmetic (fmla on .8h vectors).
    {Isa::kNeonFp16, "neonfp16", "aarch64", "arm-64-linux-arm_fp16", "arm-64-linux", 16, 32, 24,
     "aarch64 asimdhp", 6, "fmla[^\n]*v[0-9]+\\.8h", "neon", "f16"},
    // Decode kernels over i8 caches whose q.k are ARMv8.2-A DotProd products (sdot: 4 i8 x i8
    // products summed into each 32-bit lane; HWCAP_ASIMDDP): Cortex-A55/A76 onward. Its only
    // kernels are those (dtypes "i8": the i8 caches'; DecodeSpec::int8_dot).
    {Isa::kNeonDot, "neondot", "aarch64", "arm-64-linux-arm_dot_prod", "arm-64-linux", 16, 32, 24,
     "aarch64 asimddp", 5, "sdot[^\n]*v[0-9]+\\.4s", "neon", "i8", "", Int8Dot::kI8ByI8,
     "sdot[^\n]*v[0-9]+\\.4s"},
    // 32-bit ARM (ARMv7-A, hard float: Debian's armhf) with NEON: 16 q registers of 128 bits.
    // Halide's arm-32 target is LLVM's cortex-a9 with +neon (VFPv3-D32 and NEON, what
    // -mfpu=neon means to GCC): no VFPv4, so no fused vfma, and LLVM's cortex-a9 tuning splits
    // a multiply-add into vmul.f32 and vadd.f32 on q registers (the signature: f32 products in
    // q registers). No extra Halide features: ARMv7s is Apple's Swift core, ARMFp16 (f16
    // arithmetic) needs ARMv8.2-A; Halide converts f16 in integer code here (no F16C or FP16
    // hardware on the target). The name is not "neon", which names the aarch64 row.
    {Isa::kNeon32, "neon32", "armv7", "arm-32-linux", "arm-32-linux", 16, 16, 12, "arm neon", 3,
     "\tv(mla|mul)\\.f32\tq[0-9]+", "", "",
     // cortex-a9 also has the VFPv3 half-precision conversions, which NEON cores such as the
     // Cortex-A8 lack and no HWCAP reports: the kernels must not use them.
     "\tvcvt[bt]?\\.f(16\\.f32|32\\.f16)[\t ]"},
    {Isa::kAvx512, "avx512", "x86_64",
     ATTNGEN_X86_64 "-sse41-avx-f16c-fma-avx2-avx512-avx512_skylake", ATTNGEN_X86_64, 64, 32, 24,
     "avx512f avx512cd avx512bw avx512dq avx512vl avx2 fma f16c", 4, "vfmadd[0-9]+ps[^\n]*zmm"},
    // bf16 kernels whose products are AVX512-BF16 dot products (vdpbf16ps: pairs of bf16
    // products summed into f32), and decode kernels over i8 caches whose q.k are AVX512-VNNI dot
    // products (vpdpbusd; every AVX512-BF16 CPU has VNNI: generator/variant.h, int8_dot_decode).
    // Halide names the feature after Sapphire Rapids, whose LLVM CPU it targets: the CPU check
    // also asks for the Cannon Lake features that target implies.
    {Isa::kAvx512Bf16, "avx512bf16", "x86_64", ATTNGEN_X86_64_SPR, ATTNGEN_X86_64, 64, 32, 24,
     ATTNGEN_SPR_FEATURES, 5, "vdpbf16ps[^\n]*zmm", "avx512", "bf16",
     // LLVM's sapphirerapids CPU has AVX512-FP16, which AVX512-BF16 CPUs such as AMD's Zen 4
     // and 5 lack: it moves 16-bit elements with vmovw where a kernel gathers them. It also has
     // AVX-VNNI, the VEX-encoded dot products ({vex} vpdpbusd on ymm and xmm vectors) that Zen 4
     // lacks too: the i8 decode kernels' dot products must stay EVEX (zmm).
     "\t(vmovw|vmovsh|v[a-z0-9]+(ph|sh)|vcvt[a-z0-9]*(psx|phx))[\t ]|{vex}", Int8Dot::kU8ByI8,
     "vpdpbusd[^\n]*zmm"},
    // bf16 attention whose q.k and p.v are AMX tile products (tdpbf16ps: a 16 x 16 tile of f32
    // sums of 32-long bf16 dot products, 15x the FMAs' multiply-adds on Sapphire Rapids), the
    // softmax between them in AVX-512. The same Halide target as avx512bf16 (the generator tells
    // the two apart by the row: AttentionSpec::amx); "amx" is AMX-TILE, AMX-BF16 and
    // AVX512-FP16 (every AMX CPU has it, and LLVM's sapphirerapids CPU may use it), with the
    // tile state enabled by the OS and granted to the process (cpu_features.h).
    {Isa::kAmx, "amx", "x86_64", ATTNGEN_X86_64_SPR, ATTNGEN_X86_64, 64, 32, 24,
     ATTNGEN_SPR_FEATURES " amx", 7, "tdpbf16ps[^\n]*tmm", "avx512", "bf16"},
    // Host code for any x86-64; PTX for sm_80, which the driver JIT-compiles for newer GPUs.
    {Isa::kCuda, "cuda", "x86_64", ATTNGEN_X86_64 "-cuda-cuda_capability_80",
     ATTNGEN_X86_64 "-cuda", 4, 255, 64, "cuda", -1, ""},
};
#undef ATTNGEN_SPR_FEATURES
#undef ATTNGEN_X86_64_SPR
#undef ATTNGEN_X86_64

// AMX tiles (Intel's palette 1), the amx row's unit: rows of a tile, f32 columns of an f32 tile,
// and bf16 elements a row of a bf16 tile holds (its 64 bytes), the depth of one tdpbf16ps.
inline constexpr int kAmxRows = 16;
inline constexpr int kAmxColumns = 16;
inline constexpr int kAmxPairs = 32;

inline const TargetRow* find_target(const char* name) {
  if (name == nullptr) return nullptr;
  for (const TargetRow& t : kTargets) {
    if (!std::strcmp(t.name, name)) return &t;
  }
  return nullptr;
}

inline const TargetRow& target_row(Isa isa) {
  for (const TargetRow& t : kTargets) {
    if (t.isa == isa) return t;
  }
  return kTargets[0];
}

// Dispatch between the forms of attention kernels of one ISA (runtime/src/registry.cpp): above
// this many keys a kernel built with KEY_BLOCK beats the default form, whose whole score rows of
// a query tile (query_tile x Skv floats) no longer stay in L2. A causal tile visits only the
// keys up to its last row, half a row on average, so its rows stay in L2 twice as long.
// Measured on AVX-512 with K/V packed per head, against the variant list's key blocks (512
// dense, 256 causal): dense S2048 equal, S2560-S4608 the key blocks 0.89-0.97 of the rows' time;
// causal S2560-S3072 the rows 0.95-1.0, S4096 equal (bench/RESULTS.md, "Key blocks of 512 / 256
// keys and the row form to 2048 keys"). bench/autotune tunes each form on the lengths it serves
// (the generator's --describe says).
inline constexpr long long long_keys(bool causal) { return causal ? 4096 : 2048; }

// Dispatch between the forms of decode kernels (runtime/src/registry.cpp): from this many cached
// keys (the slots the call's longest sequence fills) a kernel built with KEY_BLOCK is preferred. A
// decode task computes whole key blocks, so at short lengths the default 128-key blocks waste less;
// at long ones larger blocks spend less per block (statistics, the merge into the running state,
// P.V's partial sums). Measured for the AVX512-VNNI i8 kernel at D128 (B1 Hq 32 / Hkv 8, 2
// threads): blocks of 256 keys 0.93 of the time at Skv 8192, 0.86-0.93 at 512-2048, 1.15 at 384
// and 1.5 at 16 (bench/RESULTS.md, "Every call's thread count read once").
inline constexpr long long kDecodeLongKeys = 512;

// Whether a row builds kernels of element type `dtype` ("f32"; its `dtypes`).
inline bool row_builds(const TargetRow& t, const char* dtype) {
  const char* d = t.dtypes;
  const size_t n = std::strlen(dtype);
  if (*d == '\0') return true;
  for (const char* at = std::strstr(d, dtype); at != nullptr; at = std::strstr(at + 1, dtype)) {
    if ((at == d || at[-1] == ' ') && (at[n] == '\0' || at[n] == ' ')) return true;
  }
  return false;
}

// The instruction (a CMake regex for the assembly test) by which the row's kernels widen f16 to
// f32 (generator/native_f16.h), or nullptr where Halide 14's own conversion stays:
//  - F16C's vcvtph2ps on the x86-64 CPU rows whose Halide target has F16C (not cuda's, whose host
//    code reads no f16);
//  - fcvtl (and fcvtl2 for a vector's upper half) on aarch64 without arm_fp16: every ARMv8-A
//    core has them, and Halide 14 emulates the conversion there in integer code. The arm_fp16
//    row computes in f16 and Halide converts natively there already.
inline const char* row_widens_f16(const TargetRow& t) {
  if (std::strcmp(t.arch, "x86_64") == 0 && std::strstr(t.halide_target, "-f16c") != nullptr) {
    return "\tvcvtph2ps[\t ]";
  }
  if (std::strcmp(t.arch, "aarch64") == 0 && std::strstr(t.halide_target, "arm_fp16") == nullptr) {
    return "\tfcvtl2?[\t ]";
  }
  return nullptr;
}

// The instruction (a CMake regex for the assembly test) by which the row's softmax kernels
// (attention, MHA, decode) apply exp's power of two (generator/online_softmax.h, use_native_exp),
// or nullptr where the portable form stays: AVX-512's vscalefps on the x86-64 rows whose Halide
// target has AVX-512 (not cuda's, whose softmax runs on the GPU).
inline const char* row_scales_exp(const TargetRow& t) {
  if (std::strcmp(t.arch, "x86_64") == 0 && std::strstr(t.halide_target, "-avx512") != nullptr &&
      std::strstr(t.halide_target, "-cuda") == nullptr) {
    return "\tvscalefps[\t ]";
  }
  return nullptr;
}

// The instruction (a CMake regex for the assembly test) by which the row's decode kernels
// prefetch the cache's slots ahead of q.k (DecodeTunables::prefetch_slots, on by default on the
// x86-64 CPU rows: schedules/schedule.cpp), or nullptr where they do not.
inline const char* row_prefetches_slots(const TargetRow& t) {
  if (std::strcmp(t.arch, "x86_64") == 0 && std::strstr(t.halide_target, "-cuda") == nullptr) {
    return "\tprefetcht1[\t ]";
  }
  return nullptr;
}

// Whether the row builds only the variant list's generic kernels (and linear, which has no
// other form): SSE4.1 is the row of x86-64 CPUs without AVX2, on which every call runs on the
// generic kernels; its specialised kernels were 14% of the x86 kernels' generation time
// (docs/decisions/sse41-generic.md).
inline bool row_generic_only(const TargetRow& t) { return t.isa == Isa::kSse41; }

// The instruction (a CMake regex for the assembly test) of the row's decode kernels over i8
// caches whose q.k are integer dot products (TargetRow::int8_dot; generator/variant.h,
// int8_dot_decode), or nullptr where the row converts K to f32.
inline const char* row_int8_dots(const TargetRow& t) {
  return t.int8_dot != Int8Dot::kNone ? t.int8_dot_asm : nullptr;
}

// Lanes of one native vector of elements of `element_bytes` bytes.
inline int lanes_of(const TargetRow& t, int element_bytes) {
  return t.vector_bytes / element_bytes;
}

}  // namespace attngen
