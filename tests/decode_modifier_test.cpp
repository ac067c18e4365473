// Modifiers in decode (attngen.h, "Modifiers" and attngen_decode(); docs/semantics.md,
// "Modifiers" and "Incremental decoding"): each library modifier that has decode kernels, on every
// CPU ISA this build has and this machine runs, over a KV cache with grouped-query heads, head dims
// the generic kernels pad, chunks of queries with per-sequence counts, long caches across key
// blocks and split-KV, ring buffers, paged caches and every cache dtype of kModifierCacheDtypes,
// against the float64 reference's own version of it (tests/decode_tester.h); its parameters'
// validation in decode (named errors, nothing written); decode plans with a modifier.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "attngen/attngen.h"
#include "attngen/kernel.h"
#include "core/dtype.h"
#include "core/modifier.h"
#include "tests/decode_tester.h"
#include "tests/tensor.h"

namespace attngen::test {
namespace {

// The cache dtypes the tests decode a modifier over: F32, which the modifier kernels read, and
// the others, which the runtime takes to them (its fallback). Paged caches take those but I8.
const attngen_dtype kModifierCacheDtypes[] = {ATTNGEN_F32, ATTNGEN_F16, ATTNGEN_BF16, ATTNGEN_I8};

// The modifiers of this build's decode kernels (the library's: generated/variants.cmake).
std::vector<const char*> decode_modifiers() {
  std::vector<const char*> names;
  for (size_t i = 0; i < attngen_kernel_count(); ++i) {
    const attngen_kernel_info* k = attngen_kernel_at(i);
    if (k->op == ATTNGEN_OP_DECODE && k->modifier != nullptr && k->modifier[0] != '\0' &&
        std::none_of(names.begin(), names.end(),
                     [&](const char* n) { return std::strcmp(n, k->modifier) == 0; })) {
      names.push_back(k->modifier);
    }
  }
  return names;
}

// The decode kernels generated with `modifier` (none for a modifier without decode kernels).
std::vector<const attngen_kernel_info*> decode_kernels_with(const std::string& modifier) {
  std::vector<const attngen_kernel_info*> out;
  for (size_t i = 0; i < attngen_kernel_count(); ++i) {
    const attngen_kernel_info* k = attngen_kernel_at(i);
    if (k->op == ATTNGEN_OP_DECODE && k->modifier != nullptr && modifier == k->modifier &&
        std::string(k->name).rfind("test_", 0) != 0) {
      out.push_back(k);
    }
  }
  return out;
}

// The CPU ISAs that have a decode kernel with `modifier` and that this machine runs (CUDA's
// kernels copy host buffers: tests/cuda tests them).
std::vector<std::string> modifier_isas(const std::string& modifier) {
  std::vector<std::string> out;
  for (const attngen_kernel_info* k : decode_kernels_with(modifier)) {
    const std::string isa = k->isa;
    if (isa == "cuda" || std::find(out.begin(), out.end(), isa) != out.end()) continue;
    if (attngen_set_isa(isa.c_str()) == ATTNGEN_OK) out.push_back(isa);
  }
  attngen_set_isa(nullptr);
  return out;
}

// Whether one of `modifier`'s tensors has a dimension of the cache's positions (Skv), which a
// ring buffer does not hold: such a modifier over a cache with a window is an error.
bool has_position_dim(const std::string& modifier) {
  for (const attngen_kernel_info* k : decode_kernels_with(modifier)) {
    for (int t = 0; t < k->modifier_tensors; ++t) {
      const attngen_modifier_tensor_info& info = k->modifier_tensor[t];
      for (int d = 0; d < info.rank; ++d) {
        if (info.dims[d] == static_cast<int32_t>(ModifierDim::kSkv)) return true;
      }
    }
  }
  return false;
}

// Why `modifier` cannot be tested here: no decode kernel with it in this build, or none that this
// machine runs; "" where it can.
std::string why_untestable(const std::string& modifier) {
  if (decode_kernels_with(modifier).empty()) {
    return "this build has no decode kernel generated with modifier " + modifier;
  }
  if (modifier_isas(modifier).empty()) {
    return "no CPU ISA of this build with a decode kernel of modifier " + modifier +
           " runs on this machine";
  }
  return "";
}

// Each library modifier's decode kernels, every call of a test under each CPU ISA that has them.
class DecodeModifier : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (const std::string why = why_untestable(GetParam()); !why.empty()) GTEST_SKIP() << why;
    isas_ = modifier_isas(GetParam());
    // Their names say the modifier (docs/variants.md, "Modifiers").
    for (const attngen_kernel_info* k : decode_kernels_with(GetParam())) {
      EXPECT_NE(std::string(k->name).find(std::string("_mod_") + GetParam()), std::string::npos)
          << k->name;
    }
  }
  // A tester of this modifier on every ISA, B sequences of Hq / Hkv heads of dim d.
  DecodeTester base(int64_t batch, int64_t hq, int64_t hkv, int64_t d) const {
    DecodeTester t;
    t.modifier(GetParam()).isas(isas_).batch(batch).heads(hq, hkv).head_dim(d);
    return t;
  }
  // Tests `t`, each of whose decode calls must run a kernel generated with the modifier (the
  // tester checks each; this, that there were some).
  void test(const DecodeTester& t) const {
    std::vector<std::string> ran;
    t.Test(nullptr, &ran);
    EXPECT_FALSE(ran.empty()) << "no decode call ran";
  }
  bool ring_allowed() const { return !has_position_dim(GetParam()); }

  std::vector<std::string> isas_;
};

// Grouped-query heads (4 and 2 query heads per kv head), head dims the generic kernels pad (64,
// 80) and their own (128), sequences of different lengths across key blocks (1, 3, 15, 65, 130,
// 300) in one batch.
TEST_P(DecodeModifier, GroupedQueryAndHeadDims) {
  test(base(2, 8, 2, 128).cached({63, 1}).steps(2));
  test(base(3, 6, 3, 80).cached({0, 14, 299}));
  test(base(2, 8, 2, 64).cached({62, 127}).steps(3));
}

// Chunks of 3 queries per step, with per-sequence counts (a sequence done takes part with 0
// rows), and a prompt attended in one call.
TEST_P(DecodeModifier, ChunksWithCounts) {
  test(base(3, 8, 2, 128).cached({12, 61, 0}).new_tokens(3).lengths({15, 65, 1}));
  test(base(2, 6, 3, 80).prefill({5, 64}).new_tokens(3).lengths({6, 70}));
}

// A long cache (past kDecodeLongKeys: the key-block form where one is built) over several key
// blocks, step by step and in a chunk, with split-KV (a sink logit joins each row once however
// many splits; FreshDrawsOverALongCache has more, with splits and without).
TEST_P(DecodeModifier, LongCacheAndSplits) {
  test(base(2, 8, 2, 128).cached({697, 300}).steps(3).kv_splits(4));
  test(base(1, 6, 3, 64).cached(699).new_tokens(3).steps(1).kv_splits(4));
}

// Ring buffers (a window): positions past the capacity are absolute ones (the modifier sees p
// and j, not slots), every slot overwritten several times, a ring wrapped by the cached tokens,
// and a window in a large cache (key blocks before it skipped). A modifier with a tensor over the
// cache's positions is an error there (DecodeModifierValidation.PositionTensorOverRing).
TEST_P(DecodeModifier, RingBuffer) {
  if (!ring_allowed()) {
    GTEST_SKIP() << GetParam() << " has a tensor over the cache's positions: no ring buffer";
  }
  test(base(2, 8, 2, 128).window(63).cached({300, 40}).new_tokens(3).steps(2));
  test(base(1, 6, 3, 64).window(5).steps(20));
  test(base(1, 8, 2, 80).window(20).capacity(400).cached(299).steps(2).kv_splits(4));
}

// A paged cache (pages of 16 slots) of each dtype that pages, its sequences in pages that held
// others' data; with a window, which a paged cache masks (no ring).
TEST_P(DecodeModifier, PagedCache) {
  for (attngen_dtype d : kModifierCacheDtypes) {
    if (d == ATTNGEN_I8) continue;  // an I8 cache is contiguous
    SCOPED_TRACE(std::string("cache ") + attngen::dtype_row(d)->name);
    test(base(2, 8, 2, 128).paged(16).cached({40, 130}).new_tokens(2).steps(2).cache_dtype(d));
  }
  test(base(2, 6, 3, 80).paged(16).scattered_pages().window(30).cached({100, 17}).steps(2));
}

// Every cache dtype of kModifierCacheDtypes (their K and V rounded to it: the f32 tolerance).
TEST_P(DecodeModifier, CacheDtypes) {
  for (attngen_dtype d : kModifierCacheDtypes) {
    SCOPED_TRACE(std::string("cache ") + attngen::dtype_row(d)->name);
    test(base(2, 8, 2, 128).cached({31, 150}).new_tokens(3).lengths({34, 151}).cache_dtype(d));
    test(base(1, 6, 3, 80).cached(64).cache_dtype(d));
    // Long enough that the copy into F32 splits each kv head over tasks (lengths apart).
    test(base(2, 4, 2, 128).cached({700, 1100}).cache_dtype(d));
  }
}

// Fresh parameters drawn four times over a long cache, with split-KV and without: for sinks, the
// blocks between the sinks and the window skipped, sinks and windows across block edges; for
// ALiBi, the standard slopes (a head count a power of two and not) and the symmetric form (in a
// causal decode the same bias).
TEST_P(DecodeModifier, FreshDrawsOverALongCache) {
  const bool alibi = std::string(GetParam()) == "alibi";
  for (int draw = 0; draw < 4; ++draw) {
    DecodeTester t = base(2, draw % 2 ? 6 : 8, 2, 128);
    if (alibi) t.modifier("alibi", /*symmetric=*/draw == 2, /*standard_slopes=*/draw < 2);
    test(t.cached({699, 400}).steps(1).kv_splits(draw % 2 ? 4 : 1));
  }
}

std::string modifier_name(const ::testing::TestParamInfo<const char*>& info) { return info.param; }

// "Builtin": like the per-kernel cases (DecodeKernel), the sanitizer suite and the trees whose
// kernels are another tree's copies leave them out (tests/CMakeLists.txt); the validation,
// workspace and plan cases below run there.
INSTANTIATE_TEST_SUITE_P(Builtin, DecodeModifier, ::testing::ValuesIn(decode_modifiers()),
                         modifier_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(DecodeModifier);

// ---- Validation ----

struct CacheDeleter {
  void operator()(attngen_kv_cache* c) const { attngen_kv_cache_destroy(c); }
};
using CachePtr = std::unique_ptr<attngen_kv_cache, CacheDeleter>;

// A small decode (B 2, Hq 4 / Hkv 2, D 32, 5 cached positions, capacity 24, one query per
// sequence) with a modifier whose parameters a test then breaks.
struct DecodeCall {
  static constexpr int64_t kB = 2, kHq = 4, kHkv = 2, kD = 32, kCapacity = 24;
  CachePtr cache;
  Storage q{{kB, 1, kHq, kD}, 0}, out{{kB, 1, kHq, kD}, 0};
  Storage floats;             // an f32 tensor of the modifier's
  std::vector<int32_t> ints;  // an i32 one
  attngen_tensor t_ints{};
  attngen_modifier modifier{};
  attngen_decode_options opt = attngen_decode_options_default();

  // window >= 0: a ring buffer of capacity window + 1.
  explicit DecodeCall(const char* name, int64_t window = -1) {
    std::mt19937_64 rng(fresh_seed());
    attngen_kv_cache_options o = attngen_kv_cache_options_default();
    o.layers = 1;
    o.batch = kB;
    o.heads_kv = kHkv;
    o.head_dim_qk = kD;
    o.capacity = window >= 0 ? window + 1 : kCapacity;
    o.window = window;
    attngen_kv_cache* c = nullptr;
    EXPECT_EQ(attngen_kv_cache_create(&o, &c), ATTNGEN_OK) << attngen_last_error();
    cache.reset(c);
    Storage k({kB, 1, kHkv, kD}, 0), v({kB, 1, kHkv, kD}, 0);
    for (int i = 0; i < 5 && cache; ++i) {
      k.fill_random(rng, -1.0, 1.0);
      v.fill_random(rng, -1.0, 1.0);
      EXPECT_EQ(attngen_kv_cache_append(cache.get(), 0, &k.t, &v.t, nullptr), ATTNGEN_OK)
          << attngen_last_error();
    }
    q.fill_random(rng, -1.0, 1.0);
    modifier.name = name;
    opt.modifier = &modifier;
    const std::string n = name;
    if (n == "alibi" || n == "sink_logit") {
      floats.init({kHq}, 0);
      floats.fill_random(rng, 0.0, 0.5);
      modifier.tensors[0] = &floats.t;
    } else if (n == "document") {
      ints.assign(static_cast<size_t>(kB * o.capacity), 0);
      for (size_t j = 0; j < ints.size(); ++j) ints[j] = static_cast<int32_t>(j / 3);
      const int64_t shape[2] = {kB, o.capacity};
      t_ints = attngen_tensor_contiguous(ints.data(), ATTNGEN_I32, 2, shape);
      modifier.tensors[0] = &t_ints;
    } else if (n == "sinks") {
      modifier.scalars[0] = 2.0f;
      modifier.scalars[1] = 3.0f;
    }
  }
  attngen_status run() { return attngen_decode(&q.t, cache.get(), 0, &out.t, &opt); }
};

// The modifier's parameters are checked as attention checks them: the same named errors, and
// neither the output nor the cache is written.
TEST(DecodeModifierValidation, BadParametersAreNamedErrorsWithNothingWritten) {
  if (const std::string why = why_untestable("alibi"); !why.empty()) GTEST_SKIP() << why;
  {
    DecodeCall c("alibi");
    ASSERT_TRUE(c.cache);
    ASSERT_EQ(c.run(), ATTNGEN_OK) << attngen_last_error();  // the call as it is runs
    EXPECT_STREQ(attngen_find_kernel(attngen_last_kernel())->modifier, "alibi");
  }
  struct Case {
    const char* what;
    attngen_status want;
    void (*breaks)(DecodeCall&);
  };
  static Storage hq_plus_one({DecodeCall::kHq + 1}, 0), hkv({DecodeCall::kHkv}, 0),
      rank2({1, DecodeCall::kHq}, 0);
  static Tensor<Half> half({DecodeCall::kHq}, 0);
  const Case cases[] = {
      {"name NULL", ATTNGEN_ERROR_NULL_POINTER, [](DecodeCall& c) { c.modifier.name = nullptr; }},
      {"unknown modifier", ATTNGEN_ERROR_NO_KERNEL,
       [](DecodeCall& c) { c.modifier.name = "no_such_modifier"; }},
      {"slopes missing", ATTNGEN_ERROR_NULL_POINTER,
       [](DecodeCall& c) { c.modifier.tensors[0] = nullptr; }},
      {"slopes of Hq + 1", ATTNGEN_ERROR_SHAPE,
       [](DecodeCall& c) { c.modifier.tensors[0] = &hq_plus_one.t; }},
      {"slopes of Hkv", ATTNGEN_ERROR_SHAPE, [](DecodeCall& c) { c.modifier.tensors[0] = &hkv.t; }},
      {"slopes of rank 2", ATTNGEN_ERROR_RANK,
       [](DecodeCall& c) { c.modifier.tensors[0] = &rank2.t; }},
      {"slopes in F16", ATTNGEN_ERROR_DTYPE,
       [](DecodeCall& c) { c.modifier.tensors[0] = &half.t; }},
      {"slopes' data NULL", ATTNGEN_ERROR_NULL_POINTER,
       [](DecodeCall& c) { c.floats.t.data = nullptr; }},
      {"a second tensor", ATTNGEN_ERROR_INVALID_ARGUMENT,
       [](DecodeCall& c) { c.modifier.tensors[1] = &c.floats.t; }},
      {"a second scalar", ATTNGEN_ERROR_INVALID_ARGUMENT,
       [](DecodeCall& c) { c.modifier.scalars[1] = 1.0f; }},
      {"a NaN scalar", ATTNGEN_ERROR_INVALID_ARGUMENT,
       [](DecodeCall& c) { c.modifier.scalars[0] = std::nanf(""); }},
      {"out over the slopes", ATTNGEN_ERROR_ALIAS,
       [](DecodeCall& c) { c.floats.t.data = c.out.buf.data() + 3; }},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.what);
    DecodeCall c("alibi");
    ASSERT_TRUE(c.cache);
    k.breaks(c);
    EXPECT_EQ(c.run(), k.want) << attngen_status_name(c.run()) << ": " << attngen_last_error();
    EXPECT_NE(std::strlen(attngen_last_error()), 0u);
    EXPECT_TRUE(c.out.all_poison()) << "an output was written";
    int64_t n = -1;
    EXPECT_EQ(attngen_kv_cache_length(c.cache.get(), 0, 0, &n), ATTNGEN_OK);
    EXPECT_EQ(n, 5) << "the cache changed";
  }
  // A plain decode runs no modifier kernel; a modifier call on a kernel named without it is
  // refused.
  DecodeCall plain("alibi");
  ASSERT_TRUE(plain.cache);
  plain.opt.modifier = nullptr;
  ASSERT_EQ(plain.run(), ATTNGEN_OK) << attngen_last_error();
  const std::string plain_kernel = attngen_last_kernel();
  EXPECT_STREQ(attngen_find_kernel(plain_kernel.c_str())->modifier, "") << plain_kernel;
  DecodeCall named("alibi");
  ASSERT_TRUE(named.cache);
  named.opt.kernel = plain_kernel.c_str();
  EXPECT_NE(named.run(), ATTNGEN_OK) << "a kernel without the modifier ran a call with it";
  EXPECT_TRUE(named.out.all_poison()) << "a refused call wrote its output";
}

// Document ids are [B, Skv] with Skv the cache's capacity (not the call's t, nor the length held);
// over a ring buffer, which no longer holds the positions they name, they are an error.
TEST(DecodeModifierValidation, PositionTensorOverRing) {
  if (const std::string why = why_untestable("document"); !why.empty()) GTEST_SKIP() << why;
  {
    DecodeCall c("document");
    ASSERT_TRUE(c.cache);
    ASSERT_EQ(c.run(), ATTNGEN_OK) << attngen_last_error();
  }
  {
    DecodeCall c("document");
    ASSERT_TRUE(c.cache);
    const int64_t shape[2] = {DecodeCall::kB, DecodeCall::kCapacity - 1};
    c.t_ints = attngen_tensor_contiguous(c.ints.data(), ATTNGEN_I32, 2, shape);
    EXPECT_EQ(c.run(), ATTNGEN_ERROR_SHAPE) << attngen_last_error();
    EXPECT_TRUE(c.out.all_poison()) << "an output was written";
  }
  {
    DecodeCall c("document");
    ASSERT_TRUE(c.cache);
    const int64_t shape[2] = {DecodeCall::kB, 1};  // [B, t]
    c.t_ints = attngen_tensor_contiguous(c.ints.data(), ATTNGEN_I32, 2, shape);
    EXPECT_EQ(c.run(), ATTNGEN_ERROR_SHAPE) << attngen_last_error();
    EXPECT_TRUE(c.out.all_poison()) << "an output was written";
  }
  DecodeCall ring("document", /*window=*/7);
  ASSERT_TRUE(ring.cache);
  EXPECT_EQ(ring.run(), ATTNGEN_ERROR_INVALID_ARGUMENT) << attngen_last_error();
  EXPECT_NE(std::strlen(attngen_last_error()), 0u);
  EXPECT_TRUE(ring.out.all_poison()) << "an output was written";
}

// ---- Workspaces ----

// The workspace figure of a decode with a modifier covers every length the cache may hold,
// whatever its dtype (the F32 copy of the layer where the modifier's kernels read F32 caches
// only), a paged cache's too: runs in a workspace of exactly that many bytes succeed, with the
// outputs of the calls without one bit for bit.
TEST(DecodeModifierWorkspace, SizeCoversEveryCacheDtype) {
  if (const std::string why = why_untestable("alibi"); !why.empty()) GTEST_SKIP() << why;
  std::mt19937_64 rng(fresh_seed());
  constexpr int64_t kB = 2, kHq = 4, kHkv = 2, kD = 80, kCapacity = 64, kStep = 16;
  for (attngen_dtype dtype : kModifierCacheDtypes) {
    for (int64_t page_slots : {0, 16}) {
      if (page_slots > 0 && dtype == ATTNGEN_I8) continue;  // an I8 cache is contiguous
      SCOPED_TRACE(std::string("cache ") + attngen::dtype_row(dtype)->name + " page_slots " +
                   std::to_string(page_slots));
      attngen_kv_cache_options o = attngen_kv_cache_options_default();
      o.layers = 1;
      o.batch = kB;
      o.heads_kv = kHkv;
      o.head_dim_qk = kD;
      o.capacity = kCapacity;
      o.dtype = dtype;
      o.page_slots = page_slots;
      attngen_kv_cache* raw_cache = nullptr;
      ASSERT_EQ(attngen_kv_cache_create(&o, &raw_cache), ATTNGEN_OK) << attngen_last_error();
      CachePtr cache(raw_cache);
      Storage q({kB, 1, kHq, kD}, 0), out({kB, 1, kHq, kD}, 0), slopes({kHq}, 0);
      slopes.fill_random(rng, 0.0, 0.1);
      attngen_modifier m{};
      m.name = "alibi";
      m.tensors[0] = &slopes.t;
      attngen_decode_options opt = attngen_decode_options_default();
      opt.modifier = &m;
      size_t bytes = 0;
      ASSERT_EQ(attngen_decode_workspace_size(&q.t, cache.get(), 0, &out.t, &opt, &bytes),
                ATTNGEN_OK)
          << attngen_last_error();
      std::vector<unsigned char> memory(bytes + 1);
      for (int64_t length = kStep; length <= kCapacity; length += kStep) {
        SCOPED_TRACE("length " + std::to_string(length));
        Storage k({kB, kStep, kHkv, kD}, 0), v({kB, kStep, kHkv, kD}, 0);
        for (Storage* s : {&k, &v, &q}) s->fill_random(rng, -1.0, 1.0);
        ASSERT_EQ(attngen_kv_cache_append(cache.get(), 0, &k.t, &v.t, nullptr), ATTNGEN_OK)
            << attngen_last_error();
        std::fill(out.buf.begin(), out.buf.end(), poison());
        ASSERT_EQ(attngen_decode(&q.t, cache.get(), 0, &out.t, &opt), ATTNGEN_OK)
            << attngen_last_error();
        const std::vector<float> want = out.buf;
        std::fill(out.buf.begin(), out.buf.end(), poison());
        // (Off by one byte: any alignment.)
        ASSERT_EQ(attngen_set_workspace(memory.data() + 1, bytes), ATTNGEN_OK);
        const attngen_status st = attngen_decode(&q.t, cache.get(), 0, &out.t, &opt);
        attngen_set_workspace(nullptr, 0);
        ASSERT_EQ(st, ATTNGEN_OK) << attngen_status_name(st) << ": " << attngen_last_error();
        EXPECT_EQ(std::memcmp(want.data(), out.buf.data(), want.size() * sizeof(float)), 0)
            << "the run in the workspace differs from the call without one";
      }
    }
  }
}

// ---- Plans ----

struct PlanDeleter {
  void operator()(attngen_decode_plan* p) const { attngen_decode_plan_destroy(p); }
};
using PlanPtr = std::unique_ptr<attngen_decode_plan, PlanDeleter>;

// A decode plan with a modifier, made once: its runs over a growing cache, with the modifier's
// tensor as each run's data (fresh values every step), equal attngen_decode() with the same
// options bit for bit and run a kernel with the modifier; a run missing the tensor, or giving
// one the modifier does not take, is refused with nothing written.
TEST(DecodeModifierPlan, RunsEqualCalls) {
  int planned = 0;
  for (const char* name : {"alibi", "sink_logit", "sinks"}) {
    if (modifier_isas(name).empty()) continue;
    SCOPED_TRACE(name);
    ++planned;
    std::mt19937_64 rng(fresh_seed());
    constexpr int64_t kB = 2, kHq = 8, kHkv = 2, kD = 64, kT = 2;
    attngen_kv_cache_options o = attngen_kv_cache_options_default();
    o.layers = 1;
    o.batch = kB;
    o.heads_kv = kHkv;
    o.head_dim_qk = kD;
    o.capacity = 96;
    attngen_kv_cache* raw_cache = nullptr;
    ASSERT_EQ(attngen_kv_cache_create(&o, &raw_cache), ATTNGEN_OK) << attngen_last_error();
    CachePtr cache(raw_cache);
    Storage q({kB, kT, kHq, kD}, 0), out({kB, kT, kHq, kD}, 0), params({kHq}, 0);
    std::vector<int32_t> counts = {2, 1};
    const int64_t batch = kB;
    attngen_tensor tc = attngen_tensor_contiguous(counts.data(), ATTNGEN_I32, 1, &batch);
    const bool has_tensor = std::string(name) != "sinks";
    attngen_modifier m{};
    m.name = name;
    if (has_tensor) {
      m.tensors[0] = &params.t;
    } else {
      m.scalars[0] = 3.0f;
      m.scalars[1] = 40.5f;
    }
    attngen_decode_options opt = attngen_decode_options_default();
    opt.counts = &tc;
    opt.modifier = &m;
    params.fill_random(rng, 0.0, 0.5);
    q.fill_random(rng, -1.0, 1.0);
    attngen_decode_plan* raw_plan = nullptr;
    ASSERT_EQ(attngen_decode_plan_create(&q.t, cache.get(), 0, &out.t, &opt, &raw_plan), ATTNGEN_OK)
        << attngen_last_error();
    PlanPtr plan(raw_plan);
    for (int step = 0; step < 4; ++step) {
      SCOPED_TRACE("step " + std::to_string(step));
      Storage k({kB, 21 + step, kHkv, kD}, 0), v({kB, 21 + step, kHkv, kD}, 0);
      k.fill_random(rng, -1.0, 1.0);
      v.fill_random(rng, -1.0, 1.0);
      ASSERT_EQ(attngen_kv_cache_append(cache.get(), 0, &k.t, &v.t, nullptr), ATTNGEN_OK)
          << attngen_last_error();
      q.fill_random(rng, -1.0, 1.0);
      params.fill_random(rng, name == std::string("sink_logit") ? -3.0 : 0.0, 0.5);
      std::fill(out.buf.begin(), out.buf.end(), poison());
      ASSERT_EQ(attngen_decode(&q.t, cache.get(), 0, &out.t, &opt), ATTNGEN_OK)
          << attngen_last_error();
      const std::string kernel = attngen_last_kernel();
      EXPECT_STREQ(attngen_find_kernel(kernel.c_str())->modifier, name) << kernel;
      const std::vector<float> want = out.buf;
      std::fill(out.buf.begin(), out.buf.end(), poison());
      attngen_decode_data d = attngen_decode_data_default();
      d.q = q.buf.data();
      d.out = out.buf.data();
      d.counts = counts.data();
      if (has_tensor) d.modifier_tensors[0] = params.buf.data();
      ASSERT_EQ(attngen_decode_plan_run(plan.get(), cache.get(), 0, &d), ATTNGEN_OK)
          << attngen_last_error();
      EXPECT_EQ(kernel, attngen_last_kernel());
      EXPECT_EQ(std::memcmp(want.data(), out.buf.data(), want.size() * sizeof(float)), 0)
          << "the plan's run differs from the call";
      // Refused runs write nothing.
      Storage untouched({kB, kT, kHq, kD}, 0);
      d.out = untouched.buf.data();
      if (has_tensor) {
        d.modifier_tensors[0] = nullptr;
        EXPECT_EQ(attngen_decode_plan_run(plan.get(), cache.get(), 0, &d),
                  ATTNGEN_ERROR_NULL_POINTER);
        d.modifier_tensors[0] = params.buf.data();
      }
      d.modifier_tensors[1] = params.buf.data();
      EXPECT_EQ(attngen_decode_plan_run(plan.get(), cache.get(), 0, &d),
                ATTNGEN_ERROR_INVALID_ARGUMENT);
      EXPECT_TRUE(untouched.all_poison()) << "a refused run wrote its output";
    }
  }
  if (planned == 0) {
    GTEST_SKIP() << "no decode kernel of alibi, sink_logit or sinks that this machine runs";
  }
  // A plan without a modifier refuses a run that gives a modifier tensor.
  attngen_kv_cache_options o = attngen_kv_cache_options_default();
  o.layers = 1;
  o.batch = 1;
  o.heads_kv = 1;
  o.head_dim_qk = 32;
  o.capacity = 8;
  attngen_kv_cache* raw_cache = nullptr;
  ASSERT_EQ(attngen_kv_cache_create(&o, &raw_cache), ATTNGEN_OK) << attngen_last_error();
  CachePtr cache(raw_cache);
  std::mt19937_64 rng(fresh_seed());
  Storage k({1, 3, 1, 32}, 0), v({1, 3, 1, 32}, 0), q({1, 1, 2, 32}, 0), out({1, 1, 2, 32}, 0);
  for (Storage* s : {&k, &v, &q}) s->fill_random(rng, -1.0, 1.0);
  ASSERT_EQ(attngen_kv_cache_append(cache.get(), 0, &k.t, &v.t, nullptr), ATTNGEN_OK);
  attngen_decode_plan* raw_plan = nullptr;
  ASSERT_EQ(attngen_decode_plan_create(&q.t, cache.get(), 0, &out.t, nullptr, &raw_plan),
            ATTNGEN_OK)
      << attngen_last_error();
  PlanPtr plan(raw_plan);
  attngen_decode_data d = attngen_decode_data_default();
  d.q = q.buf.data();
  d.out = out.buf.data();
  d.modifier_tensors[2] = k.buf.data();
  EXPECT_EQ(attngen_decode_plan_run(plan.get(), cache.get(), 0, &d),
            ATTNGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(out.all_poison()) << "a refused run wrote its output";
}

}  // namespace
}  // namespace attngen::test
