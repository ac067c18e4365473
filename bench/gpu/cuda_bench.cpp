// Times the CUDA attention kernels with device-resident tensors (no host copies inside the
// timed loop), FLOPs as attngen_bench counts them (bench/flops.h), one CSV line per kernel and
// shape:
//   kernel,dtype,B,H,S,D,causal,ms,gflops
// (arguments: see main)
// The kernels (D64 dense and causal in f32, f16 and bf16) are listed in cuda_bench_kernels.h,
// which bench/CMakeLists.txt writes from the variant model. Run by bench/gpu/run.sh next to
// PyTorch's scaled_dot_product_attention in the same dtype.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include <dlfcn.h>

#include "HalideBuffer.h"
#include "HalideRuntimeCuda.h"
#include "bench/flops.h"
#include "cuda_bench_kernels.h"

namespace {

using Halide::Runtime::Buffer;
using Kernel = int (*)(const void*, halide_buffer_t*, halide_buffer_t*, halide_buffer_t*,
                       halide_buffer_t*, float, float, bool, halide_buffer_t*);

struct Shape {
  int b, h, s, d;
};

// Halide's default error handler aborts: print its message instead, and let the failing call's
// error code end the run through fail() (a clear line, exit status 1).
void print_halide_error(void*, const char* msg) {
  const size_t n = std::strlen(msg);
  std::fprintf(stderr, "Halide: %s%s", msg, n > 0 && msg[n - 1] == '\n' ? "" : "\n");
}

[[noreturn]] void fail(const char* what, const char* kernel, int rc) {
  std::fprintf(stderr, "attngen_cuda_bench: %s failed for %s (Halide error %d)%s\n", what, kernel,
               rc, std::strcmp(what, "copy to device") ? "" : ": no usable CUDA device or driver?");
  std::exit(1);
}

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// f32 to bf16, rounding to nearest even; NaNs stay (quiet) NaNs.
uint16_t bf16_bits(float f) {
  const uint32_t u = bits_of(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// f32 to IEEE f16, rounding to nearest even, with f16 subnormals, overflow to infinity and NaNs.
uint16_t f16_bits(float f) {
  const uint32_t u = bits_of(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // NaN
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520: infinity
  if (a >= 0x38800000u) {                                              // normal: >= 2^-14
    const uint32_t r = a - 0x38000000u;  // exponent rebiased from 127 to 15
    return static_cast<uint16_t>(sign | ((r + 0xfffu + ((r >> 13) & 1u)) >> 13));
  }
  if (a < 0x33000000u) return static_cast<uint16_t>(sign);  // below 2^-25: zero
  // Subnormal: the significand in units of 2^-24, shifted right by 14..24 bits, ties to even.
  const uint32_t mant = (a & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126u - (a >> 23);
  uint32_t h = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1u), half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

// The Halide type of a dtype named as in the variant model and the CSV.
halide_type_t halide_type_of_dtype(const char* dtype) {
  if (!std::strcmp(dtype, "f32")) return halide_type_t(halide_type_float, 32);
  if (!std::strcmp(dtype, "f16")) return halide_type_t(halide_type_float, 16);
  if (!std::strcmp(dtype, "bf16")) return halide_type_t(halide_type_bfloat, 16);
  std::fprintf(stderr, "attngen_cuda_bench: unknown dtype %s\n", dtype);
  std::exit(1);
}

// The type the kernel's metadata gives a buffer argument (halide_type_t() if there is none).
halide_type_t argument_type(const halide_filter_metadata_t* md, const char* arg) {
  for (int i = 0; i < md->num_arguments; ++i) {
    if (!std::strcmp(md->arguments[i].name, arg)) return md->arguments[i].type;
  }
  return halide_type_t();
}

// Uniform in [-1, 1), drawn as f32 and rounded to the buffer's type, in Halide order (d, h, s, b).
Buffer<void> random_bshd(halide_type_t type, const Shape& sh, uint64_t seed) {
  Buffer<void> buf(type, sh.d, sh.h, sh.s, sh.b);  // dense: element i at data() + i
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const size_t n = buf.number_of_elements();
  if (type.bits == 32) {
    float* p = static_cast<float*>(buf.data());
    for (size_t i = 0; i < n; ++i) p[i] = dist(rng);
  } else {
    uint16_t* p = static_cast<uint16_t*>(buf.data());
    const bool bf16 = type.code == halide_type_bfloat;
    for (size_t i = 0; i < n; ++i) p[i] = bf16 ? bf16_bits(dist(rng)) : f16_bits(dist(rng));
  }
  buf.set_host_dirty();
  return buf;
}

struct Named {
  const char* name;
  Kernel fn;
  const halide_filter_metadata_t* (*metadata)();
  const char* dtype;
  bool causal;
};

double flops_of(const Shape& sh, bool causal) {
  return attngen::bench::self_attention_flops(sh.b, sh.h, sh.s, sh.d, causal);
}

// Median of `reps` timings of `iters` back-to-back calls, in ms per call.
double time_kernel(const Named& k, const Shape& sh) {
  const halide_device_interface_t* cuda = halide_cuda_device_interface();
  const halide_type_t type = halide_type_of_dtype(k.dtype);
  Buffer<void> q = random_bshd(type, sh, 1), k_in = random_bshd(type, sh, 2),
               v = random_bshd(type, sh, 3);
  Buffer<void> out(type, sh.d, sh.h, sh.s, sh.b);
  Buffer<int32_t> kv_len(sh.b);
  kv_len.fill(sh.s);
  for (halide_buffer_t* b :
       {q.raw_buffer(), k_in.raw_buffer(), v.raw_buffer(), kv_len.raw_buffer()}) {
    if (int rc = halide_copy_to_device(nullptr, b, cuda)) fail("copy to device", k.name, rc);
  }
  if (int rc = out.device_malloc(cuda)) fail("device allocation", k.name, rc);
  const float scale = 1.0f / std::sqrt(static_cast<float>(sh.d));
  auto call = [&] {
    if (int rc = k.fn(nullptr, q, k_in, v, kv_len, scale, 0.0f, true, out)) {
      fail("kernel call", k.name, rc);
    }
  };
  auto sync = [&] {
    if (int rc = out.device_sync()) fail("device sync", k.name, rc);
  };
  call();
  sync();
  // Each timing covers about 50 ms of calls (at least 3), from one more warm call's time: a
  // slow kernel must not stretch the run past a device lease.
  const auto w0 = std::chrono::steady_clock::now();
  call();
  sync();
  const double warm_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - w0).count();
  const int iters = std::max(3, static_cast<int>(50.0 / std::max(warm_ms, 1e-3)));
  std::vector<double> ms;
  for (int r = 0; r < 5; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) call();
    sync();
    const auto t1 = std::chrono::steady_clock::now();
    ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count() / iters);
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

// attngen_cuda_bench [KERNEL [S]]: every kernel and shape, or those whose name contains KERNEL
// (and whose sequence length is S), e.g. to profile one with ncu.
int main(int argc, char** argv) {
  const char* only_kernel = argc > 1 ? argv[1] : nullptr;
  const int only_s = argc > 2 ? std::atoi(argv[2]) : 0;
  halide_set_error_handler(print_halide_error);
  const Shape shapes[] = {{4, 12, 512, 64}, {8, 12, 197, 64}, {1, 16, 2048, 64}, {1, 8, 8192, 64}};
#define ATTNGEN_ROW(kernel, dtype, causal) {#kernel, kernel, kernel##_metadata, #dtype, causal},
  const Named kernels[] = {ATTNGEN_CUDA_BENCH_KERNELS(ATTNGEN_ROW)};
#undef ATTNGEN_ROW
  // The buffers' types must be the kernels': check the list against each kernel's own metadata
  // before timing anything.
  for (const Named& k : kernels) {
    const halide_type_t want = halide_type_of_dtype(k.dtype);
    const halide_filter_metadata_t* md = k.metadata();
    if (argument_type(md, "q") != want || argument_type(md, "out") != want) {
      std::fprintf(stderr, "attngen_cuda_bench: %s does not take and return %s buffers\n", k.name,
                   k.dtype);
      return 1;
    }
  }
  // Without a driver Halide's CUDA runtime reports every missing symbol; say it in one line.
  if (dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL) == nullptr) {
    std::fprintf(stderr, "attngen_cuda_bench: no CUDA driver here (%s)\n", dlerror());
    return 1;
  }
  std::printf("kernel,dtype,B,H,S,D,causal,ms,gflops\n");
  std::fflush(stdout);
  for (const Named& k : kernels) {
    if (only_kernel != nullptr && std::strstr(k.name, only_kernel) == nullptr) continue;
    for (const Shape& sh : shapes) {
      if (only_s > 0 && sh.s != only_s) continue;
      const double ms = time_kernel(k, sh);
      std::printf("%s,%s,%d,%d,%d,%d,%d,%.4f,%.1f\n", k.name, k.dtype, sh.b, sh.h, sh.s, sh.d,
                  k.causal, ms, flops_of(sh, k.causal) / ms / 1e6);
      std::fflush(stdout);
    }
  }
  return 0;
}
