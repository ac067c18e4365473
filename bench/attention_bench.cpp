// Benchmarks registered from the variant list: every built-in attention kernel this CPU can
// run, the MHA layer, and OpenBLAS sgemm as the machine's matmul ceiling, in one run.
// FLOPs follow FlashAttention's convention: 4 * B * H * Sq * Skv * D (halved for causal).
//
//   build/bench/attngen_bench --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "attngen/attngen.h"
#include "attngen/kernel.h"

namespace {

std::vector<float> random_vector(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

void set_gflops(benchmark::State& state, double flops) {
  state.counters["GFLOP/s"] = benchmark::Counter(
      flops, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

struct Shape {
  int64_t b, h, s;
};

void attention(benchmark::State& state, const attngen_kernel_info* kernel, Shape shape) {
  const int64_t B = shape.b, H = shape.h, S = shape.s;
  const int64_t Dqk = kernel->head_dim_qk, Dv = kernel->head_dim_v;
  std::vector<float> q = random_vector(B * S * H * Dqk, 1), k = random_vector(B * S * H * Dqk, 2);
  std::vector<float> v = random_vector(B * S * H * Dv, 3), o(B * S * H * Dv);
  const int64_t qs[] = {B, S, H, Dqk}, vs[] = {B, S, H, Dv};
  attngen_tensor tq = attngen_tensor_contiguous(q.data(), ATTNGEN_F32, 4, qs);
  attngen_tensor tk = attngen_tensor_contiguous(k.data(), ATTNGEN_F32, 4, qs);
  attngen_tensor tv = attngen_tensor_contiguous(v.data(), ATTNGEN_F32, 4, vs);
  attngen_tensor to = attngen_tensor_contiguous(o.data(), ATTNGEN_F32, 4, vs);
  attngen_attention_options opt = attngen_attention_options_default();
  opt.kernel = kernel->name;
  opt.mask = kernel->mask;
  if (kernel->softcap) opt.softcap = 30.0f;
  // Mask-tensor kernels get a dense [Sq, Skv] mask broadcast over batch and heads.
  std::vector<uint8_t> keep(kernel->mask_tensor == ATTNGEN_MASK_TENSOR_BOOL ? S * S : 0, 1);
  std::vector<float> add(kernel->mask_tensor == ATTNGEN_MASK_TENSOR_ADDITIVE ? S * S : 0, 0.0f);
  const int64_t ms[] = {S, S};
  attngen_tensor tm{};
  if (!keep.empty()) tm = attngen_tensor_contiguous(keep.data(), ATTNGEN_BOOL, 2, ms);
  if (!add.empty()) tm = attngen_tensor_contiguous(add.data(), ATTNGEN_F32, 2, ms);
  if (tm.data != nullptr) opt.mask_tensor = &tm;
  for (auto _ : state) {
    if (attngen_attention(&tq, &tk, &tv, &to, &opt) != ATTNGEN_OK) {
      state.SkipWithError(attngen_last_error());
      break;
    }
  }
  const double pairs = static_cast<double>(B * H) * S * S;
  const double flops = 2.0 * pairs * (Dqk + Dv) * (kernel->mask == ATTNGEN_MASK_CAUSAL ? 0.5 : 1);
  set_gflops(state, flops);
}

void mha(benchmark::State& state, const attngen_kernel_info* kernel, int64_t B, int64_t S,
         int64_t E) {
  const int64_t H = E / kernel->head_dim_qk;
  std::vector<float> x = random_vector(B * S * E, 1), in_w = random_vector(3 * E * E, 2);
  std::vector<float> out_w = random_vector(E * E, 3), y(B * S * E);
  const int64_t xs[] = {B, S, E}, iws[] = {3 * E, E}, ows[] = {E, E};
  attngen_tensor tx = attngen_tensor_contiguous(x.data(), ATTNGEN_F32, 3, xs);
  attngen_tensor ty = attngen_tensor_contiguous(y.data(), ATTNGEN_F32, 3, xs);
  attngen_tensor tiw = attngen_tensor_contiguous(in_w.data(), ATTNGEN_F32, 2, iws);
  attngen_tensor tow = attngen_tensor_contiguous(out_w.data(), ATTNGEN_F32, 2, ows);
  attngen_mha_weights w{&tiw, nullptr, &tow, nullptr};
  attngen_mha_options opt{};
  opt.num_heads = H;
  opt.mask = kernel->mask;
  opt.kernel = kernel->name;
  for (auto _ : state) {
    if (attngen_mha(&tx, &w, &ty, &opt) != ATTNGEN_OK) {
      state.SkipWithError(attngen_last_error());
      break;
    }
  }
  const double proj = 2.0 * B * S * E * (4.0 * E);
  const double attn = 4.0 * B * S * S * E * (kernel->mask == ATTNGEN_MASK_CAUSAL ? 0.5 : 1);
  set_gflops(state, proj + attn);
}

// The ceiling: single-precision GEMM n x n x n.
void sgemm(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  std::vector<float> a = random_vector(size_t(n) * n, 1), b = random_vector(size_t(n) * n, 2);
  std::vector<float> c(size_t(n) * n);
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a.data(), n, b.data(), n,
                0.0f, c.data(), n);
    benchmark::DoNotOptimize(c.data());
  }
  set_gflops(state, 2.0 * n * n * n);
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::RegisterBenchmark("openblas_sgemm", sgemm)
      ->Arg(2048)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
  for (size_t i = 0; i < attngen_kernel_count(); ++i) {
    const attngen_kernel_info* k = attngen_kernel_at(i);
    if (!attngen_kernel_supported(k)) continue;
    if (k->op == ATTNGEN_OP_ATTENTION) {
      for (const Shape s : {Shape{1, 16, 2048}, Shape{4, 12, 512}}) {
        const std::string name = std::string(k->name) + "/B" + std::to_string(s.b) + "_H" +
                                 std::to_string(s.h) + "_S" + std::to_string(s.s);
        benchmark::RegisterBenchmark(name.c_str(), attention, k, s)
            ->UseRealTime()
            ->Unit(benchmark::kMillisecond);
      }
    } else if (k->op == ATTNGEN_OP_MHA) {
      const std::string name = std::string(k->name) + "/B4_S512_E768";
      benchmark::RegisterBenchmark(name.c_str(), mha, k, 4, 512, 768)
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
    }
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
