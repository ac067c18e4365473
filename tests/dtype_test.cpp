// F16 and BF16 tensors: the runtime's element conversions against the tests' own, dispatch to
// kernels of the call's dtypes, and the conversion that runs on an F32 kernel the calls no kernel
// of their dtypes takes (docs/semantics.md, "Precision and tolerance").
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "attngen/attngen.h"
#include "attngen/kernel.h"
#include "runtime/src/convert.h"
#include "runtime/src/internal.h"
#include "tests/attention_tester.h"
#include "tests/tensor.h"

namespace attngen::test {
namespace {

float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// The runtime's widening equals the tests' for every one of the 2^16 bit patterns (NaN for NaN,
// with its sign).
template <typename T>
void check_widening(float (*widen)(uint16_t)) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const double want = ElementTraits<T>::to_double(T{static_cast<uint16_t>(h)});
    const float got = widen(static_cast<uint16_t>(h));
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << std::hex << h;
      ASSERT_EQ(std::signbit(got), (h & 0x8000) != 0) << std::hex << h;
    } else {
      ASSERT_EQ(static_cast<double>(got), want) << std::hex << h;
    }
  }
}

// The runtime's rounding equals the tests' (one rounding from the exact value) at every tie
// between two neighbouring values of T and one float ulp either side of it, at the overflow
// threshold, on infinities and NaNs, and on random floats.
template <typename T>
void check_rounding(uint16_t (*narrow)(float)) {
  using Traits = ElementTraits<T>;
  const auto expect = [&](float f) {
    const uint16_t got = narrow(f);
    if (std::isnan(f)) {
      ASSERT_TRUE(std::isnan(Traits::to_double(T{got}))) << f;
      ASSERT_EQ((got & 0x8000) != 0, std::signbit(f)) << "sign of NaN";
      return;
    }
    ASSERT_EQ(got, Traits::from_double(f).bits) << std::hexfloat << f;
  };
  const uint16_t inf = Traits::from_double(std::numeric_limits<double>::infinity()).bits;
  for (uint16_t h = 0; h < inf; ++h) {  // every finite positive value and its successor
    const double lo = Traits::to_double(T{h}),
                 hi = Traits::to_double(T{static_cast<uint16_t>(h + 1)});
    const float mid = static_cast<float>((lo + hi) / 2);  // exact in float
    ASSERT_EQ(static_cast<double>(mid), (lo + hi) / 2);
    for (const float f :
         {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, HUGE_VALF), static_cast<float>(lo)}) {
      expect(f);
      expect(-f);
    }
  }
  expect(std::numeric_limits<float>::infinity());
  expect(-std::numeric_limits<float>::infinity());
  expect(std::numeric_limits<float>::max());
  expect(std::numeric_limits<float>::denorm_min());
  expect(float_of(0x7fc00000u));  // quiet NaN
  expect(float_of(0xffa00001u));  // negative signalling NaN with a low payload
  expect(float_of(0x7f800001u));
  std::mt19937_64 rng(fresh_seed());
  std::uniform_int_distribution<uint32_t> any;
  for (int i = 0; i < (1 << 18); ++i) expect(float_of(any(rng)));
}

TEST(Conversion, F16Widening) { check_widening<Half>(rt::f16_to_f32); }
TEST(Conversion, Bf16Widening) { check_widening<BFloat16>(rt::bf16_to_f32); }
// The runtime's vectorised span conversions give exactly the element conversions' bits, for
// every 16-bit pattern (NaN payloads, subnormals and signed zeros included), at every alignment.
TEST(Conversion, SpansAsElements) {
  std::vector<uint16_t> all(65536 + 3);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i * 40503u + 17u);
  std::vector<float> got(all.size());
  for (int64_t offset : {0, 1, 3}) {
    const int64_t n = 65536;
    std::fill(got.begin(), got.end(), -7.0f);
    rt::f16_to_f32_n(all.data() + offset, got.data() + offset, n);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(bits_of(got[offset + i]), bits_of(rt::f16_to_f32(all[offset + i])))
          << std::hex << all[offset + i];
    }
    std::fill(got.begin(), got.end(), -7.0f);
    rt::bf16_to_f32_n(all.data() + offset, got.data() + offset, n);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(bits_of(got[offset + i]), bits_of(rt::bf16_to_f32(all[offset + i])))
          << std::hex << all[offset + i];
    }
  }
}
TEST(Conversion, F16Rounding) { check_rounding<Half>(rt::f32_to_f16); }
TEST(Conversion, Bf16Rounding) { check_rounding<BFloat16>(rt::f32_to_bf16); }

// Spot checks the tests' conversions themselves against values known from the formats.
TEST(Conversion, KnownValues) {
  using H = ElementTraits<Half>;
  using B = ElementTraits<BFloat16>;
  EXPECT_EQ(H::from_double(1.0).bits, 0x3c00);
  EXPECT_EQ(H::from_double(65504.0).bits, 0x7bff);          // the largest f16
  EXPECT_EQ(H::from_double(65519.99).bits, 0x7bff);         // below the halfway point
  EXPECT_EQ(H::from_double(65520.0).bits, 0x7c00);          // halfway: to even, Inf
  EXPECT_EQ(H::from_double(std::ldexp(1.0, -24)).bits, 1);  // the smallest subnormal
  EXPECT_EQ(H::from_double(std::ldexp(1.0, -25)).bits, 0);  // halfway to 0: to even
  EXPECT_EQ(H::from_double(std::ldexp(3.0, -25)).bits, 2);  // 1.5 ulp: to even, 2
  EXPECT_EQ(H::from_double(-2.0).bits, 0xc000);
  EXPECT_EQ(H::from_double(1.0 + std::ldexp(1.0, -11)).bits, 0x3c00);  // tie to even
  EXPECT_EQ(H::from_double(1.0 + 3 * std::ldexp(1.0, -11)).bits, 0x3c02);
  EXPECT_EQ(H::to_double({0x0001}), std::ldexp(1.0, -24));
  EXPECT_EQ(B::from_double(1.0).bits, 0x3f80);
  EXPECT_EQ(B::from_double(3.0e38).bits, 0x7f62);
  EXPECT_EQ(B::from_double(std::numeric_limits<float>::max()).bits, 0x7f80);  // rounds to Inf
  EXPECT_EQ(B::from_double(1.0 + std::ldexp(1.0, -8)).bits, 0x3f80);          // tie to even
  EXPECT_EQ(rt::f32_to_bf16(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(rt::f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(rt::f32_to_f16(65520.0f), 0x7c00);  // the overflow threshold, both sides
  EXPECT_EQ(rt::f32_to_f16(std::nextafter(65520.0f, 0.0f)), 0x7bff);
  EXPECT_EQ(rt::f32_to_f16(-std::ldexp(1.0f, -25)), 0x8000);
  EXPECT_EQ(rt::f32_to_f16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(bits_of(rt::f16_to_f32(0x7bff)), bits_of(65504.0f));
}

// The first built kernel that `pred` accepts, or nullptr.
template <typename Pred>
const attngen_kernel_info* find_first(const Pred& pred) {
  for (size_t i = 0; i < attngen_kernel_count(); ++i) {
    const attngen_kernel_info* k = attngen_kernel_at(i);
    if (pred(*k)) return k;
  }
  return nullptr;
}

// The first kernel of an op whose q (or x) has this dtype, of the given ISA (any: nullptr).
const attngen_kernel_info* first_kernel(attngen_op op, attngen_dtype dtype, const char* isa) {
  return find_first([&](const attngen_kernel_info& k) {
    return k.op == op && k.dtypes.q == dtype && (isa == nullptr || !std::strcmp(k.isa, isa));
  });
}

struct RestoreIsa {
  ~RestoreIsa() { attngen_set_isa(nullptr); }
};

// Whether the build has a generic kernel of `op` with q in `dtype`, output in `out` and head dims
// up to at least `head_dim` (a filtered build may have none).
bool has_generic_kernel(attngen_op op, attngen_dtype dtype, attngen_dtype out, int64_t head_dim) {
  return find_first([&](const attngen_kernel_info& k) {
           return k.op == op && k.generic && k.dtypes.q == dtype && k.dtypes.out == out &&
                  k.head_dim_qk >= head_dim;
         }) != nullptr;
}

// The kernel that the last call ran.
const attngen_kernel_info* ran() {
  const attngen_kernel_info* k = attngen_find_kernel(attngen_last_kernel());
  EXPECT_NE(k, nullptr) << "last kernel '" << attngen_last_kernel() << "'";
  return k;
}

// A bf16 call runs a bf16 kernel: the amx one (AMX tiles) where it is built and this CPU runs
// it, else the avx512bf16 one (vdpbf16ps) where it is built, this CPU runs it and its dot
// products pay here (rt::extension_pays), else the avx512 one; each extension's kernel also when
// it is forced (and its base's kernels for other calls); with "avx512" forced, the avx512 bf16
// kernel.
TEST(DtypeDispatch, Bf16CallRunsBf16Kernel) {
  RestoreIsa restore;
  if (first_kernel(ATTNGEN_OP_ATTENTION, ATTNGEN_BF16, nullptr) == nullptr) {
    GTEST_SKIP() << "no bf16 attention kernel is built";
  }
  AttentionTester t;
  t.batch(2).heads(4, 2).seq(19, 33).head_dim(64).causal().dtype(ATTNGEN_BF16);
  t.Test();
  const attngen_kernel_info* k = ran();
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->dtypes.q, ATTNGEN_BF16) << k->name;
  EXPECT_EQ(k->dtypes.out, ATTNGEN_BF16) << k->name;
  EXPECT_FALSE(k->generic) << k->name << ": a specialised bf16 D64 causal kernel is built";

  const attngen_kernel_info* avx512 = first_kernel(ATTNGEN_OP_ATTENTION, ATTNGEN_BF16, "avx512");
  if (avx512 != nullptr && attngen_kernel_supported(avx512)) {
    ASSERT_EQ(attngen_set_isa("avx512"), ATTNGEN_OK) << attngen_last_error();
    t.Test();
    k = ran();
    ASSERT_NE(k, nullptr);
    EXPECT_STREQ(k->isa, "avx512") << k->name;
    EXPECT_EQ(k->dtypes.q, ATTNGEN_BF16) << k->name;
    attngen_set_isa(nullptr);
  }

  const attngen_kernel_info* amx = first_kernel(ATTNGEN_OP_ATTENTION, ATTNGEN_BF16, "amx");
  const bool amx_runs = amx != nullptr && attngen_kernel_supported(amx);
  if (amx_runs) {
    t.Test();
    EXPECT_STREQ(ran()->isa, "amx") << ran()->name;
    ASSERT_EQ(attngen_set_isa("amx"), ATTNGEN_OK) << attngen_last_error();
    t.Test();
    EXPECT_STREQ(ran()->isa, "amx");
    AttentionTester().batch(1).heads(2, 2).seq(9, 17).head_dim(64).Test();
    EXPECT_STREQ(ran()->isa, "avx512");
    attngen_set_isa(nullptr);
  }

  const attngen_kernel_info* ext = first_kernel(ATTNGEN_OP_ATTENTION, ATTNGEN_BF16, "avx512bf16");
  if (ext == nullptr) GTEST_SKIP() << "no avx512bf16 kernel is built (ATTNGEN_KERNEL_ISAS)";
  if (!attngen_kernel_supported(ext)) GTEST_SKIP() << "this CPU lacks AVX512-BF16";
  t.Test();
  k = ran();
  ASSERT_NE(k, nullptr);
  const bool pays = rt::extension_pays("avx512bf16");
  EXPECT_STREQ(k->isa, amx_runs ? "amx"
                       : pays   ? "avx512bf16"
                                : "avx512")
      << k->name << ": the preferred ISA for bf16, the dot products doing " << rt::bf16_dot_rate()
      << "x the FMAs' multiply-adds a second here";
  ASSERT_EQ(attngen_set_isa("avx512bf16"), ATTNGEN_OK) << attngen_last_error();
  t.Test();
  EXPECT_STREQ(ran()->isa, "avx512bf16");
  // The extension admits its base ISA: an f32 call runs the avx512 kernel.
  AttentionTester().batch(1).heads(2, 2).seq(9, 17).head_dim(64).Test();
  EXPECT_STREQ(ran()->isa, "avx512");
}

// The rate that decides between the avx512bf16 and avx512 kernels is measured on this CPU: where
// it has AVX512-BF16 a positive, plausible ratio (a 512-bit vdpbf16ps does 32 multiply-adds,
// an FMA 16: between a quarter and 4x the FMAs' rate on any CPU so far), the same on every ask
// (measured once), and the choice follows it; where it has none, 0 and never preferred.
TEST(DtypeDispatch, Bf16DotRateDecidesTheExtension) {
  const double rate = rt::bf16_dot_rate();
  EXPECT_EQ(rt::bf16_dot_rate(), rate);
#if defined(__x86_64__)
  const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16");
#else
  const bool has = false;
#endif
  if (has) {
    EXPECT_GT(rate, 0.25);
    EXPECT_LT(rate, 4.0);
  } else {
    EXPECT_EQ(rate, 0.0);
  }
  EXPECT_EQ(rt::extension_pays("avx512bf16"), rate >= rt::kBf16DotRateThatPays);
  EXPECT_TRUE(rt::extension_pays("neonfp16"));
}

// F16 and BF16 calls run kernels of their dtypes wherever one fits: specialised, generic (head
// dims within the buckets built for the dtype), and f32 output of f16 / bf16 inputs.
TEST(DtypeDispatch, NativeKernelsWhereTheyFit) {
  // The kernel the last call ran (never null past the ASSERT, which returns from the lambda and
  // fails the test).
  const attngen_kernel_info* k = nullptr;
  const auto last = [&k] {
    k = ran();
    ASSERT_NE(k, nullptr);
  };
  const attngen_op op = ATTNGEN_OP_ATTENTION;
  for (const attngen_dtype dtype : {ATTNGEN_F16, ATTNGEN_BF16}) {
    SCOPED_TRACE(dtype);
    if (first_kernel(op, dtype, nullptr) == nullptr) continue;
    AttentionTester().heads(2, 1).seq(20, 31).head_dim(128).dtype(dtype).Test();
    ASSERT_NO_FATAL_FAILURE(last());
    EXPECT_EQ(k->dtypes.q, dtype) << k->name;
    // Head dims no specialised kernel has run on the generic kernels of the dtype, where the
    // build has them (a filtered build may keep only specialised ones).
    if (has_generic_kernel(op, dtype, dtype, 96)) {
      AttentionTester().heads(2, 2).seq(13, 40).head_dim(96, 72).causal().dtype(dtype).Test();
      ASSERT_NO_FATAL_FAILURE(last());
      EXPECT_TRUE(k->generic && k->dtypes.q == dtype) << k->name;
    }
    if (has_generic_kernel(op, dtype, dtype, 200)) {
      AttentionTester().heads(3, 1).seq(17, 17).head_dim(200).kv_len({9}).dtype(dtype).Test();
      ASSERT_NO_FATAL_FAILURE(last());
      EXPECT_TRUE(k->dtypes.q == dtype && k->head_dim_qk == 256) << k->name;
    }
    if (has_generic_kernel(op, dtype, ATTNGEN_F32, 80)) {
      AttentionTester()
          .heads(2, 2)
          .seq(21, 21)
          .head_dim(80)
          .dtype(dtype)
          .out_dtype(ATTNGEN_F32)
          .Test();
      ASSERT_NO_FATAL_FAILURE(last());
      EXPECT_TRUE(k->dtypes.q == dtype && k->dtypes.out == ATTNGEN_F32) << k->name;
    }
  }
}

// Every valid call runs: where no kernel of the call's dtypes fits, the runtime converts q, k
// and v to F32, runs the F32 kernel (which attngen_last_kernel() names) and rounds its output
// into the call's. Strided and fused views, key padding and masks go through the conversion.
TEST(DtypeConversion, CallsNoKernelOfTheDtypeTakes) {
  for (const attngen_dtype dtype : {ATTNGEN_F16, ATTNGEN_BF16}) {
    SCOPED_TRACE(dtype);
    const auto expect_f32_kernel = [] {
      const attngen_kernel_info* k = ran();
      ASSERT_NE(k, nullptr);
      EXPECT_EQ(k->dtypes.q, ATTNGEN_F32) << k->name;
      EXPECT_EQ(k->dtypes.out, ATTNGEN_F32) << k->name;
    };
    // A window pattern.
    AttentionTester()
        .batch(2)
        .heads(4, 2)
        .seq(70, 90)
        .head_dim(64)
        .pattern(attngen_pattern_local(9))
        .causal()
        .dtype(dtype)
        .Test();
    expect_f32_kernel();
    // The attention weights and log-sum-exp outputs (F32), strided views.
    AttentionTester()
        .heads(2, 1)
        .seq(23, 37)
        .head_dim(64)
        .weights()
        .lse()
        .padded(2)
        .dtype(dtype)
        .Test();
    expect_f32_kernel();
    // A head dim past every bucket of the dtype (D512 runs on the f32 generic D512).
    AttentionTester().heads(2, 1).seq(9, 14).head_dim(512, 300).causal().dtype(dtype).Test();
    expect_f32_kernel();
    // F32 output of f16 / bf16 inputs at D256 (the out-f32 kernels stop at D128), fused QKV.
    AttentionTester()
        .batch(2)
        .heads(2, 2)
        .seq(15, 15)
        .head_dim(256)
        .fused_qkv()
        .dtype(dtype)
        .out_dtype(ATTNGEN_F32)
        .Test();
    expect_f32_kernel();
    // Mask tensors and key padding, padded views, and a block-sparse layout.
    AttentionTester()
        .batch(2)
        .heads(2, 2)
        .seq(31, 45)
        .head_dim(40)
        .padded(3)
        .kv_len({45, 20})
        .additive_mask({2, 1, 31, 45})
        .pattern(attngen_pattern{ATTNGEN_PATTERN_STRIDED, 0, 0, 7})
        .dtype(dtype)
        .Test();
    expect_f32_kernel();
  }
}

// A linear layer through the same conversion. Every ISA builds f16 and bf16 linear kernels, so an
// F32 one is registered again under the "generic" ISA, which none of the built-in ones has: forced
// onto it, an f16 / bf16 call finds no kernel of its dtype and runs there, converted.
TEST(DtypeConversion, Linear) {
  const attngen_kernel_info* real = nullptr;
  for (size_t i = 0; i < attngen_kernel_count() && real == nullptr; ++i) {
    const attngen_kernel_info* k = attngen_kernel_at(i);
    if (k->op == ATTNGEN_OP_LINEAR && k->dtypes.q == ATTNGEN_F32 && attngen_kernel_supported(k))
      real = k;
  }
  if (real == nullptr) GTEST_SKIP() << "no F32 linear kernel this machine runs";
  static attngen_kernel_info generic;
  generic = *real;
  generic.name = "test_generic_linear_f32";
  generic.isa = "generic";
  if (attngen_find_kernel(generic.name) == nullptr) {
    ASSERT_EQ(attngen_register_kernel(&generic), ATTNGEN_OK) << attngen_last_error();
  }
  RestoreIsa restore;
  ASSERT_EQ(attngen_set_isa("generic"), ATTNGEN_OK) << attngen_last_error();
  std::mt19937_64 rng(fresh_seed());
  for (const attngen_dtype dtype : {ATTNGEN_F16, ATTNGEN_BF16}) {
    for (const bool bias : {true, false}) {
      SCOPED_TRACE(std::to_string(dtype) + (bias ? " bias" : ""));
      const int64_t b = 2, s = 7, e = 37, n = 19, pad = bias ? 2 : 0;
      AnyTensor x(dtype, {b, s, e}, pad), w(dtype, {n, e}, pad), bv(dtype, {n}, 0),
          y(dtype, {b, s, n}, pad);
      x.fill_random(rng, -1, 1);
      w.fill_random(rng, -1, 1);
      bv.fill_random(rng, -1, 1);
      const attngen_status st = attngen_linear(&x.t(), &w.t(), bias ? &bv.t() : nullptr, &y.t());
      ASSERT_EQ(st, ATTNGEN_OK) << attngen_last_error();
      EXPECT_STREQ(attngen_last_kernel(), generic.name);
      const std::vector<double> want = reference_linear(x.dense(), b * s, e, w.dense(), n,
                                                        bias ? bv.dense() : std::vector<double>{});
      expect_close(y.dense(), want, max_abs(want), dtype);
      EXPECT_EQ(y.gaps_written(), 0);
    }
  }
}

// What the conversion does not change: a call no kernel takes in any dtype keeps its error, and a
// named kernel is taken as named.
TEST(DtypeConversion, ErrorsAreKept) {
  // Head dims past 512.
  AnyTensor q(ATTNGEN_F16, {1, 3, 2, 600}, 0), k(ATTNGEN_F16, {1, 4, 2, 600}, 0),
      v(ATTNGEN_F16, {1, 4, 2, 600}, 0), out(ATTNGEN_F16, {1, 3, 2, 600}, 0);
  std::mt19937_64 rng(fresh_seed());
  q.fill_random(rng, -1, 1);
  k.fill_random(rng, -1, 1);
  v.fill_random(rng, -1, 1);
  EXPECT_EQ(attngen_attention(&q.t(), &k.t(), &v.t(), &out.t(), nullptr), ATTNGEN_ERROR_NO_KERNEL);
  EXPECT_NE(std::string(attngen_last_error()).find("head dim 600"), std::string::npos)
      << attngen_last_error();
  EXPECT_TRUE(out.all_poison());
  // A named kernel is taken as named: an F32 kernel refuses f16 tensors.
  const attngen_kernel_info* f32 = first_kernel(ATTNGEN_OP_ATTENTION, ATTNGEN_F32, nullptr);
  ASSERT_NE(f32, nullptr);
  AnyTensor q2(ATTNGEN_F16, {1, 3, 2, f32->head_dim_qk}, 0),
      k2(ATTNGEN_F16, {1, 4, 2, f32->head_dim_qk}, 0),
      v2(ATTNGEN_F16, {1, 4, 2, f32->head_dim_v}, 0),
      o2(ATTNGEN_F16, {1, 3, 2, f32->head_dim_v}, 0);
  attngen_attention_options opt = attngen_attention_options_default();
  opt.kernel = f32->name;
  opt.mask = f32->mask;
  EXPECT_EQ(attngen_attention(&q2.t(), &k2.t(), &v2.t(), &o2.t(), &opt), ATTNGEN_ERROR_DTYPE);
  EXPECT_NE(std::string(attngen_last_error()).find("q has dtype F16"), std::string::npos)
      << attngen_last_error();
  EXPECT_TRUE(o2.all_poison());
}

// Decode with F16 / BF16 queries and output, over caches of each dtype: the kernels take f32
// queries, so the runtime stages q and out in F32. The result must be the f32-query call's on
// the same (rounded) queries, rounded once to the output's dtype; the output poisoned first.
TEST(DtypeConversion, DecodeStagesQueriesAndOutput) {
  std::mt19937_64 rng(fresh_seed());
  for (const attngen_dtype cache_dtype : {ATTNGEN_F32, ATTNGEN_F16, ATTNGEN_I8}) {
    for (const attngen_dtype dt : {ATTNGEN_F16, ATTNGEN_BF16}) {
      SCOPED_TRACE(std::string("cache ") + rt::dtype_name(cache_dtype) + ", q " +
                   rt::dtype_name(dt));
      attngen_kv_cache_options o = attngen_kv_cache_options_default();
      o.layers = 1;
      o.batch = 2;
      o.heads_kv = 2;
      o.head_dim_qk = 64;
      o.capacity = 40;
      o.dtype = cache_dtype;
      attngen_kv_cache* cache = nullptr;
      ASSERT_EQ(attngen_kv_cache_create(&o, &cache), ATTNGEN_OK) << attngen_last_error();
      AnyTensor k(ATTNGEN_F32, {2, 37, 2, 64}, 0), v(ATTNGEN_F32, {2, 37, 2, 64}, 0);
      k.fill_random(rng, -1, 1);
      v.fill_random(rng, -1, 1);
      ASSERT_EQ(attngen_kv_cache_append(cache, 0, &k.t(), &v.t(), nullptr), ATTNGEN_OK)
          << attngen_last_error();
      AnyTensor q(dt, {2, 3, 4, 64}, 1), out(dt, {2, 3, 4, 64}, 0);
      q.fill_random(rng, -2, 2);
      ASSERT_EQ(attngen_decode(&q.t(), cache, 0, &out.t(), nullptr), ATTNGEN_OK)
          << attngen_last_error();
      // The same queries in f32 (exact: f16 and bf16 widen exactly), an f32 output.
      AnyTensor q32(ATTNGEN_F32, {2, 3, 4, 64}, 0), out32(ATTNGEN_F32, {2, 3, 4, 64}, 0);
      const std::vector<double> qd = q.dense();
      float* q32p = static_cast<float*>(q32.t().data);
      for (size_t i = 0; i < qd.size(); ++i) q32p[i] = static_cast<float>(qd[i]);
      ASSERT_EQ(attngen_decode(&q32.t(), cache, 0, &out32.t(), nullptr), ATTNGEN_OK)
          << attngen_last_error();
      const std::vector<double> got = out.dense(), want = out32.dense();
      ASSERT_EQ(got.size(), want.size());
      const double ulp = dt == ATTNGEN_F16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_LE(std::abs(got[i] - want[i]), ulp * std::abs(want[i]) + 1e-7)
            << "element " << i << ": " << got[i] << " against " << want[i];
      }
      EXPECT_EQ(out.gaps_written(), 0);
      attngen_kv_cache_destroy(cache);
    }
  }
}

}  // namespace
}  // namespace attngen::test
