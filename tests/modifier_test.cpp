// Modifiers (attngen.h, "Modifiers"; docs/semantics.md): each library modifier on every CPU ISA
// this build has and this machine runs, combined with the masks, key padding, grouped-query
// heads, alignments, the soft cap and each dtype, against the float64 reference's own version of
// it; its parameters' validation (named errors, nothing written); plans with a modifier.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "attngen/attngen.h"
#include "attngen/kernel.h"
#include "tests/attention_tester.h"
#include "tests/isas.h"

namespace attngen::test {
namespace {

// The CPU ISAs with attention kernels in this build that this machine runs: every tester below
// runs its call under each of them, on one draw of inputs (AttentionTester::isas()).
const std::vector<std::string>& cpu_isas() {
  static const std::vector<std::string> isas = [] {
    const attngen_op op = ATTNGEN_OP_ATTENTION;
    return runnable_cpu_isas(&op);
  }();
  return isas;
}

// Runs `body`, or skips the test where no CPU ISA of this build runs on this machine.
template <typename Body>
void on_every_cpu_isa(Body body) {
  if (cpu_isas().empty()) GTEST_SKIP() << "no CPU ISA of this build runs on this machine";
  body();
}

// A tester of a library modifier (with ALiBi's symmetric form where `symmetric`) on every CPU ISA.
AttentionTester with_modifier(const char* name, bool symmetric = false) {
  AttentionTester t;
  t.modifier(name, symmetric).isas(cpu_isas());
  return t;
}

// The kernel `name`, which must have been generated with `modifier` ("": none).
void expect_modifier_kernel(const std::string& name, const char* modifier) {
  const attngen_kernel_info* k = attngen_find_kernel(name.c_str());
  ASSERT_NE(k, nullptr) << name;
  EXPECT_STREQ(k->modifier, modifier) << k->name;
}

// Tests `t`, each of whose runs must take a kernel generated with `modifier`.
void test_on_modifier_kernels(const AttentionTester& t, const char* modifier) {
  std::vector<std::string> ran;
  t.Test(nullptr, &ran);
  EXPECT_FALSE(ran.empty());
  for (const std::string& name : ran) expect_modifier_kernel(name, modifier);
}

TEST(Modifier, AlibiSlopesAreThePapers) {
  for (int64_t heads : {1, 2, 3, 8, 12, 16, 20, 32, 40, 64, 96}) {
    SCOPED_TRACE("heads " + std::to_string(heads));
    std::vector<float> got(static_cast<size_t>(heads), -1.0f);
    ASSERT_EQ(attngen_alibi_slopes(heads, got.data()), ATTNGEN_OK) << attngen_last_error();
    const std::vector<double> want = reference_alibi_slopes(heads);
    ASSERT_EQ(want.size(), got.size());
    for (size_t h = 0; h < got.size(); ++h) {
      EXPECT_NEAR(got[h], want[h], 1e-7 * want[h]) << "head " << h;
    }
  }
  float one = 7.0f;
  EXPECT_EQ(attngen_alibi_slopes(4, nullptr), ATTNGEN_ERROR_NULL_POINTER);
  EXPECT_EQ(attngen_alibi_slopes(0, &one), ATTNGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(attngen_alibi_slopes(-3, &one), ATTNGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(one, 7.0f);
}

// ALiBi with every run-time option of its kernels, on each CPU ISA.
TEST(Modifier, AlibiOnEveryIsa) {
  on_every_cpu_isa([] {
    const auto alibi = [](bool symmetric = false) { return with_modifier("alibi", symmetric); };
    // Causal decoder shapes: bottom-right (a chunk of new queries over a longer context), one
    // query over a cache, top-left, key padding, GQA.
    test_on_modifier_kernels(alibi().batch(2).heads(4, 4).seq(37, 53).head_dim(64).causal(),
                             "alibi");
    alibi().batch(1).heads(8, 2).seq(1, 200).head_dim(128).causal().Test();
    alibi().batch(1).heads(3, 1).seq(70, 70).head_dim(72).causal().top_left().Test();
    alibi().batch(3).heads(2, 1).seq(40, 61).head_dim(48).causal().kv_len({61, 0, 17}).Test();
    // Bidirectional (the symmetric form), padding, long enough for several key blocks.
    alibi(true).batch(2).heads(4, 2).seq(129, 300).head_dim(64).kv_len({300, 151}).Test();
    alibi(true).batch(1).heads(2, 2).seq(19, 27).head_dim(96, 64).Test();
    // With the soft cap (applied first), an additive mask (after), a bool mask, and the other
    // dtypes (converted to the f32 kernel).
    alibi().batch(1).heads(2, 1).seq(33, 33).head_dim(64).causal().softcap(5.0f).Test();
    alibi(true).batch(2).heads(2, 2).seq(17, 29).head_dim(64).additive_mask({1, 2, 1, 29}).Test();
    alibi().batch(2).heads(2, 2).seq(17, 29).head_dim(64).bool_mask({2, 1, 17, 29}).Test();
    for (attngen_dtype d : {ATTNGEN_F16, ATTNGEN_BF16}) {
      alibi().batch(1).heads(4, 2).seq(25, 40).head_dim(64).causal().dtype(d).Test();
    }
    // The standard slopes, at a head count that is no power of two.
    AttentionTester()
        .modifier("alibi", false, true)
        .isas(cpu_isas())
        .heads(12, 12)
        .seq(50, 50)
        .causal()
        .Test();
  });
}

// Document masking (a mask modifier) with the run-time options of its kernel, on each CPU ISA:
// packed sequences with and without causal, GQA, padding, a chunk of queries over a longer
// context (their positions index the ids), the other dtypes.
TEST(Modifier, DocumentOnEveryIsa) {
  on_every_cpu_isa([] {
    const auto document = [] { return with_modifier("document"); };
    test_on_modifier_kernels(document().batch(2).heads(4, 4).seq(90, 90).head_dim(64).causal(),
                             "document");
    document().batch(2).heads(4, 2).seq(200, 200).head_dim(128).Test();
    document().batch(1).heads(2, 1).seq(17, 140).head_dim(72).causal().Test();
    document().batch(3).heads(2, 2).seq(65, 65).head_dim(32).causal().kv_len({65, 1, 30}).Test();
    document().batch(1).heads(2, 2).seq(40, 40).head_dim(64).causal().top_left().Test();
    for (attngen_dtype d : {ATTNGEN_F16, ATTNGEN_BF16}) {
      document().batch(1).heads(2, 2).seq(33, 33).head_dim(64).causal().dtype(d).Test();
    }
    // Long enough that tiles skip the key blocks of other documents (generator/modifiers/
    // document.cpp), a chunk of queries over a long context among them.
    document().batch(2).heads(2, 1).seq(700, 700).head_dim(64).causal().Test();
    document().batch(1).heads(2, 2).seq(520, 520).head_dim(128).Test();
    document().batch(2).heads(2, 2).seq(90, 600).head_dim(64).causal().kv_len({600, 333}).Test();
  });
}

// Prefix-LM on each CPU ISA: prefixes of none, some, all and past the sequence, per batch; long
// enough that tiles skip the blocks past their diagonal and the prefix; bottom- and top-left
// alignment, padding, GQA, the other dtypes.
TEST(Modifier, PrefixOnEveryIsa) {
  on_every_cpu_isa([] {
    const auto prefix = [] { return with_modifier("prefix"); };
    test_on_modifier_kernels(prefix().batch(3).heads(4, 2).seq(300, 300).head_dim(64), "prefix");
    prefix().batch(3).heads(2, 2).seq(40, 257).head_dim(128).kv_len({257, 100, 0}).Test();
    prefix().batch(2).heads(2, 1).seq(70, 70).head_dim(80).top_left().Test();
    for (attngen_dtype d : {ATTNGEN_F16, ATTNGEN_BF16}) {
      prefix().batch(2).heads(2, 2).seq(33, 33).head_dim(64).dtype(d).Test();
    }
  });
}

// Sinks (StreamingLLM) on each CPU ISA: with causal and without, sinks and windows of random
// sizes (fractional ones among them), a sequence long enough that tiles skip the blocks between
// the sinks and their window, a chunk of queries over a longer context, padding, GQA.
TEST(Modifier, SinksOnEveryIsa) {
  on_every_cpu_isa([] {
    const auto sinks = [] { return with_modifier("sinks"); };
    for (int repeat = 0; repeat < 3; ++repeat) {
      test_on_modifier_kernels(sinks().batch(1).heads(2, 1).seq(600, 600).head_dim(64).causal(),
                               "sinks");
    }
    sinks().batch(2).heads(4, 2).seq(130, 130).head_dim(128).Test();
    sinks().batch(2).heads(2, 2).seq(50, 400).head_dim(64).causal().kv_len({400, 77}).Test();
    sinks().batch(1).heads(2, 2).seq(90, 90).head_dim(48).causal().top_left().Test();
    sinks().batch(1).heads(2, 1).seq(40, 40).head_dim(64).causal().dtype(ATTNGEN_BF16).Test();
  });
}

// T5's relative position bias on each CPU ISA: encoder (bidirectional, T5's 32 buckets and 128)
// and decoder shapes, sequences past the reach (their last bucket shared), chunks of queries
// over a longer context, top-left, padding, GQA, the soft cap, the other dtypes; the table's
// bucket count, reach and direction drawn per test.
TEST(Modifier, T5BiasOnEveryIsa) {
  on_every_cpu_isa([] {
    const auto t5 = [] { return with_modifier("t5_bias"); };
    for (int repeat = 0; repeat < 3; ++repeat) {
      test_on_modifier_kernels(t5().batch(2).heads(4, 4).seq(300, 300).head_dim(64), "t5_bias");
    }
    t5().batch(1).heads(4, 2).seq(70, 330).head_dim(64).causal().Test();
    t5().batch(3).heads(2, 2).seq(40, 61).head_dim(32).causal().kv_len({61, 0, 17}).Test();
    t5().batch(1).heads(2, 1).seq(90, 90).head_dim(48).causal().top_left().Test();
    t5().batch(1).heads(2, 2).seq(33, 33).head_dim(64).softcap(8.0f).Test();
    for (attngen_dtype d : {ATTNGEN_F16, ATTNGEN_BF16}) {
      t5().batch(1).heads(4, 2).seq(25, 140).head_dim(64).dtype(d).Test();
    }
  });
}

// A learned sink logit per head on each CPU ISA: with causal and without, rows that attend
// nothing (kv_len 0: the output stays 0), a head without a sink (-inf), the soft cap, a mask
// tensor, several key blocks, the other dtypes.
TEST(Modifier, SinkLogitOnEveryIsa) {
  on_every_cpu_isa([] {
    const auto sink = [] { return with_modifier("sink_logit"); };
    test_on_modifier_kernels(sink().batch(2).heads(8, 2).seq(1, 300).head_dim(64).causal(),
                             "sink_logit");
    sink().batch(3).heads(4, 4).seq(37, 53).head_dim(128).causal().kv_len({53, 0, 20}).Test();
    sink().batch(1).heads(4, 1).seq(150, 150).head_dim(64).Test();
    sink().batch(1).heads(2, 2).seq(33, 33).head_dim(64).causal().softcap(20.0f).Test();
    sink().batch(2).heads(2, 2).seq(17, 29).head_dim(64).bool_mask({2, 1, 17, 29}).Test();
    for (attngen_dtype d : {ATTNGEN_F16, ATTNGEN_BF16}) {
      sink().batch(1).heads(4, 2).seq(25, 40).head_dim(64).causal().dtype(d).Test();
    }
  });
}

// A modifier of this build's generic attention kernels with the log-sum-exp, and the largest
// head dim of those kernels.
struct ModifierKernels {
  std::string name;
  int64_t head_dim;
};

// Those of the kernels that write the weights too (`weights`) or not.
std::vector<ModifierKernels> modifiers_with_lse(bool weights) {
  std::vector<ModifierKernels> out;
  for (size_t i = 0; i < attngen_kernel_count(); ++i) {
    const attngen_kernel_info* k = attngen_kernel_at(i);
    if (k->op != ATTNGEN_OP_ATTENTION || !k->generic || !k->lse || (k->weights != 0) != weights ||
        k->modifier == nullptr || k->modifier[0] == '\0' ||
        std::string(k->name).rfind("test_", 0) == 0) {
      continue;
    }
    auto m = std::find_if(out.begin(), out.end(),
                          [&](const ModifierKernels& e) { return e.name == k->modifier; });
    if (m == out.end()) {
      out.push_back({k->modifier, k->head_dim_qk});
    } else {
      m->head_dim = std::max<int64_t>(m->head_dim, k->head_dim_qk);
    }
  }
  return out;
}

// The log-sum-exp with each library modifier, on each CPU ISA: written from the key-block form's
// final state with the output. Rows that attend nothing (padding 0: -inf), tiles and key blocks
// with tails, causal both ways, GQA, a sink logit's share of the sum, the other dtypes.
TEST(Modifier, LogSumExpOnEveryIsa) {
  const std::vector<ModifierKernels> modifiers = modifiers_with_lse(false);
  if (modifiers.empty()) GTEST_SKIP() << "no modifier kernel with the log-sum-exp in this build";
  on_every_cpu_isa([&] {
    for (const ModifierKernels& m : modifiers) {
      SCOPED_TRACE(m.name);
      const auto lse = [&] {
        AttentionTester t = with_modifier(m.name.c_str());
        t.lse();
        return t;
      };
      const int64_t d = m.head_dim;
      test_on_modifier_kernels(
          lse().batch(3).heads(4, 2).seq(77, 150).head_dim(d).causal().kv_len({150, 0, 61}),
          m.name.c_str());
      lse().batch(1).heads(2, 2).seq(130, 130).head_dim(d - 8).Test();
      lse().batch(2).heads(3, 1).seq(40, 40).head_dim(d).causal().top_left().Test();
      lse().batch(1).heads(2, 1).seq(33, 70).head_dim(d).dtype(ATTNGEN_F16).Test();
    }
  });
}

// The CPU ISAs this machine runs that have an attention kernel of `modifier` writing the weights.
std::vector<std::string> weights_isas(const char* modifier) {
  return runnable_cpu_isas_with([modifier](const attngen_kernel_info& k) {
    return k.op == ATTNGEN_OP_ATTENTION && k.weights && !std::strcmp(k.modifier, modifier);
  });
}

// The attention weights (and log-sum-exp) with each library modifier on each ISA that has the
// kernel: masked pairs weigh 0, a sink logit's rows sum to less than 1, padding, GQA, causal
// both ways, the other dtypes (converted to the F32 kernel).
TEST(Modifier, WeightsOnEveryIsa) {
  const std::vector<ModifierKernels> modifiers = modifiers_with_lse(true);
  if (modifiers.empty()) GTEST_SKIP() << "no modifier kernel with the weights in this build";
  for (const ModifierKernels& m : modifiers) {
    SCOPED_TRACE(m.name);
    const std::vector<std::string> isas = weights_isas(m.name.c_str());
    if (isas.empty()) continue;
    const auto weights = [&] {
      AttentionTester t;
      t.modifier(m.name).isas(isas).weights();
      return t;
    };
    const int64_t d = m.head_dim;
    std::vector<std::string> ran;
    weights().lse().batch(2).heads(4, 2).seq(45, 70).head_dim(d).causal().kv_len({70, 9}).Test(
        nullptr, &ran);
    ASSERT_FALSE(ran.empty());
    for (const std::string& name : ran) expect_modifier_kernel(name, m.name.c_str());
    weights().batch(1).heads(2, 1).seq(70, 70).head_dim(d - 16).Test();
    weights().batch(1).heads(2, 2).seq(20, 20).head_dim(d).causal().top_left().Test();
    weights().batch(1).heads(2, 2).seq(17, 30).head_dim(d).dtype(ATTNGEN_BF16).Test();
  }
}

// A small f32 call with ALiBi whose parameters a test then breaks.
struct AlibiCall {
  Storage q{{1, 5, 2, 16}, 0}, k{{1, 7, 2, 16}, 0}, v{{1, 7, 2, 16}, 0}, out{{1, 5, 2, 16}, 0};
  Storage slopes{{2}, 0};
  attngen_modifier modifier{};
  attngen_attention_options opt = attngen_attention_options_default();
  AlibiCall() {
    std::mt19937_64 rng(fresh_seed());
    for (Storage* t : {&q, &k, &v, &slopes}) t->fill_random(rng, -1.0, 1.0);
    modifier.name = "alibi";
    modifier.tensors[0] = &slopes.t;
    opt.modifier = &modifier;
  }
  attngen_status run() { return attngen_attention(&q.t, &k.t, &v.t, &out.t, &opt); }
};

TEST(Modifier, BadParametersAreNamedErrorsWithNothingWritten) {
  {
    AlibiCall c;
    ASSERT_EQ(c.run(), ATTNGEN_OK) << attngen_last_error();  // the call as it is runs
  }
  struct Case {
    const char* what;
    attngen_status want;
    void (*breaks)(AlibiCall&);
  };
  static Storage wrong_shape({3}, 0), rank2({1, 2}, 0);
  static Tensor<Half> half({2}, 0);
  const Case cases[] = {
      {"name NULL", ATTNGEN_ERROR_NULL_POINTER, [](AlibiCall& c) { c.modifier.name = nullptr; }},
      {"unknown modifier", ATTNGEN_ERROR_NO_KERNEL,
       [](AlibiCall& c) { c.modifier.name = "no_such_modifier"; }},
      {"slopes missing", ATTNGEN_ERROR_NULL_POINTER,
       [](AlibiCall& c) { c.modifier.tensors[0] = nullptr; }},
      {"slopes of Hq + 1", ATTNGEN_ERROR_SHAPE,
       [](AlibiCall& c) { c.modifier.tensors[0] = &wrong_shape.t; }},
      {"slopes of rank 2", ATTNGEN_ERROR_RANK,
       [](AlibiCall& c) { c.modifier.tensors[0] = &rank2.t; }},
      {"slopes in F16", ATTNGEN_ERROR_DTYPE, [](AlibiCall& c) { c.modifier.tensors[0] = &half.t; }},
      {"slopes' data NULL", ATTNGEN_ERROR_NULL_POINTER,
       [](AlibiCall& c) { c.slopes.t.data = nullptr; }},
      {"a second tensor", ATTNGEN_ERROR_INVALID_ARGUMENT,
       [](AlibiCall& c) { c.modifier.tensors[1] = &c.slopes.t; }},
      {"a second scalar", ATTNGEN_ERROR_INVALID_ARGUMENT,
       [](AlibiCall& c) { c.modifier.scalars[1] = 1.0f; }},
      {"a NaN scalar", ATTNGEN_ERROR_INVALID_ARGUMENT,
       [](AlibiCall& c) { c.modifier.scalars[0] = std::nanf(""); }},
      {"out over the slopes", ATTNGEN_ERROR_ALIAS,
       [](AlibiCall& c) { c.slopes.t.data = c.out.buf.data() + 3; }},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.what);
    AlibiCall c;
    k.breaks(c);
    EXPECT_EQ(c.run(), k.want) << attngen_last_error();
    EXPECT_NE(std::strlen(attngen_last_error()), 0u);
    EXPECT_TRUE(c.out.all_poison()) << "an output was written";
  }
  // A plain call runs no modifier kernel, and a modifier call no plain one.
  AlibiCall plain;
  plain.opt.modifier = nullptr;
  ASSERT_EQ(plain.run(), ATTNGEN_OK) << attngen_last_error();
  expect_modifier_kernel(attngen_last_kernel(), "");
  AlibiCall named;
  named.opt.kernel = attngen_last_kernel();
  EXPECT_NE(named.run(), ATTNGEN_OK) << "a kernel without the modifier ran a call with it";
}

TEST(Modifier, PlanRunsEqualCalls) {
  AlibiCall c;
  attngen_attention_plan* plan = nullptr;
  ASSERT_EQ(attngen_attention_plan_create(&c.q.t, &c.k.t, &c.v.t, &c.out.t, &c.opt, &plan),
            ATTNGEN_OK)
      << attngen_last_error();
  EXPECT_STREQ(attngen_find_kernel(attngen_attention_plan_kernel(plan))->modifier, "alibi");
  std::mt19937_64 rng(fresh_seed());
  for (int run = 0; run < 3; ++run) {
    SCOPED_TRACE("run " + std::to_string(run));
    for (Storage* t : {&c.q, &c.k, &c.v, &c.slopes}) t->fill_random(rng, -1.0, 1.0);
    ASSERT_EQ(c.run(), ATTNGEN_OK) << attngen_last_error();
    const std::vector<float> want = c.out.buf;
    Storage planned_out({1, 5, 2, 16}, 0);
    attngen_attention_data d = attngen_attention_data_default();
    d.q = c.q.buf.data();
    d.k = c.k.buf.data();
    d.v = c.v.buf.data();
    d.out = planned_out.buf.data();
    d.modifier_tensors[0] = c.slopes.buf.data();
    ASSERT_EQ(attngen_attention_plan_run(plan, &d), ATTNGEN_OK) << attngen_last_error();
    EXPECT_EQ(std::memcmp(planned_out.buf.data(), want.data(), want.size() * sizeof(float)), 0);
    // The modifier's tensor is the run's data: missing is NULL, one too many is refused.
    d.modifier_tensors[0] = nullptr;
    Storage untouched({1, 5, 2, 16}, 0);
    d.out = untouched.buf.data();
    EXPECT_EQ(attngen_attention_plan_run(plan, &d), ATTNGEN_ERROR_NULL_POINTER);
    d.modifier_tensors[0] = c.slopes.buf.data();
    d.modifier_tensors[1] = c.slopes.buf.data();
    EXPECT_EQ(attngen_attention_plan_run(plan, &d), ATTNGEN_ERROR_INVALID_ARGUMENT);
    EXPECT_TRUE(untouched.all_poison());
  }
  attngen_attention_plan_destroy(plan);
  // A plan without a modifier refuses a run that gives a modifier tensor.
  c.opt.modifier = nullptr;
  ASSERT_EQ(attngen_attention_plan_create(&c.q.t, &c.k.t, &c.v.t, &c.out.t, &c.opt, &plan),
            ATTNGEN_OK);
  attngen_attention_data d = attngen_attention_data_default();
  d.q = c.q.buf.data();
  d.k = c.k.buf.data();
  d.v = c.v.buf.data();
  d.out = c.out.buf.data();
  d.modifier_tensors[2] = c.slopes.buf.data();
  EXPECT_EQ(attngen_attention_plan_run(plan, &d), ATTNGEN_ERROR_INVALID_ARGUMENT);
  attngen_attention_plan_destroy(plan);
}

}  // namespace
}  // namespace attngen::test
