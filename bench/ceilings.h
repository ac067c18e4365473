// The machine's own limits, measured in the same process as the kernels (bench/ceilings.cpp):
// the arithmetic's (a loop of independent FMAs per vector ISA the CPU has), the memory's (a
// vectorised streaming read at an L3-resident and at a DRAM-sized buffer), and which OpenBLAS
// core its sgemm runs, against the one this CPU would be served by.
#pragma once

#include <benchmark/benchmark.h>

#include <cstddef>
#include <string>
#include <vector>

namespace attngen::bench {

// A vector ISA with fused multiply-add this CPU can run, widest first: "avx512" (16 f32 lanes),
// "avx2" (8, with FMA3), "neon" (4, aarch64).
struct FmaIsa {
  const char* name;
  int lanes;
};
std::vector<FmaIsa> fma_isas();

// GFLOP/s of `threads` threads each running independent FMA chains of `isa` (enough chains to
// cover both FMA ports' latency): the arithmetic's peak.
void fma_peak(benchmark::State& state, const char* isa, int threads);

// The bf16 multiply-add units this CPU has besides the FMAs: "avx512bf16" (vdpbf16ps, 16 lanes
// of bf16 pairs into f32) and "amx" (AMX-BF16 tiles, tdpbf16ps: 16x16 f32 results of 32-long
// bf16 dot products; Linux grants a process its tile state on request, which this asks for).
std::vector<std::string> bf16_units();

// GFLOP/s (2 per bf16 multiply-add) of `threads` threads each running independent chains on
// `unit`: the ceiling of bf16 products, which no FMA-peak fraction shows (on a Sapphire Rapids
// vdpbf16ps does half the FMAs' multiply-adds a second, AMX 15x them).
void bf16_peak(benchmark::State& state, const std::string& unit, int threads);

// GB/s of `threads` threads summing disjoint slices of a buffer of `bytes` with the widest
// vector loads the CPU has, several accumulators each.
void stream_read(benchmark::State& state, double bytes, int threads);

// Bytes of the last-level cache (sysfs, then sysconf) and of all cores' L2s together; 0 where
// unknown.
size_t l3_bytes();
size_t l2_bytes_all_cores();
// A buffer size that stays in L3 (a quarter of it, at most 64 MiB, at least 4x the L2s), and one
// that does not (4x L3, at least 256 MiB): the sizes of the streaming-read and decode ceilings.
size_t l3_resident_bytes();
size_t dram_bytes();

// The OpenBLAS core sgemm runs (openblas_get_corename()), the one this CPU would be served by
// (from its vector features: Cooperlake for AVX512-BF16, SkylakeX for AVX-512, Haswell for
// AVX2 + FMA, Sandybridge for AVX), and whether the running core is below it (a generic core
// such as Prescott: Debian's OpenBLAS 0.3.21 does not know Sapphire Rapids and falls back to
// it, 4.7x slower).
struct BlasCore {
  std::string running, for_cpu;
  bool wrong = false;
  std::string how;  // "OpenBLAS" (its own choice), "OPENBLAS_CORETYPE" (set by the caller), or
                    // "attngen_bench" (selected here, see select_openblas_core)
};
BlasCore openblas_core();

// Called first in main(), with main's arguments untouched: where OpenBLAS chose a core below
// this CPU's and the caller set no OPENBLAS_CORETYPE, runs this program again with
// OPENBLAS_CORETYPE set to the CPU's core (OpenBLAS reads it once, when it is loaded) and does
// not return; otherwise, or with --openblas_core=keep among the arguments, returns. A caller's
// OPENBLAS_CORETYPE is kept, right or wrong, and reported.
void select_openblas_core(int argc, char** argv);

}  // namespace attngen::bench
