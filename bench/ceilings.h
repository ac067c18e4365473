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

// GB/s of stream_read's loop over a buffer of `bytes` on `threads` threads: the best of
// several passes taking about `seconds` in all (a ceiling measured inside another benchmark).
double stream_read_rate(double bytes, int threads, double seconds);

// The arithmetic a decode kernel needs per key and kv head, in 512-bit instructions: FMAs, f16
// widenings (vcvtph2ps), bf16 widenings (vpmovzxwd and vpslld each), u8 x i8 dot products
// (vpdpbusd) and the xors that offset an i8 K into u8 (bench/RESULTS.md, "Decode against its
// roofline", derives each kernel's).
struct DecodeMix {
  int fma = 0, cvt_f16 = 0, widen_bf16 = 0, dot_u8i8 = 0, xor_u8 = 0;
};

// Keys a second, on `threads` threads, at which this CPU issues `mix` (each thread the mix of one
// key an iteration, every instruction independent of the others but its chain's): the best of
// several passes taking about `seconds` in all; 0 where the CPU lacks AVX-512, or AVX512-VNNI for
// a mix with dot products.
double decode_mix_rate(const DecodeMix& mix, int threads, double seconds);

// Bytes of the last-level cache (sysfs, then sysconf) and of all cores' L2s together; 0 where
// unknown.
size_t l3_bytes();
size_t l2_bytes_all_cores();
// A buffer size that stays in L3 (a quarter of it, at most 64 MiB, at least 4x the L2s), and one
// that does not (4x L3, at least 256 MiB, at most 1.5 GiB: a decode kernel addresses a cache
// layer with 32-bit offsets): the sizes of the streaming-read and decode ceilings.
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
