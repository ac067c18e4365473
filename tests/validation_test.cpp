// Every validation path: bad input returns the named status and a message naming the
// argument, writes nothing to the output, and aborts nothing.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "HalideRuntime.h"
#include "attngen/attngen.h"
#include "attngen/kernel.h"
#include "core/cpu_features.h"
#include "core/targets.h"
#include "tests/attention_call.h"
#include "tests/tensor.h"

namespace attngen::test {
namespace {

class AttentionValidation : public AttentionCall {};

TEST_F(AttentionValidation, ValidCallSucceeds) {
  ASSERT_EQ(call(), ATTNGEN_OK) << attngen_last_error();
  EXPECT_STREQ(attngen_last_error(), "");
  EXPECT_STRNE(attngen_last_kernel(), "");
}

TEST_F(AttentionValidation, NullPointers) {
  EXPECT_EQ(attngen_attention(nullptr, &k.t, &v.t, &out.t, &opt), ATTNGEN_ERROR_NULL_POINTER);
  EXPECT_NE(std::string(attngen_last_error()).find("q is NULL"), std::string::npos);
  EXPECT_EQ(attngen_attention(&q.t, &k.t, &v.t, nullptr, &opt), ATTNGEN_ERROR_NULL_POINTER);
  EXPECT_NE(std::string(attngen_last_error()).find("out is NULL"), std::string::npos);
  v.t.data = nullptr;
  expect_error(ATTNGEN_ERROR_NULL_POINTER, "v.data");
}

TEST_F(AttentionValidation, Dtype) {
  k.t.dtype = ATTNGEN_F16;
  expect_error(ATTNGEN_ERROR_DTYPE, "k has dtype F16, expected F32");
}

TEST_F(AttentionValidation, Rank) {
  q.t.rank = 3;
  expect_error(ATTNGEN_ERROR_RANK, "q has rank 3");
}

TEST_F(AttentionValidation, ShapeMismatches) {
  const struct {
    attngen_tensor* t;
    int dim;
    const char* needle;
  } cases[] = {{&k.t, 0, "k.shape[0] (B)"},      {&k.t, 3, "k.shape[3] (Dqk)"},
               {&v.t, 1, "v.shape[1] (Skv)"},    {&v.t, 2, "v.shape[2] (Hkv)"},
               {&out.t, 1, "out.shape[1] (Sq)"}, {&out.t, 2, "out.shape[2] (Hq)"},
               {&out.t, 3, "out.shape[3] (Dv)"}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.needle);
    const int64_t saved = c.t->shape[c.dim];
    c.t->shape[c.dim] = saved - 1;  // stays within the allocation
    expect_error(ATTNGEN_ERROR_SHAPE, c.needle);
    c.t->shape[c.dim] = saved;
  }
}

TEST_F(AttentionValidation, HeadsNotAMultiple) {
  k.t.shape[2] = v.t.shape[2] = 3;  // 4 query heads over 3 kv heads
  expect_error(ATTNGEN_ERROR_HEADS, "multiple of Hkv");
}

TEST_F(AttentionValidation, EmptyAndNegativeSizes) {
  q.t.shape[1] = 0;
  expect_error(ATTNGEN_ERROR_EMPTY, "q.shape[1] (Sq) is 0");
  q.t.shape[1] = -5;
  expect_error(ATTNGEN_ERROR_SHAPE, "negative");
}

TEST_F(AttentionValidation, TooLarge) {
  const int64_t saved = k.t.strides[0];
  k.t.strides[0] = int64_t{1} << 33;
  expect_error(ATTNGEN_ERROR_TOO_LARGE, "k.strides[0]");
  k.t.strides[0] = int64_t{1} << 30;  // fits a stride, but k would span 2^32 bytes
  expect_error(ATTNGEN_ERROR_TOO_LARGE, "k spans");
  k.t.strides[0] = saved;
  q.t.shape[0] = int64_t{1} << 31;
  expect_error(ATTNGEN_ERROR_TOO_LARGE, "q.shape[0]");
}

TEST_F(AttentionValidation, Strides) {
  q.t.strides[3] = 2;
  expect_error(ATTNGEN_ERROR_STRIDE, "innermost");
  q.t.strides[3] = 1;
  k.t.strides[1] = -64;
  expect_error(ATTNGEN_ERROR_STRIDE, "negative");
  k.t.strides[1] = 128;
  out.t.strides[2] = 0;  // every head would write the same elements
  expect_error(ATTNGEN_ERROR_STRIDE, "overlap");
}

TEST_F(AttentionValidation, OutputAliasesInput) {
  attngen_tensor alias = out.t;
  alias.data = q.buf.data();
  EXPECT_EQ(attngen_attention(&q.t, &k.t, &v.t, &alias, &opt), ATTNGEN_ERROR_ALIAS);
  EXPECT_NE(std::string(attngen_last_error()).find("out overlaps q"), std::string::npos);
}

TEST_F(AttentionValidation, Scalars) {
  opt.scale = std::numeric_limits<float>::quiet_NaN();
  expect_error(ATTNGEN_ERROR_INVALID_ARGUMENT, "scale");
  opt.scale = 0.0f;
  opt.softcap = -1.0f;
  expect_error(ATTNGEN_ERROR_INVALID_ARGUMENT, "softcap");
  opt.softcap = 0.0f;
  opt.mask = static_cast<attngen_mask_kind>(7);
  expect_error(ATTNGEN_ERROR_INVALID_ARGUMENT, "mask is 7");
  opt.mask = ATTNGEN_MASK_NONE;
  opt.alignment = static_cast<attngen_alignment>(9);
  expect_error(ATTNGEN_ERROR_INVALID_ARGUMENT, "alignment is 9");
}

TEST_F(AttentionValidation, KvLen) {
  std::vector<int32_t> lens = {7, 8};  // 8 > Skv
  int64_t n = 2;
  attngen_tensor t = attngen_tensor_contiguous(lens.data(), ATTNGEN_I32, 1, &n);
  opt.kv_len = &t;
  expect_error(ATTNGEN_ERROR_INVALID_ARGUMENT, "kv_len[1] is 8");
  lens[1] = -1;
  expect_error(ATTNGEN_ERROR_INVALID_ARGUMENT, "kv_len[1] is -1");
  lens[1] = 3;
  n = 1;
  t = attngen_tensor_contiguous(lens.data(), ATTNGEN_I32, 1, &n);
  expect_error(ATTNGEN_ERROR_SHAPE, "kv_len.shape[0] (B)");
  n = 2;
  t = attngen_tensor_contiguous(lens.data(), ATTNGEN_F32, 1, &n);
  expect_error(ATTNGEN_ERROR_DTYPE, "kv_len has dtype F32");
}

TEST_F(AttentionValidation, MaskTensor) {
  std::vector<uint8_t> bytes(2 * 4 * 5 * 7, 1);
  std::vector<int32_t> ints(bytes.size(), 1);
  const int64_t wrong[] = {2, 4, 3, 7};  // Sq is 5
  attngen_tensor m = attngen_tensor_contiguous(bytes.data(), ATTNGEN_BOOL, 4, wrong);
  opt.mask_tensor = &m;
  expect_error(ATTNGEN_ERROR_MASK, "mask_tensor.shape[2] is 3, expected 5 (Sq) or 1");
  const int64_t good[] = {2, 4, 5, 7};
  m = attngen_tensor_contiguous(ints.data(), ATTNGEN_I32, 4, good);
  expect_error(ATTNGEN_ERROR_MASK, "mask_tensor has dtype I32");
  const int64_t rank5[] = {1, 2, 4, 5, 7};
  m = attngen_tensor_contiguous(bytes.data(), ATTNGEN_BOOL, 5, rank5);
  expect_error(ATTNGEN_ERROR_MASK, "rank 5");
}

TEST_F(AttentionValidation, Pattern) {
  opt.pattern.kind = static_cast<attngen_pattern_kind>(9);
  expect_error(ATTNGEN_ERROR_INVALID_ARGUMENT, "pattern: kind is 9");
  opt.pattern = attngen_pattern{};
  opt.pattern.kind = ATTNGEN_PATTERN_WINDOW;
  opt.pattern.window_left = opt.pattern.window_right = -1;
  expect_error(ATTNGEN_ERROR_INVALID_ARGUMENT, "not both -1");
  opt.pattern.window_left = -2;
  opt.pattern.window_right = 3;
  expect_error(ATTNGEN_ERROR_INVALID_ARGUMENT, "window_left -2");
  opt.pattern = attngen_pattern{};
  opt.pattern.kind = ATTNGEN_PATTERN_STRIDED;
  expect_error(ATTNGEN_ERROR_INVALID_ARGUMENT, "stride is 0");
  opt.pattern = attngen_pattern{};
  opt.pattern.kind = ATTNGEN_PATTERN_GLOBAL_LOCAL;
  opt.pattern.local = -1;
  expect_error(ATTNGEN_ERROR_INVALID_ARGUMENT, "local -1");
  // Block-sparse: the layout is required and must be [ceil(Sq / block), ceil(Skv / block)].
  opt.pattern = attngen_pattern{};
  opt.pattern.kind = ATTNGEN_PATTERN_BLOCK_SPARSE;
  opt.pattern.block = 64;
  expect_error(ATTNGEN_ERROR_NULL_POINTER, "pattern.layout is NULL");
  std::vector<uint8_t> layout(4, 1);
  const int64_t wrong[] = {2, 2};  // Sq = 5, Skv = 7 with block 64: [1, 1]
  attngen_tensor l = attngen_tensor_contiguous(layout.data(), ATTNGEN_BOOL, 2, wrong);
  opt.pattern.layout = &l;
  expect_error(ATTNGEN_ERROR_SHAPE, "pattern.layout.shape[0] (Sq / block) is 2");
  const int64_t right[] = {1, 1};
  l = attngen_tensor_contiguous(layout.data(), ATTNGEN_F32, 2, right);
  expect_error(ATTNGEN_ERROR_DTYPE, "pattern.layout has dtype F32");
  // Valid parameters no specialised kernel was built for: a generic pattern kernel runs them,
  // with the weights output too.
  opt.pattern = attngen_pattern_local(5);
  Storage weights;
  weights.init({2, 4, 5, 7}, 0);
  opt.weights = &weights.t;
  EXPECT_EQ(call(), ATTNGEN_OK) << attngen_last_error();
  const attngen_kernel_info* ran = attngen_find_kernel(attngen_last_kernel());
  ASSERT_NE(ran, nullptr);
  EXPECT_TRUE(ran->generic && ran->weights) << ran->name;
}

TEST_F(AttentionValidation, ExtraOutputs) {
  Storage weights, lse;
  weights.init({2, 4, 5, 6}, 0);  // Skv is 7
  opt.weights = &weights.t;
  expect_error(ATTNGEN_ERROR_SHAPE, "weights.shape[3] (Skv) is 6, expected 7");
  for (float f : weights.buf) ASSERT_TRUE(is_poison(f));
  weights.init({2, 4, 5, 7}, 0);
  lse.init({2, 4, 6}, 0);
  opt.lse = &lse.t;
  expect_error(ATTNGEN_ERROR_SHAPE, "lse.shape[2] (Sq) is 6, expected 5");
  lse.init({2, 4, 5}, 0);
  attngen_tensor aliased = weights.t;
  aliased.data = out.buf.data();
  opt.weights = &aliased;
  expect_error(ATTNGEN_ERROR_ALIAS, "overlaps");
  // With both outputs valid, the generated d64 weights + lse kernel runs.
  opt.weights = &weights.t;
  ASSERT_EQ(call(), ATTNGEN_OK) << attngen_last_error();
  EXPECT_NE(std::string(attngen_last_kernel()).find("_p_lse"), std::string::npos);
}

TEST_F(AttentionValidation, NoKernelForConfiguration) {
  // Past the largest generic kernel's head dims (512): no kernel can run it.
  std::mt19937_64 rng(fresh_seed());
  q.init({2, 5, 4, 600}, 0);
  k.init({2, 7, 2, 600}, 0);
  q.fill_random(rng, -1, 1);
  k.fill_random(rng, -1, 1);
  expect_error(ATTNGEN_ERROR_NO_KERNEL, "head dim 600");
}

TEST_F(AttentionValidation, NamedKernel) {
  opt.kernel = "no_such_kernel";
  expect_error(ATTNGEN_ERROR_NO_KERNEL, "no kernel named 'no_such_kernel'");
  // A kernel that exists but was generated for another configuration.
  for (size_t i = 0; i < attngen_kernel_count(); ++i) {
    const attngen_kernel_info* k = attngen_kernel_at(i);
    if (k->op == ATTNGEN_OP_ATTENTION && k->mask == ATTNGEN_MASK_CAUSAL) {
      opt.kernel = k->name;
      expect_error(ATTNGEN_ERROR_NO_KERNEL, "does not fit");
      return;
    }
  }
  ADD_FAILURE() << "no causal attention kernel in the variant list";
}

// Kernels registered at run time, to reach the paths no built-in kernel takes.
int g_fake_runs = 0;
int fake_run(void*, const attngen_kernel_args*) { return ++g_fake_runs, 0; }
int failing_run(void* uc, const attngen_kernel_args*) {
  halide_error(uc, "simulated failure inside the kernel\n");
  return -1;
}

// A descriptor written by hand, as a user's own build would: dense D64 f32 attention.
attngen_kernel_info hand_descriptor(const char* name, const char* isa,
                                    int (*run)(void*, const attngen_kernel_args*)) {
  attngen_kernel_info info{};
  info.struct_size = sizeof(attngen_kernel_info);
  info.abi_version = ATTNGEN_KERNEL_ABI_VERSION;
  info.name = name;
  info.op = ATTNGEN_OP_ATTENTION;
  info.isa = isa;
  info.halide_target = "other";
  info.dtypes = {ATTNGEN_F32, ATTNGEN_F32, ATTNGEN_F32, ATTNGEN_F32, ATTNGEN_F32, ATTNGEN_F32};
  info.head_dim_qk = info.head_dim_v = 64;
  info.run = run;
  return info;
}

TEST_F(AttentionValidation, UnsupportedTarget) {
#if defined(__aarch64__)
  const char* foreign = "avx512";
#else
  const char* foreign = "neon";
#endif
  static attngen_kernel_info info = hand_descriptor("test_foreign_isa", foreign, fake_run);
  if (attngen_find_kernel(info.name) == nullptr) {
    ASSERT_EQ(attngen_register_kernel(&info), ATTNGEN_OK);
  }
  opt.kernel = info.name;
  expect_error(ATTNGEN_ERROR_UNSUPPORTED_TARGET, "lacks");
  EXPECT_EQ(g_fake_runs, 0) << "an unsupported kernel must never run";
  // Registering the same name twice is refused.
  EXPECT_EQ(attngen_register_kernel(&info), ATTNGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(attngen_register_kernel(nullptr), ATTNGEN_ERROR_NULL_POINTER);
}

// A kernel registered after a call chose another takes the same call over: the runtime remembers
// its last choices per thread (registry.cpp), and a registration makes them stale. The registered
// kernel is the chosen one's descriptor under another name, running through it (so that any later
// test of this process still gets right results).
const attngen_kernel_info* g_chosen = nullptr;
int g_forwarded_runs = 0;
int forwarding_run(void* uc, const attngen_kernel_args* args) {
  ++g_forwarded_runs;
  return g_chosen->run(uc, args);
}

TEST_F(AttentionValidation, RegistrationSupersedesRememberedChoice) {
  ASSERT_EQ(call(), ATTNGEN_OK) << attngen_last_error();
  ASSERT_EQ(call(), ATTNGEN_OK) << attngen_last_error();  // the second served from memory
  const std::string first = attngen_last_kernel();
  g_chosen = attngen_find_kernel(first.c_str());
  ASSERT_NE(g_chosen, nullptr) << first;
  static attngen_kernel_info twin;
  static const std::string name = "test_twin_of_" + first;
  if (attngen_find_kernel(name.c_str()) == nullptr) {
    twin = *g_chosen;
    twin.name = name.c_str();
    twin.run = forwarding_run;
    ASSERT_EQ(attngen_register_kernel(&twin), ATTNGEN_OK) << attngen_last_error();
  }
  const int runs = g_forwarded_runs;
  ASSERT_EQ(call(), ATTNGEN_OK) << attngen_last_error();
  EXPECT_STREQ(attngen_last_kernel(), name.c_str())
      << "a registered kernel that fits as well, scanned first, was not chosen";
  EXPECT_EQ(g_forwarded_runs, runs + 1);
}

// Dispatch and attngen_set_isa() never take a row of another architecture's (on 32-bit ARM the
// aarch64 rows neon and neonfp16 are refused like the x86 ones), and every built-in kernel this
// machine runs is of its architecture.
TEST(TargetRows, OnlyThisArchitecturesRowsRun) {
#if defined(__x86_64__)
  const char* arch = "x86_64";
#elif defined(__aarch64__)
  const char* arch = "aarch64";
#elif defined(__arm__)
  const char* arch = "armv7";
#else
  GTEST_SKIP() << "the target table has no row for this architecture";
#endif
  for (const TargetRow& t : kTargets) {
    if (t.isa == Isa::kGeneric || !std::strcmp(t.arch, arch)) continue;
    EXPECT_EQ(attngen_set_isa(t.name), ATTNGEN_ERROR_UNSUPPORTED_TARGET) << t.name;
  }
  ASSERT_EQ(attngen_set_isa(nullptr), ATTNGEN_OK);
  const TargetRow* preferred = find_target(attngen_isa());
  ASSERT_NE(preferred, nullptr) << attngen_isa();
  if (preferred->isa != Isa::kGeneric) {
    EXPECT_STREQ(preferred->arch, arch) << preferred->name;
  }
#if defined(__arm__)
  // NEON (HWCAP_NEON) where the CPU has it, as qemu-arm's default CPU does.
  if (cpu_feature("neon")) {
    EXPECT_STREQ(attngen_isa(), "neon32");
  }
#endif
  for (size_t i = 0; i < attngen_kernel_count(); ++i) {
    const attngen_kernel_info* k = attngen_kernel_at(i);
    const TargetRow* row = find_target(k->isa);
    if (row == nullptr || row->isa == Isa::kGeneric || !attngen_kernel_supported(k)) continue;
    EXPECT_STREQ(row->arch, arch) << k->name;
  }
}

// A descriptor of another ABI version, or of an older, smaller struct, is refused by name and
// never registered: the runtime would misread its fields.
TEST_F(AttentionValidation, IncompatibleDescriptorIsRefused) {
  static attngen_kernel_info old_version = hand_descriptor("test_abi_v1", "generic", fake_run);
  old_version.abi_version = ATTNGEN_KERNEL_ABI_VERSION - 1;
  EXPECT_EQ(attngen_register_kernel(&old_version), ATTNGEN_ERROR_ABI);
  EXPECT_NE(std::string(attngen_last_error()).find("regenerate"), std::string::npos)
      << attngen_last_error();
  static attngen_kernel_info small = hand_descriptor("test_abi_small", "generic", fake_run);
  small.struct_size = sizeof(attngen_kernel_info) - 8;
  EXPECT_EQ(attngen_register_kernel(&small), ATTNGEN_ERROR_ABI);
  EXPECT_EQ(attngen_find_kernel("test_abi_v1"), nullptr);
  EXPECT_EQ(attngen_find_kernel("test_abi_small"), nullptr);
  EXPECT_EQ(g_fake_runs, 0);
}

// A linear or mha descriptor must say how its packed weights are laid out: panels of at least
// one row (the runtime divides by it).
TEST_F(AttentionValidation, LayerDescriptorWithoutWeightPanelIsRefused) {
  for (const attngen_op op : {ATTNGEN_OP_LINEAR, ATTNGEN_OP_MHA}) {
    static attngen_kernel_info info[2];
    attngen_kernel_info& k = info[op == ATTNGEN_OP_MHA];
    k = hand_descriptor(op == ATTNGEN_OP_MHA ? "test_mha_no_panel" : "test_linear_no_panel",
                        "generic", fake_run);
    k.op = op;
    k.weight_panel = 0;
    EXPECT_EQ(attngen_register_kernel(&k), ATTNGEN_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(attngen_last_error()).find("weight_panel"), std::string::npos)
        << attngen_last_error();
    EXPECT_EQ(attngen_find_kernel(k.name), nullptr);
  }
  EXPECT_EQ(g_fake_runs, 0);
}

TEST_F(AttentionValidation, KernelFailureIsCapturedNotPrinted) {
  static attngen_kernel_info info = hand_descriptor("test_failing_kernel", "generic", failing_run);
  if (attngen_find_kernel(info.name) == nullptr) {
    ASSERT_EQ(attngen_register_kernel(&info), ATTNGEN_OK);
  }
  opt.kernel = info.name;
  testing::internal::CaptureStderr();
  EXPECT_EQ(call(), ATTNGEN_ERROR_KERNEL);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  EXPECT_NE(std::string(attngen_last_error()).find("simulated failure"), std::string::npos)
      << attngen_last_error();
}

TEST_F(AttentionValidation, RealHalideErrorIsCaptured) {
  // A descriptor that lies about its head dim: validation passes, and the generated kernel's
  // own checks reject the buffers. The runtime must report, not print or abort.
  const attngen_kernel_info* real = nullptr;
  for (size_t i = 0; i < attngen_kernel_count(); ++i) {
    const attngen_kernel_info* k = attngen_kernel_at(i);
    if (k->op == ATTNGEN_OP_ATTENTION && k->dtypes.q == ATTNGEN_F32 && k->head_dim_qk == 64 &&
        k->head_dim_v == 64 && k->mask == ATTNGEN_MASK_NONE &&
        k->mask_tensor == ATTNGEN_MASK_TENSOR_NONE && !k->softcap &&
        k->pattern.kind == ATTNGEN_PATTERN_NONE && !k->weights && !k->lse && !k->generic &&
        k->dtypes.q == ATTNGEN_F32 && attngen_kernel_supported(k)) {
      real = k;
    }
  }
  ASSERT_NE(real, nullptr);
  static attngen_kernel_info liar;
  liar = *real;
  liar.name = "test_lying_kernel";
  liar.head_dim_qk = liar.head_dim_v = 32;
  if (attngen_find_kernel(liar.name) == nullptr) {
    ASSERT_EQ(attngen_register_kernel(&liar), ATTNGEN_OK);
  }
  q.t.shape[3] = k.t.shape[3] = v.t.shape[3] = out.t.shape[3] = 32;
  opt.kernel = liar.name;
  testing::internal::CaptureStderr();
  expect_error(ATTNGEN_ERROR_KERNEL, "test_lying_kernel");
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
}

TEST(LinearValidation, Shapes) {
  Storage x({1, 3, 8}, 0), w({5, 9}, 0), y({1, 3, 5}, 0);
  EXPECT_EQ(attngen_linear(&x.t, &w.t, nullptr, &y.t), ATTNGEN_ERROR_SHAPE);
  EXPECT_NE(std::string(attngen_last_error()).find("w.shape[1] (E)"), std::string::npos);
  for (float f : y.buf) EXPECT_TRUE(is_poison(f));
  Storage bias({4}, 0), w2({5, 8}, 0);
  EXPECT_EQ(attngen_linear(&x.t, &w2.t, &bias.t, &y.t), ATTNGEN_ERROR_SHAPE);
  EXPECT_NE(std::string(attngen_last_error()).find("bias.shape[0] (N)"), std::string::npos);
  EXPECT_EQ(attngen_linear(&x.t, nullptr, nullptr, &y.t), ATTNGEN_ERROR_NULL_POINTER);
}

TEST(MhaValidation, HeadsAndWeights) {
  Storage x({1, 4, 128}, 0), in_w({384, 128}, 0), out_w({128, 128}, 0), y({1, 4, 128}, 0);
  std::mt19937_64 rng(fresh_seed());
  x.fill_random(rng, -1, 1);
  attngen_mha_weights w{&in_w.t, nullptr, &out_w.t, nullptr};
  attngen_mha_options opt = attngen_mha_options_default();
  opt.num_heads = 3;  // 128 % 3 != 0
  EXPECT_EQ(attngen_mha(&x.t, &w, &y.t, &opt), ATTNGEN_ERROR_HEADS);
  EXPECT_NE(std::string(attngen_last_error()).find("num_heads is 3"), std::string::npos);
  opt.num_heads = 1;  // head dim 520: no MHA kernel is generated past 512 dims a head
  Storage wide_x({1, 4, 520}, 0), wide_in({1560, 520}, 0), wide_out({520, 520}, 0),
      wide_y({1, 4, 520}, 0);
  wide_x.fill_random(rng, -1, 1);
  attngen_mha_weights wide{&wide_in.t, nullptr, &wide_out.t, nullptr};
  EXPECT_EQ(attngen_mha(&wide_x.t, &wide, &wide_y.t, &opt), ATTNGEN_ERROR_NO_KERNEL);
  opt.num_heads = 2;
  Storage bad_w({383, 128}, 0);
  w.in_proj_weight = &bad_w.t;
  EXPECT_EQ(attngen_mha(&x.t, &w, &y.t, &opt), ATTNGEN_ERROR_SHAPE);
  EXPECT_NE(std::string(attngen_last_error()).find("in_proj_weight.shape[0] (3E)"),
            std::string::npos);
  EXPECT_EQ(attngen_mha(&x.t, nullptr, &y.t, &opt), ATTNGEN_ERROR_NULL_POINTER);
  EXPECT_EQ(attngen_mha(&x.t, &w, &y.t, nullptr), ATTNGEN_ERROR_NULL_POINTER);
  for (float f : y.buf) EXPECT_TRUE(is_poison(f));
}

// Element types: q, k and v share one of F32, F16, BF16, and out has theirs or F32; a linear or
// mha call has one dtype throughout. Anything else is ATTNGEN_ERROR_DTYPE naming the tensor, its
// dtype and what was expected, with nothing written.
class DtypeValidation : public ::testing::Test {
 protected:
  // An attention call of these dtypes fails with ATTNGEN_ERROR_DTYPE and `needle`; out, in its
  // own dtype, still holds poison.
  void expect_attention_error(attngen_dtype dq, attngen_dtype dk, attngen_dtype dv,
                              attngen_dtype dout, const std::string& needle) {
    SCOPED_TRACE(needle);
    AnyTensor q = input(dq, {2, 5, 4, 64}), k = input(dk, {2, 7, 2, 64}),
              v = input(dv, {2, 7, 2, 64}), out(dout, {2, 5, 4, 64}, 0);
    const attngen_status st = attngen_attention(&q.t(), &k.t(), &v.t(), &out.t(), nullptr);
    EXPECT_EQ(st, ATTNGEN_ERROR_DTYPE) << attngen_status_name(st) << ": " << attngen_last_error();
    EXPECT_NE(std::string(attngen_last_error()).find(needle), std::string::npos)
        << "message '" << attngen_last_error() << "' does not mention '" << needle << "'";
    EXPECT_TRUE(out.all_poison()) << "output written on error";
  }

  // A linear call with x, w, bias and y of these dtypes, likewise.
  void expect_linear_error(attngen_dtype dx, attngen_dtype dw, attngen_dtype db, attngen_dtype dy,
                           const std::string& needle) {
    SCOPED_TRACE(needle);
    AnyTensor x = input(dx, {2, 3, 8}), w = input(dw, {5, 8}), bias = input(db, {5}),
              y(dy, {2, 3, 5}, 0);
    const attngen_status st = attngen_linear(&x.t(), &w.t(), &bias.t(), &y.t());
    EXPECT_EQ(st, ATTNGEN_ERROR_DTYPE) << attngen_status_name(st) << ": " << attngen_last_error();
    EXPECT_NE(std::string(attngen_last_error()).find(needle), std::string::npos)
        << "message '" << attngen_last_error() << "' does not mention '" << needle << "'";
    EXPECT_TRUE(y.all_poison()) << "output written on error";
  }

  // Random input of this dtype; of an integer dtype, F32 storage described as that dtype (its
  // elements are no wider).
  AnyTensor input(attngen_dtype dtype, std::vector<int64_t> shape) {
    const bool floating = dtype == ATTNGEN_F32 || dtype == ATTNGEN_F16 || dtype == ATTNGEN_BF16;
    AnyTensor t(floating ? dtype : ATTNGEN_F32, std::move(shape), 0);
    t.fill_random(rng, -1, 1);
    t.t().dtype = dtype;
    return t;
  }

  std::mt19937_64 rng{fresh_seed()};
};

TEST_F(DtypeValidation, Attention) {
  const attngen_dtype f32 = ATTNGEN_F32, f16 = ATTNGEN_F16, bf16 = ATTNGEN_BF16;
  expect_attention_error(f16, bf16, f16, f16, "k has dtype BF16, expected F16 (the dtype of q)");
  expect_attention_error(bf16, bf16, f16, bf16, "v has dtype F16, expected BF16 (the dtype of q)");
  expect_attention_error(f16, f16, f32, f16, "v has dtype F32, expected F16");
  expect_attention_error(f16, f16, f16, bf16,
                         "out has dtype BF16, expected F16 (the dtype of q) or F32");
  expect_attention_error(f32, f32, f32, f16, "out has dtype F16, expected F32 (the dtype of q)");
  expect_attention_error(ATTNGEN_I8, f32, f32, f32, "q has dtype I8, expected F32, F16 or BF16");
  expect_attention_error(f32, f16, f32, f32, "k has dtype F16, expected F32");
}

TEST_F(DtypeValidation, Linear) {
  const attngen_dtype f32 = ATTNGEN_F32, f16 = ATTNGEN_F16, bf16 = ATTNGEN_BF16;
  expect_linear_error(f16, f32, f16, f16, "w has dtype F32, expected F16 (the dtype of x)");
  expect_linear_error(bf16, bf16, f32, bf16, "bias has dtype F32, expected BF16 (the dtype of x)");
  expect_linear_error(f16, f16, f16, f32, "y has dtype F32, expected F16 (the dtype of x)");
  expect_linear_error(f32, f32, f32, bf16, "y has dtype BF16, expected F32 (the dtype of x)");
  expect_linear_error(ATTNGEN_I32, f32, f32, f32, "x has dtype I32, expected F32, F16 or BF16");
}

TEST_F(DtypeValidation, Mha) {
  const int64_t e = 64;
  AnyTensor x(ATTNGEN_F16, {1, 4, e}, 0), in_w(ATTNGEN_F16, {3 * e, e}, 0),
      in_b(ATTNGEN_F16, {3 * e}, 0), out_w(ATTNGEN_F16, {e, e}, 0), out_b(ATTNGEN_F16, {e}, 0),
      y(ATTNGEN_F16, {1, 4, e}, 0);
  for (AnyTensor* t : {&x, &in_w, &in_b, &out_w, &out_b}) t->fill_random(rng, -0.1, 0.1);
  attngen_mha_weights w{&in_w.t(), &in_b.t(), &out_w.t(), &out_b.t()};
  attngen_mha_options opt = attngen_mha_options_default();
  opt.num_heads = 1;
  const struct {
    AnyTensor* t;
    attngen_dtype dtype;
    const char* needle;
  } cases[] = {
      {&in_w, ATTNGEN_BF16, "in_proj_weight has dtype BF16, expected F16 (the dtype of x)"},
      {&in_b, ATTNGEN_F32, "in_proj_bias has dtype F32, expected F16"},
      {&out_w, ATTNGEN_F32, "out_proj_weight has dtype F32, expected F16"},
      {&out_b, ATTNGEN_BF16, "out_proj_bias has dtype BF16, expected F16"},
      {&y, ATTNGEN_F32, "y has dtype F32, expected F16 (the dtype of x)"},
      {&x, ATTNGEN_I8, "x has dtype I8, expected F32, F16 or BF16"}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.needle);
    const attngen_dtype saved = c.t->t().dtype;
    c.t->t().dtype = c.dtype;  // refused before anything reads it
    EXPECT_EQ(attngen_mha(&x.t(), &w, &y.t(), &opt), ATTNGEN_ERROR_DTYPE) << attngen_last_error();
    EXPECT_NE(std::string(attngen_last_error()).find(c.needle), std::string::npos)
        << attngen_last_error();
    c.t->t().dtype = saved;
    EXPECT_TRUE(y.all_poison()) << "output written on error";
  }
  // The same layer in one dtype runs.
  EXPECT_EQ(attngen_mha(&x.t(), &w, &y.t(), &opt), ATTNGEN_OK) << attngen_last_error();
  EXPECT_EQ(y.gaps_written(), 0);
}

TEST(Api, StatusNamesAndThreads) {
  EXPECT_STREQ(attngen_status_name(ATTNGEN_ERROR_SHAPE), "ATTNGEN_ERROR_SHAPE");
  EXPECT_STREQ(attngen_status_name(static_cast<attngen_status>(999)), "ATTNGEN_ERROR_UNKNOWN");
  EXPECT_EQ(attngen_set_num_threads(-1), ATTNGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(attngen_set_num_threads(0), ATTNGEN_OK);
}

}  // namespace
}  // namespace attngen::test
