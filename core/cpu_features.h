// Whether the machine this code runs on has what a row of the target table requires
// (TargetRow::requires_features). Used by the runtime's dispatch and by the variant tool for
// the ISA that `host` means on the build machine. Plain C++, no Halide.
#pragma once

#include <string_view>
#if defined(__x86_64__) || defined(_M_X64)
#include <cpuid.h>
#endif
#if defined(__x86_64__) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
#if (defined(__aarch64__) || defined(__arm__)) && defined(__linux__)
#include <sys/auxv.h>
#endif

#include "core/targets.h"

namespace attngen {

// One CPU feature, as TargetRow::requires_features spells it; false for names this build
// cannot check (GCC's __builtin_cpu_supports takes literals only, hence the list). Views, not
// strings: dispatch asks on every call, which must not allocate (a call in a workspace).
inline bool cpu_feature(std::string_view f) {
#if defined(__x86_64__) || defined(_M_X64)
  __builtin_cpu_init();
  if (f == "sse4.1") return __builtin_cpu_supports("sse4.1");
  if (f == "avx2") return __builtin_cpu_supports("avx2");
  if (f == "fma") return __builtin_cpu_supports("fma");
  if (f == "f16c") {
    // Not a name clang 14's __builtin_cpu_supports knows (the fuzz build), so CPUID itself, once
    // per process: in a virtual machine each CPUID traps to the hypervisor (40-50 us a call with
    // one per kernel row dispatch checked, on the Sapphire-Rapids-class VM: bench/RESULTS.md).
    static const bool f16c = [] {
      unsigned a, b, c, d;
      return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
    }();
    return f16c;
  }
  if (f == "avx512f") return __builtin_cpu_supports("avx512f");
  if (f == "avx512cd") return __builtin_cpu_supports("avx512cd");
  if (f == "avx512bw") return __builtin_cpu_supports("avx512bw");
  if (f == "avx512dq") return __builtin_cpu_supports("avx512dq");
  if (f == "avx512vl") return __builtin_cpu_supports("avx512vl");
  if (f == "avx512ifma") return __builtin_cpu_supports("avx512ifma");
  if (f == "avx512vbmi") return __builtin_cpu_supports("avx512vbmi");
  if (f == "avx512vnni") return __builtin_cpu_supports("avx512vnni");
  if (f == "avx512bf16") return __builtin_cpu_supports("avx512bf16");
  if (f == "amx") {
    // AMX-TILE, AMX-BF16 and AVX512-FP16 (CPUID.(7,0):EDX bits 24, 22 and 23), and Linux's grant
    // of the tile data state to this process (arch_prctl ARCH_REQ_XCOMP_PERM for
    // XFEATURE_XTILEDATA, asm/prctl.h), which a tile instruction needs before it runs: it fails
    // where the kernel or the hypervisor does not enable the state. Asked once per process.
    static const bool amx = [] {
      unsigned a, b, c, d;
      if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
      const unsigned want = (1u << 22) | (1u << 23) | (1u << 24);
      if ((d & want) != want) return false;
#if defined(__linux__)
      return syscall(SYS_arch_prctl, 0x1023, 18) == 0;
#else
      return false;
#endif
    }();
    return amx;
  }
  return false;
#elif defined(__aarch64__)
  // ARMv8.2-A half-precision arithmetic: HWCAP_ASIMDHP (Linux's asm/hwcap.h).
  if (f == "asimdhp") return (getauxval(AT_HWCAP) & (1UL << 10)) != 0;
  // ARMv8.2-A dot products (sdot, udot): HWCAP_ASIMDDP.
  if (f == "asimddp") return (getauxval(AT_HWCAP) & (1UL << 20)) != 0;
  return f == "aarch64";
#elif defined(__arm__)
  // 32-bit ARM: "arm" for any such process; NEON is HWCAP_NEON (bit 12 of AT_HWCAP, Linux's
  // arch/arm asm/hwcap.h). An armhf system may run on a core without NEON (Tegra 2): dispatch
  // then never runs a neon32 kernel, and a call returns a named error instead of SIGILL.
#if defined(__linux__)
  if (f == "neon") return (getauxval(AT_HWCAP) & (1UL << 12)) != 0;
#endif
  return f == "arm";
#else
  (void)f;
  return false;
#endif
}

// Every feature the row requires, "cuda" answered by `cuda_device` (a probe the caller owns).
template <typename CudaProbe>
bool machine_runs(const TargetRow& t, CudaProbe cuda_device) {
  const std::string_view all = t.requires_features;
  size_t at = 0;
  while (at < all.size()) {
    size_t end = all.find(' ', at);
    if (end == std::string_view::npos) end = all.size();
    const std::string_view f = all.substr(at, end - at);
    if (!f.empty() && !(f == "cuda" ? cuda_device() : cpu_feature(f))) return false;
    at = end + 1;
  }
  return true;
}

}  // namespace attngen
