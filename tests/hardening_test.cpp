// Regression tests of a hostile user's report (issue 17, findings 3 to 6): every int64 and enum
// input is defined (no crash, no undefined behaviour: the ASan/UBSan suite runs these too),
// bad input is a named status with nothing written, output overlap is exact, and no input of a
// decode step may lie in the cache storage the step writes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "attngen/attngen.h"
#include "attngen/kernel.h"
#include "runtime/src/internal.h"  // rt::self_overlap, rt::bytes_overlap
#include "tests/attention_call.h"
#include "tests/tensor.h"

namespace attngen::test {
namespace {

using Storage = Tensor<float>;
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

// Stores any int in an enum field, as a C caller may (no C++ conversion to the enum is made).
template <typename E>
void store_int(E& field, int32_t v) {
  static_assert(sizeof(E) == sizeof v);
  std::memcpy(&field, &v, sizeof v);
}

bool mentions(const std::string& needle) {
  return std::string(attngen_last_error()).find(needle) != std::string::npos;
}

#define EXPECT_STATUS(call, status)                                                              \
  do {                                                                                           \
    const attngen_status st_ = (call);                                                           \
    EXPECT_STREQ(attngen_status_name(st_), attngen_status_name(status)) << attngen_last_error(); \
  } while (0)

// ---- Finding 3: attngen_pattern_attends is defined for every input ----

// The patterns' definitions (attngen.h) for any int64 input, written independently of the
// runtime's arithmetic: every definition is a comparison of d = pos - j with a parameter, and d
// is the 64-bit wrapped difference plus the wrap, 2^64 times the sign of pos where it overflows
// (then |d| >= 2^63 exceeds every parameter). Portable to 32-bit targets (no __int128).
int reference_attends(const attngen_pattern& p, int64_t pos, int64_t j) {
  int64_t wrapped;
  const bool wraps = __builtin_sub_overflow(pos, j, &wrapped);
  // d <= c and d >= c for an int32 c; |d| < c, |d| <= c for c >= 0; d mod s == 0 for s > 0.
  const auto at_most = [&](int64_t c) { return wraps ? pos < 0 : wrapped <= c; };
  const auto at_least = [&](int64_t c) { return wraps ? pos >= 0 : wrapped >= c; };
  const auto abs_below = [&](int64_t c) { return !wraps && wrapped > -c && wrapped < c; };
  const auto multiple = [&](int64_t s) {
    // d = wrapped + k * 2^64 (k = 0, 1 or -1): its remainder from the two terms' remainders.
    const int64_t two64_mod =
        static_cast<int64_t>((~uint64_t{0}) % static_cast<uint64_t>(s) + 1) % s;
    const int64_t k = !wraps ? 0 : pos >= 0 ? 1 : -1;
    return ((wrapped % s) + k * two64_mod) % s == 0;
  };
  switch (p.kind) {
    case ATTNGEN_PATTERN_WINDOW:  // pos - left <= j <= pos + right
      return (p.window_left < 0 || at_most(p.window_left)) &&
             (p.window_right < 0 || at_least(-int64_t{p.window_right}));
    case ATTNGEN_PATTERN_STRIDED:
      return abs_below(p.stride) || multiple(p.stride);
    case ATTNGEN_PATTERN_GLOBAL_LOCAL:
      return abs_below(int64_t{p.local} + 1) || j < p.global_tokens || pos < p.global_tokens;
    default:
      return -1;
  }
}

#if defined(__SIZEOF_INT128__)
// The same definitions in 128-bit integers, where the compiler has them: the reference's check.
int reference_attends_128(const attngen_pattern& p, int64_t pos, int64_t j) {
  const __int128 d = static_cast<__int128>(pos) - j;
  const __int128 a = d < 0 ? -d : d;
  switch (p.kind) {
    case ATTNGEN_PATTERN_WINDOW:
      return (p.window_left < 0 || j >= static_cast<__int128>(pos) - p.window_left) &&
             (p.window_right < 0 || j <= static_cast<__int128>(pos) + p.window_right);
    case ATTNGEN_PATTERN_STRIDED:
      return a < p.stride || d % p.stride == 0;
    case ATTNGEN_PATTERN_GLOBAL_LOCAL:
      return a <= p.local || j < p.global_tokens || pos < p.global_tokens;
    default:
      return -1;
  }
}
#endif

TEST(HardeningPattern, ExtremePositionsAnswerCorrectly) {
  attngen_pattern window{};
  window.kind = ATTNGEN_PATTERN_WINDOW;
  window.window_left = 5;
  window.window_right = 3;
  attngen_pattern left_only = window;
  left_only.window_right = -1;
  attngen_pattern right_only = window;
  right_only.window_left = -1;
  attngen_pattern strided{};
  strided.kind = ATTNGEN_PATTERN_STRIDED;
  strided.stride = 4;
  attngen_pattern strided_max = strided;
  strided_max.stride = std::numeric_limits<int32_t>::max();
  attngen_pattern global{};
  global.kind = ATTNGEN_PATTERN_GLOBAL_LOCAL;
  global.local = 2;
  global.global_tokens = 3;
  const int64_t values[] = {kMin, kMin + 1, kMin + 3, -5, -1, 0, 1, 2, 5, kMax - 3, kMax - 1, kMax};
  int checked = 0;
  for (const attngen_pattern& p : {window, left_only, right_only, strided, strided_max, global}) {
    for (int64_t pos : values) {
      for (int64_t j : values) {
        SCOPED_TRACE("kind " + std::to_string(p.kind) + " p " + std::to_string(pos) + " j " +
                     std::to_string(j));
#if defined(__SIZEOF_INT128__)
        ASSERT_EQ(reference_attends(p, pos, j), reference_attends_128(p, pos, j));
#endif
        ASSERT_EQ(attngen_pattern_attends(&p, pos, 0, j), reference_attends(p, pos, j));
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 6 * 12 * 12);
  // Spot checks the reference itself: p = INT64_MIN sits next to itself and to a multiple of 4.
  EXPECT_EQ(attngen_pattern_attends(&window, kMin, 0, kMin), 1);
  EXPECT_EQ(attngen_pattern_attends(&strided, kMin, 0, 0), 1);
  EXPECT_EQ(attngen_pattern_attends(&strided, kMin, 0, kMax), 0);
  EXPECT_EQ(attngen_pattern_attends(&global, kMax, 0, kMin), 1);  // j < global_tokens
}

TEST(HardeningPattern, MalformedPatternsAnswerZero) {
  attngen_pattern p{};
  store_int(p.kind, -1);
  EXPECT_EQ(attngen_pattern_attends(&p, 0, 0, 0), 0);
  store_int(p.kind, 1000);
  EXPECT_EQ(attngen_pattern_attends(&p, 0, 0, 0), 0);
  p = attngen_pattern{};
  p.kind = ATTNGEN_PATTERN_WINDOW;
  p.window_left = p.window_right = -1;  // both unbounded: a call rejects it
  EXPECT_EQ(attngen_pattern_attends(&p, 0, 0, 0), 0);
  p.window_left = -7;
  p.window_right = 2;
  EXPECT_EQ(attngen_pattern_attends(&p, 0, 0, 0), 0);
  p = attngen_pattern{};
  p.kind = ATTNGEN_PATTERN_GLOBAL_LOCAL;
  p.local = -1;
  EXPECT_EQ(attngen_pattern_attends(&p, 0, 0, 0), 0);
  p.kind = ATTNGEN_PATTERN_STRIDED;
  p.stride = 0;
  EXPECT_EQ(attngen_pattern_attends(&p, 0, 0, 0), 0);
  EXPECT_EQ(attngen_pattern_attends(nullptr, 0, 0, 0), 0);
}

TEST(HardeningPattern, BlockSparseLayoutIsValidatedBeforeItIsRead) {
  // A valid 2 x 2 layout of block 4: only the diagonal blocks attend.
  uint8_t cells[4] = {1, 0, 0, 1};
  const int64_t shape[2] = {2, 2};
  attngen_tensor layout = attngen_tensor_contiguous(cells, ATTNGEN_BOOL, 2, shape);
  attngen_pattern p{};
  p.kind = ATTNGEN_PATTERN_BLOCK_SPARSE;
  p.block = 4;
  p.layout = &layout;
  EXPECT_EQ(attngen_pattern_attends(&p, 0, 5, 6), 1);
  EXPECT_EQ(attngen_pattern_attends(&p, 0, 5, 2), 0);
  EXPECT_EQ(attngen_pattern_attends(&p, 0, 0, 3), 1);
  // Outside the layout, or negative or extreme indices.
  for (int64_t i : {kMin, int64_t{-1}, int64_t{8}, kMax}) {
    EXPECT_EQ(attngen_pattern_attends(&p, 0, i, 0), 0) << i;
    EXPECT_EQ(attngen_pattern_attends(&p, 0, 0, i), 0) << i;
  }
  // Malformed layouts answer 0 without reading anything (the report's stride -(1 << 40)
  // crashed here).
  const struct {
    const char* what;
    void (*spoil)(attngen_tensor&);
  } cases[] = {
      {"stride -(1 << 40)", [](attngen_tensor& t) { t.strides[0] = -(int64_t{1} << 40); }},
      {"stride 1 << 40", [](attngen_tensor& t) { t.strides[0] = int64_t{1} << 40; }},
      {"stride INT64_MAX", [](attngen_tensor& t) { t.strides[0] = kMax; }},
      {"stride INT64_MIN", [](attngen_tensor& t) { t.strides[1] = kMin; }},
      {"inner stride 2", [](attngen_tensor& t) { t.strides[1] = 2; }},
      {"dtype F32", [](attngen_tensor& t) { t.dtype = ATTNGEN_F32; }},
      {"dtype -1", [](attngen_tensor& t) { store_int(t.dtype, -1); }},
      {"rank 3", [](attngen_tensor& t) { t.rank = 3; }},
      {"rank -1", [](attngen_tensor& t) { t.rank = -1; }},
      {"shape 0", [](attngen_tensor& t) { t.shape[0] = 0; }},
      {"shape -2", [](attngen_tensor& t) { t.shape[1] = -2; }},
      {"shape INT64_MAX", [](attngen_tensor& t) { t.shape[0] = kMax; }},
      {"data NULL", [](attngen_tensor& t) { t.data = nullptr; }},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    attngen_tensor bad = layout;
    c.spoil(bad);
    p.layout = &bad;
    EXPECT_EQ(attngen_pattern_attends(&p, 0, 5, 6), 0);
    EXPECT_EQ(attngen_pattern_attends(&p, 0, 0, 0), 0);
  }
  p.layout = &layout;
  p.block = 0;
  EXPECT_EQ(attngen_pattern_attends(&p, 0, 0, 0), 0);
  p.block = -4;
  EXPECT_EQ(attngen_pattern_attends(&p, 0, 0, 0), 0);
}

// ---- Finding 4: undefined behaviour in validation ----

class HardeningAttention : public AttentionCall {};

TEST_F(HardeningAttention, EnumFieldsOutOfRange) {
  for (int32_t bad : {-1, 2, 1000, std::numeric_limits<int32_t>::min()}) {
    SCOPED_TRACE(bad);
    store_int(opt.mask, bad);
    expect_error(ATTNGEN_ERROR_INVALID_ARGUMENT, "mask is " + std::to_string(bad));
    opt = attngen_attention_options_default();
    store_int(opt.alignment, bad);
    expect_error(ATTNGEN_ERROR_INVALID_ARGUMENT, "alignment is " + std::to_string(bad));
    opt = attngen_attention_options_default();
    store_int(opt.pattern.kind, bad == 2 ? 5 : bad);
    expect_error(ATTNGEN_ERROR_INVALID_ARGUMENT, "pattern: kind is");
    opt = attngen_attention_options_default();
  }
  for (int32_t bad : {-1, 6, 1000}) {
    SCOPED_TRACE(bad);
    store_int(q.t.dtype, bad);
    expect_error(ATTNGEN_ERROR_DTYPE, "q has dtype unknown dtype");
    q.t.dtype = ATTNGEN_F32;
    store_int(k.t.dtype, bad);
    expect_error(ATTNGEN_ERROR_DTYPE, "k has dtype unknown dtype");
    k.t.dtype = ATTNGEN_F32;
    store_int(out.t.dtype, bad);
    expect_error(ATTNGEN_ERROR_DTYPE, "out has dtype");
    out.t.dtype = ATTNGEN_F32;
    Storage mask({7}, 0);
    store_int(mask.t.dtype, bad);
    opt.mask_tensor = &mask.t;
    expect_error(ATTNGEN_ERROR_MASK, "mask_tensor has dtype");
    opt = attngen_attention_options_default();
  }
}

TEST(HardeningApi, StatusNameOfAnyInt) {
  // As a C caller passes it: an int where the enum is (same ABI), never a C++ enum conversion.
  const auto name_of = reinterpret_cast<const char* (*)(int32_t)>(&attngen_status_name);
  EXPECT_STREQ(name_of(-1), "ATTNGEN_ERROR_UNKNOWN");
  EXPECT_STREQ(name_of(1000), "ATTNGEN_ERROR_UNKNOWN");
  EXPECT_STREQ(name_of(std::numeric_limits<int32_t>::min()), "ATTNGEN_ERROR_UNKNOWN");
  EXPECT_STREQ(name_of(ATTNGEN_ERROR_ABI), "ATTNGEN_ERROR_ABI");
}

TEST(HardeningApi, ContiguousStridesSaturateAndAreRejected) {
  const int64_t huge[4] = {int64_t{1} << 40, int64_t{1} << 40, int64_t{1} << 40, 4};
  float cell = 0.0f;
  const attngen_tensor t = attngen_tensor_contiguous(&cell, ATTNGEN_F32, 4, huge);
  EXPECT_EQ(t.strides[3], 1);
  EXPECT_EQ(t.strides[2], 4);
  EXPECT_EQ(t.strides[1], int64_t{1} << 42);
  EXPECT_EQ(t.strides[0], kMax) << "a stride past int64 is documented as INT64_MAX";
  // Every call rejects such a tensor: TOO_LARGE.
  const int64_t rows_shape[3] = {int64_t{1} << 40, int64_t{1} << 40, 8};
  attngen_tensor x = attngen_tensor_contiguous(&cell, ATTNGEN_F32, 3, rows_shape);
  EXPECT_EQ(x.strides[0], int64_t{1} << 43);
  Storage w({5, 8}, 0), y({1, 3, 5}, 0);
  EXPECT_STATUS(attngen_linear(&x, &w.t, nullptr, &y.t), ATTNGEN_ERROR_TOO_LARGE);
  const int64_t wrap[3] = {int64_t{1} << 62, 4, 8};  // 2^62 * 32 wraps to 0
  x = attngen_tensor_contiguous(&cell, ATTNGEN_F32, 3, wrap);
  EXPECT_EQ(x.strides[0], 32);
  const int64_t wrap4[4] = {4, int64_t{1} << 62, 4, 8};
  const attngen_tensor t4 = attngen_tensor_contiguous(&cell, ATTNGEN_F32, 4, wrap4);
  EXPECT_EQ(t4.strides[0], kMax);
  for (float f : y.buf) EXPECT_TRUE(is_poison(f));
  // A dtype of any int (passed as a C caller passes it) is stored as given.
  const auto contiguous =
      reinterpret_cast<attngen_tensor (*)(void*, int32_t, int32_t, const int64_t*)>(
          &attngen_tensor_contiguous);
  const attngen_tensor odd = contiguous(&cell, -1, 1, rows_shape + 2);
  int32_t stored;
  std::memcpy(&stored, &odd.dtype, sizeof stored);
  EXPECT_EQ(stored, -1);
}

TEST_F(HardeningAttention, F32MaskSpanOverflowIsTooLarge) {
  // Skv = 2^31 - 1 keys, all one row (stride 0: inputs may repeat), and an F32 mask [Skv] whose
  // stride makes (Skv - 1) * stride * 4 bytes pass 2^63.
  const int64_t skv = std::numeric_limits<int32_t>::max();
  q.init({1, 1, 1, 64}, 0);
  out.init({1, 1, 1, 64}, 0);
  std::vector<float> row(64, 0.5f);
  for (Storage* s : {&k, &v}) {
    s->t.data = row.data();
    s->t.shape[0] = 1;
    s->t.shape[1] = skv;
    s->t.shape[2] = 1;
    s->t.strides[0] = s->t.strides[1] = s->t.strides[2] = 0;
  }
  std::vector<float> cells(4, 0.0f);
  attngen_tensor mask{};
  mask.data = cells.data();
  mask.dtype = ATTNGEN_F32;
  mask.rank = 1;
  mask.shape[0] = skv;
  mask.strides[0] = skv;
  opt.mask_tensor = &mask;
  expect_error(ATTNGEN_ERROR_TOO_LARGE, "mask_tensor spans more than 2^31 - 1 bytes");
}

// Found by the fuzzer (tests/fuzz/regressions/known8-*): float data at an address not a multiple
// of its element size was read through typed pointers (the F32 staging of f16 inputs, a cache
// append). It is rejected, by name, nothing written.
TEST_F(HardeningAttention, MisalignedFloatDataIsRejected) {
  std::vector<float> shifted(q.buf.size() + 1);
  std::memcpy(reinterpret_cast<char*>(shifted.data()) + 2, q.buf.data(),
              q.buf.size() * sizeof(float) - 2);
  q.t.data = reinterpret_cast<char*>(shifted.data()) + 2;
  expect_error(ATTNGEN_ERROR_STRIDE, "q.data is not aligned to its element size (4 bytes)");
  std::vector<uint16_t> halves(k.buf.size() + 1);
  attngen_tensor k16 = k.t;
  k16.dtype = ATTNGEN_F16;
  k16.data = reinterpret_cast<char*>(halves.data()) + 1;
  const int64_t shape[4] = {2, 7, 2, 64};
  attngen_kv_cache_options o = attngen_kv_cache_options_default();
  o.layers = 1;
  o.batch = 2;
  o.heads_kv = 2;
  o.head_dim_qk = 64;
  o.capacity = 16;
  o.dtype = ATTNGEN_F32;
  o.window = -1;
  attngen_kv_cache* cache = nullptr;
  ASSERT_EQ(attngen_kv_cache_create(&o, &cache), ATTNGEN_OK) << attngen_last_error();
  attngen_tensor v16 = attngen_tensor_contiguous(halves.data(), ATTNGEN_F16, 4, shape);
  EXPECT_STATUS(attngen_kv_cache_append(cache, 0, &k16, &v16, nullptr), ATTNGEN_ERROR_STRIDE);
  EXPECT_TRUE(mentions("not aligned"));
  int64_t length = -1;
  ASSERT_EQ(attngen_kv_cache_length(cache, 0, 0, &length), ATTNGEN_OK);
  EXPECT_EQ(length, 0) << "nothing appended";
  attngen_kv_cache_destroy(cache);
}

TEST_F(HardeningAttention, MisalignedKvLenIsReadAsIs) {
  // kv_len's I32 values at an odd address: read as they are (no misaligned int32 load).
  ASSERT_EQ(attngen_attention(&q.t, &k.t, &v.t, &out.t, &opt), ATTNGEN_OK) << attngen_last_error();
  alignas(8) unsigned char bytes[1 + 2 * sizeof(int32_t)] = {};
  const int32_t n[2] = {7, 4};
  std::memcpy(bytes + 1, n, sizeof n);
  const int64_t b = 2;
  const attngen_tensor kv_len = attngen_tensor_contiguous(bytes + 1, ATTNGEN_I32, 1, &b);
  std::vector<int32_t> aligned(n, n + 2);
  const attngen_tensor kv_len_aligned =
      attngen_tensor_contiguous(aligned.data(), ATTNGEN_I32, 1, &b);
  Storage out2({2, 5, 4, 64}, 0);
  opt.kv_len = &kv_len_aligned;
  ASSERT_EQ(attngen_attention(&q.t, &k.t, &v.t, &out2.t, &opt), ATTNGEN_OK);
  opt.kv_len = &kv_len;
  ASSERT_EQ(attngen_attention(&q.t, &k.t, &v.t, &out.t, &opt), ATTNGEN_OK) << attngen_last_error();
  EXPECT_EQ(std::memcmp(out.buf.data(), out2.buf.data(), out.buf.size() * sizeof(float)), 0);
  // An invalid value behind a misaligned pointer is still reported by value.
  const int32_t bad[2] = {7, 9};
  std::memcpy(bytes + 1, bad, sizeof bad);
  Storage out3({2, 5, 4, 64}, 0);
  EXPECT_STATUS(attngen_attention(&q.t, &k.t, &v.t, &out3.t, &opt), ATTNGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions("kv_len[1] is 9"));
  EXPECT_TRUE(out3.all_poison());
}

TEST(HardeningMha, EnumFieldsOutOfRange) {
  Storage x({1, 4, 128}, 0), in_w({384, 128}, 0), out_w({128, 128}, 0), y({1, 4, 128}, 0);
  std::mt19937_64 rng(fresh_seed());
  x.fill_random(rng, -1, 1);
  in_w.fill_random(rng, -0.1, 0.1);
  out_w.fill_random(rng, -0.1, 0.1);
  const attngen_mha_weights w{&in_w.t, nullptr, &out_w.t, nullptr};
  attngen_mha_options opt = attngen_mha_options_default();
  opt.num_heads = 2;
  store_int(opt.mask, -1);
  EXPECT_STATUS(attngen_mha(&x.t, &w, &y.t, &opt), ATTNGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions("mask is -1"));
  opt.mask = ATTNGEN_MASK_NONE;
  store_int(opt.alignment, 7);
  EXPECT_STATUS(attngen_mha(&x.t, &w, &y.t, &opt), ATTNGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions("alignment is 7"));
  opt.alignment = ATTNGEN_ALIGN_TOP_LEFT;
  store_int(x.t.dtype, -1);
  EXPECT_STATUS(attngen_mha(&x.t, &w, &y.t, &opt), ATTNGEN_ERROR_DTYPE);
  EXPECT_TRUE(y.all_poison());
}

TEST(HardeningRegistry, DescriptorEnumsOutOfRange) {
  const attngen_kernel_info* builtin = attngen_kernel_at(0);
  ASSERT_NE(builtin, nullptr);
  attngen_kernel_info k = *builtin;
  k.name = "hardening_bad_enum";
  store_int(k.mask_tensor, 7);
  EXPECT_STATUS(attngen_register_kernel(&k), ATTNGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions("mask_tensor is 7"));
  k = *builtin;
  k.name = "hardening_bad_enum";
  store_int(k.op, -1);
  EXPECT_STATUS(attngen_register_kernel(&k), ATTNGEN_ERROR_INVALID_ARGUMENT);
  k = *builtin;
  k.name = "hardening_bad_enum";
  store_int(k.dtypes.cache, -1);
  EXPECT_STATUS(attngen_register_kernel(&k), ATTNGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(attngen_find_kernel("hardening_bad_enum"), nullptr);
}

TEST(HardeningKvCache, WindowExtremesAreCleanErrors) {
  attngen_kv_cache_options o = attngen_kv_cache_options_default();
  o.layers = 1;
  o.batch = 1;
  o.heads_kv = 1;
  o.head_dim_qk = 64;
  o.capacity = 8;
  attngen_kv_cache* c = nullptr;
  size_t bytes = 0;
  for (int64_t window : {kMax, kMax - 1, int64_t{8}, int64_t{1} << 40}) {
    SCOPED_TRACE(window);
    o.window = window;
    EXPECT_STATUS(attngen_kv_cache_create(&o, &c), ATTNGEN_ERROR_INVALID_ARGUMENT);
    EXPECT_TRUE(mentions("options.capacity is 8, expected >= window + 1"));
    EXPECT_EQ(c, nullptr);
    EXPECT_STATUS(attngen_kv_cache_storage_size(&o, &bytes), ATTNGEN_ERROR_INVALID_ARGUMENT);
  }
  o.window = kMin;
  EXPECT_STATUS(attngen_kv_cache_create(&o, &c), ATTNGEN_ERROR_INVALID_ARGUMENT);
  o.window = -1;
  store_int(o.dtype, -1);
  EXPECT_STATUS(attngen_kv_cache_create(&o, &c), ATTNGEN_ERROR_DTYPE);
  EXPECT_TRUE(mentions("options.dtype is unknown dtype (-1)"));
  EXPECT_EQ(c, nullptr);
}

TEST(HardeningKvCache, AppendEnumAndMisalignedCounts) {
  attngen_kv_cache_options o = attngen_kv_cache_options_default();
  o.layers = 1;
  o.batch = 2;
  o.heads_kv = 1;
  o.head_dim_qk = 64;
  o.capacity = 8;
  attngen_kv_cache* c = nullptr;
  ASSERT_EQ(attngen_kv_cache_create(&o, &c), ATTNGEN_OK);
  Storage k({2, 3, 1, 64}, 0), v({2, 3, 1, 64}, 0);
  std::mt19937_64 rng(fresh_seed());
  k.fill_random(rng, -1, 1);
  v.fill_random(rng, -1, 1);
  store_int(k.t.dtype, -1);
  EXPECT_STATUS(attngen_kv_cache_append(c, 0, &k.t, &v.t, nullptr), ATTNGEN_ERROR_DTYPE);
  EXPECT_TRUE(mentions("k has dtype unknown dtype"));
  k.t.dtype = ATTNGEN_F32;
  // counts at an odd address.
  alignas(8) unsigned char bytes[1 + 2 * sizeof(int32_t)] = {};
  const int32_t n[2] = {3, 1};
  std::memcpy(bytes + 1, n, sizeof n);
  const int64_t b = 2;
  const attngen_tensor counts = attngen_tensor_contiguous(bytes + 1, ATTNGEN_I32, 1, &b);
  ASSERT_EQ(attngen_kv_cache_append(c, 0, &k.t, &v.t, &counts), ATTNGEN_OK) << attngen_last_error();
  int64_t len = -1;
  ASSERT_EQ(attngen_kv_cache_length(c, 0, 1, &len), ATTNGEN_OK);
  EXPECT_EQ(len, 1);
  attngen_kv_cache_destroy(c);
}

// ---- Finding 5: exact output overlap ----

// Whether two indices of a tensor of these sizes and strides reach the same element.
bool brute_force_overlap(int rank, const int64_t* shape, const int64_t* strides) {
  std::vector<int64_t> offsets;
  std::vector<int64_t> idx(static_cast<size_t>(rank), 0);
  for (;;) {
    int64_t off = 0;
    for (int d = 0; d < rank; ++d) off += idx[static_cast<size_t>(d)] * strides[d];
    offsets.push_back(off);
    int d = rank - 1;
    for (; d >= 0; --d) {
      if (++idx[static_cast<size_t>(d)] < shape[d]) break;
      idx[static_cast<size_t>(d)] = 0;
    }
    if (d < 0) break;
  }
  std::sort(offsets.begin(), offsets.end());
  return std::adjacent_find(offsets.begin(), offsets.end()) != offsets.end();
}

TEST_F(HardeningAttention, DisjointStridedOutputIsAccepted) {
  // out [2, 2, 1, 64], strides [192, 128, 64, 1]: elements at b * 192 + s * 128 + d, disjoint.
  q.init({2, 2, 1, 64}, 0);
  k.init({2, 3, 1, 64}, 0);
  v.init({2, 3, 1, 64}, 0);
  std::mt19937_64 rng(fresh_seed());
  q.fill_random(rng, -1, 1);
  k.fill_random(rng, -1, 1);
  v.fill_random(rng, -1, 1);
  Storage dense({2, 2, 1, 64}, 0);
  ASSERT_EQ(attngen_attention(&q.t, &k.t, &v.t, &dense.t, &opt), ATTNGEN_OK);
  std::vector<float> buf(384, poison());
  attngen_tensor strided = dense.t;
  strided.data = buf.data();
  const int64_t strides[4] = {192, 128, 64, 1};
  std::copy(strides, strides + 4, strided.strides);
  ASSERT_FALSE(brute_force_overlap(4, strided.shape, strided.strides));
  ASSERT_EQ(attngen_attention(&q.t, &k.t, &v.t, &strided, &opt), ATTNGEN_OK)
      << attngen_last_error();
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t s = 0; s < 2; ++s) {
      for (int64_t d = 0; d < 64; ++d) {
        EXPECT_EQ(buf[static_cast<size_t>(b * 192 + s * 128 + d)],
                  dense.buf[static_cast<size_t>((b * 2 + s) * 64 + d)]);
      }
    }
  }
  for (int64_t gap : {64, 127, 256, 319}) EXPECT_TRUE(is_poison(buf[static_cast<size_t>(gap)]));
}

TEST(HardeningLinear, OutputOverlapIsExact) {
  std::mt19937_64 rng(fresh_seed());
  Storage x({2, 2, 8}, 0), w({64, 8}, 0);
  x.fill_random(rng, -1, 1);
  w.fill_random(rng, -1, 1);
  Storage dense({2, 2, 64}, 0);
  ASSERT_EQ(attngen_linear(&x.t, &w.t, nullptr, &dense.t), ATTNGEN_OK) << attngen_last_error();
  // y [2, 2, 64], strides [192, 128, 1]: disjoint, accepted.
  std::vector<float> buf(192 + 128 + 64, poison());
  attngen_tensor y = dense.t;
  y.data = buf.data();
  y.strides[0] = 192;
  y.strides[1] = 128;
  ASSERT_EQ(attngen_linear(&x.t, &w.t, nullptr, &y), ATTNGEN_OK) << attngen_last_error();
  EXPECT_EQ(buf[192 + 128 + 63], dense.buf[3 * 64 + 63]);
  EXPECT_TRUE(is_poison(buf[64]));
  // strides [124, 64, 1]: y[0, 1, 60..63] and y[1, 0, 0..3] share memory: rejected.
  std::vector<float> before(buf.size(), poison());
  buf = before;
  y.strides[0] = 124;
  y.strides[1] = 64;
  ASSERT_TRUE(brute_force_overlap(3, y.shape, y.strides));
  EXPECT_STATUS(attngen_linear(&x.t, &w.t, nullptr, &y), ATTNGEN_ERROR_STRIDE);
  EXPECT_TRUE(mentions("overlap"));
  EXPECT_EQ(std::memcmp(buf.data(), before.data(), buf.size() * sizeof(float)), 0);
}

TEST(HardeningLinear, RandomStridesAgreeWithBruteForce) {
  // y [B, S, N] with random outer strides: accepted exactly when no two elements coincide.
  std::mt19937_64 rng(fresh_seed());
  int accepted = 0, rejected = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const int64_t batch = 1 + rng() % 3, seq = 1 + rng() % 4, n = 1 + rng() % 4;
    Storage x({batch, seq, 8}, 0), w({n, 8}, 0);
    x.fill_random(rng, -1, 1);
    w.fill_random(rng, -1, 1);
    const int64_t shape[3] = {batch, seq, n};
    int64_t strides[3] = {static_cast<int64_t>(rng() % 13), static_cast<int64_t>(rng() % 9), 1};
    const bool overlap = brute_force_overlap(3, shape, strides);
    std::vector<float> buf(
        static_cast<size_t>((batch - 1) * strides[0] + (seq - 1) * strides[1] + n), poison());
    attngen_tensor y = attngen_tensor_contiguous(buf.data(), ATTNGEN_F32, 3, shape);
    std::copy(strides, strides + 3, y.strides);
    SCOPED_TRACE("shape " + std::to_string(batch) + "," + std::to_string(seq) + "," +
                 std::to_string(n) + " strides " + std::to_string(strides[0]) + "," +
                 std::to_string(strides[1]));
    const attngen_status st = attngen_linear(&x.t, &w.t, nullptr, &y);
    if (overlap) {
      ASSERT_STREQ(attngen_status_name(st), "ATTNGEN_ERROR_STRIDE") << "a missed overlap";
      ++rejected;
    } else {
      ASSERT_STREQ(attngen_status_name(st), "ATTNGEN_OK")
          << "a false positive: " << attngen_last_error();
      ++accepted;
    }
  }
  EXPECT_GT(accepted, 50);
  EXPECT_GT(rejected, 50);
}

// ---- Finding 5: the overlap tests against brute force, on thousands of small cases ----

TEST(HardeningOverlap, SelfOverlapAgreesWithBruteForce) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("ATTNGEN_TEST_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  int overlapping = 0, disjoint = 0, searched = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    const int rank = 1 + static_cast<int>(rng() % ATTNGEN_MAX_RANK);
    int64_t shape[ATTNGEN_MAX_RANK], strides[ATTNGEN_MAX_RANK];
    const int64_t max_stride = trial % 2 ? 13 : 60;
    for (int d = 0; d < rank; ++d) {
      shape[d] = 1 + static_cast<int64_t>(rng() % (rank > 3 ? 3 : 5));
      strides[d] = static_cast<int64_t>(rng() % static_cast<uint64_t>(max_stride));
    }
    const bool want = brute_force_overlap(rank, shape, strides);
    const rt::Overlap got = rt::self_overlap(rank, shape, strides);
    ASSERT_NE(got, rt::Overlap::kUnknown);
    if (got != (want ? rt::Overlap::kOverlap : rt::Overlap::kNone)) {
      std::string what;
      for (int d = 0; d < rank; ++d) {
        what += " " + std::to_string(shape[d]) + "/" + std::to_string(strides[d]);
      }
      FAIL() << (want ? "missed overlap:" : "false positive:") << what;
    }
    (want ? overlapping : disjoint) += 1;
    // The cases the sufficient test does not settle are the ones that need the search.
    int64_t sorted[ATTNGEN_MAX_RANK];
    int n = 0;
    for (int d = 0; d < rank; ++d) {
      if (shape[d] > 1) sorted[n++] = d;
    }
    std::sort(sorted, sorted + n, [&](int64_t a, int64_t b) { return strides[a] < strides[b]; });
    int64_t reach = 0;
    bool sufficient = true;
    for (int i = 0; i < n; ++i) {
      if (strides[sorted[i]] <= reach) sufficient = false;
      reach += (shape[sorted[i]] - 1) * strides[sorted[i]];
    }
    searched += !sufficient && !want;
  }
  EXPECT_GT(overlapping, 1000);
  EXPECT_GT(disjoint, 1000);
  EXPECT_GT(searched, 100) << "disjoint cases that only the exact search settles";
}

TEST(HardeningOverlap, BytesOverlapAgreesWithBruteForce) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("ATTNGEN_TEST_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  alignas(64) static unsigned char arena[1 << 14];
  const attngen_dtype dtypes[] = {ATTNGEN_F32, ATTNGEN_F16, ATTNGEN_BOOL, ATTNGEN_I32};
  const int64_t sizes[] = {4, 2, 1, 4};
  int overlapping = 0, disjoint = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    attngen_tensor t[2];
    std::vector<int> bytes(sizeof arena, 0);
    bool want = false;
    for (int which = 0; which < 2; ++which) {
      attngen_tensor& x = t[which];
      x = attngen_tensor{};
      const int dt = static_cast<int>(rng() % 4);
      x.dtype = dtypes[dt];
      x.rank = 1 + static_cast<int>(rng() % 3);
      for (int d = 0; d < x.rank; ++d) {
        x.shape[d] = 1 + static_cast<int64_t>(rng() % 4);
        x.strides[d] = static_cast<int64_t>(rng() % 24);
      }
      const int64_t offset = static_cast<int64_t>(rng() % 64) * sizes[dt];
      x.data = arena + offset;
      std::vector<int64_t> idx(static_cast<size_t>(x.rank), 0);
      for (;;) {
        int64_t off = offset;
        for (int d = 0; d < x.rank; ++d)
          off += idx[static_cast<size_t>(d)] * x.strides[d] * sizes[dt];
        for (int64_t b = 0; b < sizes[dt]; ++b) {
          int& mark = bytes[static_cast<size_t>(off + b)];
          if (which == 1 && mark == 1) want = true;
          if (which == 0) mark = 1;
        }
        int d = x.rank - 1;
        for (; d >= 0; --d) {
          if (++idx[static_cast<size_t>(d)] < x.shape[d]) break;
          idx[static_cast<size_t>(d)] = 0;
        }
        if (d < 0) break;
      }
    }
    const rt::Overlap got = rt::bytes_overlap(t[0], t[1]);
    ASSERT_NE(got, rt::Overlap::kUnknown);
    ASSERT_EQ(got == rt::Overlap::kOverlap, want) << "trial " << trial;
    ASSERT_EQ(rt::bytes_overlap(t[1], t[0]), got) << "symmetric";
    (want ? overlapping : disjoint) += 1;
  }
  EXPECT_GT(overlapping, 1000);
  EXPECT_GT(disjoint, 1000);
}

TEST(HardeningAlias, FusedQkvWithOutputInTheGapsPasses) {
  // One buffer [B, S, 4 * Hq * D]: q, k and v are its first three column blocks and out the
  // fourth. No byte is shared, though every byte range meets.
  constexpr int64_t kB = 2, kS = 3, kH = 2, kD = 64, kRow = 4 * kH * kD;
  std::mt19937_64 rng(fresh_seed());
  std::vector<float> fused(static_cast<size_t>(kB * kS * kRow));
  std::uniform_real_distribution<float> u(-1, 1);
  for (float& f : fused) f = u(rng);
  const int64_t shape[4] = {kB, kS, kH, kD};
  const auto view = [&](int part) {
    attngen_tensor t =
        attngen_tensor_contiguous(fused.data() + part * kH * kD, ATTNGEN_F32, 4, shape);
    t.strides[0] = kS * kRow;
    t.strides[1] = kRow;
    return t;
  };
  const attngen_tensor q = view(0), k = view(1), v = view(2);
  attngen_tensor out = view(3);
  for (int64_t r = 0; r < kB * kS; ++r) {
    std::fill_n(fused.begin() + r * kRow + 3 * kH * kD, kH * kD, poison());
  }
  Storage dense({kB, kS, kH, kD}, 0);
  ASSERT_EQ(attngen_attention(&q, &k, &v, &dense.t, nullptr), ATTNGEN_OK) << attngen_last_error();
  const std::vector<float> inputs = fused;
  ASSERT_EQ(attngen_attention(&q, &k, &v, &out, nullptr), ATTNGEN_OK) << attngen_last_error();
  for (int64_t r = 0; r < kB * kS; ++r) {
    for (int64_t c = 0; c < kH * kD; ++c) {
      const size_t at = static_cast<size_t>(r * kRow + c);
      ASSERT_EQ(fused[at], inputs[at]) << "an input changed";
      ASSERT_EQ(fused[at + 3 * kH * kD], dense.buf[static_cast<size_t>(r * kH * kD + c)]);
    }
  }
  // out over the v block instead: shares bytes with v.
  out = view(2);
  EXPECT_STATUS(attngen_attention(&q, &k, &v, &out, nullptr), ATTNGEN_ERROR_ALIAS);
  EXPECT_TRUE(mentions("out overlaps v"));
}

// ---- Finding 6: no input of a decode step inside the cache storage it writes ----

class HardeningMhaDecode : public ::testing::Test {
 protected:
  static constexpr int64_t kB = 2, kT = 2, kE = 64, kH = 1;

  void SetUp() override {
    std::mt19937_64 rng(fresh_seed());
    o = attngen_kv_cache_options_default();
    o.layers = 2;
    o.batch = kB;
    o.heads_kv = kH;
    o.head_dim_qk = kE / kH;
    o.capacity = 8;
    size_t bytes = 0;
    ASSERT_EQ(attngen_kv_cache_storage_size(&o, &bytes), ATTNGEN_OK);
    cache_floats = bytes / sizeof(float);
    // Room past the cache's storage for tensors that start inside it.
    store.assign(cache_floats + 3 * kE * kE + 64, 0.25f);
    o.storage = store.data();
    ASSERT_EQ(attngen_kv_cache_create(&o, &cache), ATTNGEN_OK) << attngen_last_error();
    x.init({kB, kT, kE}, 0);
    in_w.init({3 * kE, kE}, 0);
    in_b.init({3 * kE}, 0);
    out_w.init({kE, kE}, 0);
    out_b.init({kE}, 0);
    y.init({kB, kT, kE}, 0);
    for (Storage* s : {&x, &in_w, &in_b, &out_w, &out_b}) s->fill_random(rng, -0.2, 0.2);
    opt.num_heads = kH;
  }
  void TearDown() override { attngen_kv_cache_destroy(cache); }

  // The step fails with ATTNGEN_ERROR_ALIAS naming `needle`; the cache (storage and lengths)
  // and y are untouched.
  void expect_alias(const attngen_tensor& xs, const attngen_mha_weights& w,
                    const std::string& needle) {
    SCOPED_TRACE(needle);
    const std::vector<float> before = store;
    EXPECT_STATUS(attngen_mha_decode(&xs, &w, cache, 1, &y.t, &opt), ATTNGEN_ERROR_ALIAS);
    EXPECT_TRUE(mentions(needle)) << attngen_last_error();
    EXPECT_EQ(std::memcmp(before.data(), store.data(), store.size() * sizeof(float)), 0)
        << "cache storage written on error";
    int64_t n = -1;
    ASSERT_EQ(attngen_kv_cache_length(cache, 1, 0, &n), ATTNGEN_OK);
    EXPECT_EQ(n, 0) << "appended on error";
    EXPECT_TRUE(y.all_poison()) << "y written on error";
  }

  // A copy of `t` whose data lies inside layer 1's storage (at its second slot).
  attngen_tensor inside_layer1(const Storage& t) {
    attngen_tensor v = t.t;
    const size_t layer_floats = cache_floats / 2;
    v.data = store.data() + layer_floats + 2 * kE;
    std::copy(t.buf.begin(), t.buf.end(),
              store.begin() + static_cast<std::ptrdiff_t>(layer_floats + 2 * kE));
    return v;
  }

  attngen_kv_cache_options o;
  std::vector<float> store;
  size_t cache_floats = 0;
  attngen_kv_cache* cache = nullptr;
  Storage x, in_w, in_b, out_w, out_b, y;
  attngen_mha_decode_options opt = attngen_mha_decode_options_default();
};

TEST_F(HardeningMhaDecode, ValidStepSucceeds) {
  const attngen_mha_weights w{&in_w.t, &in_b.t, &out_w.t, &out_b.t};
  ASSERT_EQ(attngen_mha_decode(&x.t, &w, cache, 1, &y.t, &opt), ATTNGEN_OK) << attngen_last_error();
}

TEST_F(HardeningMhaDecode, InputsInsideTheCacheAreAliases) {
  // The report's case: out_proj_weight inside the layer's storage, which the append overwrites
  // before out_proj reads it.
  {
    const attngen_tensor ow = inside_layer1(out_w);
    expect_alias(x.t, attngen_mha_weights{&in_w.t, &in_b.t, &ow, &out_b.t}, "out_proj_weight");
  }
  {
    const attngen_tensor ob = inside_layer1(out_b);
    expect_alias(x.t, attngen_mha_weights{&in_w.t, &in_b.t, &out_w.t, &ob}, "out_proj_bias");
  }
  {
    const attngen_tensor iw = inside_layer1(in_w);
    expect_alias(x.t, attngen_mha_weights{&iw, &in_b.t, &out_w.t, &out_b.t}, "in_proj_weight");
  }
  {
    const attngen_tensor ib = inside_layer1(in_b);
    expect_alias(x.t, attngen_mha_weights{&in_w.t, &ib, &out_w.t, &out_b.t}, "in_proj_bias");
  }
  {
    const attngen_tensor xs = inside_layer1(x);
    expect_alias(xs, attngen_mha_weights{&in_w.t, &in_b.t, &out_w.t, &out_b.t}, "x");
  }
  {
    // counts inside the storage, and counts inside y.
    float* cell = store.data() + cache_floats / 2 + 5;
    const int32_t n[2] = {static_cast<int32_t>(kT), static_cast<int32_t>(kT)};
    std::memcpy(cell, n, sizeof n);
    const int64_t b = kB;
    const attngen_tensor counts = attngen_tensor_contiguous(cell, ATTNGEN_I32, 1, &b);
    opt.counts = &counts;
    expect_alias(x.t, attngen_mha_weights{&in_w.t, &in_b.t, &out_w.t, &out_b.t}, "counts");
    opt.counts = nullptr;
  }
  // A bias in layer 0's storage is not written by a step on layer 1: fine.
  attngen_tensor ob0 = out_b.t;
  ob0.data = store.data() + 16;
  std::copy(out_b.buf.begin(), out_b.buf.end(), store.begin() + 16);
  const attngen_mha_weights w0{&in_w.t, &in_b.t, &out_w.t, &ob0};
  EXPECT_EQ(attngen_mha_decode(&x.t, &w0, cache, 1, &y.t, &opt), ATTNGEN_OK)
      << attngen_last_error();
}

// Found by the fuzzer's 30-minute run: an output in another layer's storage (y inside layer 0
// for a step on layer 1) was accepted, and writing it corrupted the cache.
TEST_F(HardeningMhaDecode, OutputInAnyLayerOfTheCacheIsAnAlias) {
  const attngen_mha_weights w{&in_w.t, &in_b.t, &out_w.t, &out_b.t};
  attngen_tensor y0 = y.t;
  y0.data = store.data();
  const std::vector<float> before = store;
  EXPECT_STATUS(attngen_mha_decode(&x.t, &w, cache, 1, &y0, &opt), ATTNGEN_ERROR_ALIAS);
  EXPECT_TRUE(mentions("y overlaps the cache's storage"));
  EXPECT_EQ(std::memcmp(before.data(), store.data(), before.size() * sizeof(float)), 0);
}

TEST_F(HardeningMhaDecode, DecodeCountsInsideOutput) {
  const attngen_mha_weights w{&in_w.t, &in_b.t, &out_w.t, &out_b.t};
  ASSERT_EQ(attngen_mha_decode(&x.t, &w, cache, 1, &y.t, &opt), ATTNGEN_OK);
  Storage q({kB, 1, kH, kE}, 0), out({kB, 1, kH, kE}, 0);
  std::mt19937_64 rng(fresh_seed());
  q.fill_random(rng, -1, 1);
  float* cell = out.buf.data() + 3;
  const int32_t n[2] = {1, 1};
  std::memcpy(cell, n, sizeof n);
  const std::vector<float> before = out.buf;
  const int64_t b = kB;
  const attngen_tensor counts = attngen_tensor_contiguous(cell, ATTNGEN_I32, 1, &b);
  attngen_decode_options dopt = attngen_decode_options_default();
  dopt.counts = &counts;
  EXPECT_STATUS(attngen_decode(&q.t, cache, 1, &out.t, &dopt), ATTNGEN_ERROR_ALIAS);
  EXPECT_TRUE(mentions("counts"));
  EXPECT_EQ(std::memcmp(before.data(), out.buf.data(), before.size() * sizeof(float)), 0);
}

}  // namespace
}  // namespace attngen::test
