// Instruction rates of this CPU that decide between kernels of the same call (internal.h,
// bf16_dot_rate). Measured once per process, on first use.
#include <algorithm>
#include <chrono>
#include <cstring>

#include "core/cpu_features.h"
#include "core/targets.h"
#include "runtime/src/internal.h"

#if (defined(__x86_64__) || defined(_M_X64)) && defined(__GNUC__)
#include <immintrin.h>
#define ATTNGEN_MEASURE_BF16_DOT 1
#endif

namespace attngen::rt {

namespace {

#if ATTNGEN_MEASURE_BF16_DOT
// Independent accumulator chains, more than latency x throughput of either instruction on the
// CPUs measured (vdpbf16ps: latency up to ~10 cycles at up to 2 a cycle), and steps per timing
// (a few microseconds: long against the clock's resolution, short against a time slice).
constexpr int kChains = 16;
constexpr int kSteps = 256;

// kChains dependent chains of vdpbf16ps (bf16_dots) or of 512-bit FMAs, timed. The chains are
// unrolled so that the accumulators stay in registers, and the function is not instrumented: a
// sanitizer's checks of a stack array made both loops check-bound, and the ratio 2.0 on a CPU
// where it is 0.5. The operands are hidden from the compiler each step (an empty asm), so each
// chain stays one instruction a step; the sum keeps the results live. One target for both
// (every AVX512-BF16 CPU has AVX512F and FMA; this runs only on those).
__attribute__((target("avx512f,avx512bf16,fma"), no_sanitize("address", "undefined"))) double
time_chains(bool bf16_dots) {
  __m512 acc[kChains];
#pragma GCC unroll 16
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i));
  const auto start = std::chrono::steady_clock::now();
  if (bf16_dots) {
    __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80), b = (__m512bh)_mm512_set1_epi16(0x3f81);
    for (int step = 0; step < kSteps; ++step) {
#pragma GCC unroll 16
      for (int i = 0; i < kChains; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
      __asm__ volatile("" : "+v"(a), "+v"(b));
    }
  } else {
    __m512 a = _mm512_set1_ps(1.0001f), b = _mm512_set1_ps(0.9999f);
    for (int step = 0; step < kSteps; ++step) {
#pragma GCC unroll 16
      for (int i = 0; i < kChains; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
      __asm__ volatile("" : "+v"(a), "+v"(b));
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  __m512 sum = acc[0];
#pragma GCC unroll 16
  for (int i = 1; i < kChains; ++i) sum = _mm512_add_ps(sum, acc[i]);
  volatile float keep = _mm512_reduce_add_ps(sum);
  (void)keep;
  return seconds;
}

// One vdpbf16ps does 32 multiply-adds (16 lanes of bf16 pairs), one 512-bit FMA 16. The
// fastest of several alternating timings of each, after a warm-up (the first 512-bit
// instructions of a core run slowly while it powers its upper lanes up): a time slice lost to
// another thread lengthens one timing, never the minimum of many.
double measure_bf16_dot_rate() {
  if (!cpu_feature("avx512f") || !cpu_feature("avx512bf16")) return 0;
  double dots = 1e9, fmas = 1e9;
  for (int round = 0; round < 12; ++round) {
    const double d = time_chains(true), f = time_chains(false);
    if (round >= 2) {
      dots = std::min(dots, d);
      fmas = std::min(fmas, f);
    }
  }
  return dots > 0 ? 2.0 * fmas / dots : 0;
}
#endif

}  // namespace

double bf16_dot_rate() {
#if ATTNGEN_MEASURE_BF16_DOT
  static const double rate = measure_bf16_dot_rate();
  return rate;
#else
  return 0;
#endif
}

bool extension_pays(const char* isa) {
  if (!std::strcmp(isa, "avx512bf16")) return bf16_dot_rate() >= kBf16DotRateThatPays;
  return true;
}

bool int8_dot_kernel(const attngen_kernel_info& kernel) {
  const attngen::TargetRow* row = attngen::find_target(kernel.isa);
  return row != nullptr && attngen::row_int8_dots(*row) != nullptr &&
         kernel.op == ATTNGEN_OP_DECODE && kernel.dtypes.cache == ATTNGEN_I8;
}

bool extension_pays(const attngen_kernel_info& kernel) {
  return int8_dot_kernel(kernel) || extension_pays(kernel.isa);
}

}  // namespace attngen::rt
