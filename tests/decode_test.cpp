// Incremental decoding: a KV cache filled token by token (or in chunks) and attended with the
// decode kernels must equal one full causal pass over the whole sequence (the float64
// reference), with and without grouped-query attention, with and without a ring-buffer window,
// for batches of sequences of different lengths; the MHA decode step must equal attngen_mha();
// bad input gives named errors and writes nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "attngen/attngen.h"
#include "attngen/kernel.h"
#include "core/targets.h"          // kDecodeLongKeys
#include "runtime/src/internal.h"  // rt::int8_dot_kernel
#include "tests/decode_tester.h"
#include "tests/kv_dtype.h"
#include "tests/reference.h"
#include "tests/shapes.h"
#include "tests/tensor.h"

namespace attngen::test {
namespace {

// The decode kernels: with a modifier, the GPU ones only (tests/decode_modifier_test.cpp runs
// the CPU ones under every ISA; these cases are what tools/gpu_opencl.sh runs of the GPU ones,
// with the modifier's parameters drawn by DecodeTester).
std::vector<const attngen_kernel_info*> decode_kernels() {
  std::vector<const attngen_kernel_info*> out;
  for (size_t i = 0; i < attngen_kernel_count(); ++i) {
    const attngen_kernel_info* k = attngen_kernel_at(i);
    const bool modifier = k->modifier != nullptr && k->modifier[0] != '\0';
    if (k->op == ATTNGEN_OP_DECODE && (!modifier || std::strcmp(k->isa, "cuda") == 0)) {
      out.push_back(k);
    }
  }
  return out;
}

// The int8 cache's bound against the float64 reference of the unquantised K and V: relative L2
// error and max abs error / max|V|, its dtype row's storage bound (core/dtype.h;
// docs/semantics.md, "Incremental decoding", has the measurement behind them).
constexpr double kI8RelL2 = attngen::dtype_row(attngen::DType::kI8).storage_rel_l2;
constexpr double kI8MaxAbs = attngen::dtype_row(attngen::DType::kI8).storage_abs_per_max;

using kv::storage_bound;

// Owns a cache; destroyed with the test.
struct Cache {
  attngen_kv_cache* cache = nullptr;
  ~Cache() { attngen_kv_cache_destroy(cache); }
};

std::string kernel_name(const ::testing::TestParamInfo<const attngen_kernel_info*>& info) {
  return info.param->name;
}

class DecodeKernel : public ::testing::TestWithParam<const attngen_kernel_info*> {
 protected:
  void SetUp() override {
    if (!attngen_kernel_supported(GetParam())) {
      GTEST_SKIP() << GetParam()->name << " needs " << GetParam()->isa
                   << ", which this machine lacks";
    }
  }
  // A tester for this kernel's head dims; for a generic kernel odd ones below its own, Dqk and
  // Dv apart (the padding is what it adds).
  DecodeTester base(int64_t batch, int64_t hq, int64_t hkv) const {
    const attngen_kernel_info& k = *GetParam();
    DecodeTester t;
    t.batch(batch).heads(hq, hkv).cache_dtype(k.dtypes.cache);
    if (k.generic) {
      t.head_dim(k.head_dim_qk - 27, k.head_dim_v / 2 + 3);
    } else {
      t.head_dim(k.head_dim_qk, k.head_dim_v);
    }
    return t;
  }
};

TEST_P(DecodeKernel, TokenByTokenEqualsFullCausalPass) {
  base(1, 3, 3).steps(37).Test(GetParam());
  base(2, 2, 2).steps(1).Test(GetParam());
}

TEST_P(DecodeKernel, GroupedQuery) {
  base(2, 8, 2).steps(29).Test(GetParam());  // g = 4
  base(1, 6, 1).steps(33).Test(GetParam());  // multi-query, g = 6
  base(1, 5, 5).steps(20).Test(GetParam());  // g = 1, odd head count
}

TEST_P(DecodeKernel, RingBufferWindow) {
  // Exactly L + 1 slots, token by token: every slot is overwritten several times.
  base(2, 4, 2).window(5).steps(41).Test(GetParam());
  // A larger ring, filled in chunks of up to capacity - L tokens (several queries per call).
  base(1, 6, 3).window(7).capacity(11).prefill(4).new_tokens(4).lengths({53}).Test(GetParam());
  // Cached tokens wrap the ring in appends of capacity - L before the queries of a step.
  base(2, 4, 2).window(6).cached(40).new_tokens(3).steps(2).Test(GetParam());
}

TEST_P(DecodeKernel, WindowInALargeCache) {
  // The ring never wraps: key blocks wholly before the window are skipped.
  base(1, 2, 1).window(20).capacity(200).cached(140).steps(10).Test(GetParam());
}

TEST_P(DecodeKernel, ChunkedQueries) {
  // A prompt attended at once, then steps of 3 queries: Sq > 1 with causal masking among them.
  base(2, 4, 2).prefill(17).new_tokens(3).steps(3).Test(GetParam());
  // Strided q and out, the last step shorter than the others.
  base(1, 3, 1).new_tokens(16).lengths({40}).padded(3).Test(GetParam());
}

// docs/semantics.md, "NaN and infinities": with several queries per step, the rows before a
// non-finite key (and every row of other sequences) stay as they were.
TEST_P(DecodeKernel, NonFiniteInputs) {
  for (int rep = 0; rep < 3; ++rep) {
    base(2, 4, 2).prefill(17).new_tokens(3).steps(3).nonfinite().Test(GetParam());
    base(1, 2, 1).prefill(40).nonfinite().Test(GetParam());
    // A ring buffer keeping only the query's own position (window 0), two tokens a step.
    base(3, 3, 3).window(0).new_tokens(2).lengths({6, 5, 4}).nonfinite().Test(GetParam());
    base(2, 4, 2).window(3).prefill(2).new_tokens(2).steps(4).nonfinite().Test(GetParam());
  }
}

// The i8-cache kernels that quantise each query row as the cache does a K row and take q.k as
// integer dot products (rt::int8_dot_kernel: the avx512bf16 row's, docs/semantics.md, "I8"):
// with q as it is (not rounded first) and K and V as the cache stores them, the result is the f32
// one of q so quantised, for q of every sign and scale: uniform, normal with outliers, all-zero
// rows (scale 0), and rows whose largest element is negative.
TEST_P(DecodeKernel, QuantisedQueryRows) {
  const attngen_kernel_info& k = *GetParam();
  if (!rt::int8_dot_kernel(k)) GTEST_SKIP() << k.name << " takes q as it is";
  base(2, 8, 2).unrounded_q().prefill(17).new_tokens(3).steps(3).Test(GetParam());
  base(1, 8, 2).unrounded_q().realistic().prefill(30).steps(5).Test(GetParam());
  base(2, 4, 1).unrounded_q().window(5).steps(20).Test(GetParam());
  base(1, 4, 2).unrounded_q().zero_q_rows().prefill(9).steps(3).Test(GetParam());
}

// An f16 cache of subnormal halves only (K, V < 2^-14): read as f32 exactly, whatever the
// target does with subnormal f32 operands (32-bit NEON flushes them to zero).
TEST_P(DecodeKernel, SubnormalHalves) {
  base(2, 4, 2).prefill(5).new_tokens(2).steps(3).tiny_kv().Test(GetParam());
  base(1, 2, 1).cached(70).steps(2).tiny_kv().Test(GetParam());
}

TEST_P(DecodeKernel, BatchOfDifferentLengths) {
  // Prompts of 5, 12 and 1 tokens appended in one call (counts), then token by token until
  // each sequence is complete; finished sequences append and attend nothing (counts 0), and
  // their query rows past the count are written as 0.
  base(3, 4, 2).prefill({5, 12, 1}).lengths({9, 20, 7}).Test(GetParam());
  base(3, 4, 2).window(4).prefill(1).lengths({9, 20, 7}).Test(GetParam());
}

TEST_P(DecodeKernel, SplitKv) {
  // A long cache: however the keys are split, the merged result is the same.
  for (int32_t splits : {0, 1, 3, 7, 5000}) {
    base(1, 4, 2).layers(3, 2).cached(1000).steps(3).kv_splits(splits).Test(GetParam());
  }
}

// Cache lengths around the kernel's key block: exactly one block, one key short of it, one
// into the next, and two blocks and a key; plain and through a window of as many keys.
TEST_P(DecodeKernel, EdgeLengths) {
  for (int64_t n : edge_lengths(key_block_of(*GetParam()))) {
    base(2, 4, 2).cached(n - 1).Test(GetParam());
    base(1, 3, 1).window(n - 1).cached(n + 5).new_tokens(2).Test(GetParam());
  }
}

// A paged cache (attngen.h): pages taken in no order from a pool that held other sequences'
// data, lengths around a page (P - 1, P, P + 1 and across several), GQA, a split that crosses
// pages, an empty sequence in the batch, a window crossing pages, several queries a step.
TEST_P(DecodeKernel, PagedCache) {
  if (GetParam()->dtypes.cache == ATTNGEN_I8) {
    GTEST_SKIP() << "an I8 cache is contiguous (docs/decisions/paged-kv.md)";
  }
  base(3, 4, 2).paged(16).scattered_pages().cached({15, 16, 17}).steps(2).Test(GetParam());
  base(3, 8, 2)
      .paged(32, 9)
      .scattered_pages()
      .prefill({40, 0, 7})
      .new_tokens(5)
      .lengths({70, 0, 33})
      .kv_splits(3)
      .Test(GetParam());
  base(2, 3, 1).paged(16).scattered_pages().window(20).cached(50).new_tokens(3).steps(3).Test(
      GetParam());
  base(1, 4, 4).paged(128).cached(200).new_tokens(2).steps(2).Test(GetParam());
  // A capacity within one page (its sequences' pages any, the tables' second entries unused).
  base(2, 4, 2).paged(64).scattered_pages().cached(40).steps(2).Test(GetParam());
}

INSTANTIATE_TEST_SUITE_P(Builtin, DecodeKernel, ::testing::ValuesIn(decode_kernels()), kernel_name);

// ---- The MHA layer, one decode step at a time, against attngen_mha() over the whole sequence.

// One decode step at a time over a cache of `dtype`; f32 within the contract's tolerance, other
// caches (K and V rounded by the cache, not by the test) within rel_l2 / max_abs * max|y|.
void mha_steps_equal_mha_causal(attngen_dtype dtype, double rel_l2, double max_abs_rel) {
  const int64_t B = 2, S = 23, E = 128, H = 2, prompt = 7;
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  Storage x({B, S, E}, 0), in_w({3 * E, E}, 0), in_b({3 * E}, 0), out_w({E, E}, 0), out_b({E}, 0),
      y_full({B, S, E}, 0);
  const float a = 1.0f / std::sqrt(static_cast<float>(E));
  x.fill_random(rng, -1, 1);
  in_w.fill_random(rng, -a, a);
  in_b.fill_random(rng, -a, a);
  out_w.fill_random(rng, -a, a);
  out_b.fill_random(rng, -a, a);
  const attngen_mha_weights w{&in_w.t, &in_b.t, &out_w.t, &out_b.t};
  attngen_mha_options full = attngen_mha_options_default();
  full.num_heads = H;
  full.mask = ATTNGEN_MASK_CAUSAL;
  ASSERT_EQ(attngen_mha(&x.t, &w, &y_full.t, &full), ATTNGEN_OK) << attngen_last_error();

  attngen_kv_cache_options o = attngen_kv_cache_options_default();
  o.layers = 2;
  o.batch = B;
  o.heads_kv = H;
  o.head_dim_qk = E / H;
  o.capacity = S;
  o.dtype = dtype;
  Cache cache;
  ASSERT_EQ(attngen_kv_cache_create(&o, &cache.cache), ATTNGEN_OK) << attngen_last_error();
  attngen_mha_decode_options opt = attngen_mha_decode_options_default();
  opt.num_heads = H;
  std::vector<double> got;
  got.reserve(static_cast<size_t>(B * S * E));
  std::vector<std::vector<double>> rows(static_cast<size_t>(B));
  for (int64_t p = 0; p < S;) {
    const int64_t t = p == 0 ? prompt : 1;
    attngen_tensor xs = x.t;  // x[:, p:p+t]
    xs.data = x.buf.data() + p * x.t.strides[1];
    xs.shape[1] = t;
    Storage y({B, t, E}, 0);
    const attngen_status st = attngen_mha_decode(&xs, &w, cache.cache, 1, &y.t, &opt);
    ASSERT_EQ(st, ATTNGEN_OK) << attngen_status_name(st) << ": " << attngen_last_error();
    EXPECT_EQ(std::string(attngen_last_kernel()).rfind("decode_", 0), 0u) << attngen_last_kernel();
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t i = 0; i < t * E; ++i) {
        rows[static_cast<size_t>(b)].push_back(y.buf[static_cast<size_t>(b * t * E + i)]);
      }
    }
    p += t;
  }
  for (const auto& r : rows) got.insert(got.end(), r.begin(), r.end());
  int64_t n = -1;
  ASSERT_EQ(attngen_kv_cache_length(cache.cache, 1, 1, &n), ATTNGEN_OK);
  EXPECT_EQ(n, S);
  ASSERT_EQ(attngen_kv_cache_length(cache.cache, 0, 1, &n), ATTNGEN_OK);
  EXPECT_EQ(n, 0) << "layer 0 was not used";
  const std::vector<double> want = reference_mha(x.dense(), B, S, E, H, in_w.dense(), in_b.dense(),
                                                 out_w.dense(), out_b.dense(), /*causal=*/true, {});
  if (dtype == ATTNGEN_F32) {
    expect_close_f32(got, want, max_abs(want));
    expect_close_f32(got, y_full.dense(), max_abs(want));
    return;
  }
  const std::vector<double> whole = y_full.dense();
  for (const std::vector<double>* w : {&want, &whole}) {
    const kv::Error e = kv::measure(got, *w);
    EXPECT_LE(e.rel_l2, rel_l2) << "cache dtype " << dtype;
    EXPECT_LE(e.max_abs, max_abs_rel * max_abs(want)) << "cache dtype " << dtype;
  }
}

TEST(MhaDecode, StepsEqualMhaCausal) { mha_steps_equal_mha_causal(ATTNGEN_F32, 0, 0); }

// The layer's K and V go into f16 / i8 caches: the storage error only (docs/semantics.md).
TEST(MhaDecode, F16AndI8Caches) {
  for (attngen_dtype d : {ATTNGEN_F16, ATTNGEN_BF16, ATTNGEN_I8}) {
    mha_steps_equal_mha_causal(d, storage_bound(d).first, storage_bound(d).second);
  }
}

// ---- Errors: named statuses, messages naming the argument, nothing written.

class DecodeValidation : public ::testing::Test {
 protected:
  static constexpr int64_t kB = 2, kHkv = 2, kHq = 4, kD = 64, kCap = 8;

  void SetUp() override {
    rng.seed(fresh_seed());
    o = attngen_kv_cache_options_default();
    o.layers = 2;
    o.batch = kB;
    o.heads_kv = kHkv;
    o.head_dim_qk = kD;
    o.capacity = kCap;
    size_t bytes = 0;
    ASSERT_EQ(attngen_kv_cache_storage_size(&o, &bytes), ATTNGEN_OK) << attngen_last_error();
    ASSERT_EQ(bytes, size_t{2 * kB * kHkv * kCap * (kD + kD) * 4});
    // Caller-provided storage, so that the tests can see that errors write nothing to it.
    store.assign(bytes / 4, 0.0f);
    std::uniform_real_distribution<float> d(-1, 1);
    for (float& f : store) f = d(rng);
    o.storage = store.data();
    ASSERT_EQ(attngen_kv_cache_create(&o, &cache.cache), ATTNGEN_OK) << attngen_last_error();
    k.init({kB, 5, kHkv, kD}, 0);
    v.init({kB, 5, kHkv, kD}, 0);
    q.init({kB, 1, kHq, kD}, 0);
    out.init({kB, 1, kHq, kD}, 0);
    for (Storage* s : {&k, &v, &q}) s->fill_random(rng, -1, 1);
    ASSERT_EQ(attngen_kv_cache_append(cache.cache, 1, &k.t, &v.t, nullptr), ATTNGEN_OK)
        << attngen_last_error();
    before = store;
  }

  // The status and a message mentioning `needle`; cache and out untouched.
  void expect_error(attngen_status got, attngen_status status, const std::string& needle) {
    EXPECT_EQ(got, status) << attngen_status_name(got) << ": " << attngen_last_error();
    EXPECT_NE(std::string(attngen_last_error()).find(needle), std::string::npos)
        << "message '" << attngen_last_error() << "' does not mention '" << needle << "'";
    EXPECT_TRUE(store == before) << "cache storage written on error";
    for (int64_t layer = 0; layer < 2; ++layer) {
      for (int64_t b = 0; b < kB; ++b) {
        int64_t n = -1;
        ASSERT_EQ(attngen_kv_cache_length(cache.cache, layer, b, &n), ATTNGEN_OK);
        EXPECT_EQ(n, layer == 1 ? 5 : 0) << "length changed on error";
      }
    }
    for (float f : out.buf) ASSERT_TRUE(is_poison(f)) << "output written on error";
  }

  attngen_status append(const attngen_tensor* counts = nullptr, int64_t layer = 1) {
    return attngen_kv_cache_append(cache.cache, layer, &k.t, &v.t, counts);
  }
  attngen_status decode(const attngen_decode_options* opt = nullptr, int64_t layer = 1) {
    return attngen_decode(&q.t, cache.cache, layer, &out.t, opt);
  }

  std::mt19937_64 rng;
  attngen_kv_cache_options o;
  std::vector<float> store, before;
  Cache cache;
  Storage k, v, q, out;
};

TEST_F(DecodeValidation, ValidDecodeSucceeds) {
  ASSERT_EQ(decode(), ATTNGEN_OK) << attngen_last_error();
  EXPECT_EQ(std::string(attngen_last_kernel()).rfind("decode_f32_d64", 0), 0u);
}

TEST_F(DecodeValidation, CreateOptions) {
  attngen_kv_cache* c = nullptr;
  attngen_kv_cache_options bad = o;
  bad.storage = nullptr;
  EXPECT_EQ(attngen_kv_cache_create(nullptr, &c), ATTNGEN_ERROR_NULL_POINTER);
  EXPECT_EQ(attngen_kv_cache_create(&bad, nullptr), ATTNGEN_ERROR_NULL_POINTER);
  bad.capacity = 0;
  EXPECT_EQ(attngen_kv_cache_create(&bad, &c), ATTNGEN_ERROR_EMPTY);
  EXPECT_NE(std::string(attngen_last_error()).find("options.capacity is 0"), std::string::npos);
  bad.capacity = kCap;
  bad.heads_kv = -3;
  EXPECT_EQ(attngen_kv_cache_create(&bad, &c), ATTNGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(attngen_last_error()).find("options.heads_kv is -3"), std::string::npos);
  bad.heads_kv = kHkv;
  bad.dtype = ATTNGEN_BOOL;
  EXPECT_EQ(attngen_kv_cache_create(&bad, &c), ATTNGEN_ERROR_DTYPE);
  bad.dtype = ATTNGEN_F32;
  bad.window = 8;  // needs capacity >= 9
  EXPECT_EQ(attngen_kv_cache_create(&bad, &c), ATTNGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(attngen_last_error()).find("window + 1 = 9"), std::string::npos);
  bad.window = -2;
  EXPECT_EQ(attngen_kv_cache_create(&bad, &c), ATTNGEN_ERROR_INVALID_ARGUMENT);
  bad.window = -1;
  bad.capacity = int64_t{1} << 30;  // one layer would span more than 2^31 bytes
  EXPECT_EQ(attngen_kv_cache_create(&bad, &c), ATTNGEN_ERROR_TOO_LARGE);
  EXPECT_NE(std::string(attngen_last_error()).find("one layer of the cache"), std::string::npos);
  EXPECT_EQ(c, nullptr);
  size_t bytes = 0;
  EXPECT_EQ(attngen_kv_cache_storage_size(&bad, &bytes), ATTNGEN_ERROR_TOO_LARGE);
  EXPECT_EQ(attngen_kv_cache_storage_size(&o, nullptr), ATTNGEN_ERROR_NULL_POINTER);
  attngen_kv_cache_destroy(nullptr);  // a no-op
  // Each layer within a kernel's 2^31 - 1 bytes, the whole storage past a 32-bit size_t: 4
  // layers of 1 GiB are a size on 64-bit targets and ATTNGEN_ERROR_TOO_LARGE on 32-bit ones.
  attngen_kv_cache_options big = o;
  big.layers = 4;
  big.batch = big.heads_kv = 1;
  big.head_dim_qk = big.head_dim_v = 128;
  big.capacity = int64_t{1} << 20;  // (128 + 128) * 4 bytes a slot: 1 GiB a layer
  big.window = -1;
  big.dtype = ATTNGEN_F32;
  bytes = 0;
  if (sizeof(size_t) >= 8) {
    EXPECT_EQ(attngen_kv_cache_storage_size(&big, &bytes), ATTNGEN_OK) << attngen_last_error();
    EXPECT_EQ(static_cast<uint64_t>(bytes), uint64_t{4} << 30);
  } else {
    EXPECT_EQ(attngen_kv_cache_storage_size(&big, &bytes), ATTNGEN_ERROR_TOO_LARGE);
    EXPECT_NE(std::string(attngen_last_error()).find("exceeds size_t"), std::string::npos)
        << attngen_last_error();
  }
}

TEST_F(DecodeValidation, AppendErrors) {
  EXPECT_EQ(attngen_kv_cache_append(nullptr, 0, &k.t, &v.t, nullptr), ATTNGEN_ERROR_NULL_POINTER);
  expect_error(append(nullptr, 2), ATTNGEN_ERROR_INVALID_ARGUMENT,
               "layer is 2, expected 0 <= layer < 2");
  expect_error(append(nullptr, -1), ATTNGEN_ERROR_INVALID_ARGUMENT, "layer is -1");
  expect_error(attngen_kv_cache_append(cache.cache, 0, nullptr, &v.t, nullptr),
               ATTNGEN_ERROR_NULL_POINTER, "k is NULL");
  // Overflow: layer 1 holds 5 of 8 positions; 5 more do not fit.
  expect_error(append(), ATTNGEN_ERROR_CAPACITY, "exceeds the capacity 8");
  // Only sequence 1 overflows: still nothing is appended, to either sequence.
  std::vector<int32_t> n = {3, 4};
  const attngen_tensor counts = attngen_tensor_contiguous(n.data(), ATTNGEN_I32, 1, &kB);
  expect_error(append(&counts), ATTNGEN_ERROR_CAPACITY, "sequence 1 of layer 1 holds 5");
  n = {3, 6};
  expect_error(append(&counts), ATTNGEN_ERROR_INVALID_ARGUMENT, "counts[1] is 6");
  // Shapes.
  const struct {
    Storage* s;
    int dim;
    const char* needle;
  } cases[] = {{&k, 0, "k.shape[0] (B) is 1, expected 2 (B of the cache)"},
               {&k, 2, "k.shape[2] (Hkv)"},
               {&k, 3, "k.shape[3] (Dqk)"},
               {&v, 1, "v.shape[1] (t) is 4, expected 5 (t of k)"},
               {&v, 3, "v.shape[3] (Dv)"}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.needle);
    const int64_t saved = c.s->t.shape[c.dim];
    c.s->t.shape[c.dim] = saved - 1;
    expect_error(append(nullptr, 0), ATTNGEN_ERROR_SHAPE, c.needle);
    c.s->t.shape[c.dim] = saved;
  }
  k.t.dtype = ATTNGEN_I8;
  expect_error(append(nullptr, 0), ATTNGEN_ERROR_DTYPE, "k has dtype I8");
  k.t.dtype = ATTNGEN_F32;
  // An input overlapping the cache's own storage.
  attngen_tensor inside = k.t;
  inside.data = store.data();
  EXPECT_EQ(attngen_kv_cache_append(cache.cache, 0, &inside, &v.t, nullptr), ATTNGEN_ERROR_ALIAS);
}

TEST_F(DecodeValidation, RingAppendTooManyAtOnce) {
  attngen_kv_cache_options ro = attngen_kv_cache_options_default();
  ro.layers = 1;
  ro.batch = kB;
  ro.heads_kv = kHkv;
  ro.head_dim_qk = kD;
  ro.window = 3;
  ro.capacity = 6;  // takes at most 6 - 3 = 3 tokens per append
  Cache ring;
  ASSERT_EQ(attngen_kv_cache_create(&ro, &ring.cache), ATTNGEN_OK) << attngen_last_error();
  EXPECT_EQ(attngen_kv_cache_append(ring.cache, 0, &k.t, &v.t, nullptr), ATTNGEN_ERROR_CAPACITY);
  EXPECT_NE(std::string(attngen_last_error()).find("takes at most 3 per append"), std::string::npos)
      << attngen_last_error();
  int64_t n = -1;
  ASSERT_EQ(attngen_kv_cache_length(ring.cache, 0, 0, &n), ATTNGEN_OK);
  EXPECT_EQ(n, 0);
  // Three at a time wrap around the ring without complaint.
  attngen_tensor three = k.t, three_v = v.t;
  three.shape[1] = three_v.shape[1] = 3;
  for (int i = 0; i < 4; ++i) {
    ASSERT_EQ(attngen_kv_cache_append(ring.cache, 0, &three, &three_v, nullptr), ATTNGEN_OK)
        << attngen_last_error();
  }
  ASSERT_EQ(attngen_kv_cache_length(ring.cache, 0, 1, &n), ATTNGEN_OK);
  EXPECT_EQ(n, 12);
  // Four queries of a ring that keeps the windows of three.
  Storage q4({kB, 4, kHq, kD}, 0), o4({kB, 4, kHq, kD}, 0);
  q4.fill_random(rng, -1, 1);
  EXPECT_EQ(attngen_decode(&q4.t, ring.cache, 0, &o4.t, nullptr), ATTNGEN_ERROR_CAPACITY);
  for (float f : o4.buf) ASSERT_TRUE(is_poison(f));
}

TEST_F(DecodeValidation, DecodeErrors) {
  EXPECT_EQ(attngen_decode(nullptr, cache.cache, 1, &out.t, nullptr), ATTNGEN_ERROR_NULL_POINTER);
  EXPECT_EQ(attngen_decode(&q.t, nullptr, 1, &out.t, nullptr), ATTNGEN_ERROR_NULL_POINTER);
  EXPECT_NE(std::string(attngen_last_error()).find("cache is NULL"), std::string::npos);
  EXPECT_EQ(attngen_decode(&q.t, cache.cache, 1, nullptr, nullptr), ATTNGEN_ERROR_NULL_POINTER);
  expect_error(decode(nullptr, 7), ATTNGEN_ERROR_INVALID_ARGUMENT, "layer is 7");
  // Layer 0 holds nothing: a query there has no position.
  expect_error(decode(nullptr, 0), ATTNGEN_ERROR_INVALID_ARGUMENT, "append the new tokens");
  q.t.shape[2] = out.t.shape[2] = 3;  // 3 query heads over 2 kv heads
  expect_error(decode(), ATTNGEN_ERROR_HEADS, "multiple of Hkv");
  q.t.shape[2] = out.t.shape[2] = kHq;
  out.t.shape[2] = 2;
  expect_error(decode(), ATTNGEN_ERROR_SHAPE, "out.shape[2] (Hq) is 2, expected 4 (Hq of q)");
  out.t.shape[2] = kHq;
  q.t.shape[3] = 32;
  expect_error(decode(), ATTNGEN_ERROR_SHAPE, "q.shape[3] (Dqk) is 32, expected 64");
  q.t.shape[3] = kD;
  attngen_decode_options opt = attngen_decode_options_default();
  opt.kv_splits = -1;
  expect_error(decode(&opt), ATTNGEN_ERROR_INVALID_ARGUMENT, "kv_splits is -1");
  opt.kv_splits = 0;
  opt.scale = std::numeric_limits<float>::infinity();
  expect_error(decode(&opt), ATTNGEN_ERROR_INVALID_ARGUMENT, "scale");
  opt.scale = 0;
  std::vector<int32_t> n = {1, 2};  // t is 1
  const attngen_tensor counts = attngen_tensor_contiguous(n.data(), ATTNGEN_I32, 1, &kB);
  opt.counts = &counts;
  expect_error(decode(&opt), ATTNGEN_ERROR_INVALID_ARGUMENT, "counts[1] is 2");
  opt.counts = nullptr;
  opt.kernel = "no_such_kernel";
  expect_error(decode(&opt), ATTNGEN_ERROR_NO_KERNEL, "no kernel named 'no_such_kernel'");
  opt.kernel = nullptr;
  attngen_tensor aliased = out.t;
  aliased.data = store.data() + kB * kHkv * kCap * (kD + kD) + 100;  // inside layer 1
  EXPECT_EQ(attngen_decode(&q.t, cache.cache, 1, &aliased, nullptr), ATTNGEN_ERROR_ALIAS);
  EXPECT_NE(std::string(attngen_last_error()).find("the cache's storage"), std::string::npos);
  EXPECT_TRUE(store == before) << "cache storage written on error";
}

TEST_F(DecodeValidation, NoKernelForHeadDim) {
  attngen_kv_cache_options small = o;
  small.storage = nullptr;
  small.head_dim_qk = small.head_dim_v = 600;  // past the largest generic decode kernel (512)
  Cache c;
  ASSERT_EQ(attngen_kv_cache_create(&small, &c.cache), ATTNGEN_OK);
  Storage k32({kB, 1, kHkv, 600}, 0), q32({kB, 1, kHq, 600}, 0), o32({kB, 1, kHq, 600}, 0);
  for (Storage* s : {&k32, &q32}) s->fill_random(rng, -1, 1);
  ASSERT_EQ(attngen_kv_cache_append(c.cache, 0, &k32.t, &k32.t, nullptr), ATTNGEN_OK);
  EXPECT_EQ(attngen_decode(&q32.t, c.cache, 0, &o32.t, nullptr), ATTNGEN_ERROR_NO_KERNEL);
  EXPECT_NE(std::string(attngen_last_error()).find("op decode, head dim 600"), std::string::npos)
      << attngen_last_error();
  for (float f : o32.buf) ASSERT_TRUE(is_poison(f));
}

TEST_F(DecodeValidation, LengthAndReset) {
  int64_t n = -1;
  EXPECT_EQ(attngen_kv_cache_length(cache.cache, 1, 2, &n), ATTNGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(attngen_last_error()).find("sequence is 2"), std::string::npos);
  EXPECT_EQ(attngen_kv_cache_length(cache.cache, 1, 0, nullptr), ATTNGEN_ERROR_NULL_POINTER);
  EXPECT_EQ(attngen_kv_cache_length(nullptr, 1, 0, &n), ATTNGEN_ERROR_NULL_POINTER);
  EXPECT_EQ(attngen_kv_cache_reset(cache.cache, 5), ATTNGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(attngen_kv_cache_reset(nullptr, 0), ATTNGEN_ERROR_NULL_POINTER);
  ASSERT_EQ(attngen_kv_cache_reset(cache.cache, 1), ATTNGEN_OK);
  ASSERT_EQ(attngen_kv_cache_length(cache.cache, 1, 0, &n), ATTNGEN_OK);
  EXPECT_EQ(n, 5);
  ASSERT_EQ(attngen_kv_cache_length(cache.cache, 1, 1, &n), ATTNGEN_OK);
  EXPECT_EQ(n, 0);
  ASSERT_EQ(attngen_kv_cache_reset(cache.cache, -1), ATTNGEN_OK);
  ASSERT_EQ(attngen_kv_cache_length(cache.cache, 1, 0, &n), ATTNGEN_OK);
  EXPECT_EQ(n, 0);
  // An emptied sequence takes a full capacity again.
  Storage k8({kB, kCap, kHkv, kD}, 0);
  k8.fill_random(rng, -1, 1);
  EXPECT_EQ(attngen_kv_cache_append(cache.cache, 1, &k8.t, &k8.t, nullptr), ATTNGEN_OK)
      << attngen_last_error();
}

TEST_F(DecodeValidation, MhaDecodeErrors) {
  const int64_t E = kHkv * kD;
  Storage x({kB, 1, E}, 0), in_w({3 * E, E}, 0), out_w({E, E}, 0), y({kB, 1, E}, 0);
  x.fill_random(rng, -1, 1);
  const attngen_mha_weights w{&in_w.t, nullptr, &out_w.t, nullptr};
  attngen_mha_decode_options opt = attngen_mha_decode_options_default();
  opt.num_heads = 4;  // the cache has 2 kv heads of 64
  EXPECT_EQ(attngen_mha_decode(&x.t, &w, cache.cache, 1, &y.t, &opt), ATTNGEN_ERROR_SHAPE);
  EXPECT_NE(std::string(attngen_last_error()).find("expected num_heads = 4"), std::string::npos)
      << attngen_last_error();
  opt.num_heads = 3;
  EXPECT_EQ(attngen_mha_decode(&x.t, &w, cache.cache, 1, &y.t, &opt), ATTNGEN_ERROR_HEADS);
  opt.num_heads = kHkv;
  EXPECT_EQ(attngen_mha_decode(&x.t, &w, cache.cache, 5, &y.t, &opt),
            ATTNGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(attngen_mha_decode(&x.t, &w, cache.cache, 1, &y.t, nullptr),
            ATTNGEN_ERROR_NULL_POINTER);
  Storage x4({kB, 4, E}, 0), y4({kB, 4, E}, 0);  // 5 + 4 > capacity 8
  x4.fill_random(rng, -1, 1);
  EXPECT_EQ(attngen_mha_decode(&x4.t, &w, cache.cache, 1, &y4.t, &opt), ATTNGEN_ERROR_CAPACITY);
  for (float f : y.buf) ASSERT_TRUE(is_poison(f));
  for (float f : y4.buf) ASSERT_TRUE(is_poison(f));
  expect_error(ATTNGEN_ERROR_CAPACITY, ATTNGEN_ERROR_CAPACITY, "");  // cache untouched
}

// ---- Cache dtypes: f16, bf16 and i8 caches (the kernels' own checks are DecodeKernel above,
// which runs every built-in decode kernel over a cache of its dtype).

constexpr attngen_dtype kCacheDtypes[] = {ATTNGEN_F32, ATTNGEN_F16, ATTNGEN_BF16, ATTNGEN_I8};

// Appends of f16 and bf16 tensors into every cache type: their values, rounded by the cache as
// the test rounds them, give the f32 result.
TEST(DecodeCacheDtype, AppendsFromF16AndBf16Inputs) {
  for (attngen_dtype cache : kCacheDtypes) {
    for (attngen_dtype input : {ATTNGEN_F16, ATTNGEN_BF16}) {
      // An i8 cache quantises the f16/bf16 values themselves (no test-side pre-quantisation is
      // also an f16 value): its bound for unrounded K/V.
      const auto tester = [&] {
        DecodeTester t;
        t.cache_dtype(cache).input_dtype(input);
        if (cache == ATTNGEN_I8) t.raw_kv(kI8RelL2, kI8MaxAbs);
        return t;
      };
      tester().batch(2).heads(4, 2).head_dim(64).prefill(5).new_tokens(2).steps(3).Test();
      // Generic kernels, a ring buffer.
      tester().batch(1).heads(3, 1).head_dim(100, 72).window(6).steps(20).Test();
    }
  }
}

// K and V as they are, not rounded first: the error of storing them in the cache's type. A
// whole sequence decoded token by token (and a ring buffer) against one full causal pass, f16
// and bf16 within the contract's bounds for storage in those types, i8 within its documented
// bound, on uniform and on realistic (outlier-channel) K and V.
TEST(DecodeCacheDtype, WholeSequenceWithUnroundedKv) {
  const struct {
    attngen_dtype dtype;
    double rel_l2, max_abs;
  } cases[] = {
      {ATTNGEN_F16, storage_bound(ATTNGEN_F16).first, storage_bound(ATTNGEN_F16).second},
      {ATTNGEN_BF16, storage_bound(ATTNGEN_BF16).first, storage_bound(ATTNGEN_BF16).second},
      {ATTNGEN_I8, kI8RelL2, kI8MaxAbs}};
  for (const auto& c : cases) {
    DecodeTester()
        .batch(2)
        .heads(8, 2)
        .head_dim(128)
        .cache_dtype(c.dtype)
        .raw_kv(c.rel_l2, c.max_abs)
        .prefill(4)
        .steps(40)
        .Test();
    DecodeTester()
        .batch(1)
        .heads(8, 2)
        .head_dim(128)
        .cache_dtype(c.dtype)
        .realistic()
        .raw_kv(c.rel_l2, c.max_abs)
        .prefill(4)
        .steps(60)
        .Test();
    DecodeTester()
        .batch(1)
        .heads(4, 1)
        .head_dim(64)
        .cache_dtype(c.dtype)
        .realistic()
        .raw_kv(c.rel_l2, c.max_abs)
        .window(16)
        .steps(50)
        .Test();
  }
}

// A decode over an i8 cache runs the kernel of the row with integer dot products (avx512bf16's
// VNNI, neondot's sdot) where it is built and this CPU runs it, whatever that CPU's bf16
// dot-product rate (which decides for avx512bf16's bf16 kernels only), and its base row's when
// that is forced. A CPU without the row's instructions (qemu's cortex-a57 for neondot:
// tests/CMakeLists.txt) runs the base row's kernel and refuses the row when it is forced.
TEST(DecodeCacheDtype, I8CacheRunsDotKernel) {
  const attngen_kernel_info* dot = nullptr;
  for (const attngen_kernel_info* k : decode_kernels()) {
    if (rt::int8_dot_kernel(*k) && !k->generic && k->head_dim_qk == 128 &&
        k->requested_key_block == 0) {
      dot = k;  // (the short caches' form: below)
    }
  }
  if (dot == nullptr)
    GTEST_SKIP() << "no i8 decode kernel of D128 with integer dot products is built";
  const char* base = attngen::find_target(dot->isa)->extends;
  const auto tester = [] {
    DecodeTester t;
    t.batch(1).heads(8, 2).head_dim(128).cache_dtype(ATTNGEN_I8).prefill(9).steps(2);
    return t;
  };
  tester().Test();
  if (!attngen_kernel_supported(dot)) {
    EXPECT_STRNE(attngen_last_kernel(), dot->name);
    // The row it extends where the CPU has that (an AVX2-only CPU runs an AVX2 kernel).
    const std::string ran = attngen_last_kernel();
    if (attngen_set_isa(base) == ATTNGEN_OK) {
      EXPECT_NE(ran.find(base), std::string::npos) << ran;
      attngen_set_isa(nullptr);
    }
    EXPECT_EQ(attngen_set_isa(dot->isa), ATTNGEN_ERROR_UNSUPPORTED_TARGET)
        << "a CPU without " << dot->isa << "'s instructions must refuse it";
    return;
  }
  EXPECT_STREQ(attngen_last_kernel(), dot->name);
  ASSERT_EQ(attngen_set_isa(base), ATTNGEN_OK) << attngen_last_error();
  tester().Test();
  EXPECT_STRNE(attngen_last_kernel(), dot->name);
  EXPECT_NE(std::strstr(attngen_last_kernel(), base), nullptr) << attngen_last_kernel();
  attngen_set_isa(nullptr);
}

// Options of the dispatch tests' caches: I8, one layer, one sequence, 2 kv heads of D128.
attngen_kv_cache_options dispatch_cache(int64_t capacity, int64_t window) {
  attngen_kv_cache_options o = attngen_kv_cache_options_default();
  o.dtype = ATTNGEN_I8;
  o.layers = 1;
  o.batch = 1;
  o.heads_kv = 2;
  o.head_dim_qk = 128;
  o.capacity = capacity;
  o.window = window;
  return o;
}

// The KEY_BLOCK decode kernel of `isa` for the dispatch tests' caches, if the build has one.
const attngen_kernel_info* long_form_of(const char* isa) {
  const attngen_kv_cache_options o = dispatch_cache(1, -1);
  const attngen_kernel_info* long_form = nullptr;
  for (const attngen_kernel_info* k : decode_kernels()) {
    if (k->dtypes.cache == o.dtype && !k->generic && k->head_dim_qk == o.head_dim_qk &&
        k->requested_key_block > 0 && !std::strcmp(k->isa, isa)) {
      long_form = k;
    }
  }
  return long_form;
}

// The default decode kernel for caches holding fewer than kDecodeLongKeys keys, a KEY_BLOCK one
// of the same ISA from there (i8 caches of D128, where the variant list has one); and one
// workspace, sized by the size query for a capacity that spans both, serves both.
TEST(DecodeDispatch, FormFollowsCacheLength) {
  const int64_t limit = kDecodeLongKeys, hq = 4;
  const attngen_kv_cache_options o = dispatch_cache(limit + 8, -1);
  const int64_t hkv = o.heads_kv, d = o.head_dim_qk;
  Cache owned;
  ASSERT_EQ(attngen_kv_cache_create(&o, &owned.cache), ATTNGEN_OK) << attngen_last_error();
  attngen_kv_cache* cache = owned.cache;
  std::mt19937_64 rng(::testing::UnitTest::GetInstance()->random_seed());
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> kv(static_cast<size_t>(o.capacity * hkv * d)), q(hq * d);
  std::vector<float> out(q.size());
  for (float& x : kv) x = u(rng);
  for (float& x : q) x = u(rng);
  const int64_t qs[4] = {1, 1, hq, d};
  const attngen_tensor tq = attngen_tensor_contiguous(q.data(), ATTNGEN_F32, 4, qs);
  attngen_tensor to = attngen_tensor_contiguous(out.data(), ATTNGEN_F32, 4, qs);
  size_t bytes = 0;
  ASSERT_EQ(attngen_decode_workspace_size(&tq, cache, 0, &to, nullptr, &bytes), ATTNGEN_OK)
      << attngen_last_error();
  std::vector<unsigned char> workspace(bytes);
  int64_t filled = 0;
  const char* short_form = nullptr;
  for (const int64_t n : {limit - 1, limit, limit + 8}) {
    SCOPED_TRACE("cache of " + std::to_string(n) + " keys");
    const int64_t rows[4] = {1, n - filled, hkv, d};
    const attngen_tensor t =
        attngen_tensor_contiguous(kv.data() + filled * hkv * d, ATTNGEN_F32, 4, rows);
    ASSERT_EQ(attngen_kv_cache_append(cache, 0, &t, &t, nullptr), ATTNGEN_OK)
        << attngen_last_error();
    filled = n;
    ASSERT_EQ(attngen_set_workspace(workspace.data(), workspace.size()), ATTNGEN_OK);
    const attngen_status st = attngen_decode(&tq, cache, 0, &to, nullptr);
    const std::string error = attngen_last_error();
    const attngen_kernel_info* k = attngen_find_kernel(attngen_last_kernel());
    attngen_set_workspace(nullptr, 0);
    ASSERT_EQ(st, ATTNGEN_OK) << error;
    ASSERT_NE(k, nullptr);
    if (n < limit) {
      EXPECT_EQ(k->requested_key_block, 0) << k->name;
      short_form = k->name;
      continue;
    }
    const attngen_kernel_info* long_form = long_form_of(k->isa);
    if (long_form == nullptr) GTEST_SKIP() << "no i8 D128 KEY_BLOCK decode kernel for " << k->isa;
    EXPECT_STREQ(k->name, long_form->name) << "short form: " << short_form;
  }
}

// Decoding through the threshold (the cache's last appends at kDecodeLongKeys - 2 ... + 1 keys),
// each step against the float64 reference: the short form below, the long one from there where
// it is built.
TEST(DecodeDispatch, BothFormsMatchTheReference) {
  const attngen_kv_cache_options o = dispatch_cache(1, -1);
  for (const int64_t n : {kDecodeLongKeys - 3, kDecodeLongKeys}) {
    SCOPED_TRACE("cached " + std::to_string(n));
    DecodeTester t;
    t.batch(1).heads(4 * o.heads_kv, o.heads_kv).head_dim(o.head_dim_qk).cache_dtype(o.dtype);
    t.cached(n).steps(2).Test();
    const attngen_kernel_info* k = attngen_find_kernel(attngen_last_kernel());
    ASSERT_NE(k, nullptr) << attngen_last_kernel();
    if (n < kDecodeLongKeys) {
      EXPECT_EQ(k->requested_key_block, 0) << k->name;
    } else if (const attngen_kernel_info* long_form = long_form_of(k->isa)) {
      EXPECT_STREQ(k->name, long_form->name);
    }
  }
}

// A ring (a window) holds at most its capacity: a sequence of more positions than
// kDecodeLongKeys over fewer slots runs the short caches' form, in the workspace its size query
// sized.
TEST(DecodeDispatch, RingLongerThanItsSlots) {
  const int64_t hq = 4, chunk = 60;
  const attngen_kv_cache_options o = dispatch_cache(64, 3);
  const int64_t hkv = o.heads_kv, d = o.head_dim_qk;
  Cache owned;
  ASSERT_EQ(attngen_kv_cache_create(&o, &owned.cache), ATTNGEN_OK) << attngen_last_error();
  std::mt19937_64 rng(::testing::UnitTest::GetInstance()->random_seed());
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> kv(static_cast<size_t>(chunk * hkv * d)), q(hq * d), out(q.size());
  for (float& x : q) x = u(rng);
  const int64_t qs[4] = {1, 1, hq, d}, rows[4] = {1, chunk, hkv, d};
  const attngen_tensor tq = attngen_tensor_contiguous(q.data(), ATTNGEN_F32, 4, qs);
  attngen_tensor to = attngen_tensor_contiguous(out.data(), ATTNGEN_F32, 4, qs);
  const attngen_tensor t = attngen_tensor_contiguous(kv.data(), ATTNGEN_F32, 4, rows);
  size_t bytes = 0;
  ASSERT_EQ(attngen_decode_workspace_size(&tq, owned.cache, 0, &to, nullptr, &bytes), ATTNGEN_OK)
      << attngen_last_error();
  std::vector<unsigned char> workspace(bytes);
  for (int64_t n = chunk; n < 2 * kDecodeLongKeys; n += chunk) {
    for (float& x : kv) x = u(rng);
    ASSERT_EQ(attngen_kv_cache_append(owned.cache, 0, &t, &t, nullptr), ATTNGEN_OK)
        << attngen_last_error();
  }
  int64_t length = 0;
  ASSERT_EQ(attngen_kv_cache_length(owned.cache, 0, 0, &length), ATTNGEN_OK);
  ASSERT_GT(length, kDecodeLongKeys);
  ASSERT_EQ(attngen_set_workspace(workspace.data(), workspace.size()), ATTNGEN_OK);
  const attngen_status st = attngen_decode(&tq, owned.cache, 0, &to, nullptr);
  const std::string error = attngen_last_error();
  const attngen_kernel_info* k = attngen_find_kernel(attngen_last_kernel());
  attngen_set_workspace(nullptr, 0);
  ASSERT_EQ(st, ATTNGEN_OK) << error;
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->requested_key_block, 0) << k->name;
}

// The int8 error on realistic K and V (Llama-like: 32/8 heads of 128, a 256-token sequence)
// over several fresh draws, reported (ATTNGEN_I8_REPORT=1 prints it) and held to the bound.
TEST(DecodeCacheDtype, I8QuantisationError) {
  double worst_rel = 0, worst_abs = 0;
  for (int draw = 0; draw < 4; ++draw) {
    double rel = 0, abs = 0;
    DecodeTester()
        .batch(1)
        .heads(32, 8)
        .head_dim(128)
        .cache_dtype(ATTNGEN_I8)
        .realistic()
        .raw_kv(kI8RelL2, kI8MaxAbs)
        .prefill(64)
        .new_tokens(16)
        .steps(12)
        .report(&rel, &abs)
        .Test();
    worst_rel = std::max(worst_rel, rel);
    worst_abs = std::max(worst_abs, abs);
  }
  if (std::getenv("ATTNGEN_I8_REPORT") != nullptr) {
    std::printf("i8 cache, realistic K/V: worst relative L2 %.5f, worst max abs / max|V| %.5f\n",
                worst_rel, worst_abs);
  }
  EXPECT_LE(worst_rel, kI8RelL2);
  EXPECT_LE(worst_abs, kI8MaxAbs);
}

// The documented storage (attngen.h): an F32 cache's K/V at
// ((((layer * B + b) * Hkv + h) * capacity + slot) * (Dqk + Dv) + d) elements; the others' in
// groups of 16 slots (capacity rounded up to G groups). An F16 or BF16 cache's group is 16 * (Dqk
// + Dv) elements, K's element d of slot s at ((layer * B + b) * Hkv + h) * G * group + (s / 16) *
// group + d * 16 + s % 16, V's at the group's 16 * Dqk + (s % 16) * Dv + d. An I8 cache's (K's
// head dim rounded up to Dqk4 = a multiple of 4) is 16 * (Dqk4 + Dv) bytes, K's byte d of slot s
// at the group's (d / 4) * 64 + (s % 16) * 4 + d % 4, V's at 16 * Dqk4 + (s % 16 / 4) * Dv * 4 +
// d * 4 + s % 4, and its scales after all layers (64-byte aligned) at (((layer * B + b) * Hkv +
// h) * 16 * G + slot) * 2 floats; f16 and bf16 rounded to nearest even, i8 quantised per (slot,
// kv head), from F32, F16 and BF16 inputs. The appended slots cross a group's end.
TEST(KvCacheStorage, LayoutAndConversions) {
  const int64_t L = 2, B = 2, H = 3, Dqk = 5, Dv = 3, C = 18, t = 17, layer = 1;
  const int64_t G = (C + 15) / 16, Dqk4 = (Dqk + 3) / 4 * 4, group = 16 * (Dqk4 + Dv);
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  // Ties, subnormals, overflow, signed zeros, then random values.
  const float specials[] = {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 65519.0f, 65520.0f, -1e-8f,
                            0x1p-25f,        3 * 0x1p-25f,        0.0f,     -0.0f,    1e30f,
                            1.0f + 0x1p-8f,  1.0f + 3 * 0x1p-8f};
  for (attngen_dtype dtype : kCacheDtypes) {
    for (attngen_dtype input : {ATTNGEN_F32, ATTNGEN_F16, ATTNGEN_BF16}) {
      SCOPED_TRACE(std::string("cache ") + std::to_string(dtype) + " input " +
                   std::to_string(input));
      attngen_kv_cache_options o = attngen_kv_cache_options_default();
      o.layers = L;
      o.batch = B;
      o.heads_kv = H;
      o.head_dim_qk = Dqk;
      o.head_dim_v = Dv;
      o.capacity = C;
      o.dtype = dtype;
      const size_t esize = dtype == ATTNGEN_F32 ? 4 : dtype == ATTNGEN_I8 ? 1 : 2;
      const bool i8 = dtype == ATTNGEN_I8, grouped = dtype != ATTNGEN_F32;
      const int64_t group_bytes = i8 ? group : 16 * (Dqk + Dv) * static_cast<int64_t>(esize);
      const size_t kv_bytes = grouped ? static_cast<size_t>(L * B * H * G * group_bytes)
                                      : size_t{L * B * H * C * (Dqk + Dv)} * esize;
      const size_t scales_at = (kv_bytes + 63) / 64 * 64;
      size_t bytes = 0;
      ASSERT_EQ(attngen_kv_cache_storage_size(&o, &bytes), ATTNGEN_OK) << attngen_last_error();
      ASSERT_EQ(bytes, i8 ? scales_at + size_t{L * B * H * G * 16 * 2 * 4} : kv_bytes);
      std::vector<uint64_t> store((bytes + 7) / 8, 0);
      o.storage = store.data();
      Cache cache;
      ASSERT_EQ(attngen_kv_cache_create(&o, &cache.cache), ATTNGEN_OK) << attngen_last_error();
      Storage k({B, t, H, Dqk}, 0), v({B, t, H, Dv}, 0);
      k.fill_random(rng, -2, 2);
      v.fill_random(rng, -2, 2);
      for (size_t i = 0; i < std::size(specials) && dtype != ATTNGEN_I8; ++i)
        k.buf[i] = specials[i];
      for (int64_t d = 0; d < Dv; ++d) v.set(v.offset({1, 2, 1, d}), 0.0);  // a zero row
      for (int64_t d = 0; d < Dqk; ++d) k.set(k.offset({0, 1, 2, d}), d == 3 ? -100.0 : 0.01);
      std::vector<uint16_t> k16(k.buf.size()), v16(v.buf.size());
      attngen_tensor kt = k.t, vt = v.t;
      if (input != ATTNGEN_F32) {  // the inputs' values become their rounding to the input type
        for (Storage* s : {&k, &v}) {
          for (float& x : s->buf) x = static_cast<float>(kv::round_to(input, x));
        }
        for (size_t i = 0; i < k.buf.size(); ++i) {
          k16[i] = input == ATTNGEN_F16 ? kv::f16_bits(k.buf[i]) : kv::bf16_bits(k.buf[i]);
        }
        for (size_t i = 0; i < v.buf.size(); ++i) {
          v16[i] = input == ATTNGEN_F16 ? kv::f16_bits(v.buf[i]) : kv::bf16_bits(v.buf[i]);
        }
        kt.data = k16.data();
        vt.data = v16.data();
        kt.dtype = vt.dtype = input;
      }
      ASSERT_EQ(attngen_kv_cache_append(cache.cache, layer, &kt, &vt, nullptr), ATTNGEN_OK)
          << attngen_last_error();
      const auto* base = reinterpret_cast<const uint8_t*>(store.data());
      const auto* scales =
          dtype == ATTNGEN_I8 ? reinterpret_cast<const float*>(base + scales_at) : nullptr;
      for (int64_t b = 0; b < B; ++b) {
        for (int64_t i = 0; i < t; ++i) {
          for (int64_t h = 0; h < H; ++h) {
            const int64_t head = (layer * B + b) * H + h, row = head * C + i;
            // An I8 cache's scales: per group its 16 slots' K scales, then their V scales.
            const int64_t scale_group = (head * G + i / 16) * 32;
            const uint8_t* group_at = base + (head * G + i / 16) * group_bytes;
            for (int part = 0; part < 2; ++part) {
              const Storage& src = part == 0 ? k : v;
              const int64_t n = part == 0 ? Dqk : Dv;
              const uint8_t* at = base + (row * (Dqk + Dv) + (part == 0 ? 0 : Dqk)) * esize;
              // An F16 or BF16 cache's element d of this slot.
              const auto half_at = [&](int64_t d) {
                return group_at + 2 * (part == 0 ? d * 16 + i % 16 : 16 * Dqk + (i % 16) * Dv + d);
              };
              // An I8 cache's element d of this slot (K's pad bytes past Dqk stay zero).
              const auto i8_at = [&](int64_t d) {
                return part == 0 ? group_at + (d / 4) * 64 + (i % 16) * 4 + d % 4
                                 : group_at + 16 * Dqk4 + (i % 16 / 4) * Dv * 4 + d * 4 + i % 4;
              };
              if (i8 && part == 0) {
                for (int64_t d = Dqk; d < Dqk4; ++d) EXPECT_EQ(*i8_at(d), 0) << "pad byte " << d;
              }
              std::vector<float> x(static_cast<size_t>(n));
              float amax = 0;
              for (int64_t d = 0; d < n; ++d) {
                x[d] = src.buf[static_cast<size_t>(src.offset({b, i, h, d}))];
                amax = std::max(amax, std::abs(x[d]));
              }
              const float scale =
                  scales != nullptr ? scales[scale_group + part * 16 + i % 16] : 0.0f;
              for (int64_t d = 0; d < n; ++d) {
                SCOPED_TRACE("b " + std::to_string(b) + " i " + std::to_string(i) + " h " +
                             std::to_string(h) + " part " + std::to_string(part) + " d " +
                             std::to_string(d) + " x " + std::to_string(x[d]));
                if (dtype == ATTNGEN_F32) {
                  float got;
                  std::memcpy(&got, at + 4 * d, 4);
                  EXPECT_EQ(got, x[d]);
                } else if (dtype == ATTNGEN_I8) {
                  EXPECT_EQ(scale, amax / 127.0f);
                  const int q = static_cast<int8_t>(*i8_at(d));
                  EXPECT_LE(std::abs(q), 127);
                  // Within half a quantum, plus the f32 rounding of x / scale (up to 127).
                  EXPECT_LE(std::abs(q * static_cast<double>(scale) - x[d]), (0.5 + 2e-5) * scale);
                  if (amax == 0) EXPECT_EQ(q, 0);
                  if (amax > 0 && std::abs(x[d]) == amax) EXPECT_EQ(std::abs(q), 127);
                } else {
                  uint16_t got;
                  std::memcpy(&got, half_at(d), 2);
                  const uint16_t want = dtype == ATTNGEN_F16 ? kv::f16_bits(kv::round_f16(x[d]))
                                                             : kv::bf16_bits(kv::round_bf16(x[d]));
                  EXPECT_EQ(got, want);
                }
              }
            }
          }
        }
      }
    }
  }
}

TEST_F(DecodeValidation, DtypeErrors) {
  // Append inputs of a type the cache does not convert from.
  k.t.dtype = ATTNGEN_I8;
  expect_error(append(nullptr, 0), ATTNGEN_ERROR_DTYPE,
               "k has dtype I8, expected F32, F16 or BF16");
  k.t.dtype = ATTNGEN_F32;
  v.t.dtype = ATTNGEN_BOOL;
  expect_error(append(nullptr, 0), ATTNGEN_ERROR_DTYPE, "v has dtype BOOL");
  v.t.dtype = ATTNGEN_F32;
  // Queries: I8 is no query type. (F16 / BF16 queries run, staged in F32 where no kernel takes
  // them: tests/dtype_test.cpp, DtypeConversion.DecodeStagesQueriesAndOutput.)
  q.t.dtype = ATTNGEN_I8;
  expect_error(decode(), ATTNGEN_ERROR_DTYPE, "q has dtype I8");
  q.t.dtype = ATTNGEN_F32;
  // Cache dtypes: unknown values and non-storage types.
  attngen_kv_cache_options bad = o;
  bad.storage = nullptr;
  attngen_kv_cache* c = nullptr;
  bad.dtype = static_cast<attngen_dtype>(42);
  EXPECT_EQ(attngen_kv_cache_create(&bad, &c), ATTNGEN_ERROR_DTYPE);
  EXPECT_NE(std::string(attngen_last_error()).find("options.dtype is unknown dtype (42)"),
            std::string::npos)
      << attngen_last_error();
  bad.dtype = ATTNGEN_BOOL;
  EXPECT_EQ(attngen_kv_cache_create(&bad, &c), ATTNGEN_ERROR_DTYPE);
  bad.dtype = ATTNGEN_I32;
  size_t bytes = 0;
  EXPECT_EQ(attngen_kv_cache_storage_size(&bad, &bytes), ATTNGEN_ERROR_DTYPE);
  EXPECT_EQ(c, nullptr);
  // A cache dtype that no kernel of its head dims takes (bf16 kernels stop at 128): named.
  bad.dtype = ATTNGEN_BF16;
  bad.head_dim_qk = bad.head_dim_v = 200;
  Cache big;
  ASSERT_EQ(attngen_kv_cache_create(&bad, &big.cache), ATTNGEN_OK) << attngen_last_error();
  Storage k2({kB, 1, kHkv, 200}, 0), q2({kB, 1, kHq, 200}, 0), o2({kB, 1, kHq, 200}, 0);
  for (Storage* s : {&k2, &q2}) s->fill_random(rng, -1, 1);
  ASSERT_EQ(attngen_kv_cache_append(big.cache, 0, &k2.t, &k2.t, nullptr), ATTNGEN_OK);
  EXPECT_EQ(attngen_decode(&q2.t, big.cache, 0, &o2.t, nullptr), ATTNGEN_ERROR_DTYPE);
  EXPECT_NE(std::string(attngen_last_error()).find("cache has dtype BF16"), std::string::npos)
      << attngen_last_error();
  for (float f : o2.buf) ASSERT_TRUE(is_poison(f));
}

}  // namespace
}  // namespace attngen::test
