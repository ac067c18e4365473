// The neonfp16 kernels (f16 attention with half-precision P.V, AttentionSpec::half_pv_chunk)
// against the float64 reference: fresh random f16 inputs, the reference on the same (rounded)
// values, relative L2 error within the f16 tolerance of docs/semantics.md, every output element
// written. Skipped with a reason where the machine does not run them (no ARMv8.2-A FP16, or a
// build without neonfp16 kernels). Self-contained (the dtype rows' f16 conversions, core/dtype.h)
// until the shared testers take dtypes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "attngen/attngen.h"
#include "core/cpu_features.h"
#include "core/dtype.h"
#include "tests/reference.h"

namespace attngen::test {
namespace {

// relative L2 (docs/semantics.md, "Precision"; the f16 row of core/dtype.h)
constexpr double kF16Tolerance = attngen::dtype_row(attngen::DType::kF16).rel_l2;
// A quiet f16 NaN with a payload no arithmetic produces: outputs are filled with it first.
constexpr uint16_t kPoisonF16 = 0x7e5a;
constexpr uint32_t kPoisonF32 = 0x7fc05a5au;

struct Shape {
  int64_t batch, seq_q, seq_kv, heads_q, heads_kv, dqk, dv;
  bool causal;
  attngen_dtype out_dtype;
  const char* expect_kernel;  // how the name of the kernel that should serve the call ends
};

std::string describe(const Shape& s) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "B%lld Sq%lld Skv%lld Hq%lld Hkv%lld Dqk%lld Dv%lld%s%s",
                static_cast<long long>(s.batch), static_cast<long long>(s.seq_q),
                static_cast<long long>(s.seq_kv), static_cast<long long>(s.heads_q),
                static_cast<long long>(s.heads_kv), static_cast<long long>(s.dqk),
                static_cast<long long>(s.dv), s.causal ? " causal" : "",
                s.out_dtype == ATTNGEN_F32 ? " out f32" : "");
  return buf;
}

// Random f16 tensor in [-1, 1): the bits for the kernel, their exact values for the reference.
struct HalfTensor {
  std::vector<uint16_t> bits;
  std::vector<float> values;
  std::vector<int64_t> shape;
  HalfTensor(std::vector<int64_t> s, std::mt19937_64& rng) : shape(std::move(s)) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (int64_t i = 0; i < n; ++i) {
      bits.push_back(attngen::f32_to_f16(dist(rng)));
      values.push_back(attngen::f16_to_f32(bits.back()));
    }
  }
  View view() const {
    std::vector<int64_t> strides(shape.size());
    int64_t stride = 1;
    for (size_t d = shape.size(); d-- > 0;) {
      strides[d] = stride;
      stride *= shape[d];
    }
    return {values.data(), shape, strides};
  }
  attngen_tensor tensor() {
    return attngen_tensor_contiguous(bits.data(), ATTNGEN_F16, 4, shape.data());
  }
};

// Runs one call on the dispatch's choice (under whatever ISA is forced) and checks it; returns
// the relative L2 error.
double run_and_check(const Shape& s, std::mt19937_64& rng) {
  HalfTensor q({s.batch, s.seq_q, s.heads_q, s.dqk}, rng);
  HalfTensor k({s.batch, s.seq_kv, s.heads_kv, s.dqk}, rng);
  HalfTensor v({s.batch, s.seq_kv, s.heads_kv, s.dv}, rng);
  int64_t out_shape[4] = {s.batch, s.seq_q, s.heads_q, s.dv};
  const size_t n = static_cast<size_t>(s.batch * s.seq_q * s.heads_q * s.dv);
  std::vector<uint16_t> out16(n, kPoisonF16);
  std::vector<uint32_t> out32(n, kPoisonF32);
  attngen_tensor qt = q.tensor(), kt = k.tensor(), vt = v.tensor();
  attngen_tensor ot = s.out_dtype == ATTNGEN_F16
                          ? attngen_tensor_contiguous(out16.data(), ATTNGEN_F16, 4, out_shape)
                          : attngen_tensor_contiguous(out32.data(), ATTNGEN_F32, 4, out_shape);
  attngen_attention_options opt = attngen_attention_options_default();
  if (s.causal) opt.mask = ATTNGEN_MASK_CAUSAL;
  const attngen_status st = attngen_attention(&qt, &kt, &vt, &ot, &opt);
  EXPECT_EQ(st, ATTNGEN_OK) << attngen_status_name(st) << ": " << attngen_last_error();
  if (st != ATTNGEN_OK) return 1.0;
  const std::string kernel = attngen_last_kernel();
  const std::string want = s.expect_kernel;
  EXPECT_TRUE(kernel.size() >= want.size() &&
              kernel.compare(kernel.size() - want.size(), want.size(), want) == 0)
      << describe(s) << " ran on " << kernel << ", expected a kernel named *" << want;

  RefAttention p;
  p.causal = s.causal;
  const std::vector<double> ref = reference_attention(q.view(), k.view(), v.view(), p);
  double err2 = 0.0, ref2 = 0.0;
  size_t unwritten = 0;
  for (size_t i = 0; i < n; ++i) {
    float got;
    if (s.out_dtype == ATTNGEN_F16) {
      if (out16[i] == kPoisonF16) ++unwritten;
      got = attngen::f16_to_f32(out16[i]);
    } else {
      if (out32[i] == kPoisonF32) ++unwritten;
      std::memcpy(&got, &out32[i], 4);
    }
    err2 += (got - ref[i]) * (got - ref[i]);
    ref2 += ref[i] * ref[i];
  }
  EXPECT_EQ(unwritten, 0u) << describe(s) << ": elements left unwritten";
  const double rel = std::sqrt(err2 / ref2);
  EXPECT_LE(rel, kF16Tolerance) << describe(s) << " on " << kernel;
  std::printf("  %-52s %-52s rel L2 %.2e\n", describe(s).c_str(), kernel.c_str(), rel);
  return rel;
}

// Odd, prime and grouped-query shapes on every f16 kernel the neonfp16 row builds
// (generated/variants.cmake): specialised D64/D128, dense and causal, and the generic buckets.
const Shape kShapes[] = {
    {2, 37, 53, 4, 2, 64, 64, false, ATTNGEN_F16, "attn_f16_d64_none__aarch64_neonfp16"},
    {1, 1, 300, 2, 1, 64, 64, false, ATTNGEN_F16, "attn_f16_d64_none__aarch64_neonfp16"},
    {2, 53, 53, 4, 4, 64, 64, true, ATTNGEN_F16, "attn_f16_d64_causal__aarch64_neonfp16"},
    {1, 19, 131, 3, 1, 64, 64, true, ATTNGEN_F16, "attn_f16_d64_causal__aarch64_neonfp16"},
    {1, 33, 70, 2, 2, 128, 128, false, ATTNGEN_F16, "attn_f16_d128_none__aarch64_neonfp16"},
    {2, 17, 40, 4, 2, 128, 128, true, ATTNGEN_F16, "attn_f16_d128_causal__aarch64_neonfp16"},
    {1, 29, 61, 4, 2, 96, 80, false, ATTNGEN_F16, "generic__aarch64_neonfp16"},
    {1, 23, 47, 2, 1, 200, 136, true, ATTNGEN_F16, "generic__aarch64_neonfp16"},
    {1, 21, 45, 2, 2, 80, 112, false, ATTNGEN_F32, "f16outf32_d128_generic__aarch64_neonfp16"},
};

class NeonFp16 : public ::testing::Test {
 protected:
  void TearDown() override { attngen_set_isa(nullptr); }
};

TEST_F(NeonFp16, F16AttentionWithinTolerance) {
  const attngen_status st = attngen_set_isa("neonfp16");
  if (st != ATTNGEN_OK) {
    GTEST_SKIP() << "neonfp16 kernels do not run here (" << attngen_status_name(st) << ": "
                 << attngen_last_error() << ")";
  }
  std::mt19937_64 rng(std::random_device{}());
  double worst = 0.0;
  for (const Shape& s : kShapes) worst = std::max(worst, run_and_check(s, rng));
  std::printf("  worst relative L2 error %.2e (tolerance %.0e)\n", worst, kF16Tolerance);
}

// Without a forced ISA an f16 call runs on neonfp16 exactly where the CPU has FP16 arithmetic,
// and on the f32-arithmetic neon kernels elsewhere (under qemu -cpu cortex-a57 as well).
TEST_F(NeonFp16, DispatchFollowsTheCpu) {
#if !defined(__aarch64__)
  GTEST_SKIP() << "an aarch64 test (neonfp16 kernels are built for aarch64 only)";
#else
  const bool fp16 = cpu_feature("asimdhp");
  std::mt19937_64 rng(std::random_device{}());
  Shape s{1,
          9,
          40,
          2,
          1,
          64,
          64,
          true,
          ATTNGEN_F16,
          fp16 ? "attn_f16_d64_causal__aarch64_neonfp16" : "attn_f16_d64_causal__aarch64_neon"};
  run_and_check(s, rng);
  if (!fp16) {
    EXPECT_EQ(attngen_set_isa("neonfp16"), ATTNGEN_ERROR_UNSUPPORTED_TARGET)
        << "a CPU without asimdhp must refuse neonfp16";
  }
#endif
}

}  // namespace
}  // namespace attngen::test
