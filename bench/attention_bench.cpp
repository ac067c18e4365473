// Benchmarks registered from the variant list: every built-in attention kernel this CPU can
// run, the MHA layer, and OpenBLAS sgemm as the machine's matmul ceiling, in one run.
// FLOPs are counted by bench/flops.h (FlashAttention's convention over the attended pairs).
//
//   build/bench/attngen_bench --benchmark_counters_tabular=true
//
// With shape files of real models (bench/shapes/*.txt, read by bench/shapes.h), given as
// --shapes=a.txt,b.txt (repeatable) or ATTNGEN_SHAPES=a.txt,b.txt, it also registers per shape
//   attngen/<name>/...            attngen_attention() with automatic kernel choice (label: the
//                                 kernel that ran; skipped with a reason when none fits)
//   openblas_composed/<name>/...  per (b, h): cblas_sgemm Q K^T * scale, stable softmax (causal
//                                 mask when causal), cblas_sgemm P V
// and attngen_mha/B4_S512_E768_H12 (the MHA layer, automatic choice; attngen_mha_layer/...: the
// same through a persistent attngen_mha_layer, weights packed once). --threads=N (default: one
// per core) sets attngen's, OpenBLAS's and the composed softmax's thread counts alike.
// bench/run_peers.sh runs these next to PyTorch and ONNX Runtime.
// --describe_shapes=a.txt,b.txt runs nothing and prints the shapes of the files and the MHA layer
// as JSON, each with its FLOPs, for the Python scripts (bench/peers/common.py): they read shape
// files and count FLOPs through this, never on their own.
// Always registered: the machine's ceilings (bench/ceilings.h): ceiling/fma_peak/<isa>/threads<n>
// (independent FMAs, GFLOP/s, on one thread and on the run's), ceiling/bf16_peak/<unit>/threads<n>
// (vdpbf16ps and AMX-BF16 tiles where the CPU has them), openblas_sgemm/2048 (labelled
// with the OpenBLAS core that ran; where OpenBLAS picks a core below this CPU's, attngen_bench
// runs itself again with OPENBLAS_CORETYPE set, --openblas_core=keep: not), decode/l3/... and
// decode/dram/... (attngen_decode over a KV cache that stays in L3 and one that does not, GB/s of
// K and V read) each next to stream_read/<l3|dram>/... (a vectorised streaming read of as many
// bytes, the memory's ceiling, in the same run), decode_cache/<dtype>/<shape> (Skv8192, and an
// L2-resident Skv128) next to stream_cache/<dtype>/..., decode_call/.../threads_<set|default>
// (a 16-slot cache: a call's own cost, with the thread count set and the library's default),
// decode_splits/... (split-KV against one task per kv head, on 2 threads), decode_batch/<dtype>/...
// (16 sequences of 128 to 8192 positions in one call, contiguous and paged, against the read
// bound of their bytes), decode_modifier/<dtype>/<shape>/<way> (modifiers in decode against the
// plain decode), and mha_decode_step/<weights|layer>/... (one token of the MHA layer over a
// KV cache: the caller's weights packed per step, or a persistent layer).
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "attngen/attngen.h"
#include "attngen/kernel.h"
#include "bench/flops.h"
#include "bench/shapes.h"
#include "ceilings.h"
#include "core/targets.h"
#include "runtime/src/internal.h"  // rt::bf16_dot_rate: what decides the bf16 kernels
#include "runtime/src/kv_cache.h"  // the cache views a decode call gives its kernel
#include "tests/reference.h"       // T5's buckets for the bias the modifier computes

namespace {

// Uniform in [-1, 1), two values of 24 bits from each step of SplitMix64: fast enough for the
// 10^9 values of a DRAM-sized decode cache (bench/RESULTS.md, "Decode's roofline on an Intel
// AVX-512 VM").
std::vector<float> random_vector(size_t n, uint64_t seed) {
  std::vector<float> v(n);
  uint64_t state = seed;
  for (size_t i = 0; i < n; i += 2) {
    uint64_t z = (state += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    z ^= z >> 31;
    v[i] = static_cast<float>(z >> 40) * 0x1p-23f - 1.0f;
    if (i + 1 < n) v[i + 1] = static_cast<float>(z & 0xffffff) * 0x1p-23f - 1.0f;
  }
  return v;
}

// Random values in [-1, 1) stored as `dtype` (F32, F16 or BF16; 16-bit values rounded toward
// zero, enough for timing): the bytes of a tensor of n elements.
std::vector<uint8_t> random_tensor(size_t n, attngen_dtype dtype, uint64_t seed) {
  const std::vector<float> f = random_vector(n, seed);
  const size_t size = dtype == ATTNGEN_F32 ? 4 : 2;
  std::vector<uint8_t> bytes(n * size);
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &f[i], 4);
    uint16_t half = static_cast<uint16_t>(bits >> 16);  // bf16
    if (dtype == ATTNGEN_F16) {                         // |x| < 1: normal or flushed to zero
      const int exponent = static_cast<int>((bits >> 23) & 0xff) - 127 + 15;
      half = static_cast<uint16_t>(((bits >> 16) & 0x8000) |
                                   (exponent > 0 ? (exponent << 10) | ((bits >> 13) & 0x3ff) : 0));
    }
    if (size == 4) {
      std::memcpy(&bytes[i * 4], &f[i], 4);
    } else {
      std::memcpy(&bytes[i * 2], &half, 2);
    }
  }
  return bytes;
}

void set_gflops(benchmark::State& state, double flops) {
  state.counters["GFLOP/s"] = benchmark::Counter(
      flops, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

struct Shape {
  int64_t b, h, s;
};

// Attended (query, key) pairs of one head under the kernel's causal mask and pattern.
double attended_pairs(const attngen_kernel_info& k, const attngen_pattern& p, int64_t S) {
  if (k.pattern.kind == ATTNGEN_PATTERN_NONE) {
    return attngen::bench::self_attention_pairs(S, k.mask == ATTNGEN_MASK_CAUSAL);
  }
  double n = 0;
  for (int64_t i = 0; i < S; ++i) {
    const int64_t last = k.mask == ATTNGEN_MASK_CAUSAL ? i : S - 1;
    for (int64_t j = 0; j <= last; ++j) n += attngen_pattern_attends(&p, i, i, j);
  }
  return n;
}

// `kernel` at its own configuration; a generic kernel (generic_call set) at head dim 64 with the
// causal mask or not, as a call no specialised kernel served would run it.
struct GenericCall {
  bool on = false, causal = false;
};

void attention(benchmark::State& state, const attngen_kernel_info* kernel, Shape shape,
               GenericCall generic_call = {}) {
  const int64_t B = shape.b, H = shape.h, S = shape.s;
  const int64_t Dqk = generic_call.on ? 64 : kernel->head_dim_qk;
  const int64_t Dv = generic_call.on ? 64 : kernel->head_dim_v;
  // In the kernel's dtypes (f32, or f16/bf16 inputs with an f16/bf16 or f32 output).
  const attngen_kernel_dtypes& dt = kernel->dtypes;
  std::vector<uint8_t> q = random_tensor(B * S * H * Dqk, dt.q, 1);
  std::vector<uint8_t> k = random_tensor(B * S * H * Dqk, dt.k, 2);
  std::vector<uint8_t> v = random_tensor(B * S * H * Dv, dt.v, 3);
  std::vector<uint8_t> o = random_tensor(B * S * H * Dv, dt.out, 4);
  const int64_t qs[] = {B, S, H, Dqk}, vs[] = {B, S, H, Dv};
  attngen_tensor tq = attngen_tensor_contiguous(q.data(), dt.q, 4, qs);
  attngen_tensor tk = attngen_tensor_contiguous(k.data(), dt.k, 4, qs);
  attngen_tensor tv = attngen_tensor_contiguous(v.data(), dt.v, 4, vs);
  attngen_tensor to = attngen_tensor_contiguous(o.data(), dt.out, 4, vs);
  attngen_attention_options opt = attngen_attention_options_default();
  opt.kernel = kernel->name;
  opt.mask = kernel->mask;
  if (generic_call.on) opt.mask = generic_call.causal ? ATTNGEN_MASK_CAUSAL : ATTNGEN_MASK_NONE;
  if (kernel->softcap) opt.softcap = 30.0f;
  // Mask-tensor kernels get a dense [Sq, Skv] mask broadcast over batch and heads.
  std::vector<uint8_t> keep(kernel->mask_tensor == ATTNGEN_MASK_TENSOR_BOOL ? S * S : 0, 1);
  std::vector<float> add(kernel->mask_tensor == ATTNGEN_MASK_TENSOR_ADDITIVE ? S * S : 0, 0.0f);
  const int64_t ms[] = {S, S};
  attngen_tensor tm{};
  if (!keep.empty()) tm = attngen_tensor_contiguous(keep.data(), ATTNGEN_BOOL, 2, ms);
  if (!add.empty()) tm = attngen_tensor_contiguous(add.data(), ATTNGEN_F32, 2, ms);
  if (tm.data != nullptr) opt.mask_tensor = &tm;
  // Patterns as generated; a block-sparse layout with the diagonal and a quarter of the blocks.
  opt.pattern = kernel->pattern;
  std::vector<uint8_t> layout;
  attngen_tensor tl{};
  if (kernel->pattern.kind == ATTNGEN_PATTERN_BLOCK_SPARSE) {
    const int64_t n = (S + kernel->pattern.block - 1) / kernel->pattern.block, ls[] = {n, n};
    std::mt19937_64 rng(7);
    std::bernoulli_distribution on(0.25);
    layout.resize(static_cast<size_t>(n * n));
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t c = 0; c < n; ++c) layout[static_cast<size_t>(r * n + c)] = r == c || on(rng);
    }
    tl = attngen_tensor_contiguous(layout.data(), ATTNGEN_BOOL, 2, ls);
    opt.pattern.layout = &tl;
  }
  std::vector<float> weights(kernel->weights ? B * H * S * S : 0), lse(kernel->lse ? B * H * S : 0);
  const int64_t wsh[] = {B, H, S, S};
  attngen_tensor tw = attngen_tensor_contiguous(weights.data(), ATTNGEN_F32, 4, wsh);
  attngen_tensor tlse = attngen_tensor_contiguous(lse.data(), ATTNGEN_F32, 3, wsh);
  if (kernel->weights) opt.weights = &tw;
  if (kernel->lse) opt.lse = &tlse;
  for (auto _ : state) {
    if (attngen_attention(&tq, &tk, &tv, &to, &opt) != ATTNGEN_OK) {
      state.SkipWithError(attngen_last_error());
      break;
    }
  }
  const double pairs = generic_call.on
                           ? attngen::bench::self_attention_pairs(S, generic_call.causal)
                           : attended_pairs(*kernel, opt.pattern, S);
  state.counters["pairs/dense"] = pairs / attngen::bench::self_attention_pairs(S, false);
  set_gflops(state, attngen::bench::attention_flops(B, H, pairs, Dqk, Dv));
}

using LayerPtr = std::unique_ptr<attngen_mha_layer, void (*)(attngen_mha_layer*)>;

// A persistent layer of the weights (nullptr, with the state's error, if it cannot be made).
LayerPtr make_layer(benchmark::State& state, const attngen_mha_weights& w, int64_t heads) {
  attngen_mha_layer* layer = nullptr;
  if (attngen_mha_layer_create(&w, heads, &layer) != ATTNGEN_OK) {
    state.SkipWithError(attngen_last_error());
  }
  return LayerPtr(layer, attngen_mha_layer_destroy);
}

// kernel_name NULL: automatic choice, as a user's call would get. persistent: through an
// attngen_mha_layer made once (the weights packed once), else attngen_mha() (packed per call).
void mha(benchmark::State& state, const char* kernel_name, attngen_mask_kind mask, int64_t B,
         int64_t S, int64_t E, int64_t H, bool persistent) {
  std::vector<float> x = random_vector(B * S * E, 1), in_w = random_vector(3 * E * E, 2);
  std::vector<float> out_w = random_vector(E * E, 3), y(B * S * E);
  const int64_t xs[] = {B, S, E}, iws[] = {3 * E, E}, ows[] = {E, E};
  attngen_tensor tx = attngen_tensor_contiguous(x.data(), ATTNGEN_F32, 3, xs);
  attngen_tensor ty = attngen_tensor_contiguous(y.data(), ATTNGEN_F32, 3, xs);
  attngen_tensor tiw = attngen_tensor_contiguous(in_w.data(), ATTNGEN_F32, 2, iws);
  attngen_tensor tow = attngen_tensor_contiguous(out_w.data(), ATTNGEN_F32, 2, ows);
  attngen_mha_weights w{&tiw, nullptr, &tow, nullptr};
  attngen_mha_options opt = attngen_mha_options_default();
  opt.num_heads = H;
  opt.mask = mask;
  opt.kernel = kernel_name;
  LayerPtr layer(nullptr, attngen_mha_layer_destroy);
  if (persistent && !(layer = make_layer(state, w, H))) return;
  for (auto _ : state) {
    const attngen_status st = persistent ? attngen_mha_layer_forward(layer.get(), &tx, &ty, &opt)
                                         : attngen_mha(&tx, &w, &ty, &opt);
    if (st != ATTNGEN_OK) {
      state.SkipWithError(attngen_last_error());
      break;
    }
  }
  if (!state.error_occurred()) state.SetLabel(attngen_last_kernel());
  set_gflops(state, attngen::bench::mha_layer_flops(B, S, E, mask == ATTNGEN_MASK_CAUSAL));
}

// One decode step of the MHA layer (B sequences, one token each, E features, H heads) over a
// ring-buffer cache holding the last `keys` positions: through attngen_mha_decode() (weights
// packed per step) or a persistent layer. The weights are read once a step (4 E^2 floats:
// 9.4 MB at E 768), so the rate counted is GB/s of weights and K/V read.
void mha_decode_step(benchmark::State& state, int64_t B, int64_t E, int64_t H, int64_t keys,
                     bool persistent) {
  std::vector<float> in_w = random_vector(3 * E * E, 2), out_w = random_vector(E * E, 3);
  std::vector<float> in_b = random_vector(3 * E, 4), out_b = random_vector(E, 5);
  std::vector<float> x = random_vector(B * E, 1), y(B * E);
  const int64_t iws[] = {3 * E, E}, ows[] = {E, E}, ibs[] = {3 * E}, obs[] = {E}, xs[] = {B, 1, E};
  attngen_tensor tiw = attngen_tensor_contiguous(in_w.data(), ATTNGEN_F32, 2, iws);
  attngen_tensor tow = attngen_tensor_contiguous(out_w.data(), ATTNGEN_F32, 2, ows);
  attngen_tensor tib = attngen_tensor_contiguous(in_b.data(), ATTNGEN_F32, 1, ibs);
  attngen_tensor tob = attngen_tensor_contiguous(out_b.data(), ATTNGEN_F32, 1, obs);
  attngen_tensor tx = attngen_tensor_contiguous(x.data(), ATTNGEN_F32, 3, xs);
  attngen_tensor ty = attngen_tensor_contiguous(y.data(), ATTNGEN_F32, 3, xs);
  const attngen_mha_weights w{&tiw, &tib, &tow, &tob};
  attngen_kv_cache_options o = attngen_kv_cache_options_default();
  o.layers = 1;
  o.batch = B;
  o.heads_kv = H;
  o.head_dim_qk = E / H;
  o.window = keys - 1;  // a ring of `keys` slots: every step attends the last `keys` positions
  o.capacity = keys;
  attngen_kv_cache* raw = nullptr;
  if (attngen_kv_cache_create(&o, &raw) != ATTNGEN_OK) {
    state.SkipWithError(attngen_last_error());
    return;
  }
  const std::unique_ptr<attngen_kv_cache, void (*)(attngen_kv_cache*)> cache(
      raw, attngen_kv_cache_destroy);
  attngen_mha_decode_options opt = attngen_mha_decode_options_default();
  opt.num_heads = H;
  LayerPtr layer(nullptr, attngen_mha_layer_destroy);
  if (persistent && !(layer = make_layer(state, w, H))) return;
  const auto step = [&] {
    return persistent ? attngen_mha_layer_decode(layer.get(), &tx, cache.get(), 0, &ty, &opt)
                      : attngen_mha_decode(&tx, &w, cache.get(), 0, &ty, &opt);
  };
  for (int64_t p = 0; p < keys; ++p) {  // fill the ring
    if (step() != ATTNGEN_OK) {
      state.SkipWithError(attngen_last_error());
      return;
    }
  }
  for (auto _ : state) {
    if (step() != ATTNGEN_OK) {
      state.SkipWithError(attngen_last_error());
      break;
    }
  }
  if (!state.error_occurred()) state.SetLabel(attngen_last_kernel());
  const double bytes = 4.0 * (4.0 * E * E + 2.0 * B * keys * E);
  state.counters["GB/s"] = benchmark::Counter(bytes, benchmark::Counter::kIsIterationInvariantRate,
                                              benchmark::Counter::kIs1000);
}

// The matmul ceiling: single-precision GEMM n x n x n (label: the OpenBLAS core that ran, and
// whether it is below the one this CPU would be served by).
void sgemm(benchmark::State& state, const attngen::bench::BlasCore& core) {
  const int n = static_cast<int>(state.range(0));
  std::vector<float> a = random_vector(size_t(n) * n, 1), b = random_vector(size_t(n) * n, 2);
  std::vector<float> c(size_t(n) * n);
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a.data(), n, b.data(), n,
                0.0f, c.data(), n);
    benchmark::DoNotOptimize(c.data());
  }
  set_gflops(state, 2.0 * n * n * n);
  state.SetLabel("core " + core.running + " (" + core.how + ")" +
                 (core.wrong ? ", below this CPU's " + core.for_cpu + ": not the ceiling" : ""));
}

// ---- Shapes of real models, attngen with automatic choice, and the composed OpenBLAS peer ----

using attngen::bench::ModelShape;

// The MHA layer attngen_mha and the peers' MHA rows time: BERT-base's, x [4, 512, 768] through
// nn.MultiheadAttention(768, 12) with the dense mask. The peers take it from --describe_shapes.
struct MhaLayerShape {
  int64_t b, s, e, h;
};
constexpr MhaLayerShape kMhaLayer{4, 512, 768, 12};

std::string describe(const MhaLayerShape& m) {
  return "B" + std::to_string(m.b) + "_S" + std::to_string(m.s) + "_E" + std::to_string(m.e) +
         "_H" + std::to_string(m.h);
}

// Shapes of the comma-separated file lists, in order; false, with the reason on stderr, where a
// file is unreadable or malformed.
bool read_shape_lists(const std::vector<std::string>& lists, std::vector<ModelShape>* shapes) {
  std::string error;
  for (const std::string& list : lists) {
    if (!attngen::bench::read_shape_files(list, shapes, &error)) {
      std::fprintf(stderr, "attngen_bench: %s\n", error.c_str());
      return false;
    }
  }
  return true;
}

// A JSON string of s (shape names are single words, but may hold any other character).
std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (static_cast<unsigned char>(c) < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", c);
      out += escaped;
      continue;
    }
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + '"';
}

// --describe_shapes: the shapes of the files, in order, and the MHA layer, each with its FLOPs
// (bench/flops.h), as one JSON object on stdout.
void print_shapes_json(const std::vector<ModelShape>& shapes) {
  std::printf("{\"shapes\": [");
  for (size_t i = 0; i < shapes.size(); ++i) {
    const ModelShape& m = shapes[i];
    std::printf(
        "%s\n  {\"name\": %s, \"b\": %lld, \"h\": %lld, \"s\": %lld, \"d\": %lld, "
        "\"causal\": %s, \"sizes\": \"%s\", \"flops\": %.17g}",
        i ? "," : "", json_string(m.name).c_str(), static_cast<long long>(m.b),
        static_cast<long long>(m.h), static_cast<long long>(m.s), static_cast<long long>(m.d),
        m.causal ? "true" : "false", attngen::bench::sizes_of(m).c_str(),
        attngen::bench::flops_of(m));
  }
  const MhaLayerShape& l = kMhaLayer;
  std::printf(
      "],\n \"mha_layer\": {\"name\": \"mha_layer\", \"b\": %lld, \"s\": %lld, \"e\": %lld, "
      "\"h\": %lld, \"causal\": false, \"sizes\": \"%s\", \"flops\": %.17g}}\n",
      static_cast<long long>(l.b), static_cast<long long>(l.s), static_cast<long long>(l.e),
      static_cast<long long>(l.h), describe(l).c_str(),
      attngen::bench::mha_layer_flops(l.b, l.s, l.e, false));
}

int g_threads = 1;  // set in main: --threads or one per core

// ---- Decode against a KV cache: bandwidth of K/V streaming, next to a plain read of as many
// bytes measured in the same run, and split-KV against one task per (sequence, kv head).

struct DecodeShape {
  int64_t b, sq, hq, hkv, d, skv;
};

std::string describe(const DecodeShape& s) {
  return "B" + std::to_string(s.b) + "_Sq" + std::to_string(s.sq) + "_Hq" + std::to_string(s.hq) +
         "_Hkv" + std::to_string(s.hkv) + "_D" + std::to_string(s.d) + "_Skv" +
         std::to_string(s.skv);
}

// Bytes of K and V a decode call reads from a cache of `dtype` (an I8 cache: and its scales, two
// floats per slot).
double kv_bytes(const DecodeShape& s, attngen_dtype dtype = ATTNGEN_F32) {
  const double slots = static_cast<double>(s.b * s.skv * s.hkv);
  switch (dtype) {
    case ATTNGEN_F16:
    case ATTNGEN_BF16:
      return slots * 2 * s.d * 2;
    case ATTNGEN_I8:
      return slots * (2 * s.d + 2 * sizeof(float));
    default:
      return slots * 2 * s.d * sizeof(float);
  }
}

void set_bandwidth(benchmark::State& state, double bytes) {
  state.counters["GB/s"] = benchmark::Counter(bytes, benchmark::Counter::kIsIterationInvariantRate,
                                              benchmark::Counter::kIs1000);
}

// The arithmetic the x86 decode kernels need per key and kv head (schedules/cpu_decode.cpp), g
// query rows a kv head and Dqk = Dv = D, in 512-bit instructions: q.k and P.V g * D / 16 FMAs
// each; an f16 or bf16 cache also widens each vector of K (16 keys' element d) and of V once, 2 *
// D / 16 widenings; an i8 cache with VNNI (the avx512bf16 row's kernel) takes q.k as g * D / 64
// vpdpbusd (16 keys x 4 bytes each), P.V as 3 * g * D / 64 (the weights' 3 bytes, 4 keys each),
// and D / 64 xors of K into u8, without VNNI its FMAs with K's and V's bytes widened (counted as
// bf16's widenings, two instructions each). Shuffles, horizontal sums, exps and loads are
// left out: the bound is what the contract's arithmetic needs, not what a schedule spends.
// `kernel`: the one the call ran, whose target row says whether it takes dot products.
attngen::bench::DecodeMix decode_mix(const DecodeShape& s, attngen_dtype dtype,
                                     const attngen_kernel_info& kernel) {
  const int rows = static_cast<int>(s.hq / s.hkv * s.sq), d = static_cast<int>(s.d);
  const attngen::TargetRow* row = attngen::find_target(kernel.isa);
  attngen::bench::DecodeMix m;
  if (dtype == ATTNGEN_I8 && row != nullptr && row->int8_dot == attngen::Int8Dot::kU8ByI8) {
    m.dot_u8i8 = 4 * rows * d / 64;
    m.xor_u8 = d / 64;
    return m;
  }
  m.fma = 2 * rows * d / 16;
  if (dtype == ATTNGEN_F16) m.cvt_f16 = 2 * d / 16;
  if (dtype == ATTNGEN_BF16 || dtype == ATTNGEN_I8) m.widen_bf16 = 2 * d / 16;
  return m;
}

// kv_splits as in attngen_decode_options (0: automatic); threads 0: the run's thread count, -1:
// the library's default (attngen_set_num_threads(0): HL_NUM_THREADS, else one per core); the
// cache's dtype (filled from f32 K and V by the append). roofline: the call's time against the
// same run's bounds (decode_roofline/ below), as counters: read_us, the cache's bytes at a
// streaming read's rate; arith_us, the keys' arithmetic (decode_mix) at the rate this CPU issues
// it; roofline, the larger of the two over the call's time.
// Plain RoPE's frequencies (base 10000) over rotary dims `dim`, and a rope of them.
struct PlainRope {
  std::vector<float> freq;
  int64_t half;
  attngen_tensor freq_t{};
  attngen_rope rope = attngen_rope_default();
  explicit PlainRope(int64_t dim) : freq(static_cast<size_t>(dim / 2)), half(dim / 2) {
    attngen_rope_inv_freq(10000.0, dim, freq.data());
    freq_t = attngen_tensor_contiguous(freq.data(), ATTNGEN_F32, 1, &half);
    rope.inv_freq = &freq_t;
  }
  PlainRope(const PlainRope&) = delete;
};

// The benchmark's loop of attngen_decode() over layer 0; returns a call's mean time in us.
double timed_decode_us(benchmark::State& state, const attngen_tensor& q, attngen_kv_cache* cache,
                       attngen_tensor& out, const attngen_decode_options& opt) {
  const auto start = std::chrono::steady_clock::now();
  for (auto _ : state) {
    if (attngen_decode(&q, cache, 0, &out, &opt) != ATTNGEN_OK) {
      state.SkipWithError(attngen_last_error());
      break;
    }
  }
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
             .count() /
         std::max<double>(1, static_cast<double>(state.iterations()));
}

// page_slots > 0: a paged cache of pages of that many slots, exactly as many as the sequences
// need, filled once and reset before the timed cache's append, so that each sequence's pages come
// in descending order (no two consecutive pages adjacent in memory).
// modifier: decode with it (its tensors the caller's); kernel: run the decode kernel of that name.
void decode_run(benchmark::State& state, DecodeShape s, int32_t kv_splits, int threads,
                attngen_dtype dtype, bool roofline, bool rope = false, int64_t page_slots = 0,
                const attngen_modifier* modifier = nullptr, const char* kernel = nullptr) {
  const PlainRope plain(s.d);
  attngen_kv_cache_options o = attngen_kv_cache_options_default();
  if (rope) o.rope = &plain.rope;
  o.dtype = dtype;
  o.layers = 1;
  o.batch = s.b;
  o.heads_kv = s.hkv;
  o.head_dim_qk = s.d;
  o.capacity = s.skv;
  o.page_slots = page_slots;
  attngen_kv_cache* cache = nullptr;
  if (attngen_kv_cache_create(&o, &cache) != ATTNGEN_OK) {
    state.SkipWithError(attngen_last_error());
    return;
  }
  std::vector<float> k = random_vector(s.b * s.skv * s.hkv * s.d, 1);
  std::vector<float> v = random_vector(k.size(), 2);
  std::vector<float> q = random_vector(s.b * s.sq * s.hq * s.d, 3), out(q.size());
  const int64_t ks[] = {s.b, s.skv, s.hkv, s.d}, qs[] = {s.b, s.sq, s.hq, s.d};
  const attngen_tensor tk = attngen_tensor_contiguous(k.data(), ATTNGEN_F32, 4, ks);
  const attngen_tensor tv = attngen_tensor_contiguous(v.data(), ATTNGEN_F32, 4, ks);
  const attngen_tensor tq = attngen_tensor_contiguous(q.data(), ATTNGEN_F32, 4, qs);
  attngen_tensor to = attngen_tensor_contiguous(out.data(), ATTNGEN_F32, 4, qs);
  attngen_decode_options opt = attngen_decode_options_default();
  opt.kv_splits = kv_splits;
  opt.modifier = modifier;
  opt.kernel = kernel;
  if (threads != 0) attngen_set_num_threads(std::max(threads, 0));
  // The positions appended a range at a time: an input tensor spans at most 2^31 - 1 bytes, less
  // than a DRAM-sized cache of F32 inputs (dram_bytes()).
  const auto append = [&] {
    const int64_t step = std::max<int64_t>(1, (int64_t{1} << 28) / (s.b * s.hkv * s.d));
    for (int64_t p = 0; p < s.skv; p += step) {
      attngen_tensor ck = tk, cv = tv;
      ck.shape[1] = cv.shape[1] = std::min(step, s.skv - p);
      ck.data = k.data() + p * tk.strides[1];
      cv.data = v.data() + p * tv.strides[1];
      if (attngen_kv_cache_append(cache, 0, &ck, &cv, nullptr) != ATTNGEN_OK) return false;
    }
    return true;
  };
  if (page_slots > 0 && (!append() || attngen_kv_cache_reset(cache, -1) != ATTNGEN_OK)) {
    state.SkipWithError(attngen_last_error());
  } else if (!append() || attngen_decode(&tq, cache, 0, &to, &opt) != ATTNGEN_OK) {
    state.SkipWithError(attngen_last_error());
  } else {
    state.SetLabel(attngen_last_kernel());
    double read_us = 0, arith_us = 0;
    if (roofline) {
      const int t = threads > 0 ? threads : g_threads;
      const double gbps = attngen::bench::stream_read_rate(kv_bytes(s, dtype), t, 0.3);
      if (gbps > 0) read_us = kv_bytes(s, dtype) / gbps * 1e-3;
      const double keys = static_cast<double>(s.b * s.hkv * s.skv);
      const attngen_kernel_info* kernel = attngen_find_kernel(attngen_last_kernel());
      const double rate = kernel == nullptr ? 0
                                            : attngen::bench::decode_mix_rate(
                                                  decode_mix(s, dtype, *kernel), t, 0.3);
      if (rate > 0) {
        arith_us = keys / rate * 1e6;
      } else {
        state.SetLabel(std::string(attngen_last_kernel()) +
                       " (no arithmetic bound: its loop needs AVX-512)");
      }
    }
    const double call_us = timed_decode_us(state, tq, cache, to, opt);
    set_bandwidth(state, kv_bytes(s, dtype));
    if (roofline) {
      if (read_us > 0) state.counters["read_us"] = read_us;
      if (arith_us > 0) state.counters["arith_us"] = arith_us;
      state.counters["roofline"] = std::max(read_us, arith_us) / call_us;
    }
  }
  if (threads != 0) attngen_set_num_threads(g_threads);
  attngen_kv_cache_destroy(cache);
}

void decode(benchmark::State& state, DecodeShape s, int32_t kv_splits, int threads,
            attngen_dtype dtype) {
  decode_run(state, s, kv_splits, threads, dtype, false);
}

void decode_roofline(benchmark::State& state, DecodeShape s, attngen_dtype dtype) {
  decode_run(state, s, 0, 0, dtype, true);
}

// The same decode over a contiguous cache (page_slots 0) and over pages (paged_decode/ below).
void decode_paged(benchmark::State& state, DecodeShape s, attngen_dtype dtype, int64_t page_slots) {
  decode_run(state, s, 0, 0, dtype, false, false, page_slots);
}

// decode_modifier/<cache dtype>/<shape>/<way>: one decode step, "plain" on the kernel dispatch
// picks, "plain_generic" on the generic D128 decode kernel of this run's ISA, "alibi" (the
// standard slopes), "sink_logit" (logits [Hq]) and "sinks" (4 sinks and a window of 1024: the
// blocks between them skipped) on their generic kernels; over an f16 cache the modifiers read an
// F32 copy of the layer (attngen.h, attngen_decode_options::modifier).
void decode_modifier(benchmark::State& state, DecodeShape s, attngen_dtype dtype,
                     const std::string& way) {
  std::vector<float> per_head(static_cast<size_t>(s.hq));
  attngen_alibi_slopes(s.hq, per_head.data());
  if (way == "sink_logit") {
    for (size_t h = 0; h < per_head.size(); ++h) per_head[h] = 0.5f * static_cast<float>(h % 5);
  }
  const int64_t hq = s.hq;
  const attngen_tensor heads = attngen_tensor_contiguous(per_head.data(), ATTNGEN_F32, 1, &hq);
  attngen_modifier m{};
  m.name = way.c_str();
  if (way == "alibi" || way == "sink_logit") m.tensors[0] = &heads;
  if (way == "sinks") {
    m.scalars[0] = 4.0f;
    m.scalars[1] = 1024.0f;
  }
  std::string generic;
  if (way == "plain_generic") {
    for (size_t i = 0; i < attngen_kernel_count(); ++i) {
      const attngen_kernel_info* k = attngen_kernel_at(i);
      if (k->op == ATTNGEN_OP_DECODE && k->generic && k->head_dim_qk == 128 &&
          k->dtypes.cache == dtype && !std::strcmp(k->modifier, "") &&
          k->requested_key_block == 0 && !std::strcmp(k->isa, attngen_isa())) {
        generic = k->name;
      }
    }
    if (generic.empty()) {
      state.SkipWithError("no generic D128 decode kernel of this ISA for the cache dtype");
      return;
    }
  }
  const bool plain = way.rfind("plain", 0) == 0;
  decode_run(state, s, 0, 0, dtype, false, false, 0, plain ? nullptr : &m,
             generic.empty() ? nullptr : generic.c_str());
}

// One call over a batch of sequences of different lengths (`lengths`, one new query each),
// Llama's heads (Hq 32 / Hkv 8, D128), over a contiguous cache (page_slots 0: a capacity of the
// longest each) or pages of page_slots slots, exactly as many as the lengths need. Counters:
// read_us, the bytes of K and V the call reads (each sequence's own positions) at the same run's
// streaming-read rate of that many bytes; read_bound, read_us over the call's time.
void decode_batch(benchmark::State& state, std::vector<int64_t> lengths, attngen_dtype dtype,
                  int64_t page_slots) {
  const int64_t b = static_cast<int64_t>(lengths.size()), hq = 32, hkv = 8, d = 128, chunk = 512;
  const int64_t longest = *std::max_element(lengths.begin(), lengths.end());
  attngen_kv_cache_options o = attngen_kv_cache_options_default();
  o.dtype = dtype;
  o.layers = 1;
  o.batch = b;
  o.heads_kv = hkv;
  o.head_dim_qk = d;
  o.capacity = longest;
  o.page_slots = page_slots;
  double positions = 0;
  for (int64_t n : lengths) {
    positions += static_cast<double>(n);
    if (page_slots > 0) o.pages += (n + page_slots - 1) / page_slots;
  }
  attngen_kv_cache* cache = nullptr;
  if (attngen_kv_cache_create(&o, &cache) != ATTNGEN_OK) {
    state.SkipWithError(attngen_last_error());
    return;
  }
  // Appended `chunk` rows at a time, each sequence until it holds its length.
  std::vector<float> k = random_vector(static_cast<size_t>(b * chunk * hkv * d), 1);
  std::vector<float> v = random_vector(k.size(), 2);
  std::vector<float> q = random_vector(static_cast<size_t>(b * hq * d), 3), out(q.size());
  const int64_t ks[] = {b, chunk, hkv, d}, qs[] = {b, 1, hq, d};
  const attngen_tensor tk = attngen_tensor_contiguous(k.data(), ATTNGEN_F32, 4, ks);
  const attngen_tensor tv = attngen_tensor_contiguous(v.data(), ATTNGEN_F32, 4, ks);
  const attngen_tensor tq = attngen_tensor_contiguous(q.data(), ATTNGEN_F32, 4, qs);
  attngen_tensor to = attngen_tensor_contiguous(out.data(), ATTNGEN_F32, 4, qs);
  std::vector<int32_t> counts(static_cast<size_t>(b));
  const attngen_tensor tcounts = attngen_tensor_contiguous(counts.data(), ATTNGEN_I32, 1, &b);
  for (int64_t done = 0; done < longest; done += chunk) {
    for (int64_t i = 0; i < b; ++i) {
      counts[i] = static_cast<int32_t>(std::clamp<int64_t>(lengths[i] - done, 0, chunk));
    }
    if (attngen_kv_cache_append(cache, 0, &tk, &tv, &tcounts) != ATTNGEN_OK) {
      state.SkipWithError(attngen_last_error());
      attngen_kv_cache_destroy(cache);
      return;
    }
  }
  const attngen_decode_options opt = attngen_decode_options_default();
  if (attngen_decode(&tq, cache, 0, &to, &opt) != ATTNGEN_OK) {
    state.SkipWithError(attngen_last_error());
    attngen_kv_cache_destroy(cache);
    return;
  }
  state.SetLabel(attngen_last_kernel());
  const double bytes = kv_bytes(DecodeShape{1, 1, hq, hkv, d, 1}, dtype) * positions;
  const double gbps = attngen::bench::stream_read_rate(bytes, g_threads, 0.3);
  const double call_us = timed_decode_us(state, tq, cache, to, opt);
  set_bandwidth(state, bytes);
  if (gbps > 0) {
    const double read_us = bytes / gbps * 1e-3;
    state.counters["read_us"] = read_us;
    state.counters["read_bound"] = read_us / call_us;
  }
  attngen_kv_cache_destroy(cache);
}

// The cost of a rope (attngen.h, "Rotary position embeddings"): the same call with and without
// one (rope_cost/ below). A decode over a cache that has one rotates its query; attention rotates
// q and k.
void decode_rope(benchmark::State& state, DecodeShape s, attngen_dtype dtype, bool rope) {
  decode_run(state, s, 0, 0, dtype, false, rope);
}

void prefill_rope(benchmark::State& state, DecodeShape s, attngen_dtype dtype, bool rope) {
  const int64_t qs[] = {s.b, s.sq, s.hq, s.d}, ks[] = {s.b, s.skv, s.hkv, s.d};
  std::vector<uint8_t> q = random_tensor(static_cast<size_t>(s.b * s.sq * s.hq * s.d), dtype, 1);
  std::vector<uint8_t> k = random_tensor(static_cast<size_t>(s.b * s.skv * s.hkv * s.d), dtype, 2);
  std::vector<uint8_t> v = random_tensor(k.size() / (dtype == ATTNGEN_F32 ? 4 : 2), dtype, 3);
  std::vector<uint8_t> o = random_tensor(q.size() / (dtype == ATTNGEN_F32 ? 4 : 2), dtype, 4);
  const attngen_tensor tq = attngen_tensor_contiguous(q.data(), dtype, 4, qs);
  const attngen_tensor tk = attngen_tensor_contiguous(k.data(), dtype, 4, ks);
  const attngen_tensor tv = attngen_tensor_contiguous(v.data(), dtype, 4, ks);
  attngen_tensor to = attngen_tensor_contiguous(o.data(), dtype, 4, qs);
  const PlainRope plain(s.d);
  attngen_attention_options opt = attngen_attention_options_default();
  opt.mask = ATTNGEN_MASK_CAUSAL;
  if (rope) opt.rope = &plain.rope;
  if (attngen_attention(&tq, &tk, &tv, &to, &opt) != ATTNGEN_OK) {
    state.SkipWithError(attngen_last_error());
    return;
  }
  state.SetLabel(attngen_last_kernel());
  for (auto _ : state) {
    if (attngen_attention(&tq, &tk, &tv, &to, &opt) != ATTNGEN_OK) {
      state.SkipWithError(attngen_last_error());
      break;
    }
  }
  set_gflops(state, attngen::bench::attention_flops(
                        s.b, s.hq, attngen::bench::self_attention_pairs(s.sq, true), s.d, s.d));
}

// Packed prompts of these lengths in one attngen_attention_varlen() call (packed), or causal
// self-attention of `dense` tokens (B1), Llama's heads (Hq 32 / Hkv 8, D128), f32; counter
// `pairs`: the attended (query, key) pairs of a call (bench/way_pairs.py divides by it).
void varlen_prefill(benchmark::State& state, std::vector<int32_t> lengths, int64_t dense) {
  const int64_t hq = 32, hkv = 8, d = 128;
  std::vector<int32_t> cu{0};
  for (int32_t n : lengths) cu.push_back(cu.back() + n);
  const int64_t t = dense > 0 ? dense : cu.back(), n1 = static_cast<int64_t>(cu.size());
  std::vector<float> q = random_vector(static_cast<size_t>(t * hq * d), 1), o(q.size());
  std::vector<float> k = random_vector(static_cast<size_t>(t * hkv * d), 2);
  std::vector<float> v = random_vector(k.size(), 3);
  const int64_t qs[] = {1, t, hq, d}, ks[] = {1, t, hkv, d};
  const int rank = dense > 0 ? 4 : 3;
  const int64_t* q_shape = dense > 0 ? qs : qs + 1;
  const int64_t* k_shape = dense > 0 ? ks : ks + 1;
  const attngen_tensor tq = attngen_tensor_contiguous(q.data(), ATTNGEN_F32, rank, q_shape);
  const attngen_tensor tk = attngen_tensor_contiguous(k.data(), ATTNGEN_F32, rank, k_shape);
  const attngen_tensor tv = attngen_tensor_contiguous(v.data(), ATTNGEN_F32, rank, k_shape);
  attngen_tensor to = attngen_tensor_contiguous(o.data(), ATTNGEN_F32, rank, q_shape);
  const attngen_tensor tcu = attngen_tensor_contiguous(cu.data(), ATTNGEN_I32, 1, &n1);
  attngen_attention_options opt = attngen_attention_options_default();
  opt.mask = ATTNGEN_MASK_CAUSAL;
  const auto call = [&] {
    return dense > 0 ? attngen_attention(&tq, &tk, &tv, &to, &opt)
                     : attngen_attention_varlen(&tq, &tk, &tv, &to, &tcu, nullptr, &opt);
  };
  if (call() != ATTNGEN_OK) {
    state.SkipWithError(attngen_last_error());
    return;
  }
  state.SetLabel(attngen_last_kernel());
  for (auto _ : state) {
    if (call() != ATTNGEN_OK) {
      state.SkipWithError(attngen_last_error());
      break;
    }
  }
  double pairs = 0;
  for (int32_t n : dense > 0 ? std::vector<int32_t>{static_cast<int32_t>(dense)} : lengths) {
    pairs += attngen::bench::self_attention_pairs(n, true);
  }
  state.counters["pairs"] = pairs * hq;
  set_gflops(state, attngen::bench::attention_flops(1, hq, pairs, d, d));
}

// nn.Linear of one token's row (a decode step's projection), through attngen_linear() (the
// weights packed on every call) or an attngen_linear_layer (packed once), F32.
void linear_step(benchmark::State& state, int64_t e, int64_t n, bool layer) {
  std::vector<float> x = random_vector(static_cast<size_t>(e), 1), y(static_cast<size_t>(n));
  std::vector<float> w = random_vector(static_cast<size_t>(n * e), 2);
  const int64_t xs[] = {1, 1, e}, ws[] = {n, e}, ys[] = {1, 1, n};
  const attngen_tensor tx = attngen_tensor_contiguous(x.data(), ATTNGEN_F32, 3, xs);
  const attngen_tensor tw = attngen_tensor_contiguous(w.data(), ATTNGEN_F32, 2, ws);
  attngen_tensor ty = attngen_tensor_contiguous(y.data(), ATTNGEN_F32, 3, ys);
  attngen_linear_layer* made = nullptr;
  if (layer && attngen_linear_layer_create(&tw, nullptr, &made) != ATTNGEN_OK) {
    state.SkipWithError(attngen_last_error());
    return;
  }
  const std::unique_ptr<attngen_linear_layer, void (*)(attngen_linear_layer*)> owned(
      made, attngen_linear_layer_destroy);
  for (auto _ : state) {
    const attngen_status st = layer ? attngen_linear_layer_forward(made, &tx, &ty)
                                    : attngen_linear(&tx, &tw, nullptr, &ty);
    if (st != ATTNGEN_OK) {
      state.SkipWithError(attngen_last_error());
      break;
    }
  }
  state.SetLabel(attngen_last_kernel());
  set_bandwidth(state, static_cast<double>(n * e) * 4);
}

// Llama-style GQA (32 query heads over 8 kv heads, D128), one query over a cache of about
// `bytes` of f32 K and V.
DecodeShape llama_of_bytes(size_t bytes) {
  DecodeShape s{1, 1, 32, 8, 128, 0};
  s.skv = std::max<int64_t>(1, static_cast<int64_t>(bytes / (s.hkv * s.d * 2 * sizeof(float))));
  return s;
}

void register_decode() {
  const DecodeShape llama{1, 1, 32, 8, 128, 8192};
  const auto add = [](const std::string& name, auto fn, auto... args) {
    benchmark::RegisterBenchmark(name.c_str(), fn, args...)
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
  };
  // The decode's ceilings (bench/ceilings.h): a cache that stays in L3 and one that does not,
  // each next to a streaming read of its bytes.
  const std::pair<const char*, DecodeShape> resident_and_dram[] = {
      {"l3", llama_of_bytes(attngen::bench::l3_resident_bytes())},
      {"dram", llama_of_bytes(attngen::bench::dram_bytes())}};
  for (const auto& [where, s] : resident_and_dram) {
    add(std::string("decode/") + where + "/" + describe(s), decode, s, 0, 0, ATTNGEN_F32);
    add(std::string("stream_read/") + where + "/" +
            std::to_string(static_cast<int64_t>(kv_bytes(s)) >> 20) + "MiB",
        attngen::bench::stream_read, kv_bytes(s), g_threads);
  }
  // Caches of each dtype, each next to a streaming read of its own bytes (the ratios of
  // bench/RESULTS.md, "Decode over f16, bf16 and i8 caches"), and the same heads over a short
  // context that fits in L2 (1 MiB of f32 K and V): the kernel's compute rate, not memory's,
  // and where the per-call costs show.
  const DecodeShape resident{1, 1, 32, 8, 128, 128};
  const std::pair<attngen_dtype, const char*> dtypes[] = {
      {ATTNGEN_F32, "f32"}, {ATTNGEN_F16, "f16"}, {ATTNGEN_BF16, "bf16"}, {ATTNGEN_I8, "i8"}};
  for (const auto& [dtype, word] : dtypes) {
    for (const DecodeShape& s : {llama, resident}) {
      add(std::string("decode_cache/") + word + "/" + describe(s), decode, s, 0, 0, dtype);
    }
    add(std::string("stream_cache/") + word + "/" +
            std::to_string(static_cast<int64_t>(kv_bytes(llama, dtype)) >> 10) + "KiB",
        attngen::bench::stream_read, kv_bytes(llama, dtype), g_threads);
  }
  // Each dtype's cache at an L3-resident and a DRAM-sized length (its own bytes), against its
  // roofline: the same run's read and arithmetic bounds (decode above).
  for (const auto& [dtype, word] : dtypes) {
    DecodeShape one = llama;
    one.skv = 1;
    for (const auto& [where, bytes] :
         {std::pair<const char*, size_t>{"l3", attngen::bench::l3_resident_bytes()},
          std::pair<const char*, size_t>{"dram", attngen::bench::dram_bytes()}}) {
      DecodeShape s = llama;
      s.skv = std::max<int64_t>(1, static_cast<int64_t>(bytes / kv_bytes(one, dtype)));
      add(std::string("decode_roofline/") + word + "/" + where + "/" + describe(s), decode_roofline,
          s, dtype);
    }
  }
  // A rope's cost (prefill_rope, decode_rope above): Llama's heads, each call without and with
  // one, next to each other (bench/paired.py pairs them).
  for (const auto& [dtype, word] : {dtypes[0], dtypes[2]}) {
    const DecodeShape prompt{1, 2048, 32, 8, 128, 2048};
    for (const char* way : {"none", "rope"}) {
      add(std::string("rope_cost/prefill/") + word + "/B1_S2048_H32_8_D128/" + way, prefill_rope,
          prompt, dtype, std::string(way) == "rope");
    }
  }
  for (const auto& [dtype, word] : dtypes) {
    for (int64_t keys : {2048, 8192}) {
      DecodeShape s = llama;
      s.skv = keys;
      for (const char* way : {"none", "rope"}) {
        add(std::string("rope_cost/decode/") + word + "/" + describe(s) + "/" + way, decode_rope, s,
            dtype, std::string(way) == "rope");
      }
    }
  }
  // Decode over pages of 16 and 128 slots against a contiguous cache (decode_paged above), the
  // cache dtypes that page (an I8 cache is contiguous), Llama's heads over 2048 and 8192 cached
  // positions (bench/way_pairs.py).
  for (const auto& [dtype, word] : dtypes) {
    if (dtype == ATTNGEN_I8) continue;
    for (int64_t keys : {2048, 8192}) {
      DecodeShape s = llama;
      s.skv = keys;
      for (int64_t page_slots : {0, 16, 128}) {
        add(std::string("paged_decode/") + word + "/" + describe(s) + "/" +
                (page_slots == 0 ? std::string("contiguous") : "P" + std::to_string(page_slots)),
            decode_paged, s, dtype, page_slots);
      }
    }
  }
  // Modifiers in decode against the plain decode (decode_modifier above), Llama's heads over
  // 2048 and 8192 positions, an F32 cache and an F16 one (served through an F32 copy).
  for (const auto& [dtype, word] : dtypes) {
    if (dtype != ATTNGEN_F32 && dtype != ATTNGEN_F16) continue;
    for (int64_t keys : {2048, 8192}) {
      DecodeShape s = llama;
      s.skv = keys;
      for (const char* way : {"plain", "plain_generic", "alibi", "sink_logit", "sinks"}) {
        add(std::string("decode_modifier/") + word + "/" + describe(s) + "/" + way, decode_modifier,
            s, dtype, std::string(way));
      }
    }
  }
  // A batch of 16 sequences of 128 to 8192 cached positions (evenly spread) in one call, against
  // the same run's read bound of the bytes it reads (decode_batch above), every cache dtype over a
  // contiguous cache and over pages of 16 and 128 slots (an I8 cache: contiguous only).
  std::vector<int64_t> spread;
  for (int64_t i = 0; i < 16; ++i) spread.push_back(128 + i * (8192 - 128) / 15 / 16 * 16);
  for (const auto& [dtype, word] : dtypes) {
    for (int64_t page_slots : {0, 16, 128}) {
      if (dtype == ATTNGEN_I8 && page_slots > 0) continue;
      add(std::string("decode_batch/") + word + "/B16_Skv128to8192_Hq32_Hkv8_D128/" +
              (page_slots == 0 ? std::string("contiguous") : "P" + std::to_string(page_slots)),
          decode_batch, spread, dtype, page_slots);
    }
  }
  // A decode step's projection (Llama-7B's q_proj and a 1B model's MLP): the weights packed per
  // call against once.
  for (const auto& [e, n] : {std::pair<int64_t, int64_t>{4096, 4096}, {2048, 5632}}) {
    for (const char* way : {"call", "layer"}) {
      add("linear_step/f32/E" + std::to_string(e) + "_N" + std::to_string(n) + "/" + way,
          linear_step, e, n, std::string(way) == "layer");
    }
  }
  // 8 packed prompts of 64 to 1024 tokens against dense causal calls of 1024 and 2048 tokens, per
  // attended pair (varlen_prefill above).
  const std::vector<int32_t> prompts = {64, 1024, 192, 512, 128, 768, 256, 384};
  add("varlen/prefill/f32/8_prompts_64_to_1024/packed", varlen_prefill, prompts, int64_t{0});
  for (int64_t s : {1024, 2048}) {
    add("varlen/prefill/f32/8_prompts_64_to_1024/dense_S" + std::to_string(s), varlen_prefill,
        prompts, s);
  }
  // The cost of a call: a cache of 16 slots, with the run's thread count set and with the
  // library's default (which once read the CPU count from /sys on every parallel loop).
  const DecodeShape tiny{1, 1, 32, 8, 128, 16};
  add("decode_call/" + describe(tiny) + "/threads_set", decode, tiny, 0, 0, ATTNGEN_F32);
  add("decode_call/" + describe(tiny) + "/threads_default", decode, tiny, 0, -1, ATTNGEN_F32);
  // Split-KV against one task per (sequence, kv head), on 2 threads: with 8 kv heads, and with
  // multi-query attention (1 kv head), where without splits one thread has all the work.
  // And a batch of 8 sequences (64 groups), where one split per group already gives each
  // thread many tasks.
  const DecodeShape mqa{1, 1, 32, 1, 128, 32768}, batch8{8, 1, 32, 8, 128, 1024};
  for (const DecodeShape& s : {llama, mqa, batch8}) {
    add("decode_splits/" + describe(s) + "/threads2/none", decode, s, 1, 2, ATTNGEN_F32);
    add("decode_splits/" + describe(s) + "/threads2/auto", decode, s, 0, 2, ATTNGEN_F32);
    add("decode_splits/" + describe(s) + "/threads2/splits8", decode, s, 8, 2, ATTNGEN_F32);
  }
}

void attngen_auto(benchmark::State& state, ModelShape m) {
  std::vector<float> q = random_vector(m.b * m.s * m.h * m.d, 1);
  std::vector<float> k = random_vector(q.size(), 2), v = random_vector(q.size(), 3), o(q.size());
  const int64_t shape[] = {m.b, m.s, m.h, m.d};
  attngen_tensor tq = attngen_tensor_contiguous(q.data(), ATTNGEN_F32, 4, shape);
  attngen_tensor tk = attngen_tensor_contiguous(k.data(), ATTNGEN_F32, 4, shape);
  attngen_tensor tv = attngen_tensor_contiguous(v.data(), ATTNGEN_F32, 4, shape);
  attngen_tensor to = attngen_tensor_contiguous(o.data(), ATTNGEN_F32, 4, shape);
  attngen_attention_options opt = attngen_attention_options_default();
  opt.mask = m.causal ? ATTNGEN_MASK_CAUSAL : ATTNGEN_MASK_NONE;
  // One untimed call: finds out whether any kernel fits (a skipped row if not) and warms up.
  const attngen_status st = attngen_attention(&tq, &tk, &tv, &to, &opt);
  if (st != ATTNGEN_OK) {
    const std::string why = st == ATTNGEN_ERROR_NO_KERNEL
                                ? "no kernel for D" + std::to_string(m.d) + ": "
                                : std::string(attngen_status_name(st)) + ": ";
    state.SkipWithError((why + attngen_last_error()).c_str());
    return;
  }
  const std::string kernel = attngen_last_kernel();
  for (auto _ : state) {
    if (attngen_attention(&tq, &tk, &tv, &to, &opt) != ATTNGEN_OK) {
      state.SkipWithError(attngen_last_error());
      break;
    }
  }
  state.SetLabel(kernel);
  set_gflops(state, attngen::bench::flops_of(m));
}

// Rows of one head's score matrix become probabilities in place: scores of masked keys (j > i
// when causal; Sq = Skv, so top-left and bottom-right alignment agree) become 0.
void softmax_row(float* row, int64_t i, int64_t n, bool causal) {
  const int64_t valid = causal ? i + 1 : n;
  float max = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < valid; ++j) max = std::max(max, row[j]);
  float sum = 0.0f;
  for (int64_t j = 0; j < valid; ++j) {
    row[j] = std::exp(row[j] - max);
    sum += row[j];
  }
  const float inv = 1.0f / sum;
  for (int64_t j = 0; j < valid; ++j) row[j] *= inv;
  std::fill(row + valid, row + n, 0.0f);
}

// The softmax runs on as many threads as the GEMMs (rows dealt round-robin, which also balances
// the causal triangle), so the peer is not held back by a serial step between two threaded ones.
void softmax_rows(float* scores, int64_t n, bool causal) {
  auto work = [=](int t) {
    for (int64_t i = t; i < n; i += g_threads) softmax_row(scores + i * n, i, n, causal);
  };
  std::vector<std::thread> helpers;
  for (int t = 1; t < g_threads; ++t) helpers.emplace_back(work, t);
  work(0);
  for (std::thread& h : helpers) h.join();
}

void openblas_composed(benchmark::State& state, ModelShape m) {
  const int64_t B = m.b, H = m.h, S = m.s, D = m.d,
                ld = H * D;  // BSHD: rows of a head are H*D apart
  std::vector<float> q = random_vector(B * S * H * D, 1);
  std::vector<float> k = random_vector(q.size(), 2), v = random_vector(q.size(), 3), o(q.size());
  std::vector<float> scores(S * S);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const int n = static_cast<int>(S), d = static_cast<int>(D), lda = static_cast<int>(ld);
  for (auto _ : state) {
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t h = 0; h < H; ++h) {
        const int64_t head = b * S * ld + h * D;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, d, scale, q.data() + head, lda,
                    k.data() + head, lda, 0.0f, scores.data(), n);
        softmax_rows(scores.data(), S, m.causal);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, d, n, 1.0f, scores.data(), n,
                    v.data() + head, lda, 0.0f, o.data() + head, lda);
      }
    }
    benchmark::DoNotOptimize(o.data());
  }
  set_gflops(state, attngen::bench::flops_of(m));
}

void register_shape(const ModelShape& m) {
  const std::string suffix = "/" + m.name + "/" + attngen::bench::sizes_of(m);
  benchmark::RegisterBenchmark(("attngen" + suffix).c_str(), attngen_auto, m)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark(("openblas_composed" + suffix).c_str(), openblas_composed, m)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
}

// Removes "--name=value" arguments (every occurrence) from argv and returns their values.
std::vector<std::string> take_flag(const char* name, int* argc, char** argv) {
  const std::string prefix = std::string("--") + name + "=";
  std::vector<std::string> values;
  int kept = 1;
  for (int i = 1; i < *argc; ++i) {
    const std::string arg = argv[i];
    if (arg.compare(0, prefix.size(), prefix) == 0) {
      values.push_back(arg.substr(prefix.size()));
    } else {
      argv[kept++] = argv[i];
    }
  }
  *argc = kept;
  return values;
}

// The price of generality (bench/generic_price.py): D64 dense and causal at B1 H16 S2048 and
// ViT-B's B8 H12 S197, on the specialised kernel dispatch picks and on the generic kernel of
// the same ISA, as generic/<dense|causal>/<shape>/<specialised|generic>.
const attngen_kernel_info* dispatched_d64(int64_t S, bool causal) {
  std::vector<float> q = random_vector(S * 64, 1), o(S * 64);
  const int64_t sh[] = {1, S, 1, 64};
  attngen_tensor t = attngen_tensor_contiguous(q.data(), ATTNGEN_F32, 4, sh);
  attngen_tensor to = attngen_tensor_contiguous(o.data(), ATTNGEN_F32, 4, sh);
  attngen_attention_options opt = attngen_attention_options_default();
  opt.mask = causal ? ATTNGEN_MASK_CAUSAL : ATTNGEN_MASK_NONE;
  if (attngen_attention(&t, &t, &t, &to, &opt) != ATTNGEN_OK) return nullptr;
  return attngen_find_kernel(attngen_last_kernel());
}

void register_generic_price() {
  const attngen_kernel_info* generic = nullptr;
  for (size_t i = 0; i < attngen_kernel_count(); ++i) {
    const attngen_kernel_info* k = attngen_kernel_at(i);
    if (k->generic && k->head_dim_qk == 64 && k->head_dim_v == 64 &&
        !std::strcmp(k->isa, attngen_isa())) {
      generic = k;
    }
  }
  if (generic == nullptr) return;
  for (const bool causal : {false, true}) {
    for (const Shape s : {Shape{1, 16, 2048}, Shape{8, 12, 197}}) {
      // The specialised kernel automatic dispatch takes for the call (a small one of the same
      // lengths and options).
      const attngen_kernel_info* special = dispatched_d64(s.s, causal);
      if (special == nullptr || special->generic) continue;
      const std::string base = std::string("generic/") + (causal ? "causal" : "dense") + "/B" +
                               std::to_string(s.b) + "_H" + std::to_string(s.h) + "_S" +
                               std::to_string(s.s);
      benchmark::RegisterBenchmark((base + "/specialised").c_str(), attention, special, s,
                                   GenericCall{})
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
      benchmark::RegisterBenchmark((base + "/generic").c_str(), attention, generic, s,
                                   GenericCall{true, causal})
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
    }
  }
}

// ALiBi (a causal decoder's, B1 H16 D128, S 1024 and 4096) five ways, as
// modifier/alibi/<shape>/<way>: "modifier", the alibi modifier on the kernel dispatch picks (the
// specialised one); "modifier_generic", on the generic D128 alibi kernel; "additive", the same
// bias as an additive [1, H, 1, S] mask of m_h * j (the key-position form: it differs from
// m_h (j - p) by a constant per row, which the softmax cancels); "modifier_lse", the modifier
// with the row log-sum-exp asked for too (the generic kernel, which writes it); "plain", causal
// attention without the bias on the kernel dispatch picks; "plain_generic", that on the generic
// D128 kernel. Each against the same ISA (this run's).
enum class AlibiWay { kModifier, kModifierGeneric, kModifierLse, kAdditive, kPlain, kPlainGeneric };

// The generic f32 attention kernel of head dim `head_dim` of this run's ISA with that modifier
// ("" none; the library's modifier kernels also write the log-sum-exp), or nullptr.
const attngen_kernel_info* generic_kernel(int32_t head_dim, const char* modifier) {
  for (size_t i = 0; i < attngen_kernel_count(); ++i) {
    const attngen_kernel_info* k = attngen_kernel_at(i);
    if (k->op == ATTNGEN_OP_ATTENTION && k->generic && k->head_dim_qk == head_dim &&
        k->dtypes.q == ATTNGEN_F32 && !k->weights && (!k->lse || modifier[0] != '\0') &&
        k->pattern.kind == ATTNGEN_PATTERN_NONE && !std::strcmp(k->modifier, modifier) &&
        !std::strcmp(k->isa, attngen_isa())) {
      return k;
    }
  }
  return nullptr;
}

// Runs a plan of q, k, v and out with `opt` in the benchmark's loop, with a modifier's first
// tensor, a mask tensor's and the log-sum-exp's data where given (nullptr: none), and labels the
// benchmark with the plan's kernel. False (the benchmark skipped with the error) where the plan
// or a run fails.
bool run_attention_plan(benchmark::State& state, const attngen_tensor& q, const attngen_tensor& k,
                        const attngen_tensor& v, const attngen_tensor& out,
                        const attngen_attention_options& opt, const void* modifier_tensor,
                        const void* mask, void* lse = nullptr) {
  attngen_attention_plan* plan = nullptr;
  if (attngen_attention_plan_create(&q, &k, &v, &out, &opt, &plan) != ATTNGEN_OK) {
    state.SkipWithError(attngen_last_error());
    return false;
  }
  attngen_attention_data data = attngen_attention_data_default();
  data.q = q.data;
  data.k = k.data;
  data.v = v.data;
  data.out = out.data;
  data.modifier_tensors[0] = modifier_tensor;
  data.mask_tensor = mask;
  data.lse = lse;
  bool ok = true;
  for (auto _ : state) {
    if (attngen_attention_plan_run(plan, &data) != ATTNGEN_OK) {
      state.SkipWithError(attngen_last_error());
      ok = false;
      break;
    }
  }
  state.SetLabel(attngen_attention_plan_kernel(plan));
  attngen_attention_plan_destroy(plan);
  return ok;
}

void alibi(benchmark::State& state, int64_t S, AlibiWay way) {
  constexpr int64_t B = 1, H = 16, D = 128;
  std::vector<float> q = random_vector(B * S * H * D, 1), k = random_vector(q.size(), 2);
  std::vector<float> v = random_vector(q.size(), 3), o(q.size());
  std::vector<float> slopes(H), bias(H * S), lse(B * H * S);
  attngen_alibi_slopes(H, slopes.data());
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t j = 0; j < S; ++j) bias[h * S + j] = slopes[h] * static_cast<float>(j);
  }
  const int64_t shape[] = {B, S, H, D}, slope_shape[] = {H}, bias_shape[] = {1, H, 1, S},
                lse_shape[] = {B, H, S};
  attngen_tensor tq = attngen_tensor_contiguous(q.data(), ATTNGEN_F32, 4, shape);
  attngen_tensor tk = attngen_tensor_contiguous(k.data(), ATTNGEN_F32, 4, shape);
  attngen_tensor tv = attngen_tensor_contiguous(v.data(), ATTNGEN_F32, 4, shape);
  attngen_tensor to = attngen_tensor_contiguous(o.data(), ATTNGEN_F32, 4, shape);
  attngen_tensor ts = attngen_tensor_contiguous(slopes.data(), ATTNGEN_F32, 1, slope_shape);
  attngen_tensor tb = attngen_tensor_contiguous(bias.data(), ATTNGEN_F32, 4, bias_shape);
  attngen_tensor tl = attngen_tensor_contiguous(lse.data(), ATTNGEN_F32, 3, lse_shape);
  attngen_modifier m{};
  m.name = "alibi";
  m.tensors[0] = &ts;
  attngen_attention_options opt = attngen_attention_options_default();
  opt.mask = ATTNGEN_MASK_CAUSAL;
  const bool modifier = way == AlibiWay::kModifier || way == AlibiWay::kModifierGeneric ||
                        way == AlibiWay::kModifierLse;
  if (modifier) opt.modifier = &m;
  if (way == AlibiWay::kModifierLse) opt.lse = &tl;
  if (way == AlibiWay::kAdditive) opt.mask_tensor = &tb;
  if (way == AlibiWay::kModifierGeneric || way == AlibiWay::kPlainGeneric) {
    const attngen_kernel_info* k = generic_kernel(128, modifier ? "alibi" : "");
    if (k == nullptr) {
      state.SkipWithError("no generic D128 kernel of this ISA");
      return;
    }
    opt.kernel = k->name;
  }
  if (!run_attention_plan(state, tq, tk, tv, to, opt, modifier ? slopes.data() : nullptr,
                          way == AlibiWay::kAdditive ? bias.data() : nullptr,
                          way == AlibiWay::kModifierLse ? lse.data() : nullptr)) {
    return;
  }
  set_gflops(state, attngen::bench::self_attention_flops(B, H, S, D, true));
}

void register_alibi() {
  const std::pair<const char*, AlibiWay> ways[] = {{"modifier", AlibiWay::kModifier},
                                                   {"modifier_generic", AlibiWay::kModifierGeneric},
                                                   {"modifier_lse", AlibiWay::kModifierLse},
                                                   {"additive", AlibiWay::kAdditive},
                                                   {"plain", AlibiWay::kPlain},
                                                   {"plain_generic", AlibiWay::kPlainGeneric}};
  for (const int64_t S : {1024, 4096}) {
    for (const auto& [name, way] : ways) {
      benchmark::RegisterBenchmark(
          ("modifier/alibi/B1_H16_S" + std::to_string(S) + "_D128_causal/" + name).c_str(), alibi,
          S, way)
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
    }
  }
}

// T5's relative position bias (an encoder's: bidirectional, 32 buckets, reach 128; B1 H16 D64,
// S 1024 and 4096) three ways, as modifier/t5_bias/<shape>/<way>: "modifier", the t5_bias
// modifier (a [32, H] table); "additive", the same bias materialised as an F32 additive mask
// [1, H, S, S], as a caller without the modifier passes it (1 GiB at S 4096); "plain_generic",
// the generic D64 kernel without a bias. Counter `bias_bytes`: what each way reads of the bias.
enum class T5Way { kModifier, kAdditive, kPlainGeneric };

void t5(benchmark::State& state, int64_t S, T5Way way) {
  constexpr int64_t B = 1, H = 16, D = 64, kBuckets = 32;
  std::vector<float> q = random_vector(B * S * H * D, 1), k = random_vector(q.size(), 2);
  std::vector<float> v = random_vector(q.size(), 3), o(q.size());
  std::vector<float> table = random_vector(kBuckets * H, 4);
  const int64_t shape[] = {B, S, H, D}, table_shape[] = {kBuckets, H};
  attngen_tensor tq = attngen_tensor_contiguous(q.data(), ATTNGEN_F32, 4, shape);
  attngen_tensor tk = attngen_tensor_contiguous(k.data(), ATTNGEN_F32, 4, shape);
  attngen_tensor tv = attngen_tensor_contiguous(v.data(), ATTNGEN_F32, 4, shape);
  attngen_tensor to = attngen_tensor_contiguous(o.data(), ATTNGEN_F32, 4, shape);
  attngen_tensor tt = attngen_tensor_contiguous(table.data(), ATTNGEN_F32, 2, table_shape);
  attngen_modifier m{};
  m.name = "t5_bias";
  m.tensors[0] = &tt;
  m.scalars[0] = 1.0f;
  m.scalars[1] = 128.0f;
  attngen_attention_options opt = attngen_attention_options_default();
  std::vector<float> bias;
  attngen_tensor tb{};
  if (way == T5Way::kModifier) opt.modifier = &m;
  if (way == T5Way::kAdditive) {
    // The buckets of the modifier's parameters, as the reference computes them.
    std::vector<int64_t> bucket(static_cast<size_t>(2 * S - 1));
    for (int64_t rel = -(S - 1); rel < S; ++rel) {
      bucket[static_cast<size_t>(rel + S - 1)] =
          attngen::test::reference_t5_bucket(rel, m.scalars[0] != 0.0f, kBuckets, m.scalars[1]);
    }
    bias.resize(static_cast<size_t>(H * S * S));
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t i = 0; i < S; ++i) {
        for (int64_t j = 0; j < S; ++j) {
          bias[static_cast<size_t>((h * S + i) * S + j)] =
              table[static_cast<size_t>(bucket[static_cast<size_t>(j - i + S - 1)] * H + h)];
        }
      }
    }
    const int64_t bias_shape[] = {1, H, S, S};
    tb = attngen_tensor_contiguous(bias.data(), ATTNGEN_F32, 4, bias_shape);
    opt.mask_tensor = &tb;
  }
  if (way == T5Way::kPlainGeneric) {
    const attngen_kernel_info* kernel = generic_kernel(64, "");
    if (kernel == nullptr) {
      state.SkipWithError("no generic D64 kernel of this ISA");
      return;
    }
    opt.kernel = kernel->name;
  }
  if (!run_attention_plan(state, tq, tk, tv, to, opt,
                          way == T5Way::kModifier ? table.data() : nullptr,
                          way == T5Way::kAdditive ? bias.data() : nullptr)) {
    return;
  }
  state.counters["bias_bytes"] = static_cast<double>(way == T5Way::kModifier   ? table.size() * 4
                                                     : way == T5Way::kAdditive ? bias.size() * 4
                                                                               : 0);
  set_gflops(state, attngen::bench::self_attention_flops(B, H, S, D, false));
}

void register_t5() {
  const std::pair<const char*, T5Way> ways[] = {{"modifier", T5Way::kModifier},
                                                {"additive", T5Way::kAdditive},
                                                {"plain_generic", T5Way::kPlainGeneric}};
  for (const int64_t S : {1024, 4096}) {
    for (const auto& [name, way] : ways) {
      benchmark::RegisterBenchmark(
          ("modifier/t5_bias/B1_H16_S" + std::to_string(S) + "_D64/" + name).c_str(), t5, S, way)
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
    }
  }
}

// A packed batch (document masking, causal inside each document): 8 documents of 64 to 1024
// tokens (3328 in all), B1 H16 D128, as modifier/document/<shape>/<way>: "modifier", the packed
// sequence with the document modifier (its kernel skips the key blocks of other documents);
// "dense", causal attention over the whole packed sequence on the kernel dispatch picks;
// "dense_generic", that on the generic D128 kernel; "separate", each document a causal call of
// its own; "one_document", the modifier with the whole sequence one document (its per-pair cost
// where there is nothing to skip). Counter `pairs`: the (query, key) pairs each way attends, for
// times per pair.
enum class DocumentWay { kModifier, kDense, kDenseGeneric, kSeparate, kOneDocument };

void documents(benchmark::State& state, DocumentWay way) {
  constexpr int64_t H = 16, D = 128;
  const int64_t lengths[] = {64, 128, 192, 256, 384, 512, 768, 1024};
  int64_t S = 0, pairs = 0;
  for (int64_t n : lengths) {
    S += n;
    pairs += n * (n + 1) / 2;
  }
  std::vector<float> q = random_vector(S * H * D, 1), k = random_vector(q.size(), 2);
  std::vector<float> v = random_vector(q.size(), 3), o(q.size());
  std::vector<int32_t> ids;
  for (int32_t d = 0; d < 8; ++d) {
    ids.insert(ids.end(), static_cast<size_t>(lengths[d]),
               way == DocumentWay::kOneDocument ? 0 : d);
  }
  const bool modifier = way == DocumentWay::kModifier || way == DocumentWay::kOneDocument;
  attngen_attention_options opt = attngen_attention_options_default();
  opt.mask = ATTNGEN_MASK_CAUSAL;
  attngen_modifier m{};
  const int64_t id_shape[] = {1, S};
  attngen_tensor tids = attngen_tensor_contiguous(ids.data(), ATTNGEN_I32, 2, id_shape);
  m.name = "document";
  m.tensors[0] = &tids;
  if (modifier) opt.modifier = &m;
  if (way == DocumentWay::kDenseGeneric) {
    const attngen_kernel_info* kernel = generic_kernel(128, "");
    if (kernel == nullptr) {
      state.SkipWithError("no generic D128 kernel of this ISA");
      return;
    }
    opt.kernel = kernel->name;
  }
  // One plan per call: the whole sequence, or each document (its rows of the packed tensors).
  std::vector<attngen_attention_plan*> plans;
  std::vector<attngen_attention_data> runs;
  std::vector<int64_t> parts;
  if (way == DocumentWay::kSeparate) {
    parts.assign(std::begin(lengths), std::end(lengths));
  } else {
    parts = {S};
  }
  int64_t start = 0;
  for (int64_t n : parts) {
    const int64_t shape[] = {1, n, H, D};
    float* rows[4] = {q.data(), k.data(), v.data(), o.data()};
    attngen_tensor t[4];
    for (int x = 0; x < 4; ++x) {
      t[x] = attngen_tensor_contiguous(rows[x] + start * H * D, ATTNGEN_F32, 4, shape);
    }
    attngen_attention_plan* plan = nullptr;
    if (attngen_attention_plan_create(&t[0], &t[1], &t[2], &t[3], &opt, &plan) != ATTNGEN_OK) {
      state.SkipWithError(attngen_last_error());
      for (attngen_attention_plan* p : plans) attngen_attention_plan_destroy(p);
      return;
    }
    plans.push_back(plan);
    attngen_attention_data data = attngen_attention_data_default();
    data.q = t[0].data;
    data.k = t[1].data;
    data.v = t[2].data;
    data.out = t[3].data;
    if (modifier) data.modifier_tensors[0] = ids.data();
    runs.push_back(data);
    start += n;
  }
  for (auto _ : state) {
    for (size_t c = 0; c < plans.size(); ++c) {
      if (attngen_attention_plan_run(plans[c], &runs[c]) != ATTNGEN_OK) {
        state.SkipWithError(attngen_last_error());
        break;
      }
    }
  }
  state.SetLabel(attngen_attention_plan_kernel(plans.back()));
  state.counters["pairs"] = static_cast<double>(
      way == DocumentWay::kModifier || way == DocumentWay::kSeparate ? pairs : S * (S + 1) / 2);
  for (attngen_attention_plan* p : plans) attngen_attention_plan_destroy(p);
}

void register_documents() {
  const std::pair<const char*, DocumentWay> ways[] = {{"modifier", DocumentWay::kModifier},
                                                      {"dense", DocumentWay::kDense},
                                                      {"dense_generic", DocumentWay::kDenseGeneric},
                                                      {"separate", DocumentWay::kSeparate},
                                                      {"one_document", DocumentWay::kOneDocument}};
  for (const auto& [name, way] : ways) {
    benchmark::RegisterBenchmark(
        (std::string("modifier/document/B1_H16_8docs_64-1024_D128_causal/") + name).c_str(),
        documents, way)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  }
}

}  // namespace

// The runtime's cost per call above its kernel (issue: a planned call within 1 us of the
// kernel's own entry point): one small attention, B1 H1 S16 D64, run three ways on the same
// buffers at the run's thread count: the kernel's descriptor entry point with Halide views made
// once ("direct"), an attention plan's run ("planned"), and attngen_attention() ("call").
// "paired" alternates batches of direct and planned runs within one benchmark (microseconds
// apart, so the machine's drift falls on both alike) and reports each one's mean time and their
// difference as counters: the figure the target is about.
enum class Through { kDirect, kPlanned, kCall, kPaired };

// Runs `direct` and `planned` in alternating batches for the benchmark's iterations; sets the
// counters direct_us, planned_us and overhead_us (means per call). False if a call failed.
template <typename Direct, typename Planned>
bool run_paired(benchmark::State& state, Direct direct, Planned planned) {
  constexpr int kBatch = 32;
  using clock = std::chrono::steady_clock;
  double direct_s = 0, planned_s = 0;
  int64_t calls = 0;
  for (auto _ : state) {
    const auto t0 = clock::now();
    for (int i = 0; i < kBatch; ++i) {
      if (!direct()) return false;
    }
    const auto t1 = clock::now();
    for (int i = 0; i < kBatch; ++i) {
      if (!planned()) return false;
    }
    const auto t2 = clock::now();
    direct_s += std::chrono::duration<double>(t1 - t0).count();
    planned_s += std::chrono::duration<double>(t2 - t1).count();
    calls += kBatch;
  }
  if (calls > 0) {
    state.counters["direct_us"] = direct_s / calls * 1e6;
    state.counters["planned_us"] = planned_s / calls * 1e6;
    state.counters["overhead_us"] = (planned_s - direct_s) / calls * 1e6;
  }
  return true;
}

// The benchmark loop of one way: direct, planned, the unplanned call, or paired (run_paired).
template <typename Direct, typename Planned, typename Call>
void run_through(benchmark::State& state, Through through, Direct direct, Planned planned,
                 Call call) {
  if (through == Through::kPaired) {
    if (!run_paired(state, direct, planned)) state.SkipWithError(attngen_last_error());
    return;
  }
  for (auto _ : state) {
    const bool ok = through == Through::kDirect    ? direct()
                    : through == Through::kPlanned ? planned()
                                                   : call();
    if (!ok) {
      state.SkipWithError(attngen_last_error());
      break;
    }
  }
}

// A Halide view of a dense tensor (dims innermost first).
struct DirectView {
  halide_buffer_t buf{};
  halide_dimension_t dims[ATTNGEN_MAX_RANK]{};
  DirectView(void* data, halide_type_t type, std::initializer_list<int64_t> shape) {
    const int rank = static_cast<int>(shape.size());
    int64_t stride = 1;
    for (int d = 0; d < rank; ++d) {
      const int64_t extent = *(shape.end() - 1 - d);
      dims[d] = {0, static_cast<int32_t>(extent), static_cast<int32_t>(stride), 0};
      stride *= extent;
    }
    buf.host = static_cast<uint8_t*>(data);
    buf.type = type;
    buf.dimensions = rank;
    buf.dim = dims;
  }
};

void overhead_attention(benchmark::State& state, Through through) {
  constexpr int64_t B = 1, H = 1, S = 16, D = 64;
  std::vector<uint8_t> q = random_tensor(B * S * H * D, ATTNGEN_F32, 1);
  std::vector<uint8_t> k = random_tensor(B * S * H * D, ATTNGEN_F32, 2);
  std::vector<uint8_t> v = random_tensor(B * S * H * D, ATTNGEN_F32, 3);
  std::vector<float> o(B * S * H * D);
  const int64_t shape[] = {B, S, H, D};
  attngen_tensor tq = attngen_tensor_contiguous(q.data(), ATTNGEN_F32, 4, shape);
  attngen_tensor tk = attngen_tensor_contiguous(k.data(), ATTNGEN_F32, 4, shape);
  attngen_tensor tv = attngen_tensor_contiguous(v.data(), ATTNGEN_F32, 4, shape);
  attngen_tensor to = attngen_tensor_contiguous(o.data(), ATTNGEN_F32, 4, shape);
  const attngen_attention_options opt = attngen_attention_options_default();
  attngen_attention_plan* plan = nullptr;
  if (attngen_attention_plan_create(&tq, &tk, &tv, &to, &opt, &plan) != ATTNGEN_OK) {
    state.SkipWithError(attngen_last_error());
    return;
  }
  const attngen_kernel_info* kernel = attngen_find_kernel(attngen_attention_plan_kernel(plan));
  int32_t kv_len = S;
  const halide_type_t f32(halide_type_float, 32), i32(halide_type_int, 32);
  DirectView hq(q.data(), f32, {B, S, H, D}), hk(k.data(), f32, {B, S, H, D});
  DirectView hv(v.data(), f32, {B, S, H, D}), ho(o.data(), f32, {B, S, H, D});
  DirectView hl(&kv_len, i32, {B});
  attngen_kernel_args args{};
  args.q = &hq.buf;
  args.k = &hk.buf;
  args.v = &hv.buf;
  args.out = &ho.buf;
  args.kv_len = &hl.buf;
  args.scale = 1.0f / std::sqrt(static_cast<float>(D));
  attngen_attention_data data = attngen_attention_data_default();
  data.q = q.data();
  data.k = k.data();
  data.v = v.data();
  data.out = o.data();
  const auto direct = [&] { return kernel->run(nullptr, &args) == 0; };
  const auto planned = [&] { return attngen_attention_plan_run(plan, &data) == ATTNGEN_OK; };
  run_through(state, through, direct, planned,
              [&] { return attngen_attention(&tq, &tk, &tv, &to, &opt) == ATTNGEN_OK; });
  state.SetLabel(kernel->name);
  attngen_attention_plan_destroy(plan);
}

// The same for one decode step: one token over 16 cached positions, Hq 32, Hkv 8, D128, an f32
// cache. "direct" gives the kernel the views of the cache a call makes (runtime/src/kv_cache.h),
// no split (what the call's automatic split is at 16 positions).
void overhead_decode(benchmark::State& state, Through through) {
  constexpr int64_t Hq = 32, Hkv = 8, D = 128, kCached = 16;
  attngen_kv_cache_options co = attngen_kv_cache_options_default();
  co.layers = 1;
  co.batch = 1;
  co.heads_kv = Hkv;
  co.head_dim_qk = D;
  co.capacity = 1024;
  attngen_kv_cache* cache = nullptr;
  if (attngen_kv_cache_create(&co, &cache) != ATTNGEN_OK) {
    state.SkipWithError(attngen_last_error());
    return;
  }
  std::vector<uint8_t> kv = random_tensor(kCached * Hkv * D, ATTNGEN_F32, 5);
  std::vector<uint8_t> q = random_tensor(Hq * D, ATTNGEN_F32, 6);
  std::vector<float> o(Hq * D);
  const int64_t kvs[] = {1, kCached, Hkv, D}, qs[] = {1, 1, Hq, D};
  attngen_tensor tkv = attngen_tensor_contiguous(kv.data(), ATTNGEN_F32, 4, kvs);
  attngen_tensor tq = attngen_tensor_contiguous(q.data(), ATTNGEN_F32, 4, qs);
  attngen_tensor to = attngen_tensor_contiguous(o.data(), ATTNGEN_F32, 4, qs);
  attngen_decode_plan* plan = nullptr;
  if (attngen_kv_cache_append(cache, 0, &tkv, &tkv, nullptr) != ATTNGEN_OK ||
      attngen_decode_plan_create(&tq, cache, 0, &to, nullptr, &plan) != ATTNGEN_OK ||
      attngen_decode(&tq, cache, 0, &to, nullptr) != ATTNGEN_OK) {
    state.SkipWithError(attngen_last_error());
    attngen_kv_cache_destroy(cache);
    return;
  }
  const attngen_kernel_info* kernel = attngen_find_kernel(attngen_last_kernel());
  using attngen::rt::HalideView;
  HalideView hq, hk, hv, ho, hl, hn, ht;
  attngen::rt::make_view(hq, tq);
  attngen::rt::make_view(ho, to);
  attngen::rt::make_view(hk, attngen::rt::cache_layer(*cache, 0, false));
  attngen::rt::make_view(hv, attngen::rt::cache_layer(*cache, 0, true));
  attngen::rt::make_view(ht, attngen::rt::cache_table(*cache));
  int32_t kv_len = kCached, q_len = 1;
  const int64_t one = 1;
  attngen::rt::make_view(hl, attngen_tensor_contiguous(&kv_len, ATTNGEN_I32, 1, &one));
  attngen::rt::make_view(hn, attngen_tensor_contiguous(&q_len, ATTNGEN_I32, 1, &one));
  attngen_kernel_args args{};
  args.q = &hq.buf;
  args.k = &hk.buf;
  args.v = &hv.buf;
  args.out = &ho.buf;
  args.kv_len = &hl.buf;
  args.q_len = &hn.buf;
  args.v_finite = 1;
  args.scale = 1.0f / std::sqrt(static_cast<float>(D));
  args.capacity = static_cast<int32_t>(co.capacity);
  args.window = -1;
  args.split_keys = kCached;
  args.units = kCached;  // (an F32 cache: slots)
  args.page_shift = cache->page_shift;
  args.block_table = &ht.buf;
  attngen_decode_data data = attngen_decode_data_default();
  data.q = q.data();
  data.out = o.data();
  const auto direct = [&] { return kernel->run(nullptr, &args) == 0; };
  const auto planned = [&] { return attngen_decode_plan_run(plan, cache, 0, &data) == ATTNGEN_OK; };
  run_through(state, through, direct, planned,
              [&] { return attngen_decode(&tq, cache, 0, &to, nullptr) == ATTNGEN_OK; });
  state.SetLabel(kernel->name);
  attngen_decode_plan_destroy(plan);
  attngen_kv_cache_destroy(cache);
}

void register_overhead() {
  const std::pair<const char*, Through> ways[] = {{"direct", Through::kDirect},
                                                  {"planned", Through::kPlanned},
                                                  {"call", Through::kCall},
                                                  {"paired", Through::kPaired}};
  for (const auto& [name, through] : ways) {
    benchmark::RegisterBenchmark((std::string("overhead/attention/B1_H1_S16_D64/") + name).c_str(),
                                 overhead_attention, through)
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark(
        (std::string("overhead/decode/B1_Hq32_Hkv8_D128_Skv16/") + name).c_str(), overhead_decode,
        through)
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
  }
}

int main(int argc, char** argv) {
  // --describe_shapes answers and ends here, before OpenBLAS's core is chosen (which may run the
  // program again with argv as given, so no flag is taken out of argv before that).
  if (const std::vector<std::string> lists = take_flag("describe_shapes", &argc, argv);
      !lists.empty()) {
    std::vector<ModelShape> shapes;
    if (!read_shape_lists(lists, &shapes)) return 1;
    print_shapes_json(shapes);
    return 0;
  }
  attngen::bench::select_openblas_core(argc, argv);
  // Our flags go before benchmark::Initialize, which rejects flags it does not know.
  take_flag("openblas_core", &argc, argv);
  std::vector<std::string> shape_lists = take_flag("shapes", &argc, argv);
  const std::vector<std::string> threads = take_flag("threads", &argc, argv);
  if (shape_lists.empty() && std::getenv("ATTNGEN_SHAPES") != nullptr) {
    shape_lists.push_back(std::getenv("ATTNGEN_SHAPES"));
  }
  std::vector<ModelShape> shapes;  // read before anything is measured: a bad file stops the run
  if (!read_shape_lists(shape_lists, &shapes)) return 1;
  g_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (!threads.empty()) {
    g_threads = std::atoi(threads.back().c_str());
    if (g_threads <= 0) {
      std::fprintf(stderr, "attngen_bench: --threads must be a positive number\n");
      return 1;
    }
  }
  attngen_set_num_threads(g_threads);
  openblas_set_num_threads(g_threads);
  benchmark::AddCustomContext("threads", std::to_string(g_threads));
  benchmark::AddCustomContext("attngen_isa", attngen_isa());
  // Where the CPU has AVX512-BF16: its dot products' multiply-adds a second over the FMAs', and
  // whether dispatch prefers the avx512bf16 kernels for it (runtime/src/internal.h).
  if (const double rate = attngen::rt::bf16_dot_rate(); rate > 0) {
    char text[64];
    std::snprintf(text, sizeof text, "%.2f (avx512bf16 kernels preferred: %s)", rate,
                  attngen::rt::extension_pays("avx512bf16") ? "yes" : "no");
    benchmark::AddCustomContext("bf16_dot_rate_vs_fma", text);
  }

  const attngen::bench::BlasCore core = attngen::bench::openblas_core();
  benchmark::AddCustomContext("openblas_core", core.running);
  benchmark::AddCustomContext("openblas_core_for_cpu", core.for_cpu);
  benchmark::AddCustomContext("openblas_core_chosen_by", core.how);
  benchmark::AddCustomContext("openblas_core_ok", core.wrong ? "no" : "yes");
  if (core.wrong) {
    std::fprintf(stderr,
                 "attngen_bench: OpenBLAS runs its %s core on a CPU its %s core serves: sgemm is "
                 "not this machine's ceiling (compare with ceiling/fma_peak)\n",
                 core.running.c_str(), core.for_cpu.c_str());
  }
  benchmark::RegisterBenchmark("openblas_sgemm", sgemm, core)
      ->Arg(2048)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
  // The arithmetic's ceilings, on one thread and on the run's: every FMA ISA of this CPU, and
  // its bf16 products' units (vdpbf16ps, AMX tiles) where it has them.
  const auto add_ceiling = [](const std::string& family, const std::string& unit, auto fn,
                              auto arg) {
    for (int t : {1, g_threads}) {
      const std::string name = "ceiling/" + family + "/" + unit + "/threads" + std::to_string(t);
      benchmark::RegisterBenchmark(name.c_str(), fn, arg, t)
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
      if (g_threads == 1) break;
    }
  };
  for (const attngen::bench::FmaIsa& isa : attngen::bench::fma_isas()) {
    add_ceiling("fma_peak", isa.name, attngen::bench::fma_peak, isa.name);
  }
  for (const std::string& unit : attngen::bench::bf16_units()) {
    add_ceiling("bf16_peak", unit, attngen::bench::bf16_peak, unit);
  }
  register_decode();
  if (!shape_lists.empty()) {
    for (const ModelShape& m : shapes) register_shape(m);
    for (const bool persistent : {false, true}) {
      const std::string name =
          (persistent ? "attngen_mha_layer/" : "attngen_mha/") + describe(kMhaLayer);
      benchmark::RegisterBenchmark(name.c_str(), mha, nullptr, ATTNGEN_MASK_NONE, kMhaLayer.b,
                                   kMhaLayer.s, kMhaLayer.e, kMhaLayer.h, persistent)
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
    }
  }
  for (const bool persistent : {false, true}) {
    benchmark::RegisterBenchmark(persistent ? "mha_decode_step/layer/B1_E768_H12_Skv1024"
                                            : "mha_decode_step/weights/B1_E768_H12_Skv1024",
                                 mha_decode_step, 1, 768, 12, 1024, persistent)
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
  }
  register_generic_price();
  register_alibi();
  register_documents();
  register_t5();
  register_overhead();
  for (size_t i = 0; i < attngen_kernel_count(); ++i) {
    const attngen_kernel_info* k = attngen_kernel_at(i);
    if (!attngen_kernel_supported(k) || k->generic) continue;
    if (k->op == ATTNGEN_OP_ATTENTION) {
      // Sparse patterns and their dense peers at growing lengths (D 64, H 8): time should
      // follow the attended pairs. Only for the kernels automatic dispatch would choose here.
      if (!std::strcmp(k->isa, attngen_isa()) && k->head_dim_qk == 64 && k->head_dim_v == 64 &&
          k->mask_tensor == ATTNGEN_MASK_TENSOR_NONE && !k->softcap && !k->weights && !k->lse) {
        for (int64_t n : {1024, 2048, 4096, 16384}) {
          const std::string name = "pattern/" + std::string(k->name) + "/S" + std::to_string(n);
          benchmark::RegisterBenchmark(name.c_str(), attention, k, Shape{1, 8, n}, GenericCall{})
              ->UseRealTime()
              ->Unit(benchmark::kMillisecond);
        }
      }
      for (const Shape s : {Shape{1, 16, 2048}, Shape{4, 12, 512}}) {
        const std::string name = std::string(k->name) + "/B" + std::to_string(s.b) + "_H" +
                                 std::to_string(s.h) + "_S" + std::to_string(s.s);
        benchmark::RegisterBenchmark(name.c_str(), attention, k, s, GenericCall{})
            ->UseRealTime()
            ->Unit(benchmark::kMillisecond);
      }
    } else if (k->op == ATTNGEN_OP_MHA) {
      const std::string name = std::string(k->name) + "/B4_S512_E768";
      benchmark::RegisterBenchmark(name.c_str(), mha, k->name, k->mask, 4, 512, 768,
                                   768 / k->head_dim_qk, false)
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
    }
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
