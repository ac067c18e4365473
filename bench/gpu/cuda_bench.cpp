// Times the CUDA attention kernels with device-resident tensors (no host copies inside the
// timed loop), FlashAttention FLOP convention, one CSV line per kernel and shape:
//   kernel,B,H,S,D,causal,ms,gflops
// Run by bench/gpu/run.sh next to PyTorch's scaled_dot_product_attention.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "HalideBuffer.h"
#include "HalideRuntimeCuda.h"
// The two kernels, named by bench/CMakeLists.txt from the variant model (attngen_kernel_name).
#define ATTNGEN_STR2(x) #x
#define ATTNGEN_STR(x) ATTNGEN_STR2(x)
#include ATTNGEN_STR(ATTNGEN_DENSE_KERNEL.h)
#include ATTNGEN_STR(ATTNGEN_CAUSAL_KERNEL.h)

namespace {

using Halide::Runtime::Buffer;
using Kernel = int (*)(const void*, halide_buffer_t*, halide_buffer_t*, halide_buffer_t*,
                       halide_buffer_t*, float, float, bool, halide_buffer_t*);

struct Shape {
  int b, h, s, d;
};

Buffer<float> random_bshd(const Shape& sh, uint64_t seed) {
  Buffer<float> buf(sh.d, sh.h, sh.s, sh.b);  // Halide order: (d, h, s, b)
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  buf.for_each_value([&](float& x) { x = dist(rng); });
  return buf;
}

// Median of `reps` timings of `iters` back-to-back calls, in ms per call.
double time_kernel(Kernel fn, const Shape& sh, bool causal) {
  const halide_device_interface_t* cuda = halide_cuda_device_interface();
  Buffer<float> q = random_bshd(sh, 1), k = random_bshd(sh, 2), v = random_bshd(sh, 3);
  Buffer<float> out(sh.d, sh.h, sh.s, sh.b);
  Buffer<int32_t> kv_len(sh.b);
  kv_len.fill(sh.s);
  q.copy_to_device(cuda);
  k.copy_to_device(cuda);
  v.copy_to_device(cuda);
  kv_len.copy_to_device(cuda);
  out.device_malloc(cuda);
  const float scale = 1.0f / std::sqrt(static_cast<float>(sh.d));
  auto call = [&] {
    if (fn(nullptr, q, k, v, kv_len, scale, 0.0f, true, out) != 0) {
      std::fprintf(stderr, "kernel failed\n");
      std::exit(1);
    }
  };
  call();
  out.device_sync();
  const double flops_per_call =
      4.0 * sh.b * sh.h * static_cast<double>(sh.s) * sh.s * sh.d * (causal ? 0.5 : 1.0);
  const int iters = std::max(3, static_cast<int>(2e11 / flops_per_call));
  std::vector<double> ms;
  for (int r = 0; r < 5; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) call();
    out.device_sync();
    const auto t1 = std::chrono::steady_clock::now();
    ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count() / iters);
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

int main() {
  const Shape shapes[] = {{4, 12, 512, 64}, {8, 12, 197, 64}, {1, 16, 2048, 64}, {1, 8, 8192, 64}};
  struct Named {
    const char* name;
    Kernel fn;
    bool causal;
  };
  const Named kernels[] = {{ATTNGEN_STR(ATTNGEN_DENSE_KERNEL), ATTNGEN_DENSE_KERNEL, false},
                           {ATTNGEN_STR(ATTNGEN_CAUSAL_KERNEL), ATTNGEN_CAUSAL_KERNEL, true}};
  std::printf("kernel,B,H,S,D,causal,ms,gflops\n");
  for (const Named& k : kernels) {
    for (const Shape& sh : shapes) {
      const double ms = time_kernel(k.fn, sh, k.causal);
      const double flops =
          4.0 * sh.b * sh.h * static_cast<double>(sh.s) * sh.s * sh.d * (k.causal ? 0.5 : 1.0);
      std::printf("%s,%d,%d,%d,%d,%d,%.4f,%.1f\n", k.name, sh.b, sh.h, sh.s, sh.d, k.causal, ms,
                  flops / ms / 1e6);
      std::fflush(stdout);
    }
  }
  return 0;
}
