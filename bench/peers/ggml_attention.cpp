// Peer: ggml's flash attention (ggml_flash_attn_ext, the CPU backend llama.cpp decodes with), for
// attention over shape files and for one decode step over a KV cache of a given type.
//
//   bench/peers/ggml_build.sh                      # fetches ggml and builds this (bench/out/ggml)
//   bench/out/ggml/ggml_attention --threads 2 [--min-time 0.5] [--kv f16] bench/shapes/*.txt
//   bench/out/ggml/ggml_attention --threads 2 --decode [--kv f16|bf16|q8_0|f32] [--skv 8192]
//
// Attention: Q F32, K and V in the --kv type (f16 by default: what llama.cpp keeps its cache in),
// one head's rows contiguous ([B, H, S, D] in ggml's innermost-first order D, S, H, B), scale
// 1/sqrt(D); causal by ggml's F16 mask [S, S] (0 or -inf). Decode: B1, one query of
// Hq 32 heads over Skv cached positions of Hkv 8 heads, D128 (Llama-3-8B's layer, the shape of
// attngen_bench's decode_cache benchmarks). Inputs are uniform in [-1, 1). Shape files are read
// and FLOPs counted by attngen_bench's own code (bench/shapes.h, bench/flops.h). Prints one JSON
// line per case, as bench/peers/common.py's emit(): peer, shape, ms (median), gflops, threads, kv.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench/shapes.h"
#include "ggml-cpu.h"
#include "ggml.h"

namespace {

using attngen::bench::ModelShape;

ggml_type kv_type(const std::string& name) {
  if (name == "f16") return GGML_TYPE_F16;
  if (name == "q8_0") return GGML_TYPE_Q8_0;
  if (name == "bf16") return GGML_TYPE_BF16;
  if (name == "f32") return GGML_TYPE_F32;
  std::fprintf(stderr, "ggml_attention: --kv takes f16, bf16, q8_0 or f32, not %s\n", name.c_str());
  std::exit(2);
}

// Fills t (of any type) from uniform floats in [-1, 1), converted by ggml's own routine.
void fill(ggml_tensor* t, std::mt19937_64& rng) {
  const int64_t n = ggml_nelements(t);
  std::vector<float> x(static_cast<size_t>(n));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (float& v : x) v = u(rng);
  if (t->type == GGML_TYPE_F32) {
    std::memcpy(t->data, x.data(), x.size() * sizeof(float));
  } else if (t->type == GGML_TYPE_F16) {
    ggml_fp32_to_fp16_row(x.data(), static_cast<ggml_fp16_t*>(t->data), n);
  } else if (t->type == GGML_TYPE_BF16) {
    ggml_fp32_to_bf16_row(x.data(), static_cast<ggml_bf16_t*>(t->data), n);
  } else {
    const int64_t row = t->ne[0];
    ggml_quantize_chunk(t->type, x.data(), t->data, 0, n / row, row, nullptr);
  }
}

struct Timing {
  double ms;
  int threads;
};

// Median time of ggml_graph_compute over the graph of `out`: two warm-up runs, then at least 3
// timed runs, more while their total is under min_time seconds (at most 100).
Timing time_graph(ggml_context* ctx, ggml_tensor* out, int threads, double min_time) {
  ggml_cgraph* graph = ggml_new_graph(ctx);
  ggml_build_forward_expand(graph, out);
  ggml_cplan plan = ggml_graph_plan(graph, threads, nullptr);
  std::vector<uint8_t> work(plan.work_size);
  plan.work_data = work.data();
  for (int i = 0; i < 2; ++i) ggml_graph_compute(graph, &plan);
  std::vector<double> samples;
  double total = 0;
  while (samples.size() < 3 || (total < min_time && samples.size() < 100)) {
    const auto start = std::chrono::steady_clock::now();
    ggml_graph_compute(graph, &plan);
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    samples.push_back(s);
    total += s;
  }
  std::sort(samples.begin(), samples.end());
  return {samples[samples.size() / 2] * 1e3, plan.n_threads};
}

ggml_context* new_context(size_t data_bytes) {
  ggml_init_params params{};
  params.mem_size = data_bytes + 64 * ggml_tensor_overhead() + ggml_graph_overhead() + (1 << 20);
  params.mem_buffer = nullptr;
  params.no_alloc = false;
  return ggml_init(params);
}

// ggml's causal mask for Sq = Skv = s: F16 [s, s], 0 where key j <= query i, else -inf.
ggml_tensor* causal_mask(ggml_context* ctx, int64_t s) {
  ggml_tensor* mask = ggml_new_tensor_2d(ctx, GGML_TYPE_F16, s, s);
  auto* m = static_cast<ggml_fp16_t*>(mask->data);
  for (int64_t i = 0; i < s; ++i) {
    for (int64_t j = 0; j < s; ++j) m[i * s + j] = ggml_fp32_to_fp16(j <= i ? 0.0f : -INFINITY);
  }
  return mask;
}

// Element i of an F32 or F16 tensor (the check's).
float element(const ggml_tensor* t, int64_t i) {
  if (t->type == GGML_TYPE_F32) return static_cast<const float*>(t->data)[i];
  return ggml_fp16_to_fp32(static_cast<const ggml_fp16_t*>(t->data)[i]);
}

// The layouts and the mask as this peer uses them, checked once against a float64 reference on a
// small causal case with grouped heads (K and V taken as stored): a peer that computed something
// else would make its timings meaningless. Returns the relative L2 error.
double check() {
  const int64_t d = 64, s = 37, h = 4, hkv = 2;
  ggml_context* ctx = new_context(1 << 20);
  ggml_tensor* q = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, d, s, h, 1);
  ggml_tensor* k = ggml_new_tensor_4d(ctx, GGML_TYPE_F16, d, s, hkv, 1);
  ggml_tensor* v = ggml_new_tensor_4d(ctx, GGML_TYPE_F16, d, s, hkv, 1);
  std::mt19937_64 rng(3);
  for (ggml_tensor* t : {q, k, v}) fill(t, rng);
  ggml_tensor* mask = causal_mask(ctx, s);
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  ggml_tensor* out = ggml_flash_attn_ext(ctx, q, k, v, mask, scale, 0, 0);
  time_graph(ctx, out, 1, 0);
  double err = 0, norm = 0;
  for (int64_t hh = 0; hh < h; ++hh) {
    const int64_t kh = hh / (h / hkv);
    for (int64_t i = 0; i < s; ++i) {
      std::vector<double> p(static_cast<size_t>(i + 1));
      double mx = -1e300, sum = 0;
      for (int64_t j = 0; j <= i; ++j) {
        double dot = 0;
        for (int64_t c = 0; c < d; ++c) {
          dot += double(element(q, c + d * (i + s * hh))) * element(k, c + d * (j + s * kh));
        }
        p[j] = dot * scale;
        mx = std::max(mx, p[j]);
      }
      for (double& x : p) sum += (x = std::exp(x - mx));
      for (int64_t c = 0; c < d; ++c) {
        double ref = 0;
        for (int64_t j = 0; j <= i; ++j) ref += p[j] * element(v, c + d * (j + s * kh));
        ref /= sum;
        const double got = element(out, c + d * (hh + h * i));  // [Dv, H, S]: permuted
        err += (got - ref) * (got - ref);
        norm += ref * ref;
      }
    }
  }
  ggml_free(ctx);
  return std::sqrt(err / norm);
}

void emit(const char* peer, const std::string& shape, const Timing& t, double flops,
          const std::string& kv) {
  std::printf(
      "{\"peer\": \"%s\", \"shape\": \"%s\", \"ms\": %.4f, \"gflops\": %.2f, \"threads\": %d, "
      "\"kv\": \"%s\", \"version\": \"ggml %s\"}\n",
      peer, shape.c_str(), t.ms, flops / t.ms / 1e6, t.threads, kv.c_str(), ggml_version());
  std::fflush(stdout);
}

void attention(const ModelShape& s, const std::string& kv, int threads, double min_time) {
  const ggml_type type = kv_type(kv);
  const size_t bytes =
      static_cast<size_t>(s.b * s.h * s.s * s.d) * 4 * 4 + static_cast<size_t>(s.s * s.s) * 2;
  ggml_context* ctx = new_context(bytes);
  ggml_tensor* q = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, s.d, s.s, s.h, s.b);
  ggml_tensor* k = ggml_new_tensor_4d(ctx, type, s.d, s.s, s.h, s.b);
  ggml_tensor* v = ggml_new_tensor_4d(ctx, type, s.d, s.s, s.h, s.b);
  std::mt19937_64 rng(1);
  for (ggml_tensor* t : {q, k, v}) fill(t, rng);
  ggml_tensor* mask = s.causal ? causal_mask(ctx, s.s) : nullptr;
  ggml_tensor* out =
      ggml_flash_attn_ext(ctx, q, k, v, mask, 1.0f / std::sqrt(static_cast<float>(s.d)), 0, 0);
  const Timing t = time_graph(ctx, out, threads, min_time);
  emit("ggml_fa", s.name, t, attngen::bench::flops_of(s), kv);
  ggml_free(ctx);
}

void decode(int64_t skv, const std::string& kv, int threads, double min_time) {
  const ggml_type type = kv_type(kv);
  const int64_t hq = 32, hkv = 8, d = 128;
  const size_t bytes = static_cast<size_t>(2 * skv * hkv * d) * 4 + hq * d * 8;
  ggml_context* ctx = new_context(bytes);
  ggml_tensor* q = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, d, 1, hq, 1);
  ggml_tensor* k = ggml_new_tensor_4d(ctx, type, d, skv, hkv, 1);
  ggml_tensor* v = ggml_new_tensor_4d(ctx, type, d, skv, hkv, 1);
  std::mt19937_64 rng(2);
  for (ggml_tensor* t : {q, k, v}) fill(t, rng);
  ggml_tensor* out =
      ggml_flash_attn_ext(ctx, q, k, v, nullptr, 1.0f / std::sqrt(static_cast<float>(d)), 0, 0);
  const Timing t = time_graph(ctx, out, threads, min_time);
  const std::string shape = "B1_Sq1_Hq32_Hkv8_D128_Skv" + std::to_string(skv);
  // The bytes of K and V read, as attngen_bench's decode benchmarks count them.
  const double gb = static_cast<double>(ggml_nbytes(k) + ggml_nbytes(v)) / 1e9;
  std::printf(
      "{\"peer\": \"ggml_fa_decode\", \"shape\": \"%s\", \"ms\": %.4f, \"gbps\": %.2f, "
      "\"threads\": %d, \"kv\": \"%s\", \"version\": \"ggml %s\"}\n",
      shape.c_str(), t.ms, gb / (t.ms / 1e3), t.threads, kv.c_str(), ggml_version());
  std::fflush(stdout);
  ggml_free(ctx);
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 1;
  double min_time = 0.5;
  std::string kv = "f16";
  bool decode_mode = false;
  int64_t skv = 8192;
  std::vector<ModelShape> shapes;
  std::string error;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--threads" && has_value) {
      threads = std::atoi(argv[++i]);
    } else if (a == "--min-time" && has_value) {
      min_time = std::atof(argv[++i]);
    } else if (a == "--kv" && has_value) {
      kv = argv[++i];
    } else if (a == "--skv" && has_value) {
      skv = std::atoll(argv[++i]);
    } else if (a == "--decode") {
      decode_mode = true;
    } else if (a.rfind("--", 0) == 0) {
      std::fprintf(stderr, "ggml_attention: unknown option %s\n", a.c_str());
      return 2;
    } else if (!attngen::bench::read_shape_file(argv[i], &shapes, &error)) {
      std::fprintf(stderr, "ggml_attention: %s\n", error.c_str());
      return 2;
    }
  }
  if (threads < 1 || skv < 1) {
    std::fprintf(stderr, "ggml_attention: --threads and --skv take positive numbers\n");
    return 2;
  }
  ggml_cpu_init();
  // f16 K and V taken as stored, Q rounded to f16 by ggml's K.Q: within f16's tolerance.
  if (const double err = check(); !(err <= 5e-3)) {
    std::fprintf(stderr, "ggml_attention: self-check failed, relative L2 error %g\n", err);
    return 1;
  }
  if (decode_mode) {
    decode(skv, kv, threads, min_time);
    return 0;
  }
  for (const ModelShape& s : shapes) attention(s, kv, threads, min_time);
  return 0;
}
