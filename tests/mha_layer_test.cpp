// The persistent MHA layer (attngen_mha_layer): its forward and decode steps against the
// float64 reference and bitwise against attngen_mha() / attngen_mha_decode() of the same
// weights; the weights copied at creation (the caller's tensors overwritten afterwards change
// nothing); another ISA's kernels, which read other panels; concurrent calls; errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "attngen/attngen.h"
#include "attngen/kernel.h"
#include "tests/isas.h"
#include "tests/reference.h"
#include "tests/tensor.h"

namespace attngen::test {
namespace {

using LayerPtr = std::unique_ptr<attngen_mha_layer, void (*)(attngen_mha_layer*)>;

LayerPtr make_layer(const attngen_mha_weights& w, int64_t heads) {
  attngen_mha_layer* layer = nullptr;
  const attngen_status st = attngen_mha_layer_create(&w, heads, &layer);
  EXPECT_EQ(st, ATTNGEN_OK) << attngen_last_error();
  return LayerPtr(layer, attngen_mha_layer_destroy);
}

std::vector<uint8_t> bytes_of(const attngen_tensor& t, size_t bytes) {
  const auto* p = static_cast<const uint8_t*>(t.data);
  return std::vector<uint8_t>(p, p + bytes);
}

// Weights of an nn.MultiheadAttention in `dtype`, nn.Linear-like init.
struct Weights {
  AnyTensor in_w, in_b, out_w, out_b;
  attngen_mha_weights w{};
  Weights(attngen_dtype dtype, int64_t e, bool bias, std::mt19937_64& rng)
      : in_w(dtype, {3 * e, e}, 0),
        in_b(dtype, {3 * e}, 0),
        out_w(dtype, {e, e}, 0),
        out_b(dtype, {e}, 0) {
    const double a = 1.0 / std::sqrt(static_cast<double>(e));
    in_w.fill_random(rng, -a, a);
    in_b.fill_random(rng, -a, a);
    out_w.fill_random(rng, -a, a);
    out_b.fill_random(rng, -a, a);
    w = {&in_w.t(), bias ? &in_b.t() : nullptr, &out_w.t(), bias ? &out_b.t() : nullptr};
  }
  // Every element NaN: a layer that still read the caller's tensors would give NaN.
  void overwrite() {
    const int64_t e = out_w.t().shape[0];
    const double nan = std::numeric_limits<double>::quiet_NaN();
    for (int64_t r = 0; r < 3 * e; ++r) {
      in_b.set({r}, nan);
      for (int64_t c = 0; c < e; ++c) in_w.set({r, c}, nan);
    }
    for (int64_t r = 0; r < e; ++r) {
      out_b.set({r}, nan);
      for (int64_t c = 0; c < e; ++c) out_w.set({r, c}, nan);
    }
  }
};

struct LayerCase {
  attngen_dtype dtype;
  int64_t b, s, e, h;
  bool causal, bias;
  std::vector<int32_t> kv_len;
};

std::string describe(const LayerCase& c) {
  return "dtype " + std::to_string(c.dtype) + " B" + std::to_string(c.b) + " S" +
         std::to_string(c.s) + " E" + std::to_string(c.e) + " H" + std::to_string(c.h) +
         (c.causal ? " causal" : "") + (c.bias ? "" : " no bias") +
         (c.kv_len.empty() ? "" : " kv_len");
}

// attngen_mha() first, then a layer of the same weights, the caller's weights overwritten, and
// its forward: the same bytes, the same kernel, within the reference's bound.
void forward_equals_mha(const LayerCase& c) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(describe(c) + " seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  Weights w(c.dtype, c.e, c.bias, rng);
  AnyTensor x(c.dtype, {c.b, c.s, c.e}, 0), y_mha(c.dtype, {c.b, c.s, c.e}, 0),
      y(c.dtype, {c.b, c.s, c.e}, 2);
  x.fill_random(rng, -1, 1);
  attngen_mha_options opt = attngen_mha_options_default();
  opt.num_heads = c.h;
  opt.mask = c.causal ? ATTNGEN_MASK_CAUSAL : ATTNGEN_MASK_NONE;
  const int64_t nb = c.b;
  attngen_tensor kv_len =
      attngen_tensor_contiguous(const_cast<int32_t*>(c.kv_len.data()), ATTNGEN_I32, 1, &nb);
  if (!c.kv_len.empty()) opt.kv_len = &kv_len;
  ASSERT_EQ(attngen_mha(&x.t(), &w.w, &y_mha.t(), &opt), ATTNGEN_OK) << attngen_last_error();
  const std::string kernel = attngen_last_kernel();
  const std::vector<double> none;
  const std::vector<double> want =
      reference_mha(x.dense(), c.b, c.s, c.e, c.h, w.in_w.dense(), c.bias ? w.in_b.dense() : none,
                    w.out_w.dense(), c.bias ? w.out_b.dense() : none, c.causal, c.kv_len);

  LayerPtr layer = make_layer(w.w, c.h);
  ASSERT_NE(layer, nullptr);
  w.overwrite();
  opt.num_heads = 0;  // the layer's
  ASSERT_EQ(attngen_mha_layer_forward(layer.get(), &x.t(), &y.t(), &opt), ATTNGEN_OK)
      << attngen_last_error();
  EXPECT_EQ(attngen_last_kernel(), kernel);
  EXPECT_EQ(y.gaps_written(), 0);
  expect_close(y.dense(), want, max_abs(want), c.dtype);
  const std::vector<double> got = y.dense(), plain = y_mha.dense();
  ASSERT_EQ(got.size(), plain.size());
  EXPECT_EQ(std::memcmp(got.data(), plain.data(), got.size() * sizeof(double)), 0)
      << "the layer's output differs from attngen_mha()'s";
}

TEST(MhaLayer, ForwardEqualsMha) {
  const LayerCase cases[] = {
      {ATTNGEN_F32, 2, 37, 128, 2, false, true, {}},
      {ATTNGEN_F32, 1, 1, 64, 1, false, false, {}},
      {ATTNGEN_F32, 3, 23, 192, 3, true, true, {}},
      {ATTNGEN_F32, 2, 31, 128, 2, true, true, {31, 12}},
      {ATTNGEN_F32, 2, 19, 120, 3, true, true, {}},    // a generic kernel's head dim (40)
      {ATTNGEN_F32, 1, 70, 7, 7, false, true, {}},     // 1
      {ATTNGEN_F32, 1, 9, 100, 4, false, false, {9}},  // 25: E not a multiple of a panel
      {ATTNGEN_BF16, 2, 21, 128, 2, false, true, {}},
      {ATTNGEN_BF16, 2, 21, 128, 2, true, true, {21, 6}},
      {ATTNGEN_F16, 2, 17, 128, 2, false, true, {}},
      {ATTNGEN_F16, 1, 9, 2 * 136, 2, true, true, {}},  // converted: past the f16 head dims
  };
  for (const LayerCase& c : cases) forward_equals_mha(c);
}

// Decode steps of a layer (prompt, then one token at a time) into one cache and of
// attngen_mha_decode() with the caller's weights into another: the same bytes at every step,
// and the whole sequence within the bound of one causal pass of the reference.
TEST(MhaLayer, DecodeEqualsMhaDecode) {
  const int64_t B = 2, S = 19, E = 128, H = 2, prompt = 6;
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  Weights w(ATTNGEN_F32, E, true, rng);
  Storage x({B, S, E}, 0);
  x.fill_random(rng, -1, 1);
  attngen_kv_cache_options o = attngen_kv_cache_options_default();
  o.layers = 1;
  o.batch = B;
  o.heads_kv = H;
  o.head_dim_qk = E / H;
  o.capacity = S;
  attngen_kv_cache* a = nullptr;
  attngen_kv_cache* b = nullptr;
  ASSERT_EQ(attngen_kv_cache_create(&o, &a), ATTNGEN_OK);
  ASSERT_EQ(attngen_kv_cache_create(&o, &b), ATTNGEN_OK);
  const std::unique_ptr<attngen_kv_cache, void (*)(attngen_kv_cache*)> own_a(
      a, attngen_kv_cache_destroy),
      own_b(b, attngen_kv_cache_destroy);
  LayerPtr layer = make_layer(w.w, H);
  ASSERT_NE(layer, nullptr);
  attngen_mha_decode_options opt = attngen_mha_decode_options_default();
  opt.num_heads = H;
  std::vector<std::vector<double>> rows(static_cast<size_t>(B));
  for (int64_t p = 0; p < S;) {
    const int64_t t = p == 0 ? prompt : 1;
    attngen_tensor xs = x.t;  // x[:, p:p+t]
    xs.data = x.buf.data() + p * x.t.strides[1];
    xs.shape[1] = t;
    Storage y_plain({B, t, E}, 0), y({B, t, E}, 0);
    ASSERT_EQ(attngen_mha_decode(&xs, &w.w, a, 0, &y_plain.t, &opt), ATTNGEN_OK)
        << attngen_last_error();
    ASSERT_EQ(attngen_mha_layer_decode(layer.get(), &xs, b, 0, &y.t, nullptr), ATTNGEN_OK)
        << attngen_last_error();
    EXPECT_EQ(std::string(attngen_last_kernel()).rfind("decode_", 0), 0u) << attngen_last_kernel();
    EXPECT_EQ(y.buf, y_plain.buf) << "step at position " << p;
    for (int64_t bi = 0; bi < B; ++bi) {
      for (int64_t i = 0; i < t * E; ++i) {
        rows[static_cast<size_t>(bi)].push_back(y.buf[static_cast<size_t>(bi * t * E + i)]);
      }
    }
    p += t;
  }
  std::vector<double> got;
  for (const auto& r : rows) got.insert(got.end(), r.begin(), r.end());
  const std::vector<double> want =
      reference_mha(x.dense(), B, S, E, H, w.in_w.dense(), w.in_b.dense(), w.out_w.dense(),
                    w.out_b.dense(), /*causal=*/true, {});
  expect_close_f32(got, want, max_abs(want));
}

// Each ISA this machine runs reads the layer's weights in the panels of its own kernels (packed
// for it on first use): its output is attngen_mha()'s on that ISA.
TEST(MhaLayer, EveryIsaReadsItsOwnPanels) {
  struct Restore {
    ~Restore() { attngen_set_isa(nullptr); }
  } restore;
  std::vector<std::string> isas;
  for (size_t i = 0; i < attngen_kernel_count(); ++i) {
    const attngen_kernel_info* k = attngen_kernel_at(i);
    if (k->op != ATTNGEN_OP_MHA || k->dtypes.q != ATTNGEN_F32 || !attngen_kernel_supported(k) ||
        std::string(k->isa) == "cuda") {
      continue;
    }
    bool seen = false;
    for (const std::string& s : isas) seen = seen || s == k->isa;
    if (!seen) isas.push_back(k->isa);
  }
  const int64_t B = 2, S = 29, E = 128, H = 2;
  std::mt19937_64 rng(fresh_seed());
  Weights w(ATTNGEN_F32, E, true, rng);
  LayerPtr layer = make_layer(w.w, H);
  ASSERT_NE(layer, nullptr);
  Storage x({B, S, E}, 0);
  x.fill_random(rng, -1, 1);
  attngen_mha_options opt = attngen_mha_options_default();
  opt.num_heads = H;
  opt.mask = ATTNGEN_MASK_CAUSAL;
  int ran = 0;
  for (const std::string& isa : isas) {
    SCOPED_TRACE(isa);
    ASSERT_EQ(attngen_set_isa(isa.c_str()), ATTNGEN_OK) << attngen_last_error();
    Storage y_plain({B, S, E}, 0), y({B, S, E}, 0);
    ASSERT_EQ(attngen_mha(&x.t, &w.w, &y_plain.t, &opt), ATTNGEN_OK) << attngen_last_error();
    const attngen_kernel_info* k = attngen_find_kernel(attngen_last_kernel());
    ASSERT_NE(k, nullptr);
    ASSERT_EQ(attngen_mha_layer_forward(layer.get(), &x.t, &y.t, &opt), ATTNGEN_OK)
        << attngen_last_error();
    EXPECT_STREQ(attngen_last_kernel(), k->name);
    EXPECT_EQ(y.buf, y_plain.buf) << k->name << " (panels of " << k->weight_panel << ")";
    ++ran;
  }
  EXPECT_GT(ran, 0);
}

#if !ATTNGEN_SINGLE_THREADED  // whose calls must come from one thread at a time
// Calls on one layer from several threads at once give the bytes of one call alone.
TEST(MhaLayer, ConcurrentCallsAgree) {
  const int64_t B = 2, S = 33, E = 128, H = 2;
  std::mt19937_64 rng(fresh_seed());
  Weights w(ATTNGEN_F32, E, true, rng);
  LayerPtr layer = make_layer(w.w, H);
  ASSERT_NE(layer, nullptr);
  Storage x({B, S, E}, 0), alone({B, S, E}, 0);
  x.fill_random(rng, -1, 1);
  ASSERT_EQ(attngen_mha_layer_forward(layer.get(), &x.t, &alone.t, nullptr), ATTNGEN_OK)
      << attngen_last_error();
  constexpr int kThreads = 4;
  std::vector<Storage> ys;
  ys.reserve(kThreads);  // no moves: each tensor points into its own storage
  for (int i = 0; i < kThreads; ++i) ys.emplace_back(std::vector<int64_t>{B, S, E}, 0);
  std::vector<attngen_status> st(kThreads, ATTNGEN_OK);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      for (int r = 0; r < 3 && st[i] == ATTNGEN_OK; ++r) {
        st[i] = attngen_mha_layer_forward(layer.get(), &x.t, &ys[i].t, nullptr);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < kThreads; ++i) {
    EXPECT_EQ(st[i], ATTNGEN_OK) << "thread " << i;
    EXPECT_EQ(ys[i].buf, alone.buf) << "thread " << i;
  }
}
#endif

// ---- Errors: named statuses, messages naming the argument, nothing written.

#define EXPECT_STATUS(call, status, words)                                              \
  do {                                                                                  \
    const attngen_status st_ = (call);                                                  \
    EXPECT_EQ(st_, status) << attngen_status_name(st_) << ": " << attngen_last_error(); \
    EXPECT_NE(std::string(attngen_last_error()).find(words), std::string::npos)         \
        << attngen_last_error();                                                        \
  } while (0)

TEST(MhaLayer, CreateErrors) {
  std::mt19937_64 rng(fresh_seed());
  const int64_t E = 64;
  Weights w(ATTNGEN_F32, E, true, rng);
  attngen_mha_layer* layer = reinterpret_cast<attngen_mha_layer*>(&w);  // must become NULL
  EXPECT_STATUS(attngen_mha_layer_create(&w.w, 2, nullptr), ATTNGEN_ERROR_NULL_POINTER, "layer");
  EXPECT_STATUS(attngen_mha_layer_create(nullptr, 2, &layer), ATTNGEN_ERROR_NULL_POINTER,
                "weights");
  EXPECT_EQ(layer, nullptr);
  for (const int64_t heads : {int64_t{0}, int64_t{-1}, int64_t{3}}) {
    layer = reinterpret_cast<attngen_mha_layer*>(&w);
    EXPECT_STATUS(attngen_mha_layer_create(&w.w, heads, &layer), ATTNGEN_ERROR_HEADS, "num_heads");
    EXPECT_EQ(layer, nullptr);
  }
  attngen_mha_weights bad = w.w;
  bad.in_proj_weight = nullptr;
  EXPECT_STATUS(attngen_mha_layer_create(&bad, 2, &layer), ATTNGEN_ERROR_NULL_POINTER,
                "in_proj_weight");
  AnyTensor out_w_wide(ATTNGEN_F32, {E, E + 1}, 0), in_b_short(ATTNGEN_F32, {3 * E - 1}, 0),
      out_b_f16(ATTNGEN_F16, {E}, 0);
  bad = w.w;
  bad.out_proj_weight = &out_w_wide.t();
  EXPECT_STATUS(attngen_mha_layer_create(&bad, 2, &layer), ATTNGEN_ERROR_SHAPE, "out_proj_weight");
  bad = w.w;
  bad.in_proj_bias = &in_b_short.t();
  EXPECT_STATUS(attngen_mha_layer_create(&bad, 2, &layer), ATTNGEN_ERROR_SHAPE, "in_proj_bias");
  bad = w.w;
  bad.out_proj_bias = &out_b_f16.t();
  EXPECT_STATUS(attngen_mha_layer_create(&bad, 2, &layer), ATTNGEN_ERROR_DTYPE, "out_proj_bias");
  std::vector<int32_t> ints(static_cast<size_t>(3 * E * E));
  const int64_t shape[2] = {3 * E, E};
  const attngen_tensor int_w = attngen_tensor_contiguous(ints.data(), ATTNGEN_I32, 2, shape);
  bad = w.w;
  bad.in_proj_weight = &int_w;
  EXPECT_STATUS(attngen_mha_layer_create(&bad, 2, &layer), ATTNGEN_ERROR_DTYPE, "in_proj_weight");
  EXPECT_EQ(layer, nullptr);
  attngen_mha_layer_destroy(nullptr);  // a no-op
}

TEST(MhaLayer, CallErrorsWriteNothing) {
  std::mt19937_64 rng(fresh_seed());
  const int64_t B = 2, S = 5, E = 64, H = 2;
  Weights w(ATTNGEN_F32, E, true, rng);
  LayerPtr layer = make_layer(w.w, H);
  ASSERT_NE(layer, nullptr);
  Weights w16(ATTNGEN_F16, E, true, rng);
  LayerPtr layer16 = make_layer(w16.w, H);
  ASSERT_NE(layer16, nullptr);
  Storage x({B, S, E}, 0), y({B, S, E}, 0), y_short({B, S, E - 1}, 0), x_wide({B, S, E + 2}, 0);
  x.fill_random(rng, -1, 1);
  AnyTensor x16(ATTNGEN_F16, {B, S, E}, 0), y16(ATTNGEN_F16, {B, S, E}, 0);
  attngen_mha_options opt = attngen_mha_options_default();
  opt.num_heads = H;
  EXPECT_STATUS(attngen_mha_layer_forward(nullptr, &x.t, &y.t, &opt), ATTNGEN_ERROR_NULL_POINTER,
                "layer");
  EXPECT_STATUS(attngen_mha_layer_forward(layer.get(), &x16.t(), &y16.t(), &opt),
                ATTNGEN_ERROR_DTYPE, "x");
  EXPECT_STATUS(attngen_mha_layer_forward(layer.get(), &x_wide.t, &y.t, &opt), ATTNGEN_ERROR_SHAPE,
                "E of the layer");
  EXPECT_STATUS(attngen_mha_layer_forward(layer.get(), &x.t, &y_short.t, &opt), ATTNGEN_ERROR_SHAPE,
                "y");
  opt.num_heads = 4;
  EXPECT_STATUS(attngen_mha_layer_forward(layer.get(), &x.t, &y.t, &opt), ATTNGEN_ERROR_HEADS,
                "num_heads");
  opt.num_heads = H;
  opt.mask = static_cast<attngen_mask_kind>(7);
  EXPECT_STATUS(attngen_mha_layer_forward(layer.get(), &x.t, &y.t, &opt),
                ATTNGEN_ERROR_INVALID_ARGUMENT, "mask");
  opt.mask = ATTNGEN_MASK_NONE;
  EXPECT_STATUS(attngen_mha_layer_forward(layer.get(), &x.t, &x.t, &opt), ATTNGEN_ERROR_ALIAS, "y");
  EXPECT_TRUE(y.all_poison());
  EXPECT_TRUE(y_short.all_poison());
  EXPECT_TRUE(y16.all_poison());
  size_t bytes = 0;
  EXPECT_STATUS(attngen_mha_layer_forward_workspace_size(layer.get(), &x.t, &y.t, &opt, nullptr),
                ATTNGEN_ERROR_NULL_POINTER, "bytes");
  EXPECT_STATUS(
      attngen_mha_layer_forward_workspace_size(layer.get(), &x_wide.t, &y.t, &opt, &bytes),
      ATTNGEN_ERROR_SHAPE, "E of the layer");

  // Decode: an F32 layer only, a cache of the layer's heads; nothing appended on an error.
  attngen_kv_cache_options o = attngen_kv_cache_options_default();
  o.layers = 1;
  o.batch = B;
  o.heads_kv = H;
  o.head_dim_qk = E / H;
  o.capacity = 8;
  attngen_kv_cache* cache = nullptr;
  ASSERT_EQ(attngen_kv_cache_create(&o, &cache), ATTNGEN_OK);
  const std::unique_ptr<attngen_kv_cache, void (*)(attngen_kv_cache*)> own(
      cache, attngen_kv_cache_destroy);
  Storage xt({B, 1, E}, 0), yt({B, 1, E}, 0);
  xt.fill_random(rng, -1, 1);
  AnyTensor xt16(ATTNGEN_F16, {B, 1, E}, 0), yt16(ATTNGEN_F16, {B, 1, E}, 0);
  EXPECT_STATUS(attngen_mha_layer_decode(layer16.get(), &xt16.t(), cache, 0, &yt16.t(), nullptr),
                ATTNGEN_ERROR_DTYPE, "F32 layer");
  EXPECT_STATUS(attngen_mha_layer_decode(nullptr, &xt.t, cache, 0, &yt.t, nullptr),
                ATTNGEN_ERROR_NULL_POINTER, "layer");
  EXPECT_STATUS(attngen_mha_layer_decode(layer.get(), &xt.t, cache, 1, &yt.t, nullptr),
                ATTNGEN_ERROR_INVALID_ARGUMENT, "layer");
  attngen_mha_decode_options dopt = attngen_mha_decode_options_default();
  dopt.num_heads = 1;
  EXPECT_STATUS(attngen_mha_layer_decode(layer.get(), &xt.t, cache, 0, &yt.t, &dopt),
                ATTNGEN_ERROR_HEADS, "num_heads");
  Storage x9({B, 9, E}, 0), y9({B, 9, E}, 0);
  x9.fill_random(rng, -1, 1);
  EXPECT_STATUS(attngen_mha_layer_decode(layer.get(), &x9.t, cache, 0, &y9.t, nullptr),
                ATTNGEN_ERROR_CAPACITY, "");
  EXPECT_TRUE(yt.all_poison());
  EXPECT_TRUE(y9.all_poison());
  int64_t n = -1;
  ASSERT_EQ(attngen_kv_cache_length(cache, 0, 0, &n), ATTNGEN_OK);
  EXPECT_EQ(n, 0) << "a refused step appended";
}

// ---- The persistent linear layer (attngen_linear_layer) ----

using LinearPtr = std::unique_ptr<attngen_linear_layer, void (*)(attngen_linear_layer*)>;

// attngen_linear_layer_forward() equals attngen_linear() of the same weights bit for bit, on every
// CPU ISA this machine runs (each reads its own panels, packed at its first call), for each
// dtype, with and without a bias, for a strided x; the caller's weights overwritten after the
// layer was made change nothing; against the float64 reference too.
TEST(LinearLayer, ForwardEqualsLinearOnEveryIsa) {
  struct Restore {
    ~Restore() { attngen_set_isa(nullptr); }
  } restore;
  std::vector<std::string> isas = runnable_cpu_isas();
  isas.insert(isas.begin(), "");  // the default choice first
  for (attngen_dtype dtype : {ATTNGEN_F32, ATTNGEN_F16, ATTNGEN_BF16}) {
    for (bool with_bias : {true, false}) {
      const int64_t B = 2, S = 7, E = 96, N = 160;
      std::mt19937_64 rng(fresh_seed());
      AnyTensor w(dtype, {N, E}, 0), bias(dtype, {N}, 0), x(dtype, {B, S, E}, 3);
      w.fill_random(rng, -0.5, 0.5);
      bias.fill_random(rng, -0.5, 0.5);
      x.fill_random(rng, -1, 1);
      const std::vector<float> w_wide = w.widened(), b_wide = bias.widened();
      attngen_linear_layer* made = nullptr;
      ASSERT_EQ(attngen_linear_layer_create(&w.t(), with_bias ? &bias.t() : nullptr, &made),
                ATTNGEN_OK)
          << attngen_last_error();
      LinearPtr layer(made, attngen_linear_layer_destroy);
      // A copy of the weights for the plain calls; the layer's own copy must not need them.
      AnyTensor w2(dtype, {N, E}, 0), b2(dtype, {N}, 0);
      for (int64_t n = 0; n < N; ++n) {
        for (int64_t e = 0; e < E; ++e) w2.set({n, e}, w_wide[static_cast<size_t>(n * E + e)]);
        b2.set({n}, b_wide[static_cast<size_t>(n)]);
      }
      w.fill_random(rng, 5, 6);  // overwritten: the layer has its own copy
      for (const std::string& isa : isas) {
        SCOPED_TRACE(std::string(attngen::dtype_row(dtype)->name) + (with_bias ? " bias " : " ") +
                     (isa.empty() ? "default" : isa));
        ASSERT_EQ(attngen_set_isa(isa.empty() ? nullptr : isa.c_str()), ATTNGEN_OK);
        AnyTensor y_plain(dtype, {B, S, N}, 0), y(dtype, {B, S, N}, 2);
        ASSERT_EQ(attngen_linear(&x.t(), &w2.t(), with_bias ? &b2.t() : nullptr, &y_plain.t()),
                  ATTNGEN_OK)
            << attngen_last_error();
        const std::string kernel = attngen_last_kernel();
        ASSERT_EQ(attngen_linear_layer_forward(layer.get(), &x.t(), &y.t()), ATTNGEN_OK)
            << attngen_last_error();
        EXPECT_EQ(attngen_last_kernel(), kernel);
        EXPECT_EQ(y.dense(), y_plain.dense());
        EXPECT_EQ(y.gaps_written(), 0);
        // The float64 reference: y = x W^T + b.
        const std::vector<double> xs = x.dense();
        std::vector<double> want;
        for (int64_t r = 0; r < B * S; ++r) {
          for (int64_t n = 0; n < N; ++n) {
            double acc = with_bias ? b_wide[static_cast<size_t>(n)] : 0.0;
            for (int64_t e = 0; e < E; ++e) {
              acc += xs[static_cast<size_t>(r * E + e)] * w_wide[static_cast<size_t>(n * E + e)];
            }
            want.push_back(acc);
          }
        }
        expect_close(y.dense(), want, 1.0, dtype, 1.0);
      }
    }
  }
}

TEST(LinearLayer, Errors) {
  std::mt19937_64 rng(fresh_seed());
  Storage w({8, 4}, 0), bias({8}, 0), x({1, 3, 4}, 0), y({1, 3, 8}, 0);
  for (Storage* t : {&w, &bias, &x}) t->fill_random(rng, -1, 1);
  attngen_linear_layer* layer = reinterpret_cast<attngen_linear_layer*>(&w);
  Storage bias7({7}, 0);
  EXPECT_EQ(attngen_linear_layer_create(&w.t, &bias7.t, &layer), ATTNGEN_ERROR_SHAPE);
  EXPECT_EQ(layer, nullptr) << "a failed create leaves *layer NULL";
  EXPECT_EQ(attngen_linear_layer_create(nullptr, nullptr, &layer), ATTNGEN_ERROR_NULL_POINTER);
  EXPECT_EQ(attngen_linear_layer_create(&w.t, nullptr, nullptr), ATTNGEN_ERROR_NULL_POINTER);
  ASSERT_EQ(attngen_linear_layer_create(&w.t, &bias.t, &layer), ATTNGEN_OK);
  LinearPtr owned(layer, attngen_linear_layer_destroy);
  const auto expect_error = [&](const attngen_tensor* xt, attngen_tensor* yt, attngen_status want,
                                const char* needle) {
    const std::vector<float> before = y.buf;
    const attngen_status st = attngen_linear_layer_forward(layer, xt, yt);
    EXPECT_EQ(st, want) << attngen_status_name(st) << ": " << attngen_last_error();
    EXPECT_NE(std::string(attngen_last_error()).find(needle), std::string::npos)
        << attngen_last_error();
    EXPECT_EQ(std::memcmp(before.data(), y.buf.data(), before.size() * 4), 0) << "y written";
  };
  Storage x5({1, 3, 5}, 0), y9({1, 3, 9}, 0);
  x5.fill_random(rng, -1, 1);
  expect_error(&x5.t, &y.t, ATTNGEN_ERROR_SHAPE, "E of the layer");
  expect_error(&x.t, &y9.t, ATTNGEN_ERROR_SHAPE, "N of the layer");
  AnyTensor x16(ATTNGEN_F16, {1, 3, 4}, 0);
  x16.fill_random(rng, -1, 1);
  expect_error(&x16.t(), &y.t, ATTNGEN_ERROR_DTYPE, "x");
  EXPECT_EQ(attngen_linear_layer_forward(nullptr, &x.t, &y.t), ATTNGEN_ERROR_NULL_POINTER);
  ASSERT_EQ(attngen_linear_layer_forward(layer, &x.t, &y.t), ATTNGEN_OK) << attngen_last_error();
  attngen_linear_layer_destroy(nullptr);
}

// In a workspace: its size query packs nothing new, and the call then allocates nothing.
TEST(LinearLayer, InAWorkspace) {
  std::mt19937_64 rng(fresh_seed());
  Storage w({64, 32}, 0), x({2, 5, 32}, 0), y({2, 5, 64}, 0), y_heap({2, 5, 64}, 0);
  w.fill_random(rng, -1, 1);
  x.fill_random(rng, -1, 1);
  attngen_linear_layer* made = nullptr;
  ASSERT_EQ(attngen_linear_layer_create(&w.t, nullptr, &made), ATTNGEN_OK);
  LinearPtr layer(made, attngen_linear_layer_destroy);
  ASSERT_EQ(attngen_linear_layer_forward(layer.get(), &x.t, &y_heap.t), ATTNGEN_OK);
  size_t bytes = 0;
  ASSERT_EQ(attngen_linear_layer_forward_workspace_size(layer.get(), &x.t, &y.t, &bytes),
            ATTNGEN_OK)
      << attngen_last_error();
  std::vector<uint8_t> ws(bytes);
  ASSERT_EQ(attngen_set_workspace(ws.data(), bytes), ATTNGEN_OK);
  const attngen_status st = attngen_linear_layer_forward(layer.get(), &x.t, &y.t);
  ASSERT_EQ(attngen_set_workspace(nullptr, 0), ATTNGEN_OK);
  ASSERT_EQ(st, ATTNGEN_OK) << attngen_last_error();
  EXPECT_EQ(y.buf, y_heap.buf);
}

}  // namespace
}  // namespace attngen::test
