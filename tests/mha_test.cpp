// The projections and the whole nn.MultiheadAttention layer against the float64 reference,
// with weights in PyTorch's layout (in_proj_weight [3E, E], out_proj.weight [E, E]).
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "attngen/attngen.h"
#include "attngen/kernel.h"
#include "tests/reference.h"
#include "tests/tensor.h"

namespace attngen::test {
namespace {

void check(const std::vector<double>& got, const std::vector<double>& want) {
  expect_close_f32(got, want, max_abs(want));
}

struct LinearCase {
  int64_t b, s, e, n;
  bool bias;
  int64_t pad;
};

TEST(Linear, MatchesReference) {
  const LinearCase cases[] = {{1, 1, 1, 1, true, 0},
                              {2, 19, 37, 53, true, 0},
                              {1, 64, 64, 192, false, 0},
                              {3, 7, 48, 17, true, 2},
                              {1, 100, 96, 300, true, 0}};
  for (const LinearCase& c : cases) {
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE("B" + std::to_string(c.b) + " S" + std::to_string(c.s) + " E" +
                 std::to_string(c.e) + " N" + std::to_string(c.n) + " seed " +
                 std::to_string(seed));
    std::mt19937_64 rng(seed);
    Storage x({c.b, c.s, c.e}, c.pad), w({c.n, c.e}, c.pad), bias({c.n}, 0),
        y({c.b, c.s, c.n}, c.pad);
    x.fill_random(rng, -1, 1);
    w.fill_random(rng, -1, 1);
    bias.fill_random(rng, -1, 1);
    const attngen_status st = attngen_linear(&x.t, &w.t, c.bias ? &bias.t : nullptr, &y.t);
    ASSERT_EQ(st, ATTNGEN_OK) << attngen_last_error();
    check(y.dense(), reference_linear(x.dense(), c.b * c.s, c.e, w.dense(), c.n,
                                      c.bias ? bias.dense() : std::vector<double>{}));
    EXPECT_EQ(y.gaps_written(), 0);
  }
}

struct MhaCase {
  int64_t b, s, e, h;
  bool causal, bias;
  std::vector<int32_t> kv_len;
};

// One layer call on fresh random inputs against the float64 reference.
void run_case(const MhaCase& c) {
  {
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE("B" + std::to_string(c.b) + " S" + std::to_string(c.s) + " E" +
                 std::to_string(c.e) + " H" + std::to_string(c.h) + (c.causal ? " causal" : "") +
                 " seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    Storage x({c.b, c.s, c.e}, 0), in_w({3 * c.e, c.e}, 0), in_b({3 * c.e}, 0);
    Storage out_w({c.e, c.e}, 0), out_b({c.e}, 0), y({c.b, c.s, c.e}, 0);
    // nn.Linear-like init: uniform(-1/sqrt(E), 1/sqrt(E)) keeps activations O(1).
    const float a = 1.0f / std::sqrt(static_cast<float>(c.e));
    x.fill_random(rng, -1, 1);
    in_w.fill_random(rng, -a, a);
    in_b.fill_random(rng, -a, a);
    out_w.fill_random(rng, -a, a);
    out_b.fill_random(rng, -a, a);
    attngen_mha_weights weights{&in_w.t, c.bias ? &in_b.t : nullptr, &out_w.t,
                                c.bias ? &out_b.t : nullptr};
    attngen_mha_options opt{};
    opt.num_heads = c.h;
    opt.mask = c.causal ? ATTNGEN_MASK_CAUSAL : ATTNGEN_MASK_NONE;
    const int64_t nb = c.b;
    attngen_tensor kv_len =
        attngen_tensor_contiguous(const_cast<int32_t*>(c.kv_len.data()), ATTNGEN_I32, 1, &nb);
    if (!c.kv_len.empty()) opt.kv_len = &kv_len;
    const attngen_status st = attngen_mha(&x.t, &weights, &y.t, &opt);
    ASSERT_EQ(st, ATTNGEN_OK) << attngen_last_error();
    const std::vector<double> none;
    check(y.dense(),
          reference_mha(x.dense(), c.b, c.s, c.e, c.h, in_w.dense(), c.bias ? in_b.dense() : none,
                        out_w.dense(), c.bias ? out_b.dense() : none, c.causal, c.kv_len));
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

}  // namespace
}  // namespace attngen::test
