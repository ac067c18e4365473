// Attention plans (attngen.h, "Attention plans"): a plan's runs equal attngen_attention() on the
// same arguments bit for bit (the call is checked against the float64 reference by the rest of
// the suite), over new data each run; its workspace size is what a run needs, to the byte; bad
// input at creation is the call's error, and a run's bad data a named error with nothing written.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "attngen/attngen.h"
#include "tests/tensor.h"

namespace attngen::test {
namespace {

// One attention configuration's tensors (f32 storage or T's), fresh random inputs.
template <typename T>
struct Call {
  Tensor<T> q, k, v;
  Tensor<float> out, weights, lse;
  std::vector<int32_t> kv_len_buf;  // I32 [B]
  std::vector<uint8_t> mask_buf;    // BOOL, broadcast over the query heads
  attngen_tensor kv_len{}, mask{};
  attngen_attention_options opt = attngen_attention_options_default();

  Call(int64_t b, int64_t sq, int64_t skv, int64_t hq, int64_t hkv, int64_t d, int64_t pad) {
    q.init({b, sq, hq, d}, pad);
    k.init({b, skv, hkv, d}, pad);
    v.init({b, skv, hkv, d}, pad);
    out.init({b, sq, hq, d}, pad);
  }
  void refill(std::mt19937_64& rng) {
    q.fill_random(rng, -1, 1);
    k.fill_random(rng, -1, 1);
    v.fill_random(rng, -1, 1);
    std::uniform_int_distribution<int32_t> len(1, static_cast<int32_t>(k.t.shape[1]));
    for (int32_t& l : kv_len_buf) l = len(rng);
    std::bernoulli_distribution attend(0.7);
    for (uint8_t& m : mask_buf) m = attend(rng) ? 1 : 0;
  }
  void poison_outputs() {
    for (Tensor<float>* t : {&out, &weights, &lse}) {
      std::fill(t->buf.begin(), t->buf.end(), poison());
    }
  }
  attngen_attention_data data() {
    attngen_attention_data d = attngen_attention_data_default();
    d.q = q.t.data;
    d.k = k.t.data;
    d.v = v.t.data;
    d.out = out.t.data;
    if (opt.kv_len != nullptr) d.kv_len = kv_len.data;
    if (opt.mask_tensor != nullptr) d.mask_tensor = mask.data;
    if (opt.weights != nullptr) d.weights = weights.t.data;
    if (opt.lse != nullptr) d.lse = lse.t.data;
    return d;
  }
  // The outputs' logical elements, bit for bit, and whether every one was written.
  std::vector<uint32_t> outputs() const {
    std::vector<uint32_t> bits;
    for (const Tensor<float>* t : {&out, &weights, &lse}) {
      if (t->buf.empty()) continue;
      t->for_each([&](const std::vector<int64_t>&, int64_t off) {
        const float x = t->buf[static_cast<size_t>(off)];
        EXPECT_FALSE(is_poison(x)) << "an output element was not written";
        uint32_t u;
        std::memcpy(&u, &x, sizeof u);
        bits.push_back(u);
      });
    }
    return bits;
  }
};

struct PlanDeleter {
  void operator()(attngen_attention_plan* p) const { attngen_attention_plan_destroy(p); }
};
using Plan = std::unique_ptr<attngen_attention_plan, PlanDeleter>;

Plan make_plan(attngen_tensor& q, attngen_tensor& k, attngen_tensor& v, attngen_tensor& out,
               const attngen_attention_options& opt) {
  attngen_attention_plan* p = nullptr;
  const attngen_status st = attngen_attention_plan_create(&q, &k, &v, &out, &opt, &p);
  EXPECT_EQ(st, ATTNGEN_OK) << attngen_status_name(st) << ": " << attngen_last_error();
  return Plan(p);
}

// Three runs of one plan over fresh data each, each against the call on the same data.
template <typename T>
void runs_equal_calls(Call<T>& c) {
  std::mt19937_64 rng(fresh_seed());
  c.refill(rng);
  Plan plan = make_plan(c.q.t, c.k.t, c.v.t, c.out.t, c.opt);
  ASSERT_NE(plan, nullptr);
  const std::string kernel = attngen_attention_plan_kernel(plan.get());
  for (int run = 0; run < 3; ++run) {
    SCOPED_TRACE("run " + std::to_string(run));
    c.refill(rng);
    c.poison_outputs();
    ASSERT_EQ(attngen_attention(&c.q.t, &c.k.t, &c.v.t, &c.out.t, &c.opt), ATTNGEN_OK)
        << attngen_last_error();
    EXPECT_EQ(kernel, attngen_last_kernel());
    const std::vector<uint32_t> want = c.outputs();
    c.poison_outputs();
    const attngen_attention_data d = c.data();
    ASSERT_EQ(attngen_attention_plan_run(plan.get(), &d), ATTNGEN_OK) << attngen_last_error();
    EXPECT_EQ(kernel, attngen_last_kernel());
    EXPECT_EQ(c.outputs(), want) << "the plan's run differs from the call";
  }
}

TEST(AttentionPlan, F32CausalRunsEqualCalls) {
  Call<float> c(2, 19, 33, 4, 2, 64, 0);
  c.opt.mask = ATTNGEN_MASK_CAUSAL;
  runs_equal_calls(c);
}

// Generic kernel (head dim 72), strided views, key padding, a bool mask tensor and both extra
// outputs: every optional tensor of a run's data.
TEST(AttentionPlan, EveryOptionalTensorRunsEqualCalls) {
  Call<float> c(2, 13, 21, 2, 1, 72, 3);
  const int64_t batch = 2, mask_shape[4] = {2, 1, 13, 21};
  c.kv_len_buf.resize(2);
  c.kv_len = attngen_tensor_contiguous(c.kv_len_buf.data(), ATTNGEN_I32, 1, &batch);
  c.mask_buf.resize(2 * 13 * 21);
  c.mask = attngen_tensor_contiguous(c.mask_buf.data(), ATTNGEN_BOOL, 4, mask_shape);
  c.weights.init({2, 2, 13, 21}, 0);
  c.lse.init({2, 2, 13}, 0);
  c.opt.kv_len = &c.kv_len;
  c.opt.mask_tensor = &c.mask;
  c.opt.weights = &c.weights.t;
  c.opt.lse = &c.lse.t;
  c.opt.mask = ATTNGEN_MASK_CAUSAL;
  runs_equal_calls(c);
}

// BF16 with a pattern: an F32 kernel through the conversion.
TEST(AttentionPlan, ConvertedCallRunsEqualCalls) {
  Call<BFloat16> c(1, 40, 40, 2, 2, 64, 0);  // out F32
  c.opt.pattern = attngen_pattern_local(8);
  runs_equal_calls(c);
}

// The plan's workspace size is what its runs take: a run in a workspace of that size (less the
// alignment slack, the workspace being aligned) succeeds without a size query of the call, and
// one byte less in the area it checks fails with ATTNGEN_ERROR_WORKSPACE, writing nothing.
TEST(AttentionPlan, WorkspaceSizeIsWhatARunTakes) {
  Call<float> c(1, 57, 57, 4, 4, 64, 0);
  c.opt.mask = ATTNGEN_MASK_CAUSAL;
  std::mt19937_64 rng(fresh_seed());
  c.refill(rng);
  Plan plan = make_plan(c.q.t, c.k.t, c.v.t, c.out.t, c.opt);
  ASSERT_NE(plan, nullptr);
  size_t bytes = 0;
  ASSERT_EQ(attngen_attention_plan_workspace_size(plan.get(), &bytes), ATTNGEN_OK);
  ASSERT_GT(bytes, 64u);
  const size_t slack = 63;  // the size covers any alignment of the workspace's start
  void* raw = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  ASSERT_NE(raw, nullptr);
  struct Unbind {
    void* raw;
    ~Unbind() {
      attngen_set_workspace(nullptr, 0);
      std::free(raw);
    }
  } unbind{raw};

  c.poison_outputs();
  ASSERT_EQ(attngen_set_workspace(raw, bytes - slack - 1), ATTNGEN_OK);
  const attngen_attention_data d = c.data();
  EXPECT_EQ(attngen_attention_plan_run(plan.get(), &d), ATTNGEN_ERROR_WORKSPACE)
      << attngen_last_error();
  EXPECT_TRUE(c.out.all_poison()) << "a run that did not fit its workspace wrote its output";

  ASSERT_EQ(attngen_set_workspace(raw, bytes - slack), ATTNGEN_OK);
  EXPECT_EQ(attngen_attention_plan_run(plan.get(), &d), ATTNGEN_OK) << attngen_last_error();
  const std::vector<uint32_t> in_workspace = c.outputs();
  attngen_set_workspace(nullptr, 0);
  c.poison_outputs();
  ASSERT_EQ(attngen_attention(&c.q.t, &c.k.t, &c.v.t, &c.out.t, &c.opt), ATTNGEN_OK);
  EXPECT_EQ(c.outputs(), in_workspace);
}

TEST(AttentionPlan, CreationErrorsAreTheCalls) {
  Call<float> c(1, 8, 8, 3, 2, 64, 0);  // Hq not a multiple of Hkv
  attngen_attention_plan* p = reinterpret_cast<attngen_attention_plan*>(&c);
  EXPECT_EQ(attngen_attention_plan_create(&c.q.t, &c.k.t, &c.v.t, &c.out.t, &c.opt, &p),
            ATTNGEN_ERROR_HEADS);
  EXPECT_EQ(p, nullptr);
  EXPECT_EQ(attngen_attention(&c.q.t, &c.k.t, &c.v.t, &c.out.t, &c.opt), ATTNGEN_ERROR_HEADS);
  EXPECT_EQ(attngen_attention_plan_create(&c.q.t, &c.k.t, &c.v.t, &c.out.t, &c.opt, nullptr),
            ATTNGEN_ERROR_NULL_POINTER);
  EXPECT_STREQ(attngen_attention_plan_kernel(nullptr), "");
  attngen_attention_plan_destroy(nullptr);
}

TEST(AttentionPlan, BadRunDataIsANamedErrorWithNothingWritten) {
  Call<float> c(1, 9, 9, 2, 2, 64, 0);
  std::mt19937_64 rng(fresh_seed());
  c.refill(rng);
  Plan plan = make_plan(c.q.t, c.k.t, c.v.t, c.out.t, c.opt);
  ASSERT_NE(plan, nullptr);
  const auto expect_refused = [&](const attngen_attention_data& d, attngen_status want,
                                  const std::string& needle) {
    c.poison_outputs();
    const attngen_status st = attngen_attention_plan_run(plan.get(), &d);
    EXPECT_EQ(st, want) << attngen_status_name(st) << ": " << attngen_last_error();
    EXPECT_NE(std::string(attngen_last_error()).find(needle), std::string::npos)
        << attngen_last_error();
    EXPECT_TRUE(c.out.all_poison()) << "a refused run wrote its output";
  };
  attngen_attention_data d = c.data();
  d.v = nullptr;
  expect_refused(d, ATTNGEN_ERROR_NULL_POINTER, "v");
  d = c.data();
  d.q = reinterpret_cast<const char*>(d.q) + 1;  // not aligned to its f32 elements
  expect_refused(d, ATTNGEN_ERROR_STRIDE, "q");
  d = c.data();
  d.out = const_cast<void*>(d.k);  // the output over an input
  expect_refused(d, ATTNGEN_ERROR_ALIAS, "out");
  d = c.data();
  d.mask_tensor = c.q.t.data;  // a tensor the plan's call did not have
  expect_refused(d, ATTNGEN_ERROR_INVALID_ARGUMENT, "data.mask_tensor");
  d = c.data();
  d.struct_size = 0;
  expect_refused(d, ATTNGEN_ERROR_INVALID_ARGUMENT, "data.struct_size");
  EXPECT_EQ(attngen_attention_plan_run(plan.get(), nullptr), ATTNGEN_ERROR_NULL_POINTER);
  EXPECT_EQ(attngen_attention_plan_run(nullptr, &d), ATTNGEN_ERROR_NULL_POINTER);
}

// The kernel is the plan's: forcing another ISA afterwards changes what calls choose, not it.
TEST(AttentionPlan, KernelIsFixedAtCreation) {
  Call<float> c(1, 16, 16, 2, 2, 64, 0);
  std::mt19937_64 rng(fresh_seed());
  c.refill(rng);
  Plan plan = make_plan(c.q.t, c.k.t, c.v.t, c.out.t, c.opt);
  ASSERT_NE(plan, nullptr);
  const std::string kernel = attngen_attention_plan_kernel(plan.get());
  struct Restore {
    ~Restore() { attngen_set_isa(nullptr); }
  } restore;
  for (const char* isa : {"sse41", "neon32", "generic"}) {
    if (attngen_set_isa(isa) != ATTNGEN_OK) continue;
    const attngen_attention_data d = c.data();
    ASSERT_EQ(attngen_attention_plan_run(plan.get(), &d), ATTNGEN_OK) << attngen_last_error();
    EXPECT_EQ(kernel, attngen_last_kernel()) << "with attngen_set_isa(\"" << isa << "\")";
  }
}

}  // namespace
}  // namespace attngen::test

namespace attngen::test {
namespace {

struct DecodePlanDeleter {
  void operator()(attngen_decode_plan* p) const { attngen_decode_plan_destroy(p); }
};
using DecodePlan = std::unique_ptr<attngen_decode_plan, DecodePlanDeleter>;

struct CacheDeleter {
  void operator()(attngen_kv_cache* c) const { attngen_kv_cache_destroy(c); }
};
using CachePtr = std::unique_ptr<attngen_kv_cache, CacheDeleter>;

CachePtr make_cache(const attngen_kv_cache_options& o) {
  attngen_kv_cache* cache = nullptr;
  EXPECT_EQ(attngen_kv_cache_create(&o, &cache), ATTNGEN_OK) << attngen_last_error();
  return CachePtr(cache);
}

// Appends t tokens of fresh random K and V to every sequence of `layer`.
void append(attngen_kv_cache* cache, const attngen_kv_cache_options& o, int64_t layer, int64_t t,
            std::mt19937_64& rng) {
  Storage k({o.batch, t, o.heads_kv, o.head_dim_qk}, 0),
      v({o.batch, t, o.heads_kv, o.head_dim_qk}, 0);
  k.fill_random(rng, -1, 1);
  v.fill_random(rng, -1, 1);
  ASSERT_EQ(attngen_kv_cache_append(cache, layer, &k.t, &v.t, nullptr), ATTNGEN_OK)
      << attngen_last_error();
}

// Decode steps through a plan and through attngen_decode(), bit for bit, over two caches of the
// plan's options (another layer count) and two layers, with counts (some rows not real), as the
// caches grow; an i8 cache and an f32 one.
TEST(DecodePlan, RunsEqualCalls) {
  for (attngen_dtype dtype : {ATTNGEN_F32, ATTNGEN_I8}) {
    SCOPED_TRACE(std::string("cache dtype ") + std::to_string(dtype));
    std::mt19937_64 rng(fresh_seed());
    attngen_kv_cache_options o = attngen_kv_cache_options_default();
    o.layers = 2;
    o.batch = 2;
    o.heads_kv = 2;
    o.head_dim_qk = 64;
    o.capacity = 48;
    o.dtype = dtype;
    CachePtr first = make_cache(o);
    o.layers = 3;
    CachePtr second = make_cache(o);
    ASSERT_TRUE(first && second);
    const int64_t t = 2, hq = 4;
    Storage q({o.batch, t, hq, 64}, 0), out({o.batch, t, hq, 64}, 0);
    std::vector<int32_t> counts = {2, 1};
    const int64_t batch = o.batch;
    attngen_tensor tc = attngen_tensor_contiguous(counts.data(), ATTNGEN_I32, 1, &batch);
    attngen_decode_options opt = attngen_decode_options_default();
    opt.counts = &tc;
    q.fill_random(rng, -1, 1);
    attngen_decode_plan* raw = nullptr;
    ASSERT_EQ(attngen_decode_plan_create(&q.t, first.get(), 0, &out.t, &opt, &raw), ATTNGEN_OK)
        << attngen_last_error();
    DecodePlan plan(raw);
    for (int step = 0; step < 4; ++step) {
      for (attngen_kv_cache* cache : {first.get(), second.get()}) {
        for (int64_t layer : {int64_t{0}, int64_t{1}}) {
          SCOPED_TRACE("step " + std::to_string(step) + " layer " + std::to_string(layer));
          append(cache, o, layer, 5 + step, rng);
          q.fill_random(rng, -1, 1);
          std::fill(out.buf.begin(), out.buf.end(), poison());
          ASSERT_EQ(attngen_decode(&q.t, cache, layer, &out.t, &opt), ATTNGEN_OK)
              << attngen_last_error();
          const std::string kernel = attngen_last_kernel();
          const std::vector<float> want = out.buf;
          for (float x : want) ASSERT_FALSE(is_poison(x)) << "an output element was not written";
          std::fill(out.buf.begin(), out.buf.end(), poison());
          attngen_decode_data d = attngen_decode_data_default();
          d.q = q.t.data;
          d.out = out.t.data;
          d.counts = counts.data();
          ASSERT_EQ(attngen_decode_plan_run(plan.get(), cache, layer, &d), ATTNGEN_OK)
              << attngen_last_error();
          EXPECT_EQ(kernel, attngen_last_kernel());
          EXPECT_EQ(std::memcmp(want.data(), out.buf.data(), want.size() * sizeof(float)), 0)
              << "the plan's run differs from the call";
        }
      }
    }
  }
}

// A run's workspace is the plan's figure (less the alignment slack), at every length; a cache of
// other options is refused before anything is written.
TEST(DecodePlan, WorkspaceSizeAndCacheShape) {
  std::mt19937_64 rng(fresh_seed());
  attngen_kv_cache_options o = attngen_kv_cache_options_default();
  o.layers = 1;
  o.batch = 1;
  o.heads_kv = 2;
  o.head_dim_qk = 64;
  o.capacity = 40;
  CachePtr cache = make_cache(o);
  ASSERT_TRUE(cache);
  Storage q({1, 1, 8, 64}, 0), out({1, 1, 8, 64}, 0);
  q.fill_random(rng, -1, 1);
  attngen_decode_plan* raw = nullptr;
  ASSERT_EQ(attngen_decode_plan_create(&q.t, cache.get(), 0, &out.t, nullptr, &raw), ATTNGEN_OK)
      << attngen_last_error();
  DecodePlan plan(raw);
  size_t bytes = 0;
  ASSERT_EQ(attngen_decode_plan_workspace_size(plan.get(), &bytes), ATTNGEN_OK);
  void* ws = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  ASSERT_NE(ws, nullptr);
  struct Unbind {
    void* ws;
    ~Unbind() {
      attngen_set_workspace(nullptr, 0);
      std::free(ws);
    }
  } unbind{ws};
  attngen_decode_data d = attngen_decode_data_default();
  d.q = q.t.data;
  d.out = out.t.data;
  for (int64_t length = 1; length <= o.capacity; length += 13) {
    append(cache.get(), o, 0, length == 1 ? 1 : 13, rng);
    ASSERT_EQ(attngen_set_workspace(ws, bytes - 63), ATTNGEN_OK);
    EXPECT_EQ(attngen_decode_plan_run(plan.get(), cache.get(), 0, &d), ATTNGEN_OK)
        << attngen_last_error();
  }
  attngen_set_workspace(nullptr, 0);

  o.capacity = 41;
  CachePtr other = make_cache(o);
  ASSERT_TRUE(other);
  append(other.get(), o, 0, 3, rng);
  std::fill(out.buf.begin(), out.buf.end(), poison());
  EXPECT_EQ(attngen_decode_plan_run(plan.get(), other.get(), 0, &d),
            ATTNGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(attngen_last_error()).find("capacity"), std::string::npos)
      << attngen_last_error();
  EXPECT_TRUE(out.all_poison()) << "a refused run wrote its output";
  d.counts = q.t.data;  // the plan's call had no counts
  EXPECT_EQ(attngen_decode_plan_run(plan.get(), cache.get(), 0, &d),
            ATTNGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(out.all_poison()) << "a refused run wrote its output";
}

}  // namespace
}  // namespace attngen::test

// Linear and MHA plans (attngen.h, "Linear and MHA plans"): runs equal attngen_linear() and
// attngen_mha() on the same arguments bit for bit, over new data (new weights too: a run packs the
// weights it is given) and two sets of buffers; the workspace figure is what a run takes; a
// run's bad data is a named error with nothing written.
namespace attngen::test {
namespace {

// The bits of every logical element of t (any element type), which must all have been written.
template <typename T>
std::vector<uint32_t> written_bits(const Tensor<T>& t) {
  std::vector<uint32_t> bits;
  t.for_each([&](const std::vector<int64_t>&, int64_t off) {
    const T& x = t.buf[static_cast<size_t>(off)];
    EXPECT_FALSE(ElementTraits<T>::is_poison(x)) << "an output element was not written";
    uint32_t u = 0;
    std::memcpy(&u, &x, sizeof x);
    bits.push_back(u);
  });
  return bits;
}

template <typename T>
void poison_all(Tensor<T>& t) {
  std::fill(t.buf.begin(), t.buf.end(), ElementTraits<T>::poison());
}

// The plan's workspace figure against a run (`run` poisons the output, runs, and says whether
// the output is untouched): at every start of the workspace a run in the figure's bytes succeeds
// and one in a byte less fails; from a 64-byte boundary the figure less its alignment slack (63)
// succeeds and a byte less fails. A failed run returns ATTNGEN_ERROR_WORKSPACE with its output
// untouched; a run that fits gives `want`, bit for bit.
template <typename Run, typename Outputs>
void expect_plan_workspace(size_t bytes, Run run, Outputs outputs,
                           const std::vector<uint32_t>& want) {
  ASSERT_GT(bytes, size_t{64});
  const struct {
    size_t bytes, misalign;
    bool fits;
  } cases[] = {
      {bytes, 1, true}, {bytes - 1, 1, false}, {bytes - 63, 0, true}, {bytes - 64, 0, false}};
  for (const auto& w : cases) {
    SCOPED_TRACE("workspace of " + std::to_string(w.bytes) + " bytes at 64k + " +
                 std::to_string(w.misalign));
    void* raw = std::malloc(w.bytes + 128);
    ASSERT_NE(raw, nullptr);
    char* p =
        reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(raw) + 63) / 64 * 64) + w.misalign;
    ASSERT_EQ(attngen_set_workspace(p, w.bytes), ATTNGEN_OK);
    bool untouched = false;
    const attngen_status st = run(&untouched);
    attngen_set_workspace(nullptr, 0);
    std::free(raw);
    if (w.fits) {
      EXPECT_EQ(st, ATTNGEN_OK) << attngen_status_name(st) << ": " << attngen_last_error();
      if (st == ATTNGEN_OK) {
        EXPECT_EQ(outputs(), want) << "the run in a workspace differs";
      }
    } else {
      EXPECT_EQ(st, ATTNGEN_ERROR_WORKSPACE)
          << attngen_status_name(st) << ": " << attngen_last_error();
      EXPECT_TRUE(untouched) << "a run that did not fit its workspace wrote its output";
    }
  }
}

// The error `want` with a message containing `needle`.
void expect_status(attngen_status st, attngen_status want, const std::string& needle) {
  EXPECT_EQ(st, want) << attngen_status_name(st) << ": " << attngen_last_error();
  EXPECT_NE(std::string(attngen_last_error()).find(needle), std::string::npos)
      << "expected '" << needle << "' in: " << attngen_last_error();
}

struct LinearPlanDeleter {
  void operator()(attngen_linear_plan* p) const { attngen_linear_plan_destroy(p); }
};
using LinearPlan = std::unique_ptr<attngen_linear_plan, LinearPlanDeleter>;

struct MhaPlanDeleter {
  void operator()(attngen_mha_plan* p) const { attngen_mha_plan_destroy(p); }
};
using MhaPlan = std::unique_ptr<attngen_mha_plan, MhaPlanDeleter>;

// One linear configuration's tensors, of T's dtype: x [B, S, E], w [N, E], bias [N] or none,
// y [B, S, N], non-innermost strides padded by `pad`.
template <typename T>
struct LinearCase {
  Tensor<T> x, w, bias, y;
  bool has_bias;

  LinearCase(int64_t b, int64_t s, int64_t e, int64_t n, bool with_bias, int64_t pad)
      : has_bias(with_bias) {
    x.init({b, s, e}, pad);
    w.init({n, e}, pad);
    bias.init({n}, 0);
    y.init({b, s, n}, pad);
  }
  LinearCase(const LinearCase&) = delete;  // its descriptions point into it
  LinearCase& operator=(const LinearCase&) = delete;
  void refill(std::mt19937_64& rng) {
    x.fill_random(rng, -1, 1);
    w.fill_random(rng, -1, 1);
    bias.fill_random(rng, -1, 1);
  }
  const attngen_tensor* bias_t() const { return has_bias ? &bias.t : nullptr; }
  attngen_status call() { return attngen_linear(&x.t, &w.t, bias_t(), &y.t); }
  LinearPlan plan() {
    attngen_linear_plan* p = nullptr;
    const attngen_status st = attngen_linear_plan_create(&x.t, &w.t, bias_t(), &y.t, &p);
    EXPECT_EQ(st, ATTNGEN_OK) << attngen_status_name(st) << ": " << attngen_last_error();
    return LinearPlan(p);
  }
  attngen_linear_data data() const {
    attngen_linear_data d = attngen_linear_data_default();
    d.x = x.t.data;
    d.w = w.t.data;
    d.bias = has_bias ? bias.t.data : nullptr;
    d.y = y.t.data;
    return d;
  }
};

// Runs of one plan over fresh data each (alternating between two sets of buffers), each against
// the call on the same data; returns the plan's kernel.
template <typename T>
std::string linear_runs_equal_calls(int64_t b, int64_t s, int64_t e, int64_t n, bool with_bias,
                                    int64_t pad) {
  std::mt19937_64 rng(fresh_seed());
  LinearCase<T> sets[2] = {{b, s, e, n, with_bias, pad}, {b, s, e, n, with_bias, pad}};
  sets[0].refill(rng);
  LinearPlan plan = sets[0].plan();
  if (plan == nullptr) return "";
  const std::string kernel = attngen_linear_plan_kernel(plan.get());
  for (int run = 0; run < 4; ++run) {
    SCOPED_TRACE("run " + std::to_string(run));
    LinearCase<T>& c = sets[run % 2];
    c.refill(rng);
    poison_all(c.y);
    EXPECT_EQ(c.call(), ATTNGEN_OK) << attngen_last_error();
    EXPECT_EQ(kernel, attngen_last_kernel());
    const std::vector<uint32_t> want = written_bits(c.y);
    poison_all(c.y);
    const attngen_linear_data d = c.data();
    EXPECT_EQ(attngen_linear_plan_run(plan.get(), &d), ATTNGEN_OK) << attngen_last_error();
    EXPECT_EQ(kernel, attngen_last_kernel());
    EXPECT_EQ(written_bits(c.y), want) << "the plan's run differs from the call";
    EXPECT_EQ(c.y.gaps_written(), 0) << "the plan's run wrote between the output's rows";
  }
  return kernel;
}

TEST(LinearPlan, F32RunsEqualCalls) {
  linear_runs_equal_calls<float>(2, 7, 96, 40, /*with_bias=*/true, 0);
  linear_runs_equal_calls<float>(1, 5, 33, 17, /*with_bias=*/false, 3);  // strided views
}

TEST(LinearPlan, Bf16RunsEqualCalls) {
  linear_runs_equal_calls<BFloat16>(2, 9, 64, 24, /*with_bias=*/true, 0);
  linear_runs_equal_calls<BFloat16>(1, 3, 40, 8, /*with_bias=*/false, 2);
}

TEST(LinearPlan, F16RunsEqualCalls) {
  linear_runs_equal_calls<Half>(1, 11, 48, 20, /*with_bias=*/true, 1);
}

TEST(LinearPlan, WorkspaceSizeIsWhatARunTakes) {
  for (bool with_bias : {true, false}) {
    SCOPED_TRACE(with_bias ? "bias" : "no bias");
    std::mt19937_64 rng(fresh_seed());
    LinearCase<float> c(2, 13, 96, 40, with_bias, 0);
    c.refill(rng);
    LinearPlan plan = c.plan();
    ASSERT_NE(plan, nullptr);
    size_t bytes = 0;
    ASSERT_EQ(attngen_linear_plan_workspace_size(plan.get(), &bytes), ATTNGEN_OK)
        << attngen_last_error();
    poison_all(c.y);
    ASSERT_EQ(c.call(), ATTNGEN_OK) << attngen_last_error();
    const std::vector<uint32_t> want = written_bits(c.y);
    const attngen_linear_data d = c.data();
    expect_plan_workspace(
        bytes,
        [&](bool* untouched) {
          poison_all(c.y);
          const attngen_status st = attngen_linear_plan_run(plan.get(), &d);
          *untouched = c.y.all_poison();
          return st;
        },
        [&] { return written_bits(c.y); }, want);
  }
}

TEST(LinearPlan, CreationErrorsAreTheCalls) {
  LinearCase<float> c(1, 4, 32, 8, true, 0);
  c.w.init({8, 31}, 0);  // E of w is not E of x
  attngen_linear_plan* p = reinterpret_cast<attngen_linear_plan*>(&c);
  EXPECT_EQ(attngen_linear_plan_create(&c.x.t, &c.w.t, &c.bias.t, &c.y.t, &p), ATTNGEN_ERROR_SHAPE);
  EXPECT_EQ(p, nullptr);
  EXPECT_EQ(c.call(), ATTNGEN_ERROR_SHAPE);
  EXPECT_EQ(attngen_linear_plan_create(&c.x.t, &c.w.t, &c.bias.t, &c.y.t, nullptr),
            ATTNGEN_ERROR_NULL_POINTER);
  size_t bytes = 7;
  EXPECT_EQ(attngen_linear_plan_workspace_size(nullptr, &bytes), ATTNGEN_ERROR_NULL_POINTER);
  EXPECT_EQ(bytes, 7u);
  EXPECT_STREQ(attngen_linear_plan_kernel(nullptr), "");
  attngen_linear_plan_destroy(nullptr);
}

TEST(LinearPlan, BadRunDataIsANamedErrorWithNothingWritten) {
  for (bool with_bias : {true, false}) {
    SCOPED_TRACE(with_bias ? "plan with a bias" : "plan without a bias");
    std::mt19937_64 rng(fresh_seed());
    LinearCase<float> c(1, 6, 32, 16, with_bias, 0);
    c.refill(rng);
    LinearPlan plan = c.plan();
    ASSERT_NE(plan, nullptr);
    const auto expect_refused = [&](const attngen_linear_data& d, attngen_status want,
                                    const std::string& needle) {
      poison_all(c.y);
      expect_status(attngen_linear_plan_run(plan.get(), &d), want, needle);
      EXPECT_TRUE(c.y.all_poison()) << "a refused run wrote its output";
    };
    attngen_linear_data d = c.data();
    d.x = nullptr;
    expect_refused(d, ATTNGEN_ERROR_NULL_POINTER, "x.data");
    d = c.data();
    d.w = nullptr;
    expect_refused(d, ATTNGEN_ERROR_NULL_POINTER, "w.data");
    d = c.data();
    d.y = nullptr;
    expect_refused(d, ATTNGEN_ERROR_NULL_POINTER, "y.data");
    d = c.data();
    if (with_bias) {
      d.bias = nullptr;  // the plan's call had a bias
      expect_refused(d, ATTNGEN_ERROR_NULL_POINTER, "bias.data");
    } else {
      d.bias = c.bias.t.data;  // the plan's call had none
      expect_refused(d, ATTNGEN_ERROR_INVALID_ARGUMENT, "data.bias");
    }
    d = c.data();
    d.w = reinterpret_cast<const char*>(d.w) + 2;  // not aligned to its f32 elements
    expect_refused(d, ATTNGEN_ERROR_STRIDE, "w");
    d = c.data();
    d.y = const_cast<void*>(d.x);  // the output over an input
    expect_refused(d, ATTNGEN_ERROR_ALIAS, "y");
    d = c.data();
    d.struct_size = 0;
    expect_refused(d, ATTNGEN_ERROR_INVALID_ARGUMENT, "data.struct_size");
    poison_all(c.y);
    EXPECT_EQ(attngen_linear_plan_run(plan.get(), nullptr), ATTNGEN_ERROR_NULL_POINTER);
    d = c.data();
    EXPECT_EQ(attngen_linear_plan_run(nullptr, &d), ATTNGEN_ERROR_NULL_POINTER);
    EXPECT_TRUE(c.y.all_poison()) << "a refused run wrote its output";
  }
}

struct MhaShape {
  int64_t batch, seq, embed, heads;
  bool in_bias, out_bias, padding;
  attngen_mask_kind mask;
};

// One MHA configuration's tensors, of T's dtype: x and y [B, S, E], the weights of an
// nn.MultiheadAttention (each bias optional), key padding optional.
template <typename T>
struct MhaCase {
  Tensor<T> x, y, in_w, in_b, out_w, out_b;
  bool has_in_b, has_out_b;
  std::vector<int32_t> kv_len_buf;
  attngen_tensor kv_len{};
  attngen_mha_weights weights{};
  attngen_mha_options opt = attngen_mha_options_default();

  explicit MhaCase(const MhaShape& m) : has_in_b(m.in_bias), has_out_b(m.out_bias) {
    x.init({m.batch, m.seq, m.embed}, 0);
    y.init({m.batch, m.seq, m.embed}, 0);
    in_w.init({3 * m.embed, m.embed}, 0);
    in_b.init({3 * m.embed}, 0);
    out_w.init({m.embed, m.embed}, 0);
    out_b.init({m.embed}, 0);
    weights = {&in_w.t, has_in_b ? &in_b.t : nullptr, &out_w.t, has_out_b ? &out_b.t : nullptr};
    opt.num_heads = m.heads;
    opt.mask = m.mask;
    if (m.padding) {
      kv_len_buf.resize(static_cast<size_t>(m.batch));
      kv_len = attngen_tensor_contiguous(kv_len_buf.data(), ATTNGEN_I32, 1, &m.batch);
      opt.kv_len = &kv_len;
    }
  }
  MhaCase(const MhaCase&) = delete;  // its descriptions point into it
  MhaCase& operator=(const MhaCase&) = delete;

  // New inputs, weights and key lengths (1 to S).
  void refill(std::mt19937_64& rng) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(x.t.shape[2]));
    x.fill_random(rng, -1, 1);
    in_w.fill_random(rng, -bound, bound);
    in_b.fill_random(rng, -0.1, 0.1);
    out_w.fill_random(rng, -bound, bound);
    out_b.fill_random(rng, -0.1, 0.1);
    std::uniform_int_distribution<int32_t> len(1, static_cast<int32_t>(x.t.shape[1]));
    for (int32_t& l : kv_len_buf) l = len(rng);
  }
  attngen_status call() { return attngen_mha(&x.t, &weights, &y.t, &opt); }
  MhaPlan plan() {
    attngen_mha_plan* p = nullptr;
    const attngen_status st = attngen_mha_plan_create(&x.t, &weights, &y.t, &opt, &p);
    EXPECT_EQ(st, ATTNGEN_OK) << attngen_status_name(st) << ": " << attngen_last_error();
    return MhaPlan(p);
  }
  attngen_mha_data data() const {
    attngen_mha_data d = attngen_mha_data_default();
    d.x = x.t.data;
    d.y = y.t.data;
    d.in_proj_weight = in_w.t.data;
    d.in_proj_bias = has_in_b ? in_b.t.data : nullptr;
    d.out_proj_weight = out_w.t.data;
    d.out_proj_bias = has_out_b ? out_b.t.data : nullptr;
    d.kv_len = opt.kv_len != nullptr ? kv_len.data : nullptr;
    return d;
  }
};

template <typename T>
std::string mha_runs_equal_calls(const MhaShape& m) {
  std::mt19937_64 rng(fresh_seed());
  MhaCase<T> sets[2] = {MhaCase<T>(m), MhaCase<T>(m)};
  sets[0].refill(rng);
  MhaPlan plan = sets[0].plan();
  if (plan == nullptr) return "";
  const std::string kernel = attngen_mha_plan_kernel(plan.get());
  for (int run = 0; run < 4; ++run) {
    SCOPED_TRACE("run " + std::to_string(run));
    MhaCase<T>& c = sets[run % 2];
    c.refill(rng);
    poison_all(c.y);
    EXPECT_EQ(c.call(), ATTNGEN_OK) << attngen_last_error();
    EXPECT_EQ(kernel, attngen_last_kernel());
    const std::vector<uint32_t> want = written_bits(c.y);
    poison_all(c.y);
    const attngen_mha_data d = c.data();
    EXPECT_EQ(attngen_mha_plan_run(plan.get(), &d), ATTNGEN_OK) << attngen_last_error();
    EXPECT_EQ(kernel, attngen_last_kernel());
    EXPECT_EQ(written_bits(c.y), want) << "the plan's run differs from the call";
  }
  return kernel;
}

TEST(MhaPlan, F32WithBiasesCausalAndPaddingRunsEqualCalls) {
  mha_runs_equal_calls<float>({2, 21, 128, 2, true, true, true, ATTNGEN_MASK_CAUSAL});
}

TEST(MhaPlan, F32WithoutBiasesRunsEqualCalls) {
  mha_runs_equal_calls<float>({1, 9, 64, 1, false, false, false, ATTNGEN_MASK_NONE});
  mha_runs_equal_calls<float>({2, 7, 96, 3, false, true, false, ATTNGEN_MASK_CAUSAL});
}

// Head dim 256: no bf16 MHA kernel takes it, so an F32 kernel runs through the conversion.
TEST(MhaPlan, ConvertedCallRunsEqualCalls) {
  const std::string kernel =
      mha_runs_equal_calls<BFloat16>({1, 6, 256, 1, true, false, true, ATTNGEN_MASK_CAUSAL});
  RecordProperty("kernel", kernel);
  mha_runs_equal_calls<Half>({2, 5, 128, 2, true, true, false, ATTNGEN_MASK_NONE});
}

TEST(MhaPlan, WorkspaceSizeIsWhatARunTakes) {
  std::mt19937_64 rng(fresh_seed());
  MhaCase<float> c({2, 17, 128, 2, true, true, true, ATTNGEN_MASK_CAUSAL});
  c.refill(rng);
  MhaPlan plan = c.plan();
  ASSERT_NE(plan, nullptr);
  size_t bytes = 0;
  ASSERT_EQ(attngen_mha_plan_workspace_size(plan.get(), &bytes), ATTNGEN_OK)
      << attngen_last_error();
  poison_all(c.y);
  ASSERT_EQ(c.call(), ATTNGEN_OK) << attngen_last_error();
  const std::vector<uint32_t> want = written_bits(c.y);
  const attngen_mha_data d = c.data();
  expect_plan_workspace(
      bytes,
      [&](bool* untouched) {
        poison_all(c.y);
        const attngen_status st = attngen_mha_plan_run(plan.get(), &d);
        *untouched = c.y.all_poison();
        return st;
      },
      [&] { return written_bits(c.y); }, want);
}

TEST(MhaPlan, CreationErrorsAreTheCalls) {
  MhaCase<float> c({1, 4, 64, 3, true, true, false, ATTNGEN_MASK_NONE});  // 3 heads, E 64
  attngen_mha_plan* p = reinterpret_cast<attngen_mha_plan*>(&c);
  EXPECT_EQ(attngen_mha_plan_create(&c.x.t, &c.weights, &c.y.t, &c.opt, &p), ATTNGEN_ERROR_HEADS);
  EXPECT_EQ(p, nullptr);
  EXPECT_EQ(c.call(), ATTNGEN_ERROR_HEADS);
  p = reinterpret_cast<attngen_mha_plan*>(&c);
  EXPECT_EQ(attngen_mha_plan_create(&c.x.t, nullptr, &c.y.t, &c.opt, &p),
            ATTNGEN_ERROR_NULL_POINTER);
  EXPECT_EQ(p, nullptr);
  c.opt.num_heads = 2;
  EXPECT_EQ(attngen_mha_plan_create(&c.x.t, &c.weights, &c.y.t, &c.opt, nullptr),
            ATTNGEN_ERROR_NULL_POINTER);
  size_t bytes = 7;
  EXPECT_EQ(attngen_mha_plan_workspace_size(nullptr, &bytes), ATTNGEN_ERROR_NULL_POINTER);
  EXPECT_EQ(bytes, 7u);
  EXPECT_STREQ(attngen_mha_plan_kernel(nullptr), "");
  attngen_mha_plan_destroy(nullptr);
}

TEST(MhaPlan, BadRunDataIsANamedErrorWithNothingWritten) {
  for (bool biases : {true, false}) {
    SCOPED_TRACE(biases ? "plan with biases and key padding" : "plan without them");
    std::mt19937_64 rng(fresh_seed());
    MhaCase<float> c({2, 5, 64, 2, biases, biases, biases, ATTNGEN_MASK_CAUSAL});
    c.refill(rng);
    MhaPlan plan = c.plan();
    ASSERT_NE(plan, nullptr);
    const auto expect_refused = [&](const attngen_mha_data& d, attngen_status want,
                                    const std::string& needle) {
      poison_all(c.y);
      expect_status(attngen_mha_plan_run(plan.get(), &d), want, needle);
      EXPECT_TRUE(c.y.all_poison()) << "a refused run wrote its output";
    };
    attngen_mha_data d = c.data();
    d.x = nullptr;
    expect_refused(d, ATTNGEN_ERROR_NULL_POINTER, "x.data");
    d = c.data();
    d.in_proj_weight = nullptr;
    expect_refused(d, ATTNGEN_ERROR_NULL_POINTER, "in_proj_weight.data");
    d = c.data();
    d.out_proj_weight = nullptr;
    expect_refused(d, ATTNGEN_ERROR_NULL_POINTER, "out_proj_weight.data");
    if (biases) {  // tensors the plan's call had, left NULL
      d = c.data();
      d.in_proj_bias = nullptr;
      expect_refused(d, ATTNGEN_ERROR_NULL_POINTER, "in_proj_bias.data");
      d = c.data();
      d.out_proj_bias = nullptr;
      expect_refused(d, ATTNGEN_ERROR_NULL_POINTER, "out_proj_bias.data");
      d = c.data();
      d.kv_len = nullptr;
      expect_refused(d, ATTNGEN_ERROR_NULL_POINTER, "kv_len.data");
      c.kv_len_buf[1] = 6;  // past S = 5: a value checked at each run
      expect_refused(c.data(), ATTNGEN_ERROR_INVALID_ARGUMENT, "kv_len[1]");
      c.kv_len_buf[1] = 5;
    } else {  // tensors the plan's call had not, given
      d = c.data();
      d.in_proj_bias = c.in_b.t.data;
      expect_refused(d, ATTNGEN_ERROR_INVALID_ARGUMENT, "data.in_proj_bias");
      d = c.data();
      d.out_proj_bias = c.out_b.t.data;
      expect_refused(d, ATTNGEN_ERROR_INVALID_ARGUMENT, "data.out_proj_bias");
      d = c.data();
      d.kv_len = c.x.t.data;
      expect_refused(d, ATTNGEN_ERROR_INVALID_ARGUMENT, "data.kv_len");
    }
    d = c.data();
    d.x = reinterpret_cast<const char*>(d.x) + 1;  // not aligned to its f32 elements
    expect_refused(d, ATTNGEN_ERROR_STRIDE, "x");
    d = c.data();
    d.y = const_cast<void*>(d.out_proj_weight);  // the output over a weight
    expect_refused(d, ATTNGEN_ERROR_ALIAS, "y");
    d = c.data();
    d.struct_size = 0;
    expect_refused(d, ATTNGEN_ERROR_INVALID_ARGUMENT, "data.struct_size");
    poison_all(c.y);
    EXPECT_EQ(attngen_mha_plan_run(plan.get(), nullptr), ATTNGEN_ERROR_NULL_POINTER);
    d = c.data();
    EXPECT_EQ(attngen_mha_plan_run(nullptr, &d), ATTNGEN_ERROR_NULL_POINTER);
    EXPECT_TRUE(c.y.all_poison()) << "a refused run wrote its output";
  }
}

}  // namespace
}  // namespace attngen::test
