// The projections and the whole nn.MultiheadAttention layer against the float64 reference,
// with weights in PyTorch's layout (in_proj_weight [3E, E], out_proj.weight [E, E]).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "attngen/attngen.h"
#include "attngen/kernel.h"
#include "tests/reference.h"
#include "tests/tensor.h"

namespace attngen::test {
namespace {

// The linear kernels' dtypes, each once.
std::vector<attngen_dtype> linear_dtypes() {
  std::vector<attngen_dtype> out;
  for (size_t i = 0; i < attngen_kernel_count(); ++i) {
    const attngen_kernel_info* k = attngen_kernel_at(i);
    if (k->op == ATTNGEN_OP_LINEAR && std::find(out.begin(), out.end(), k->dtypes.q) == out.end())
      out.push_back(k->dtypes.q);
  }
  return out;
}

struct LinearCase {
  int64_t b, s, e, n;
  bool bias;
  int64_t pad;
};

// One linear call in `dtype` (x, w, bias and y) on fresh random inputs.
void run_linear_case(const LinearCase& c, attngen_dtype dtype) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("B" + std::to_string(c.b) + " S" + std::to_string(c.s) + " E" + std::to_string(c.e) +
               " N" + std::to_string(c.n) + " dtype " + std::to_string(dtype) + " seed " +
               std::to_string(seed));
  std::mt19937_64 rng(seed);
  AnyTensor x(dtype, {c.b, c.s, c.e}, c.pad), w(dtype, {c.n, c.e}, c.pad), bias(dtype, {c.n}, 0),
      y(dtype, {c.b, c.s, c.n}, c.pad);
  x.fill_random(rng, -1, 1);
  w.fill_random(rng, -1, 1);
  bias.fill_random(rng, -1, 1);
  const attngen_status st = attngen_linear(&x.t(), &w.t(), c.bias ? &bias.t() : nullptr, &y.t());
  ASSERT_EQ(st, ATTNGEN_OK) << attngen_last_error();
  const std::vector<double> want = reference_linear(x.dense(), c.b * c.s, c.e, w.dense(), c.n,
                                                    c.bias ? bias.dense() : std::vector<double>{});
  // The error is relative to the larger of the output and the product before the bias, as for
  // the MHA layer's output projection (docs/semantics.md, "Precision and tolerance"): where the
  // bias cancels most of x W^T (E1 N1: one product), the product's rounding error is not
  // relative to what is left (seen on aarch64's f16 kernel: 0.013 against 0.005).
  double product_l2 = 0;
  if (c.bias) {
    const std::vector<double> b = bias.dense();
    for (size_t i = 0; i < want.size(); ++i) {
      const double product = want[i] - b[i % b.size()];
      product_l2 += product * product;
    }
    product_l2 = std::sqrt(product_l2);
  }
  expect_close(y.dense(), want, max_abs(want), dtype, product_l2);
  EXPECT_EQ(y.gaps_written(), 0);
}

const LinearCase kLinearCases[] = {{1, 1, 1, 1, true, 0},
                                   {2, 19, 37, 53, true, 0},
                                   {1, 64, 64, 192, false, 0},
                                   {3, 7, 48, 17, true, 2},
                                   {1, 100, 96, 300, true, 0}};

TEST(Linear, MatchesReference) {
  for (const LinearCase& c : kLinearCases) run_linear_case(c, ATTNGEN_F32);
}

// Each dtype a linear kernel is built for runs on a kernel of that dtype.
TEST(Linear, EveryKernelDtype) {
  for (const attngen_dtype dtype : linear_dtypes()) {
    for (const LinearCase& c : kLinearCases) {
      run_linear_case(c, dtype);
      const attngen_kernel_info* k = attngen_find_kernel(attngen_last_kernel());
      ASSERT_NE(k, nullptr);
      EXPECT_EQ(k->dtypes.q, dtype) << k->name;
    }
  }
}

struct MhaCase {
  int64_t b, s, e, h;
  bool causal, bias;
  std::vector<int32_t> kv_len;
  // NaN in one element of the last token's x, and NaN / infinities in every token past kv_len:
  // the rows that do not attend them stay finite (docs/semantics.md, "NaN and infinities").
  bool nonfinite = false;
};

// One layer call in `dtype` (x, every weight and y) on fresh random inputs against the float64
// reference; on `kernel` when given.
void run_case(const MhaCase& c, attngen_dtype dtype = ATTNGEN_F32,
              const attngen_kernel_info* kernel = nullptr) {
  {
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE("B" + std::to_string(c.b) + " S" + std::to_string(c.s) + " E" +
                 std::to_string(c.e) + " H" + std::to_string(c.h) + (c.causal ? " causal" : "") +
                 " dtype " + std::to_string(dtype) + " seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    AnyTensor x(dtype, {c.b, c.s, c.e}, 0), in_w(dtype, {3 * c.e, c.e}, 0),
        in_b(dtype, {3 * c.e}, 0);
    AnyTensor out_w(dtype, {c.e, c.e}, 0), out_b(dtype, {c.e}, 0), y(dtype, {c.b, c.s, c.e}, 0);
    // nn.Linear-like init: uniform(-1/sqrt(E), 1/sqrt(E)) keeps activations O(1).
    const float a = 1.0f / std::sqrt(static_cast<float>(c.e));
    x.fill_random(rng, -1, 1);
    in_w.fill_random(rng, -a, a);
    in_b.fill_random(rng, -a, a);
    out_w.fill_random(rng, -a, a);
    out_b.fill_random(rng, -a, a);
    if (c.nonfinite) {
      const double nan = std::numeric_limits<double>::quiet_NaN();
      const double inf = std::numeric_limits<double>::infinity();
      x.set({c.b - 1, c.s - 1, std::uniform_int_distribution<int64_t>(0, c.e - 1)(rng)}, nan);
      for (int64_t b = 0; b < static_cast<int64_t>(c.kv_len.size()); ++b) {
        for (int64_t t = c.kv_len[static_cast<size_t>(b)]; t < c.s; ++t) {
          for (int64_t e = 0; e < c.e; ++e) x.set({b, t, e}, (t + e) % 2 ? nan : -inf);
        }
      }
    }
    attngen_mha_weights weights{&in_w.t(), c.bias ? &in_b.t() : nullptr, &out_w.t(),
                                c.bias ? &out_b.t() : nullptr};
    attngen_mha_options opt = attngen_mha_options_default();
    opt.num_heads = c.h;
    opt.mask = c.causal ? ATTNGEN_MASK_CAUSAL : ATTNGEN_MASK_NONE;
    opt.kernel = kernel != nullptr ? kernel->name : nullptr;
    const int64_t nb = c.b;
    attngen_tensor kv_len =
        attngen_tensor_contiguous(const_cast<int32_t*>(c.kv_len.data()), ATTNGEN_I32, 1, &nb);
    if (!c.kv_len.empty()) opt.kv_len = &kv_len;
    const attngen_status st = attngen_mha(&x.t(), &weights, &y.t(), &opt);
    ASSERT_EQ(st, ATTNGEN_OK) << attngen_last_error();
    if (kernel != nullptr) EXPECT_STREQ(attngen_last_kernel(), kernel->name);
    const std::vector<double> none;
    const std::vector<double> want =
        reference_mha(x.dense(), c.b, c.s, c.e, c.h, in_w.dense(), c.bias ? in_b.dense() : none,
                      out_w.dense(), c.bias ? out_b.dense() : none, c.causal, c.kv_len);
    // The error is relative to the larger of the output and its projection before the output
    // bias (docs/semantics.md, "Precision and tolerance"): where the bias cancels most of the
    // projection (E1 H1), the error of the projection's terms is not relative to what is left.
    double projection_l2 = 0;
    if (c.bias) {
      const std::vector<double> bias = out_b.dense();
      for (size_t i = 0; i < want.size(); ++i) {
        const double projection = want[i] - bias[i % bias.size()];  // y = projection + bias
        if (std::isfinite(want[i])) projection_l2 += projection * projection;
      }
      projection_l2 = std::sqrt(projection_l2);
    }
    expect_close(y.dense(), want, max_abs(want), dtype, projection_l2);
  }
}

TEST(Mha, MatchesNnMultiheadAttention) {
  const MhaCase cases[] = {{2, 37, 128, 2, false, true, {}},
                           {1, 1, 64, 1, false, true, {}},
                           {3, 23, 192, 3, true, true, {}},
                           {2, 17, 128, 2, false, false, {17, 5}},
                           {2, 31, 128, 2, true, true, {31, 12}}};
  for (const MhaCase& c : cases) run_case(c);
}

// Head dims no specialised layer has run on the generic one (E / H up to 128), causal or not.
TEST(Mha, GenericHeadDims) {
  const MhaCase cases[] = {{2, 19, 120, 3, true, true, {}},      // 40 a head
                           {1, 33, 100, 4, false, true, {33}},   // 25
                           {2, 9, 112, 1, true, false, {9, 4}},  // 112
                           {1, 70, 7, 7, false, true, {}}};      // 1
  for (const MhaCase& c : cases) {
    run_case(c);
    const attngen_kernel_info* k = attngen_find_kernel(attngen_last_kernel());
    ASSERT_NE(k, nullptr);
    EXPECT_TRUE(k->generic) << k->name << " ran E" << c.e << " H" << c.h;
  }
}

// Every built-in mha kernel, named, in its own dtypes: its head dim (a generic one's up to its
// bucket), its mask (a generic one's both), with and without biases and key padding.
class MhaKernel : public ::testing::TestWithParam<const attngen_kernel_info*> {
 protected:
  void SetUp() override {
    if (!attngen_kernel_supported(GetParam())) {
      GTEST_SKIP() << GetParam()->name << " needs " << GetParam()->isa
                   << ", which this machine lacks";
    }
  }
};

TEST_P(MhaKernel, MatchesNnMultiheadAttention) {
  const attngen_kernel_info& k = *GetParam();
  const std::vector<int64_t> dims =
      k.generic ? std::vector<int64_t>{1, 25, k.head_dim_qk} : std::vector<int64_t>{k.head_dim_qk};
  int n = 0;
  for (const int64_t dh : dims) {
    for (const int64_t h : {int64_t{1}, int64_t{3}}) {
      if (h > 1 && h * dh > 256) continue;  // E small enough for the reference (ASan, qemu)
      const bool causal = k.generic ? n % 2 == 1 : k.mask == ATTNGEN_MASK_CAUSAL;
      const int64_t s = 11 + 4 * n++;
      run_case({2, s, h * dh, h, causal, h == 1, {}}, k.dtypes.q, &k);
      run_case({2, s, h * dh, h, causal, true, {static_cast<int32_t>(s), 3}}, k.dtypes.q, &k);
    }
  }
}

TEST_P(MhaKernel, NonFiniteInputs) {
  const attngen_kernel_info& k = *GetParam();
  const int64_t dh = k.generic ? 25 : k.head_dim_qk, h = 2;
  for (const bool causal : {false, true}) {
    if (!k.generic && causal != (k.mask == ATTNGEN_MASK_CAUSAL)) continue;
    run_case({2, 19, h * dh, h, causal, true, {}, true}, k.dtypes.q, &k);
    run_case({2, 19, h * dh, h, causal, true, {12, 19}, true}, k.dtypes.q, &k);
  }
}

INSTANTIATE_TEST_SUITE_P(Builtin, MhaKernel, ::testing::ValuesIn([] {
                           std::vector<const attngen_kernel_info*> out;
                           for (size_t i = 0; i < attngen_kernel_count(); ++i) {
                             const attngen_kernel_info* k = attngen_kernel_at(i);
                             if (k->op == ATTNGEN_OP_MHA) out.push_back(k);
                           }
                           return out;
                         }()),
                         [](const ::testing::TestParamInfo<const attngen_kernel_info*>& info) {
                           return std::string(info.param->name);
                         });

// A layer in F16 / BF16 whose head dim no kernel of that dtype takes runs on an F32 kernel
// through the runtime's conversion, within the dtype's bound.
TEST(Mha, ConvertedWhereNoKernelOfTheDtypeFits) {
  for (const attngen_dtype dtype : {ATTNGEN_F16, ATTNGEN_BF16}) {
    int64_t widest = 0;  // the largest head dim an mha kernel of this dtype takes
    for (size_t i = 0; i < attngen_kernel_count(); ++i) {
      const attngen_kernel_info* k = attngen_kernel_at(i);
      if (k->op == ATTNGEN_OP_MHA && k->dtypes.q == dtype)
        widest = std::max<int64_t>(widest, k->head_dim_qk);
    }
    const int64_t dh = widest + 8;  // past it (D136 with the f16 generic D128)
    run_case({2, 9, 2 * dh, 2, true, true, {9, 4}}, dtype);
    const attngen_kernel_info* ran = attngen_find_kernel(attngen_last_kernel());
    ASSERT_NE(ran, nullptr);
    EXPECT_EQ(ran->dtypes.q, ATTNGEN_F32) << ran->name;
  }
}

}  // namespace
}  // namespace attngen::test
