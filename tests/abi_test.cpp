// The ABI rule of attngen.h ("Versions and the ABI rule"), one test per rule: the version calls
// agree with the header, every options struct's _default() sets struct_size, and a call reads an
// options struct within its struct_size: 0 or too small is a named error with nothing written, a
// larger struct whose extra bytes are 0 is accepted, a set byte past the known fields is refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "attngen/attngen.h"
#include "tests/attention_call.h"

namespace attngen::test {
namespace {

TEST(Abi, VersionAgreesWithTheHeader) {
  EXPECT_EQ(attngen_version(), ATTNGEN_VERSION);
  const std::string want = std::to_string(ATTNGEN_VERSION_MAJOR) + "." +
                           std::to_string(ATTNGEN_VERSION_MINOR) + "." +
                           std::to_string(ATTNGEN_VERSION_PATCH);
  EXPECT_EQ(std::string(attngen_version_string()), want);
}

TEST(Abi, EveryDefaultSetsStructSize) {
  EXPECT_EQ(attngen_attention_options_default().struct_size, sizeof(attngen_attention_options));
  EXPECT_EQ(attngen_mha_options_default().struct_size, sizeof(attngen_mha_options));
  EXPECT_EQ(attngen_kv_cache_options_default().struct_size, sizeof(attngen_kv_cache_options));
  EXPECT_EQ(attngen_decode_options_default().struct_size, sizeof(attngen_decode_options));
  EXPECT_EQ(attngen_mha_decode_options_default().struct_size, sizeof(attngen_mha_decode_options));
  // The plans' data structs follow the same rule.
  EXPECT_EQ(attngen_attention_data_default().struct_size, sizeof(attngen_attention_data));
  EXPECT_EQ(attngen_decode_data_default().struct_size, sizeof(attngen_decode_data));
  EXPECT_EQ(attngen_linear_data_default().struct_size, sizeof(attngen_linear_data));
  EXPECT_EQ(attngen_mha_data_default().struct_size, sizeof(attngen_mha_data));
}

class AbiOptions : public AttentionCall {};

// An options struct zero-initialised (`= {0}`) instead of taken from its _default().
TEST_F(AbiOptions, ZeroStructSizeIsRefused) {
  opt.struct_size = 0;
  expect_error(ATTNGEN_ERROR_INVALID_ARGUMENT, "options.struct_size is 0");
}

// The struct as version 0.2 first published it ended at `modifier`; `rope` and the positions came
// later (a caller built against that header passes the smaller size, and gets no rope).
constexpr size_t kFirstOptionsSize = offsetof(attngen_attention_options, rope);

TEST_F(AbiOptions, StructSizeBelowTheFirstPublishedIsRefused) {
  opt.struct_size = kFirstOptionsSize - 1;
  expect_error(ATTNGEN_ERROR_INVALID_ARGUMENT, "struct_size");
}

TEST_F(AbiOptions, FirstPublishedStructRunsWithoutTheLaterFields) {
  ASSERT_EQ(call(), ATTNGEN_OK) << attngen_last_error();
  const std::vector<float> want = out.buf;
  // The fields past the older caller's struct_size hold garbage, which must not be read.
  std::vector<float> freq(32, 1.0f);
  const int64_t half = 32;
  const attngen_tensor freq_t = attngen_tensor_contiguous(freq.data(), ATTNGEN_F32, 1, &half);
  attngen_rope rope = attngen_rope_default();
  rope.inv_freq = &freq_t;
  opt.rope = &rope;
  opt.struct_size = kFirstOptionsSize;
  ASSERT_EQ(call(), ATTNGEN_OK) << attngen_last_error();
  EXPECT_EQ(std::memcmp(want.data(), out.buf.data(), want.size() * sizeof(float)), 0);
}

TEST_F(AbiOptions, GarbageStructSizeIsRefusedWithoutReadingThatFar) {
  opt.struct_size = SIZE_MAX / 2;
  expect_error(ATTNGEN_ERROR_INVALID_ARGUMENT, "struct_size");
}

// A caller built against a later header whose struct has more fields, none of them set.
struct LaterOptions {
  attngen_attention_options known;
  uint64_t added[4];
};

TEST_F(AbiOptions, LargerStructWithUnsetNewFieldsRuns) {
  LaterOptions later{};
  later.known = opt;
  later.known.struct_size = sizeof later;
  later.known.mask = ATTNGEN_MASK_CAUSAL;
  ASSERT_EQ(attngen_attention(&q.t, &k.t, &v.t, &out.t, &later.known), ATTNGEN_OK)
      << attngen_last_error();
  const std::vector<float> first = out.buf;
  // The same call with the library's own struct gives the same output, bit for bit.
  opt.mask = ATTNGEN_MASK_CAUSAL;
  ASSERT_EQ(call(), ATTNGEN_OK) << attngen_last_error();
  EXPECT_EQ(std::memcmp(first.data(), out.buf.data(), first.size() * sizeof(float)), 0);
}

TEST_F(AbiOptions, LargerStructWithANewFieldSetIsRefused) {
  LaterOptions later{};
  later.known = opt;
  later.known.struct_size = sizeof later;
  later.added[2] = 1;  // an option this library does not know
  const std::vector<float> before = out.buf;
  EXPECT_EQ(attngen_attention(&q.t, &k.t, &v.t, &out.t, &later.known),
            ATTNGEN_ERROR_INVALID_ARGUMENT);
  const std::string message = attngen_last_error();
  EXPECT_NE(message.find("options.struct_size"), std::string::npos) << message;
  EXPECT_NE(message.find(attngen_version_string()), std::string::npos) << message;
  EXPECT_EQ(std::memcmp(before.data(), out.buf.data(), before.size() * sizeof(float)), 0);
}

// Every other options struct is read by the same rule: struct_size 0 is refused by its call.
TEST(AbiOtherOptions, ZeroStructSizeIsRefusedEverywhere) {
  attngen_kv_cache_options co = attngen_kv_cache_options_default();
  co.layers = 1;
  co.batch = 1;
  co.heads_kv = 1;
  co.head_dim_qk = 64;
  co.capacity = 16;
  size_t bytes = 0;
  attngen_kv_cache_options zero = co;
  zero.struct_size = 0;
  EXPECT_EQ(attngen_kv_cache_storage_size(&zero, &bytes), ATTNGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(bytes, 0u);
  attngen_kv_cache* cache = nullptr;
  EXPECT_EQ(attngen_kv_cache_create(&zero, &cache), ATTNGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(cache, nullptr);
  ASSERT_EQ(attngen_kv_cache_create(&co, &cache), ATTNGEN_OK) << attngen_last_error();

  std::vector<float> q(64, 0.5f), out(64, -7.0f);
  const int64_t qs[] = {1, 1, 1, 64};
  attngen_tensor tq = attngen_tensor_contiguous(q.data(), ATTNGEN_F32, 4, qs);
  attngen_tensor to = attngen_tensor_contiguous(out.data(), ATTNGEN_F32, 4, qs);
  ASSERT_EQ(attngen_kv_cache_append(cache, 0, &tq, &tq, nullptr), ATTNGEN_OK)
      << attngen_last_error();
  attngen_decode_options d = attngen_decode_options_default();
  d.struct_size = 0;
  EXPECT_EQ(attngen_decode(&tq, cache, 0, &to, &d), ATTNGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(attngen_last_error()).find("options.struct_size"), std::string::npos);
  for (float x : out) ASSERT_EQ(x, -7.0f) << "decode wrote its output on error";
  d = attngen_decode_options_default();
  EXPECT_EQ(attngen_decode(&tq, cache, 0, &to, &d), ATTNGEN_OK) << attngen_last_error();
  std::fill(out.begin(), out.end(), -7.0f);

  // The MHA calls: the struct is checked before the (here missing) weights are read.
  attngen_mha_weights w{};
  attngen_mha_options mo = attngen_mha_options_default();
  mo.num_heads = 1;
  mo.struct_size = 0;
  const int64_t xs[] = {1, 1, 64};
  attngen_tensor tx = attngen_tensor_contiguous(q.data(), ATTNGEN_F32, 3, xs);
  attngen_tensor ty = attngen_tensor_contiguous(out.data(), ATTNGEN_F32, 3, xs);
  EXPECT_EQ(attngen_mha(&tx, &w, &ty, &mo), ATTNGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(attngen_last_error()).find("options.struct_size"), std::string::npos);
  attngen_mha_decode_options mdo = attngen_mha_decode_options_default();
  mdo.num_heads = 1;
  mdo.struct_size = 0;
  EXPECT_EQ(attngen_mha_decode(&tx, &w, cache, 0, &ty, &mdo), ATTNGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(attngen_last_error()).find("options.struct_size"), std::string::npos);
  for (float x : out) ASSERT_EQ(x, -7.0f) << "an MHA call wrote its output on error";
  attngen_kv_cache_destroy(cache);
}

// A plan's data struct is read by the same rule: struct_size 0 is refused, a larger struct whose
// extra bytes are 0 runs, one with an extra byte set is refused; refused runs write nothing.
template <typename Data>
struct LaterData {
  Data known;
  uint64_t added[2];
};

template <typename Data, typename Run>
void expect_data_read_by_the_rule(const Data& data, Run run, std::vector<float>& out) {
  std::fill(out.begin(), out.end(), -7.0f);
  Data zero = data;
  zero.struct_size = 0;
  EXPECT_EQ(run(&zero), ATTNGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(attngen_last_error()).find("data.struct_size"), std::string::npos)
      << attngen_last_error();
  LaterData<Data> later{};
  later.known = data;
  later.known.struct_size = sizeof later;
  later.added[1] = 1;  // a field this library does not know
  EXPECT_EQ(run(&later.known), ATTNGEN_ERROR_INVALID_ARGUMENT);
  for (float x : out) ASSERT_EQ(x, -7.0f) << "a refused run wrote its output";
  later.added[1] = 0;
  EXPECT_EQ(run(&later.known), ATTNGEN_OK) << attngen_last_error();
  EXPECT_NE(out[0], -7.0f);
}

TEST(AbiPlanData, LinearAndMhaDataAreReadByTheRule) {
  std::vector<float> x(2 * 64, 0.25f), w(3 * 64 * 64, 0.01f), out(2 * 64);
  const int64_t xs[] = {1, 2, 64}, ws[] = {64, 64}, in_ws[] = {3 * 64, 64};
  attngen_tensor tx = attngen_tensor_contiguous(x.data(), ATTNGEN_F32, 3, xs);
  attngen_tensor ty = attngen_tensor_contiguous(out.data(), ATTNGEN_F32, 3, xs);
  attngen_tensor tw = attngen_tensor_contiguous(w.data(), ATTNGEN_F32, 2, ws);
  attngen_tensor tiw = attngen_tensor_contiguous(w.data(), ATTNGEN_F32, 2, in_ws);

  attngen_linear_plan* lp = nullptr;
  ASSERT_EQ(attngen_linear_plan_create(&tx, &tw, nullptr, &ty, &lp), ATTNGEN_OK)
      << attngen_last_error();
  attngen_linear_data ld = attngen_linear_data_default();
  ld.x = x.data();
  ld.w = w.data();
  ld.y = out.data();
  expect_data_read_by_the_rule(
      ld, [&](const attngen_linear_data* d) { return attngen_linear_plan_run(lp, d); }, out);
  attngen_linear_plan_destroy(lp);

  attngen_mha_weights weights{&tiw, nullptr, &tw, nullptr};
  attngen_mha_options opt = attngen_mha_options_default();
  opt.num_heads = 1;
  attngen_mha_plan* mp = nullptr;
  ASSERT_EQ(attngen_mha_plan_create(&tx, &weights, &ty, &opt, &mp), ATTNGEN_OK)
      << attngen_last_error();
  attngen_mha_data md = attngen_mha_data_default();
  md.x = x.data();
  md.y = out.data();
  md.in_proj_weight = w.data();
  md.out_proj_weight = w.data();
  expect_data_read_by_the_rule(
      md, [&](const attngen_mha_data* d) { return attngen_mha_plan_run(mp, d); }, out);
  attngen_mha_plan_destroy(mp);
}

}  // namespace
}  // namespace attngen::test
