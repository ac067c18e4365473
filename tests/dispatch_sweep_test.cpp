// Dispatch serves every valid attention call: a sweep of the optional outputs (none, weights,
// log-sum-exp, both) x masks x patterns x dtypes on each CPU ISA this build has and this machine
// runs (forced with attngen_set_isa()), at a head dim with specialised kernels and one served by
// the generic kernels only, each checked against the float64 reference. No call may return
// ATTNGEN_ERROR_NO_KERNEL below the inspection outputs' head-dim limit (the generic inspection
// kernels' 128), and a call that asks for no attention weights never runs a kernel that writes
// them (O(Sq * Skv) scratch): the log-sum-exp alone comes from a kernel that writes it alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "attngen/attngen.h"
#include "attngen/kernel.h"
#include "tests/attention_tester.h"
#include "tests/isas.h"

namespace attngen::test {
namespace {

enum class Outputs { kNone, kWeights, kLse, kBoth };
enum class Mask { kNone, kCausal, kPaddedCausal, kBoolTensor, kAdditiveCausal };

const char* name_of(Outputs o) {
  static const char* const kNames[] = {"none", "weights", "lse", "weights+lse"};
  return kNames[static_cast<int>(o)];
}
const char* name_of(Mask m) {
  static const char* const kNames[] = {"none", "causal", "kv_len+causal", "bool tensor",
                                       "additive tensor+causal"};
  return kNames[static_cast<int>(m)];
}

// The patterns, with parameters no specialised kernel has (those run on generic kernels) and
// ones a specialised D64 kernel has.
std::vector<attngen_pattern> patterns() {
  std::vector<attngen_pattern> out(1);  // none
  attngen_pattern p{};
  p.kind = ATTNGEN_PATTERN_WINDOW;
  p.window_left = 5;
  p.window_right = 2;
  out.push_back(p);
  out.push_back(attngen_pattern_local(32));  // WINDOW 31 31: specialised at D64
  p = {};
  p.kind = ATTNGEN_PATTERN_STRIDED;
  p.stride = 4;
  out.push_back(p);
  p = {};
  p.kind = ATTNGEN_PATTERN_BLOCK_SPARSE;
  p.block = 8;
  out.push_back(p);
  p = {};
  p.kind = ATTNGEN_PATTERN_GLOBAL_LOCAL;
  p.local = 3;
  p.global_tokens = 2;
  out.push_back(p);
  return out;
}

class DispatchSweep : public ::testing::TestWithParam<int> {};

// One head dim per instance: 64 (specialised kernels of many kinds), 72 (generic kernels only).
TEST_P(DispatchSweep, EveryValidCallRuns) {
  const int head_dim = GetParam();
  const std::vector<std::string> isas = runnable_cpu_isas();
  if (isas.empty()) GTEST_SKIP() << "no CPU ISA of this build runs on this machine";
  // Each call is made under every ISA (AttentionTester::isas()) on one draw of inputs, those that
  // fall back to another row's kernels included.
  for (attngen_dtype dtype : {ATTNGEN_F32, ATTNGEN_F16, ATTNGEN_BF16}) {
    for (const attngen_pattern& pattern : patterns()) {
      for (Mask mask : {Mask::kNone, Mask::kCausal, Mask::kPaddedCausal, Mask::kBoolTensor,
                        Mask::kAdditiveCausal}) {
        for (Outputs outputs : {Outputs::kNone, Outputs::kWeights, Outputs::kLse, Outputs::kBoth}) {
          SCOPED_TRACE("dtype " + std::to_string(dtype) + ", pattern " +
                       std::to_string(pattern.kind) + ", mask " + name_of(mask) + ", outputs " +
                       name_of(outputs));
          const bool weights = outputs == Outputs::kWeights || outputs == Outputs::kBoth;
          const bool lse = outputs == Outputs::kLse || outputs == Outputs::kBoth;
          AttentionTester t;
          t.isas(isas, /*fallbacks=*/true)
              .batch(2)
              .heads(2, 1)
              .seq(19, 27)
              .head_dim(head_dim)
              .dtype(dtype)
              .pattern(pattern);
          t.weights(weights).lse(lse);
          switch (mask) {
            case Mask::kNone:
              break;
            case Mask::kCausal:
              t.causal();
              break;
            case Mask::kPaddedCausal:
              t.causal().kv_len({27, 20});
              break;
            case Mask::kBoolTensor:
              t.bool_mask({2, 1, 19, 27});
              break;
            case Mask::kAdditiveCausal:
              t.causal().additive_mask({1, 2, 1, 27});
              break;
          }
          std::vector<std::string> ran;
          t.Test(nullptr, &ran);
          if (::testing::Test::HasFatalFailure()) return;
          for (const std::string& name : ran) {
            const attngen_kernel_info* k = attngen_find_kernel(name.c_str());
            ASSERT_NE(k, nullptr) << name;
            if (!weights) {
              EXPECT_EQ(k->weights, 0) << k->name << " writes the weights of a call without them";
            }
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(HeadDims, DispatchSweep, ::testing::Values(64, 72));

}  // namespace
}  // namespace attngen::test
