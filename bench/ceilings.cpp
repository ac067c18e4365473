#include "ceilings.h"

#include <cblas.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <thread>

#include "core/cpu_features.h"

#if defined(__x86_64__)
#include <immintrin.h>
#elif defined(__aarch64__)
#include <arm_neon.h>
#endif

namespace attngen::bench {

namespace {

// ---- A team of threads that stay awake between iterations, so that a short iteration (a read
// from L3 takes well under a millisecond) measures the work and not thread start-up.
class Team {
 public:
  explicit Team(int threads) : size_(std::max(1, threads)) {
    for (int t = 1; t < size_; ++t) workers_.emplace_back([this, t] { loop(t); });
  }
  ~Team() {
    stop_.store(true, std::memory_order_release);
    generation_.fetch_add(1, std::memory_order_acq_rel);
    for (std::thread& w : workers_) w.join();
  }
  // Runs fn(t) on every member t (0: the calling thread) and returns when all are done.
  void run(const std::function<void(int)>& fn) {
    fn_ = &fn;
    done_.store(0, std::memory_order_release);
    generation_.fetch_add(1, std::memory_order_acq_rel);
    fn(0);
    while (done_.load(std::memory_order_acquire) != size_ - 1) std::this_thread::yield();
  }

 private:
  void loop(int t) {
    uint64_t seen = 0;
    while (true) {
      uint64_t g;
      while ((g = generation_.load(std::memory_order_acquire)) == seen) std::this_thread::yield();
      seen = g;
      if (stop_.load(std::memory_order_acquire)) return;
      (*fn_)(t);
      done_.fetch_add(1, std::memory_order_acq_rel);
    }
  }

  const int size_;
  std::vector<std::thread> workers_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> done_{0};
  std::atomic<bool> stop_{false};
  const std::function<void(int)>* fn_ = nullptr;
};

// The best rate, per second, of `per_pass` units done by each pass of `work` on `team`: at least 3
// passes, about `seconds` in all (a ceiling measured inside another benchmark).
double best_rate(Team& team, const std::function<void(int)>& work, double per_pass,
                 double seconds) {
  double best = 0, spent = 0;
  for (int pass = 0; pass < 3 || spent < seconds; ++pass) {
    const auto start = std::chrono::steady_clock::now();
    team.run(work);
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    spent += s;
    best = std::max(best, per_pass / s);
  }
  return best;
}

void set_rate(benchmark::State& state, const char* counter, double per_iteration) {
  state.counters[counter] = benchmark::Counter(
      per_iteration, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

// ---- FMA chains: kChains independent accumulators a = a * x + y (x < 1: they converge, never
// overflow or go subnormal), fully unrolled so that they stay in registers.
using FmaLoop = float (*)(int64_t iters, float seed);

#if defined(__x86_64__)
constexpr int kChains512 = 16;  // 2 ports x 4 cycles latency = 8 in flight; 16 of 32 registers
__attribute__((target("avx512f"))) float fma_loop_avx512(int64_t iters, float seed) {
  __m512 acc[kChains512];
  const __m512 x = _mm512_set1_ps(0.999f), y = _mm512_set1_ps(seed);
#pragma GCC unroll 16
  for (int c = 0; c < kChains512; ++c) acc[c] = _mm512_set1_ps(seed * static_cast<float>(c + 1));
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 16
    for (int c = 0; c < kChains512; ++c) acc[c] = _mm512_fmadd_ps(acc[c], x, y);
  }
#pragma GCC unroll 16
  for (int c = 1; c < kChains512; ++c) acc[0] = _mm512_add_ps(acc[0], acc[c]);
  return _mm512_reduce_add_ps(acc[0]);
}

constexpr int kChains256 = 12;  // 16 registers: 12 chains, x and y
__attribute__((target("avx2,fma"))) float fma_loop_avx2(int64_t iters, float seed) {
  __m256 acc[kChains256];
  const __m256 x = _mm256_set1_ps(0.999f), y = _mm256_set1_ps(seed);
#pragma GCC unroll 12
  for (int c = 0; c < kChains256; ++c) acc[c] = _mm256_set1_ps(seed * static_cast<float>(c + 1));
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 12
    for (int c = 0; c < kChains256; ++c) acc[c] = _mm256_fmadd_ps(acc[c], x, y);
  }
#pragma GCC unroll 12
  for (int c = 1; c < kChains256; ++c) acc[0] = _mm256_add_ps(acc[0], acc[c]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, acc[0]);
  float s = 0;
  for (float v : lanes) s += v;
  return s;
}

__attribute__((target("avx512f"))) float sum_avx512(const float* p, size_t n) {
  __m512 acc[8];
  for (__m512& a : acc) a = _mm512_setzero_ps();
  for (size_t i = 0; i < n; i += 128) {
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) acc[c] = _mm512_add_ps(acc[c], _mm512_load_ps(p + i + 16 * c));
  }
  for (int c = 1; c < 8; ++c) acc[0] = _mm512_add_ps(acc[0], acc[c]);
  return _mm512_reduce_add_ps(acc[0]);
}

__attribute__((target("avx2"))) float sum_avx2(const float* p, size_t n) {
  __m256 acc[8];
  for (__m256& a : acc) a = _mm256_setzero_ps();
  for (size_t i = 0; i < n; i += 64) {
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) acc[c] = _mm256_add_ps(acc[c], _mm256_load_ps(p + i + 8 * c));
  }
  for (int c = 1; c < 8; ++c) acc[0] = _mm256_add_ps(acc[0], acc[c]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, acc[0]);
  float s = 0;
  for (float v : lanes) s += v;
  return s;
}
#elif defined(__aarch64__)
constexpr int kChainsNeon = 24;  // 32 registers: 24 chains, x and y
float fma_loop_neon(int64_t iters, float seed) {
  float32x4_t acc[kChainsNeon];
  const float32x4_t x = vdupq_n_f32(0.999f), y = vdupq_n_f32(seed);
#pragma GCC unroll 24
  for (int c = 0; c < kChainsNeon; ++c) acc[c] = vdupq_n_f32(seed * static_cast<float>(c + 1));
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 24
    for (int c = 0; c < kChainsNeon; ++c) acc[c] = vfmaq_f32(y, acc[c], x);
  }
  for (int c = 1; c < kChainsNeon; ++c) acc[0] = vaddq_f32(acc[0], acc[c]);
  return vaddvq_f32(acc[0]);
}
#endif

// Any CPU: eight independent scalar sums (the compiler vectorises what it can).
float sum_portable(const float* p, size_t n) {
  float acc[8] = {};
  for (size_t i = 0; i < n; i += 8) {
    for (int c = 0; c < 8; ++c) acc[c] += p[i + c];
  }
  float s = 0;
  for (float a : acc) s += a;
  return s;
}

#if defined(__x86_64__)
// ---- bf16 multiply-adds: vdpbf16ps chains as the FMA chains above (16 chains: its latency is
// longer), and AMX: four independent 16x16 f32 accumulator tiles, each step tdpbf16ps of two
// 16x32 bf16 tiles into each (A tiles 4, 6 by B tiles 5, 7). Operands of 1.0 and 1.0078 keep
// the sums finite.
constexpr int kChainsBf16 = 16;
__attribute__((target("avx512f,avx512bf16"))) float bf16_dot_loop(int64_t iters, float seed) {
  __m512 acc[kChainsBf16];
  __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80), b = (__m512bh)_mm512_set1_epi16(0x3f81);
#pragma GCC unroll 16
  for (int c = 0; c < kChainsBf16; ++c) acc[c] = _mm512_set1_ps(seed * static_cast<float>(c + 1));
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 16
    for (int c = 0; c < kChainsBf16; ++c) acc[c] = _mm512_dpbf16_ps(acc[c], a, b);
    __asm__ volatile("" : "+v"(a), "+v"(b));  // the operands stay loop-variant
  }
#pragma GCC unroll 16
  for (int c = 1; c < kChainsBf16; ++c) acc[0] = _mm512_add_ps(acc[0], acc[c]);
  return _mm512_reduce_add_ps(acc[0]);
}

struct AmxConfig {  // the 64-byte tile configuration of palette 1
  uint8_t palette, start_row, reserved[14];
  uint16_t bytes_per_row[16];
  uint8_t rows[16];
};
constexpr int kAmxTiles = 4;
constexpr double kAmxMacsPerStep = kAmxTiles * 16.0 * 16.0 * 32.0;
__attribute__((target("amx-tile,amx-bf16"))) float amx_loop(int64_t iters, float seed) {
  AmxConfig config{};
  config.palette = 1;
  for (int t = 0; t < 8; ++t) {
    config.rows[t] = 16;
    config.bytes_per_row[t] = 64;
  }
  alignas(64) uint16_t operand[16 * 32];
  alignas(64) float out[16 * 16];
  for (uint16_t& x : operand) x = 0x3f80;  // 1.0
  _tile_loadconfig(&config);
  _tile_loadd(4, operand, 64);
  _tile_loadd(5, operand, 64);
  _tile_loadd(6, operand, 64);
  _tile_loadd(7, operand, 64);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t i = 0; i < iters; ++i) {
    _tile_dpbf16ps(0, 4, 5);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 6, 5);
    _tile_dpbf16ps(3, 6, 7);
  }
  _tile_stored(0, out, 64);
  _tile_release();
  return out[0] + seed;
}
#endif

struct FmaKernel {
  FmaIsa isa;
  int chains;
  FmaLoop loop;
};

std::vector<FmaKernel> fma_kernels() {
  std::vector<FmaKernel> out;
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f"))
    out.push_back({{"avx512", 16}, kChains512, fma_loop_avx512});
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    out.push_back({{"avx2", 8}, kChains256, fma_loop_avx2});
  }
#elif defined(__aarch64__)
  out.push_back({{"neon", 4}, kChainsNeon, fma_loop_neon});
#endif
  return out;
}

size_t sysfs_cache_bytes(int level) {
  for (int index = 0; index < 8; ++index) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index);
    std::ifstream lf(dir + "/level"), tf(dir + "/type"), sf(dir + "/size");
    int l = 0;
    std::string type, size;
    if (!(lf >> l) || !(tf >> type) || !(sf >> size)) continue;
    if (l != level || type == "Instruction") continue;
    size_t n = std::strtoull(size.c_str(), nullptr, 10);
    const char unit = size.empty() ? ' ' : size.back();
    if (unit == 'K') n <<= 10;
    if (unit == 'M') n <<= 20;
    return n;
  }
  return 0;
}

size_t round_mib(size_t bytes) { return std::max<size_t>(1, bytes >> 20) << 20; }

// OpenBLAS x86 core names by the widest vector unit their kernels use (0: not an x86 core
// this knows).
int x86_core_tier(std::string name) {
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  static const char* const kTiers[][8] = {
      {"prescott", "core2", "penryn", "dunnington", "nehalem", "atom", "barcelona", "opteron"},
      {"sandybridge", "bulldozer", "piledriver", nullptr},
      {"haswell", "zen", "steamroller", "excavator", nullptr},
      {"skylakex", "cooperlake", "sapphirerapids", nullptr},
  };
  for (int tier = 0; tier < 4; ++tier) {
    for (const char* n : kTiers[tier]) {
      if (n != nullptr && name == n) return tier + 1;
    }
  }
  return 0;
}

}  // namespace

std::vector<FmaIsa> fma_isas() {
  std::vector<FmaIsa> out;
  for (const FmaKernel& k : fma_kernels()) out.push_back(k.isa);
  return out;
}

void fma_peak(benchmark::State& state, const char* isa, int threads) {
  FmaKernel kernel{};
  for (const FmaKernel& k : fma_kernels()) {
    if (!std::strcmp(k.isa.name, isa)) kernel = k;
  }
  if (kernel.loop == nullptr) {
    state.SkipWithError((std::string("this CPU has no ") + isa).c_str());
    return;
  }
  constexpr int64_t kIters = int64_t{1} << 21;                 // ~5-10 ms per thread and iteration
  std::vector<float> sums(static_cast<size_t>(threads) * 16);  // a cache line per thread
  Team team(threads);
  const std::function<void(int)> work = [&](int t) {
    sums[static_cast<size_t>(t) * 16] = kernel.loop(kIters, 1e-3f * static_cast<float>(t + 1));
  };
  for (auto _ : state) {
    team.run(work);
    benchmark::DoNotOptimize(sums.data());
  }
  set_rate(state, "GFLOP/s", 2.0 * threads * kIters * kernel.chains * kernel.isa.lanes);
  state.SetLabel(std::string(isa) + " x" + std::to_string(threads));
}

std::vector<std::string> bf16_units() {
  std::vector<std::string> out;
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16")) {
    out.push_back("avx512bf16");
  }
  // The amx row's check: AMX-TILE and AMX-BF16 (and FP16), and Linux's grant of the tile state.
  if (attngen::cpu_feature("amx")) out.push_back("amx");
#endif
  return out;
}

void bf16_peak(benchmark::State& state, const std::string& unit, int threads) {
  FmaLoop loop = nullptr;
  double macs_per_step = 0;
  int64_t iters = 0;
#if defined(__x86_64__)
  const std::vector<std::string> units = bf16_units();
  if (std::find(units.begin(), units.end(), unit) != units.end()) {
    if (unit == "avx512bf16") {
      loop = bf16_dot_loop;
      macs_per_step = kChainsBf16 * 32.0;
      iters = int64_t{1} << 20;
    } else {
      loop = amx_loop;
      macs_per_step = kAmxMacsPerStep;
      iters = int64_t{1} << 18;
    }
  }
#endif
  if (loop == nullptr) {
    state.SkipWithError(("this CPU has no " + unit + " (or may not use it)").c_str());
    return;
  }
  std::vector<float> sums(static_cast<size_t>(threads) * 16);  // a cache line per thread
  Team team(threads);
  const std::function<void(int)> work = [&](int t) {
    sums[static_cast<size_t>(t) * 16] = loop(iters, 1e-3f * static_cast<float>(t + 1));
  };
  for (auto _ : state) {
    team.run(work);
    benchmark::DoNotOptimize(sums.data());
  }
  set_rate(state, "GFLOP/s", 2.0 * threads * static_cast<double>(iters) * macs_per_step);
  state.SetLabel(unit + " x" + std::to_string(threads));
}

namespace {

// ---- A decode kernel's arithmetic per key (DecodeMix): each kind of instruction on 8
// independent chains, its inputs made opaque to the compiler once an iteration (an empty asm
// that may change them), its results kept (an empty asm that reads them), so that nothing is
// hoisted or dropped and nothing but the mix is issued.
#if defined(__x86_64__)
template <typename T>
inline void opaque(T& x) {
  __asm__ volatile("" : "+v"(x));
}

__attribute__((target("avx512f,avx512bw,avx512vnni"))) float mix_loop_avx512(const DecodeMix& m,
                                                                             int64_t keys,
                                                                             float seed) {
  __m512 acc[8], x = _mm512_set1_ps(0.999f), y = _mm512_set1_ps(seed);
  __m512i dot[8], a = _mm512_set1_epi32(0x01010101), b = _mm512_set1_epi32(0x02020202);
  __m256i h = _mm256_set1_epi16(0x3c00);
  for (int c = 0; c < 8; ++c) {
    acc[c] = _mm512_set1_ps(seed * static_cast<float>(c + 1));
    dot[c] = _mm512_set1_epi32(c);
  }
  // Each kind in groups of 8 (one per chain, indices constant once unrolled: the chains stay in
  // registers), then the remainder on the first chain.
  const int fma8 = m.fma / 8, dot8 = m.dot_u8i8 / 8;
  for (int64_t k = 0; k < keys; ++k) {
    opaque(x);
    opaque(h);
    opaque(a);
    for (int i = 0; i < fma8; ++i) {
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c) acc[c] = _mm512_fmadd_ps(acc[c], x, y);
    }
    for (int i = 0; i < m.fma % 8; ++i) acc[0] = _mm512_fmadd_ps(acc[0], x, y);
    for (int i = 0; i < m.cvt_f16; ++i) {
      __m512 w = _mm512_cvtph_ps(h);
      opaque(w);
    }
    for (int i = 0; i < m.widen_bf16; ++i) {
      __m512i w = _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16);
      opaque(w);
    }
    for (int i = 0; i < dot8; ++i) {
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c) dot[c] = _mm512_dpbusd_epi32(dot[c], a, b);
    }
    for (int i = 0; i < m.dot_u8i8 % 8; ++i) dot[0] = _mm512_dpbusd_epi32(dot[0], a, b);
    for (int i = 0; i < m.xor_u8; ++i) {
      __m512i w = _mm512_xor_si512(a, b);
      opaque(w);
    }
  }
  for (int c = 1; c < 8; ++c) {
    acc[0] = _mm512_add_ps(acc[0], acc[c]);
    dot[0] = _mm512_add_epi32(dot[0], dot[c]);
  }
  return _mm512_reduce_add_ps(acc[0]) + static_cast<float>(_mm512_reduce_add_epi32(dot[0]));
}
#endif

}  // namespace

double decode_mix_rate(const DecodeMix& mix, int threads, double seconds) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
      (mix.dot_u8i8 > 0 && !__builtin_cpu_supports("avx512vnni"))) {
    return 0;
  }
  const int per_key = mix.fma + mix.cvt_f16 + 2 * mix.widen_bf16 + mix.dot_u8i8 + mix.xor_u8;
  const int64_t keys = std::max<int64_t>(1, (int64_t{1} << 24) / std::max(1, per_key));
  std::vector<float> sums(static_cast<size_t>(threads) * 16);
  Team team(threads);
  const std::function<void(int)> work = [&](int t) {
    sums[static_cast<size_t>(t) * 16] = mix_loop_avx512(mix, keys, 1e-3f * (t + 1));
  };
  const double rate = best_rate(team, work, static_cast<double>(keys) * threads, seconds);
  benchmark::DoNotOptimize(sums.data());
  return rate;
#else
  (void)mix;
  (void)threads;
  (void)seconds;
  return 0;
#endif
}

namespace {

// A buffer of `bytes` as stream_read reads it, `threads` slices of whole iterations of its loop.
struct StreamBuffer {
  using Sum = float (*)(const float*, size_t);
  Sum sum = sum_portable;
  size_t slice = 0, n = 0;
  std::unique_ptr<float, decltype(&std::free)> buf{nullptr, &std::free};
};

StreamBuffer stream_buffer(double bytes, int threads) {
  StreamBuffer b;
  size_t step = 8;  // floats per iteration of the sum's loop
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) {
    b.sum = sum_avx512;
    step = 128;
  } else if (__builtin_cpu_supports("avx2")) {
    b.sum = sum_avx2;
    step = 64;
  }
#endif
  b.slice = static_cast<size_t>(bytes / sizeof(float)) / threads / step * step;
  b.n = b.slice * threads;
  // In 2 MiB pages, aligned to them, as the runtime asks for a KV cache's storage
  // (runtime/src/kv_cache.cpp): the ceiling of a decode reads memory paged as the decode's is.
  constexpr size_t kHuge = size_t{2} << 20;
  const size_t alloc_bytes = (b.n * sizeof(float) + kHuge - 1) / kHuge * kHuge;
  b.buf.reset(static_cast<float*>(std::aligned_alloc(kHuge, alloc_bytes)));
  if (!b.buf) return b;
#if defined(MADV_HUGEPAGE)
  madvise(b.buf.get(), alloc_bytes, MADV_HUGEPAGE);
#endif
  for (size_t i = 0; i < b.n; ++i) b.buf.get()[i] = static_cast<float>(i & 1023) * 1e-3f;
  return b;
}

}  // namespace

double stream_read_rate(double bytes, int threads, double seconds) {
  const StreamBuffer b = stream_buffer(bytes, threads);
  if (!b.buf) return 0;
  std::vector<float> sums(static_cast<size_t>(threads) * 16);
  Team team(threads);
  const std::function<void(int)> work = [&](int t) {
    sums[static_cast<size_t>(t) * 16] =
        b.sum(b.buf.get() + static_cast<size_t>(t) * b.slice, b.slice);
  };
  team.run(work);  // first touch
  const double rate = best_rate(team, work, static_cast<double>(b.n * sizeof(float)), seconds);
  benchmark::DoNotOptimize(sums.data());
  return rate * 1e-9;
}

void stream_read(benchmark::State& state, double bytes, int threads) {
  const StreamBuffer b = stream_buffer(bytes, threads);
  if (!b.buf) {
    state.SkipWithError("out of memory");
    return;
  }
  std::vector<float> sums(static_cast<size_t>(threads) * 16);
  Team team(threads);
  const std::function<void(int)> work = [&](int t) {
    sums[static_cast<size_t>(t) * 16] =
        b.sum(b.buf.get() + static_cast<size_t>(t) * b.slice, b.slice);
  };
  team.run(work);  // first touch
  for (auto _ : state) {
    team.run(work);
    benchmark::DoNotOptimize(sums.data());
  }
  set_rate(state, "GB/s", static_cast<double>(b.n * sizeof(float)));
}

size_t l3_bytes() {
  size_t n = sysfs_cache_bytes(3);
#ifdef _SC_LEVEL3_CACHE_SIZE
  if (n == 0) {
    const long s = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (s > 0) n = static_cast<size_t>(s);
  }
#endif
  return n;
}

size_t l2_bytes_all_cores() {
  return sysfs_cache_bytes(2) * std::max(1u, std::thread::hardware_concurrency());
}

size_t l3_resident_bytes() {
  const size_t l3 = l3_bytes();
  if (l3 == 0) return size_t{32} << 20;
  size_t n = std::min(l3 / 4, size_t{64} << 20);
  n = std::max(n, 4 * l2_bytes_all_cores());
  return round_mib(std::min(n, l3 / 2));
}

size_t dram_bytes() {
  const size_t l3 = l3_bytes();
  if (l3 == 0) return size_t{1} << 30;
  return round_mib(std::min(std::max(4 * l3, size_t{256} << 20), size_t{3} << 29));
}

BlasCore openblas_core() {
  BlasCore c;
  const char* name = openblas_get_corename();
  c.running = name ? name : "?";
  c.how = std::getenv("ATTNGEN_BENCH_OPENBLAS_SELECTED") ? "attngen_bench"
          : std::getenv("OPENBLAS_CORETYPE")             ? "OPENBLAS_CORETYPE"
                                                         : "OpenBLAS";
#if defined(__x86_64__)
  __builtin_cpu_init();
  int tier = 1;
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")) {
    tier = 4;
    c.for_cpu = __builtin_cpu_supports("avx512bf16") ? "Cooperlake" : "SkylakeX";
  } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    tier = 3;
    c.for_cpu = "Haswell";
  } else if (__builtin_cpu_supports("avx")) {
    tier = 2;
    c.for_cpu = "Sandybridge";
  }
  const int running = x86_core_tier(c.running);
  c.wrong = running > 0 && running < tier;
  if (!c.wrong && running >= tier) c.for_cpu = c.running;
#endif
  if (c.for_cpu.empty()) c.for_cpu = c.running;
  return c;
}

void select_openblas_core(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--openblas_core=keep")) return;
  }
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;
  const BlasCore c = openblas_core();
  if (!c.wrong) return;
  std::fprintf(stderr,
               "attngen_bench: OpenBLAS chose its %s core on a CPU its %s core serves; running "
               "again with OPENBLAS_CORETYPE=%s (--openblas_core=keep: as OpenBLAS chose)\n",
               c.running.c_str(), c.for_cpu.c_str(), c.for_cpu.c_str());
  setenv("OPENBLAS_CORETYPE", c.for_cpu.c_str(), 1);
  setenv("ATTNGEN_BENCH_OPENBLAS_SELECTED", "1", 1);
  execv("/proc/self/exe", argv);
  std::perror("attngen_bench: could not run again");  // then with the core OpenBLAS chose
}

}  // namespace attngen::bench
