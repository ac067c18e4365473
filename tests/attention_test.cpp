// Every built-in attention kernel (the list comes from the runtime's dispatch table, which
// is generated from generated/variants.cmake) against the float64 reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "attngen/kernel.h"
#include "core/targets.h"
#include "tests/attention_tester.h"
#include "tests/shapes.h"

namespace attngen::test {
namespace {

enum class Only { kAll, kMaskTensor, kPattern };

std::vector<const attngen_kernel_info*> kernels_of(attngen_op op, Only only = Only::kAll) {
  std::vector<const attngen_kernel_info*> out;
  for (size_t i = 0; i < attngen_kernel_count(); ++i) {
    const attngen_kernel_info* k = attngen_kernel_at(i);
    if (k->op != op || k->generic) continue;  // generic kernels: tests/generic_test.cpp
    if (only == Only::kMaskTensor && k->mask_tensor == ATTNGEN_MASK_TENSOR_NONE) continue;
    if (only == Only::kPattern && k->pattern.kind == ATTNGEN_PATTERN_NONE) continue;
    out.push_back(k);
  }
  return out;
}

std::string kernel_name(const ::testing::TestParamInfo<const attngen_kernel_info*>& info) {
  return info.param->name;
}

class AttentionKernel : public ::testing::TestWithParam<const attngen_kernel_info*> {
 protected:
  void SetUp() override {
    if (!attngen_kernel_supported(GetParam())) {
      GTEST_SKIP() << GetParam()->name << " needs " << GetParam()->isa
                   << ", which this machine lacks";
    }
  }

  // A tester set up for this kernel's compile-time configuration and the given shape.
  AttentionTester base(int64_t b, int64_t hq, int64_t hkv, int64_t sq, int64_t skv) const {
    const attngen_kernel_info& k = *GetParam();
    AttentionTester t;
    t.batch(b).heads(hq, hkv).seq(sq, skv).head_dim(k.head_dim_qk, k.head_dim_v);
    t.causal(k.mask == ATTNGEN_MASK_CAUSAL);
    if (k.softcap) t.softcap(5.0f);
    if (k.mask_tensor == ATTNGEN_MASK_TENSOR_BOOL) t.bool_mask({b, hq, sq, skv});
    if (k.mask_tensor == ATTNGEN_MASK_TENSOR_ADDITIVE) t.additive_mask({b, hq, sq, skv});
    t.pattern(k.pattern).weights(k.weights != 0).lse(k.lse != 0);
    return t;
  }
};

struct Shape {
  int64_t b, hq, hkv, sq, skv;
};

// Odd, prime, 1-sized, Sq != Skv in both directions, GQA and MQA ratios.
const Shape kShapes[] = {
    {1, 1, 1, 1, 1},    {2, 4, 2, 37, 53}, {1, 3, 3, 17, 17}, {3, 6, 1, 5, 129}, {1, 2, 2, 64, 64},
    {2, 2, 1, 100, 31}, {1, 5, 5, 1, 300}, {1, 1, 1, 97, 97}, {2, 4, 4, 33, 7},  {1, 8, 2, 16, 48},
};

TEST_P(AttentionKernel, ShapeSweep) {
  for (const Shape& s : kShapes) base(s.b, s.hq, s.hkv, s.sq, s.skv).Test(GetParam());
}

TEST_P(AttentionKernel, StridedViews) {
  base(2, 4, 2, 37, 53).padded(3).Test(GetParam());
  base(1, 3, 1, 20, 9).padded(1).Test(GetParam());
  const attngen_kernel_info& k = *GetParam();
  if (k.head_dim_qk == k.head_dim_v) {
    base(2, 3, 3, 41, 41).fused_qkv().Test(GetParam());
    base(1, 2, 2, 19, 19).fused_qkv().padded(2).Test(GetParam());
  }
}

TEST_P(AttentionKernel, LargeLogits) {
  // Logits of magnitude ~1e4 (exact in float32): overflows without the max subtraction.
  base(1, 2, 1, 23, 41).integer_inputs(12).scale(8.0f).Test(GetParam());
  base(2, 2, 2, 16, 16).integer_inputs(12).scale(-8.0f).Test(GetParam());
}

TEST_P(AttentionKernel, CustomScale) { base(1, 2, 2, 13, 29).scale(0.37f).Test(GetParam()); }

TEST_P(AttentionKernel, KeyPadding) {
  // Includes a batch with no valid key (fully masked rows give 0) and one with all keys.
  base(4, 2, 1, 11, 40).kv_len({40, 0, 17, 1}).Test(GetParam());
  base(2, 3, 3, 40, 40).kv_len({25, 40}).Test(GetParam());
}

// docs/semantics.md, "NaN and infinities": garbage in keys a row does not attend (past kv_len,
// causal, masked, outside a pattern) never reaches it; NaN and infinities in attended elements
// reach exactly the rows that read them, as in IEEE arithmetic.
TEST_P(AttentionKernel, NonFiniteInputs) {
  for (int rep = 0; rep < 3; ++rep) {
    base(2, 4, 2, 37, 53).nonfinite().kv_len({41, 53}).Test(GetParam());
    base(1, 2, 2, 64, 64).nonfinite().Test(GetParam());
    base(2, 2, 1, 19, 70).nonfinite().top_left().kv_len({70, 25}).Test(GetParam());
  }
}

// Very negative but finite scores are scores, not masks: every q.k negative and a scale of 1e29
// put every score below -1e29 (once the masking sentinel's range: rows of 0), and the softmax is
// one-hot; likewise with a scale that makes them around -1e37.
TEST_P(AttentionKernel, VeryNegativeScores) {
  base(1, 2, 1, 23, 41).negative_dots().scale(1e29f).Test(GetParam());
  base(2, 2, 2, 16, 16).negative_dots().scale(1e36f).Test(GetParam());
}

TEST_P(AttentionKernel, TopLeftAlignment) {
  base(1, 2, 2, 21, 34).top_left().Test(GetParam());
  base(2, 2, 1, 34, 21).top_left().Test(GetParam());
  base(2, 1, 1, 9, 30).top_left().kv_len({30, 12}).Test(GetParam());
}

// Kernels that take a mask tensor, with every way of broadcasting it.
class MaskedAttentionKernel : public AttentionKernel {};

TEST_P(MaskedAttentionKernel, BroadcastMasks) {
  const attngen_kernel_info& k = *GetParam();
  const int64_t b = 2, h = 3, sq = 19, skv = 26;
  const std::vector<std::vector<int64_t>> shapes = {{sq, skv}, {b, 1, sq, skv}, {1, h, 1, skv},
                                                    {skv},     {b, h, sq, 1},   {1, 1, 1, 1}};
  for (const auto& shape : shapes) {
    AttentionTester t = base(b, h, h, sq, skv);
    if (k.mask_tensor == ATTNGEN_MASK_TENSOR_BOOL) t.bool_mask(shape, 0.6);
    if (k.mask_tensor == ATTNGEN_MASK_TENSOR_ADDITIVE) t.additive_mask(shape, 0.6);
    t.Test(GetParam());
  }
  // Sparse enough that some rows are fully masked.
  AttentionTester sparse = base(1, 2, 2, 30, 4);
  if (k.mask_tensor == ATTNGEN_MASK_TENSOR_BOOL) sparse.bool_mask({1, 2, 30, 4}, 0.3);
  if (k.mask_tensor == ATTNGEN_MASK_TENSOR_ADDITIVE) sparse.additive_mask({1, 2, 30, 4}, 0.3);
  sparse.Test(GetParam());
}

// Lengths around the units the kernel tiles by (its descriptor's query tile and key block):
// partial, exact and spilling tiles and blocks, for queries and for keys, with GQA and batches.
// Small head counts keep the sweep short (it also runs under ASan and qemu).
TEST_P(AttentionKernel, EdgeLengths) {
  const attngen_kernel_info& k = *GetParam();
  std::vector<int64_t> square;  // Sq = Skv
  for (int64_t sq : edge_lengths(query_tile_of(k))) {
    square.push_back(sq);
    if (square.size() % 2) {
      base(1, 4, 2, sq, sq).Test(GetParam());
    } else {
      base(2, 1, 1, sq, sq).Test(GetParam());
    }
  }
  for (int64_t skv : edge_lengths(key_block_of(k))) {
    base(2, 2, 1, 7, skv).Test(GetParam());
    if (std::find(square.begin(), square.end(), skv) == square.end()) {
      base(1, 1, 1, skv, skv).Test(GetParam());
    }
  }
}

TEST_P(AttentionKernel, LongSequence) { base(1, 2, 1, 130, 1031).Test(GetParam()); }

// Sparse-pattern kernels over a sweep of odd lengths around their block sizes, square and not,
// so that whole key blocks are skipped, partly masked and fully kept.
class PatternKernel : public AttentionKernel {};

TEST_P(PatternKernel, OddLengths) {
  for (int64_t n : {1, 17, 63, 65, 127, 129, 200, 301}) {
    base(1, 2, 1, n, n).Test(GetParam());
    base(2, 2, 2, n, n + 37).Test(GetParam());
  }
  base(1, 2, 2, 90, 300).top_left().Test(GetParam());
  base(3, 2, 1, 70, 150).kv_len({150, 0, 77}).Test(GetParam());
}

INSTANTIATE_TEST_SUITE_P(Builtin, PatternKernel,
                         ::testing::ValuesIn(kernels_of(ATTNGEN_OP_ATTENTION, Only::kPattern)),
                         kernel_name);
INSTANTIATE_TEST_SUITE_P(Builtin, AttentionKernel,
                         ::testing::ValuesIn(kernels_of(ATTNGEN_OP_ATTENTION)), kernel_name);
INSTANTIATE_TEST_SUITE_P(Builtin, MaskedAttentionKernel,
                         ::testing::ValuesIn(kernels_of(ATTNGEN_OP_ATTENTION, Only::kMaskTensor)),
                         kernel_name);

// The runtime picks a kernel by configuration when none is named.
TEST(AttentionDispatch, ChoosesAFittingKernel) {
  AttentionTester().batch(2).heads(4, 2).seq(9, 12).head_dim(64).causal().Test();
  const attngen_kernel_info* k = attngen_find_kernel(attngen_last_kernel());
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->op, ATTNGEN_OP_ATTENTION);
  EXPECT_EQ(k->mask, ATTNGEN_MASK_CAUSAL);
  EXPECT_EQ(k->head_dim_qk, 64);
}

// attngen_set_isa() forces automatic dispatch onto each ISA the library was built for; every
// one this machine runs gives correct results, the others a named error. A D64 causal call in
// the dtype of the ISA's kernels (an extension row such as avx512bf16 builds bf16 attention only,
// and admits its base ISA's for the others).
TEST(AttentionDispatch, ForcedIsa) {
  struct Restore {
    ~Restore() { attngen_set_isa(nullptr); }
  } restore;
  std::vector<std::string> isas;
  for (const attngen_kernel_info* k : kernels_of(ATTNGEN_OP_ATTENTION)) {
    if (std::find(isas.begin(), isas.end(), k->isa) == isas.end()) isas.push_back(k->isa);
  }
  ASSERT_FALSE(isas.empty());
  int ran = 0;
  for (const std::string& isa : isas) {
    SCOPED_TRACE(isa);
    bool supported = false;
    for (const attngen_kernel_info* k : kernels_of(ATTNGEN_OP_ATTENTION)) {
      if (k->isa == isa) supported = attngen_kernel_supported(k) != 0;
    }
    const attngen_status st = attngen_set_isa(isa.c_str());
    if (!supported) {
      EXPECT_EQ(st, ATTNGEN_ERROR_UNSUPPORTED_TARGET) << attngen_last_error();
      EXPECT_NE(std::string(attngen_last_error()).find(isa), std::string::npos);
      continue;
    }
    ASSERT_EQ(st, ATTNGEN_OK) << attngen_last_error();
    EXPECT_EQ(std::string(attngen_isa()), isa);
    attngen_dtype dtype = ATTNGEN_F32;
    for (const attngen_kernel_info* k : kernels_of(ATTNGEN_OP_ATTENTION)) {
      if (k->isa == isa && k->head_dim_qk == 64 && k->mask == ATTNGEN_MASK_CAUSAL) {
        dtype = k->dtypes.q;  // the first listed: F32 where the ISA has F32 kernels
        break;
      }
    }
    AttentionTester().batch(2).heads(4, 2).seq(21, 35).head_dim(64).causal().dtype(dtype).Test();
    const attngen_kernel_info* k = attngen_find_kernel(attngen_last_kernel());
    ASSERT_NE(k, nullptr);
    EXPECT_EQ(std::string(k->isa), isa) << k->name;
    ++ran;
  }
  EXPECT_GT(ran, 0);
  EXPECT_EQ(attngen_set_isa("pentium"), ATTNGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(attngen_set_isa(""), ATTNGEN_OK);
  // Back to the default: the best ISA this CPU runs among the built ones.
  AttentionTester().batch(1).heads(2, 2).seq(8, 8).head_dim(64).Test();
  const attngen_kernel_info* best = attngen_find_kernel(attngen_last_kernel());
  ASSERT_NE(best, nullptr);
  EXPECT_STREQ(best->isa, attngen_isa());
}

// The explicit key block of the kernel the last call ran: 0 for the row form.
int32_t last_requested_key_block() {
  const attngen_kernel_info* k = attngen_find_kernel(attngen_last_kernel());
  return k != nullptr ? k->requested_key_block : -1;
}

// The row form up to attngen::long_keys() keys (causal: more), an explicit key-block kernel
// beyond; a kernel with a log-sum-exp output serves a call that wants only the weights.
TEST(AttentionDispatch, FormFollowsKeyLength) {
  AttentionTester().batch(1).heads(2, 2).seq(40, 300).head_dim(64).Test();
  EXPECT_EQ(last_requested_key_block(), 0) << attngen_last_kernel();
  for (const bool causal : {false, true}) {
    const int64_t limit = attngen::long_keys(causal);
    for (const int64_t skv : {limit, limit + 1}) {
      SCOPED_TRACE(std::string(causal ? "causal" : "dense") + ", Skv " + std::to_string(skv));
      AttentionTester t;
      t.batch(1).heads(1, 1).seq(9, skv).head_dim(64);
      if (causal) t.causal();
      t.Test();
      if (skv > limit) {
        EXPECT_GT(last_requested_key_block(), 0) << attngen_last_kernel();
      } else {
        EXPECT_EQ(last_requested_key_block(), 0) << attngen_last_kernel();
      }
    }
  }
  AttentionTester().batch(1).heads(2, 1).seq(33, 47).head_dim(64).weights().Test();
  EXPECT_NE(std::string(attngen_last_kernel()).find("_p_lse"), std::string::npos)
      << attngen_last_kernel();
}

// A short-sequence kernel (QUERY_TILE below the ISA's default) where it pads noticeably fewer
// query rows, the default tile where both pad alike.
TEST(AttentionDispatch, QueryTileFollowsQueryLength) {
  AttentionTester().batch(1).heads(2, 2).seq(256, 256).head_dim(64).Test();
  const attngen_kernel_info* dflt = attngen_find_kernel(attngen_last_kernel());
  ASSERT_NE(dflt, nullptr);
  EXPECT_EQ(std::string(dflt->variant).find("QUERY_TILE"), std::string::npos) << dflt->variant;
  // The descriptors say each kernel's resolved tile: a smaller one than the default's, asked for
  // by the variant, is the short-sequence kernel.
  const attngen_kernel_info* short_tile = nullptr;
  for (const attngen_kernel_info* k : kernels_of(ATTNGEN_OP_ATTENTION)) {
    if (!std::strcmp(k->isa, dflt->isa) && k->query_tile < dflt->query_tile &&
        std::string(k->variant).find("QUERY_TILE") != std::string::npos && k->head_dim_qk == 64 &&
        k->mask == ATTNGEN_MASK_NONE && k->pattern.kind == ATTNGEN_PATTERN_NONE &&
        k->requested_key_block == 0 && !k->weights && !k->lse && !k->mask_tensor && !k->softcap) {
      short_tile = k;
    }
  }
  if (short_tile == nullptr) GTEST_SKIP() << "no short-tile kernel is built for " << dflt->isa;
  EXPECT_NE(
      std::string(short_tile->variant).find("QUERY_TILE " + std::to_string(short_tile->query_tile)),
      std::string::npos)
      << short_tile->variant << " resolved to the tile " << short_tile->query_tile;
  // ViT: 197 tokens, five rows past three default tiles (64) on AVX-512.
  const int64_t seq = 3 * 2 * short_tile->query_tile + 5;
  AttentionTester().batch(1).heads(2, 2).seq(seq, seq).head_dim(64).Test();
  EXPECT_STREQ(attngen_last_kernel(), short_tile->name);
  AttentionTester().batch(1).heads(2, 2).seq(2 * short_tile->query_tile, 40).head_dim(64).Test();
  EXPECT_STREQ(attngen_last_kernel(), dflt->name);
}

TEST(VariantList, EveryOpHasKernels) {
  EXPECT_FALSE(kernels_of(ATTNGEN_OP_ATTENTION).empty());
  EXPECT_FALSE(kernels_of(ATTNGEN_OP_LINEAR).empty());
  EXPECT_FALSE(kernels_of(ATTNGEN_OP_MHA).empty());
}

}  // namespace
}  // namespace attngen::test
