// Generic attention kernels (GENERIC in generated/variants.cmake): any head dims up to their
// bucket, and the causal mask, a mask tensor and the soft cap at run time, each against the
// float64 reference; and dispatch, which takes them where no specialised kernel fits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "attngen/kernel.h"
#include "tests/attention_tester.h"

namespace attngen::test {
namespace {

std::vector<const attngen_kernel_info*> generic_kernels() {
  std::vector<const attngen_kernel_info*> out;
  for (size_t i = 0; i < attngen_kernel_count(); ++i) {
    const attngen_kernel_info* k = attngen_kernel_at(i);
    if (k->op == ATTNGEN_OP_ATTENTION && k->generic) out.push_back(k);
  }
  return out;
}

class GenericKernel : public ::testing::TestWithParam<const attngen_kernel_info*> {
 protected:
  void SetUp() override {
    if (!attngen_kernel_supported(GetParam())) {
      GTEST_SKIP() << GetParam()->name << " needs " << GetParam()->isa
                   << ", which this machine lacks";
    }
  }
  int64_t dqk() const { return GetParam()->head_dim_qk; }
  int64_t dv() const { return GetParam()->head_dim_v; }

  // A tester of this kernel's pattern kind with the n-th of a few parameter sets (a pattern
  // kernel takes any), and the given shape.
  AttentionTester base(int64_t b, int64_t hq, int64_t hkv, int64_t sq, int64_t skv,
                       int n = 0) const {
    static const int32_t kSides[][2] = {{7, 7}, {31, 0}, {-1, 5}, {12, -1}, {4096, 4096}};
    static const int32_t kStrides[] = {16, 5, 128, 1};
    static const int32_t kBlocks[] = {64, 16, 128, 48};  // aligned to the kernel's 64 and not
    static const int32_t kGlobal[][2] = {{4, 16}, {0, 3}, {1, 256}, {40, 0}};
    AttentionTester t;
    t.batch(b).heads(hq, hkv).seq(sq, skv);
    attngen_pattern p{};
    p.kind = GetParam()->pattern.kind;
    switch (p.kind) {
      case ATTNGEN_PATTERN_WINDOW:
        p.window_left = kSides[n % 5][0];
        p.window_right = kSides[n % 5][1];
        break;
      case ATTNGEN_PATTERN_STRIDED:
        p.stride = kStrides[n % 4];
        break;
      case ATTNGEN_PATTERN_BLOCK_SPARSE:
        p.block = kBlocks[n % 4];
        break;
      case ATTNGEN_PATTERN_GLOBAL_LOCAL:
        p.global_tokens = kGlobal[n % 4][0];
        p.local = kGlobal[n % 4][1];
        break;
      default:
        break;
    }
    t.pattern(p).weights(GetParam()->weights != 0).lse(GetParam()->lse != 0);
    return t;
  }
};

// Head dims from 1 to the bucket's, odd ones, Dqk != Dv, with GQA and odd lengths.
TEST_P(GenericKernel, HeadDims) {
  const int64_t d = dqk(), e = dv();
  const std::vector<std::pair<int64_t, int64_t>> dims = {
      {1, 1}, {7, 7}, {d / 2 + 3, e / 2 + 3}, {d, 13}, {d - 1, e}, {d, e}};
  int n = 0;
  for (const auto& [q, v] : dims) base(2, 4, 2, 21, 37, n++).head_dim(q, v).Test(GetParam());
}

// The run-time options alone and together: causal in both alignments, key padding, bool and
// additive masks, the soft cap; strided views.
TEST_P(GenericKernel, RunTimeOptions) {
  const int64_t d = std::min<int64_t>(dqk(), 40), e = std::min<int64_t>(dv(), 24);
  int n = 0;
  const auto call = [&](int64_t sq, int64_t skv) {
    AttentionTester t = base(2, 2, 1, sq, skv, n++);
    t.head_dim(d, e);
    return t;
  };
  call(33, 70).causal().Test(GetParam());
  call(70, 70).causal().top_left().Test(GetParam());
  call(19, 45).causal().top_left().Test(GetParam());
  call(30, 65).kv_len({65, 20}).causal().Test(GetParam());
  call(17, 90).bool_mask({2, 2, 17, 90}).Test(GetParam());
  call(40, 40).bool_mask({1, 1, 40, 40}).causal().Test(GetParam());
  call(23, 50).additive_mask({2, 1, 23, 50}).Test(GetParam());
  call(23, 50).additive_mask({50}).causal().Test(GetParam());
  call(29, 29).softcap(5.0f).Test(GetParam());
  call(29, 64)
      .softcap(3.0f)
      .causal()
      .additive_mask({2, 2, 29, 64})
      .kv_len({64, 40})
      .Test(GetParam());
  call(31, 31).integer_inputs(12).scale(8.0f).causal().Test(GetParam());
  call(37, 53).padded(3).Test(GetParam());
}

// docs/semantics.md, "NaN and infinities", with the run-time masks and the kernel's pattern.
TEST_P(GenericKernel, NonFiniteInputs) {
  const int64_t d = std::min<int64_t>(dqk(), 40), e = std::min<int64_t>(dv(), 24);
  int n = 0;
  for (int rep = 0; rep < 2; ++rep) {
    base(2, 2, 1, 33, 70, n++)
        .head_dim(d, e)
        .nonfinite()
        .causal()
        .kv_len({70, 41})
        .Test(GetParam());
    base(2, 2, 2, 23, 50, n++)
        .head_dim(d, e)
        .nonfinite()
        .additive_mask({2, 1, 23, 50})
        .Test(GetParam());
    base(1, 2, 2, 40, 40, n++)
        .head_dim(d, e)
        .nonfinite()
        .bool_mask({1, 1, 40, 40})
        .causal()
        .top_left()
        .Test(GetParam());
    base(1, 2, 1, 29, 64, n++).head_dim(d, e).nonfinite().softcap(3.0f).Test(GetParam());
  }
}

// Pattern parameters far past every key (INT32_MAX) mean what they say: found by the fuzzer, a
// window_right of INT32_MAX overflowed the kernels' int32 positions and attended nothing.
TEST_P(GenericKernel, HugePatternParameters) {
  attngen_pattern p{};
  p.kind = GetParam()->pattern.kind;
  const int32_t huge = std::numeric_limits<int32_t>::max();
  if (p.kind == ATTNGEN_PATTERN_WINDOW) {
    p.window_left = 0;
    p.window_right = huge;
  } else if (p.kind == ATTNGEN_PATTERN_STRIDED) {
    p.stride = huge;
  } else if (p.kind == ATTNGEN_PATTERN_GLOBAL_LOCAL) {
    p.local = huge;
  } else {
    GTEST_SKIP() << "no unbounded parameter in this kernel's pattern";
  }
  const int64_t d = std::min<int64_t>(dqk(), 7);
  AttentionTester()
      .batch(2)
      .heads(3, 1)
      .seq(20, 12)
      .head_dim(d)
      .causal()
      .pattern(p)
      .weights(GetParam()->weights != 0)
      .lse(GetParam()->lse != 0)
      .Test(GetParam());
  AttentionTester()
      .batch(1)
      .heads(2, 2)
      .seq(9, 30)
      .head_dim(d)
      .pattern(p)
      .weights(GetParam()->weights != 0)
      .lse(GetParam()->lse != 0)
      .Test(GetParam());
}

// Key blocks and query tiles cut at odd places, long enough to skip blocks past the diagonal
// and outside the patterns.
TEST_P(GenericKernel, Lengths) {
  const int64_t d = std::min<int64_t>(dqk(), 64), e = std::min<int64_t>(dv(), 64);
  int n = 0;
  for (const int64_t s : {1, 63, 64, 65, 129, 200, 300}) {
    base(1, 2, 2, s, s, n++).head_dim(d, e).causal(s % 2 == 1).Test(GetParam());
  }
}

INSTANTIATE_TEST_SUITE_P(Builtin, GenericKernel, ::testing::ValuesIn(generic_kernels()),
                         [](const ::testing::TestParamInfo<const attngen_kernel_info*>& info) {
                           return std::string(info.param->name);
                         });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(GenericKernel);

// A call no specialised kernel takes runs on the generic kernel of the smallest bucket that
// fits; one a specialised kernel takes runs there.
TEST(GenericDispatch, ServesWhatNoSpecialisedKernelDoes) {
  if (generic_kernels().empty()) GTEST_SKIP() << "no generic kernel is built";
  AttentionTester().heads(2, 1).seq(20, 30).head_dim(96).causal().softcap(4.0f).Test();
  const attngen_kernel_info* k = attngen_find_kernel(attngen_last_kernel());
  ASSERT_NE(k, nullptr);
  EXPECT_TRUE(k->generic) << k->name;
  EXPECT_EQ(k->head_dim_qk, 128) << k->name << ": the smallest bucket holding 96";
  EXPECT_STREQ(k->isa, attngen_isa());
  AttentionTester().heads(2, 2).seq(20, 30).head_dim(64).causal().Test();
  k = attngen_find_kernel(attngen_last_kernel());
  ASSERT_NE(k, nullptr);
  EXPECT_FALSE(k->generic) << "a specialised kernel fits D64 causal, not " << k->name;
  // Dqk and Dv in different buckets: the bucket must hold both.
  AttentionTester().heads(1, 1).seq(9, 12).head_dim(40, 200).Test();
  k = attngen_find_kernel(attngen_last_kernel());
  ASSERT_NE(k, nullptr);
  EXPECT_TRUE(k->generic && k->head_dim_v >= 200 && k->head_dim_qk >= 40) << k->name;
  // Mistral: GQA, D128, a causal window of 4096 (no kernel is built for these parameters).
  attngen_pattern window{};
  window.kind = ATTNGEN_PATTERN_WINDOW;
  window.window_left = 4095;
  window.window_right = 0;
  AttentionTester().heads(4, 1).seq(70, 70).head_dim(128).causal().pattern(window).Test();
  k = attngen_find_kernel(attngen_last_kernel());
  ASSERT_NE(k, nullptr);
  EXPECT_TRUE(k->generic && k->pattern.kind == ATTNGEN_PATTERN_WINDOW) << k->name;
}

}  // namespace
}  // namespace attngen::test
