// Packed sequences of different lengths (attngen.h, "Packed sequences"): attngen_attention_varlen()
// against the float64 reference of each sequence on its own (causal bottom-right per sequence,
// grouped-query heads, patterns, a rope with positions from 0 in each sequence, f16, a generic head
// dim), sequences without queries or keys, strided packed tensors; its validation (named errors,
// nothing written); its workspace.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "attngen/attngen.h"
#include "tests/plain_rope.h"
#include "tests/tensor.h"

namespace attngen::test {
namespace {

size_t at(int64_t i) { return static_cast<size_t>(i); }

// Offsets of packed sequences of these lengths: cu[0] = 0, cu[i + 1] = cu[i] + lengths[i].
std::vector<int32_t> offsets(const std::vector<int32_t>& lengths) {
  std::vector<int32_t> cu{0};
  for (int32_t n : lengths) cu.push_back(cu.back() + n);
  return cu;
}

struct Varlen {
  std::vector<int32_t> q_lengths, k_lengths;  // k_lengths empty: self-attention (cu_seqlens_k NULL)
  int64_t heads_q = 8, heads_kv = 2, dim = 64, dim_v = 64, pad = 0;
  attngen_dtype dtype = ATTNGEN_F32;
  bool causal = true, rope = false;
  attngen_pattern pattern{};
  float softcap = 0.0f;

  // The packed call into a poisoned output, each sequence against the reference of its rows; the
  // rows of a sequence without keys are zeros; the output's gaps untouched.
  void Test() const {
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed) + " " + attngen::dtype_row(dtype)->name +
                 (causal ? " causal" : "") + (rope ? " rope" : ""));
    std::mt19937_64 rng(seed);
    const std::vector<int32_t> cu_q = offsets(q_lengths);
    const std::vector<int32_t> cu_k = offsets(k_lengths.empty() ? q_lengths : k_lengths);
    const int64_t tq = cu_q.back(), tk = cu_k.back(), n = static_cast<int64_t>(q_lengths.size());
    AnyTensor q(dtype, {tq, heads_q, dim}, pad), k(dtype, {tk, heads_kv, dim}, pad),
        v(dtype, {tk, heads_kv, dim_v}, pad), out(dtype, {tq, heads_q, dim_v}, pad);
    q.fill_random(rng, -1.0, 1.0);
    k.fill_random(rng, -1.0, 1.0);
    v.fill_random(rng, -1.0, 1.0);
    const int64_t nn = n + 1;
    const attngen_tensor cu_q_t =
        attngen_tensor_contiguous(const_cast<int32_t*>(cu_q.data()), ATTNGEN_I32, 1, &nn);
    const attngen_tensor cu_k_t =
        attngen_tensor_contiguous(const_cast<int32_t*>(cu_k.data()), ATTNGEN_I32, 1, &nn);
    const PlainRope plain(dim);
    const std::vector<float>& freq = plain.freq;
    attngen_attention_options opt = attngen_attention_options_default();
    opt.mask = causal ? ATTNGEN_MASK_CAUSAL : ATTNGEN_MASK_NONE;
    opt.pattern = pattern;
    opt.softcap = softcap;
    if (rope) opt.rope = &plain.rope;
    const attngen_status st = attngen_attention_varlen(&q.t(), &k.t(), &v.t(), &out.t(), &cu_q_t,
                                                       k_lengths.empty() ? nullptr : &cu_k_t, &opt);
    ASSERT_EQ(st, ATTNGEN_OK) << attngen_status_name(st) << ": " << attngen_last_error();
    EXPECT_EQ(out.gaps_written(), 0) << "the call wrote outside the output view";

    const std::vector<float> qw = q.widened(), kw = k.widened(), vw = v.widened();
    const std::vector<double> got = out.dense();
    std::vector<double> all_got, all_want;
    double max_v = 0;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t q0 = cu_q[at(i)], sq = cu_q[at(i + 1)] - q0;
      const int64_t k0 = cu_k[at(i)], sk = cu_k[at(i + 1)] - k0;
      if (sq == 0) continue;
      const auto rows = [](const View& whole, int64_t first, int64_t count) {
        View s = whole;
        s.data += first * whole.strides[0];
        s.shape = {1, count, whole.shape[1], whole.shape[2]};
        s.strides = {count * whole.strides[0], whole.strides[0], whole.strides[1],
                     whole.strides[2]};
        return s;
      };
      const View vq = rows(q.view_in(q.t(), qw), q0, sq);
      const View vk = rows(k.view_in(k.t(), kw), k0, sk);
      const View vv = rows(v.view_in(v.t(), vw), k0, sk);
      const std::vector<double> seq_got(got.begin() + q0 * heads_q * dim_v,
                                        got.begin() + (q0 + sq) * heads_q * dim_v);
      if (sk == 0) {
        for (double x : seq_got) ASSERT_EQ(x, 0.0) << "sequence " << i << " has no keys";
        continue;
      }
      max_v = std::max(max_v, max_abs(vv));
      RefAttention ref;
      ref.causal = causal;
      ref.bottom_right = true;
      ref.softcap = softcap;
      RefPattern rp;
      rp.kind = pattern.kind;
      rp.p = pattern;
      if (pattern.kind != ATTNGEN_PATTERN_NONE) {
        ref.pattern = [rp](int64_t p, int64_t i, int64_t j) {
          return reference_pattern_attends(rp, p, i, j);
        };
      }
      std::vector<double> want;
      if (rope) {  // positions from 0 in each sequence: queries bottom-right, keys at j
        std::vector<int64_t> qp, kp;
        for (int64_t j = 0; j < sq; ++j) qp.push_back(sk - sq + j);
        for (int64_t j = 0; j < sk; ++j) kp.push_back(j);
        const std::vector<double> fd(freq.begin(), freq.end());
        const auto rotated = [&](const View& x, const std::vector<int64_t>& pos) {
          const std::vector<double> d = reference_rope(x, dim, false, fd, pos);
          Storage s({1, x.shape[1], x.shape[2], x.shape[3]}, 0);
          for (size_t e = 0; e < d.size(); ++e) s.buf[e] = static_cast<float>(d[e]);
          return s;
        };
        const Storage rq = rotated(vq, qp), rk = rotated(vk, kp);
        want = reference_attention(view_of(rq.t), view_of(rk.t), vv, ref);
      } else {
        want = reference_attention(vq, vk, vv, ref);
      }
      all_got.insert(all_got.end(), seq_got.begin(), seq_got.end());
      all_want.insert(all_want.end(), want.begin(), want.end());
    }
    expect_close(all_got, all_want, max_v, dtype);
  }
};

TEST(Varlen, PackedPromptsCausal) {
  Varlen t;
  t.q_lengths = {5, 0, 64, 1, 130, 33};
  t.Test();
  t.pad = 3;
  t.causal = false;
  t.Test();
}

// More keys than queries per sequence (chunked prefill, speculative verification: bottom-right),
// a sequence of no keys (rows of zeros) and one of keys but no queries.
TEST(Varlen, QueriesOverLongerKeys) {
  Varlen t;
  t.q_lengths = {4, 7, 0, 3, 16};
  t.k_lengths = {40, 7, 9, 0, 100};
  t.Test();
}

TEST(Varlen, PatternSoftcapRopeHalfAndGenericDims) {
  Varlen t;
  t.q_lengths = {70, 9, 200};
  t.pattern = attngen_pattern_local(16);
  t.softcap = 20.0f;
  t.Test();
  t.pattern = attngen_pattern{};
  t.softcap = 0.0f;
  t.rope = true;
  t.Test();
  t.rope = false;
  t.dtype = ATTNGEN_F16;
  t.Test();
  t.dtype = ATTNGEN_F32;
  t.dim = t.dim_v = 80;
  t.heads_q = t.heads_kv = 3;
  t.Test();
}

// Each sequence is the call attngen_attention() makes of its rows: the same kernels, bit for bit.
TEST(Varlen, EqualsACallPerSequence) {
  std::mt19937_64 rng(fresh_seed());
  const std::vector<int32_t> lengths = {17, 90, 3}, cu = offsets(lengths);
  const int64_t T = cu.back(), H = 4, D = 64, n1 = 4;
  Storage q({T, H, D}, 0), k({T, H, D}, 0), v({T, H, D}, 0), packed({T, H, D}, 0);
  Storage each({T, H, D}, 0);
  for (Storage* s : {&q, &k, &v}) s->fill_random(rng, -1.0, 1.0);
  const attngen_tensor cu_t =
      attngen_tensor_contiguous(const_cast<int32_t*>(cu.data()), ATTNGEN_I32, 1, &n1);
  attngen_attention_options opt = attngen_attention_options_default();
  opt.mask = ATTNGEN_MASK_CAUSAL;
  ASSERT_EQ(attngen_attention_varlen(&q.t, &k.t, &v.t, &packed.t, &cu_t, nullptr, &opt), ATTNGEN_OK)
      << attngen_last_error();
  for (size_t i = 0; i < lengths.size(); ++i) {
    const int64_t shape[4] = {1, lengths[i], H, D};
    const auto rows = [&](Storage& s) {
      return attngen_tensor_contiguous(s.buf.data() + cu[i] * H * D, ATTNGEN_F32, 4, shape);
    };
    attngen_tensor qi = rows(q), ki = rows(k), vi = rows(v), oi = rows(each);
    ASSERT_EQ(attngen_attention(&qi, &ki, &vi, &oi, &opt), ATTNGEN_OK) << attngen_last_error();
  }
  EXPECT_EQ(std::memcmp(packed.buf.data(), each.buf.data(), packed.buf.size() * 4), 0);
}

class VarlenValidation : public ::testing::Test {
 protected:
  void SetUp() override {
    std::mt19937_64 rng(fresh_seed());
    for (Storage* s : {&q, &k, &v}) s->fill_random(rng, -1.0, 1.0);
    cu_t = attngen_tensor_contiguous(cu.data(), ATTNGEN_I32, 1, &n1);
  }
  attngen_status call(const attngen_tensor* cu_k = nullptr) {
    return attngen_attention_varlen(&q.t, &k.t, &v.t, &out.t, &cu_t, cu_k, &opt);
  }
  void expect_error(attngen_status got, attngen_status status, const std::string& needle) {
    EXPECT_EQ(got, status) << attngen_status_name(got) << ": " << attngen_last_error();
    EXPECT_NE(std::string(attngen_last_error()).find(needle), std::string::npos)
        << "message '" << attngen_last_error() << "' does not mention '" << needle << "'";
    EXPECT_TRUE(out.all_poison()) << "output written on error";
  }

  std::vector<int32_t> cu = {0, 3, 3, 10};
  int64_t n1 = 4;
  attngen_tensor cu_t{};
  attngen_attention_options opt = attngen_attention_options_default();
  Storage q{{10, 4, 64}, 0}, k{{10, 2, 64}, 0}, v{{10, 2, 64}, 0}, out{{10, 4, 64}, 0};
};

TEST_F(VarlenValidation, ValidCallSucceeds) {
  ASSERT_EQ(call(), ATTNGEN_OK) << attngen_last_error();
  EXPECT_FALSE(out.all_poison());
}

TEST_F(VarlenValidation, CuSeqlens) {
  cu = {1, 3, 3, 10};
  expect_error(call(), ATTNGEN_ERROR_INVALID_ARGUMENT, "cu_seqlens_q[0] is 1");
  cu = {0, 5, 3, 10};
  expect_error(call(), ATTNGEN_ERROR_INVALID_ARGUMENT, "cu_seqlens_q[2] is 3");
  cu = {0, 3, 3, 9};
  expect_error(call(), ATTNGEN_ERROR_INVALID_ARGUMENT, "cu_seqlens_q[3] is 9");
  cu = {0, 3, 3, 10};
  cu_t.dtype = ATTNGEN_F32;
  expect_error(call(), ATTNGEN_ERROR_DTYPE, "cu_seqlens_q");
  cu_t.dtype = ATTNGEN_I32;
  std::vector<int32_t> other = {0, 10};
  const int64_t two = 2;
  const attngen_tensor cu_k = attngen_tensor_contiguous(other.data(), ATTNGEN_I32, 1, &two);
  expect_error(call(&cu_k), ATTNGEN_ERROR_SHAPE, "cu_seqlens_k");
  expect_error(attngen_attention_varlen(&q.t, &k.t, &v.t, &out.t, nullptr, nullptr, &opt),
               ATTNGEN_ERROR_NULL_POINTER, "cu_seqlens_q");
  // A pattern's parameters are checked once (a window with a negative side beyond -1).
  opt.pattern.kind = ATTNGEN_PATTERN_WINDOW;
  opt.pattern.window_left = -5;
  expect_error(call(), ATTNGEN_ERROR_INVALID_ARGUMENT, "pattern: window_left -5");
}

// The options are checked even where no sequence has keys (so none runs a call of its own).
TEST_F(VarlenValidation, OptionsCheckedWithoutKeys) {
  // Queries 3, 0, 7; keys 0, 5, 0: the one sequence with keys has no queries.
  std::vector<int32_t> keys = {0, 0, 5, 5};
  const attngen_tensor cu_k = attngen_tensor_contiguous(keys.data(), ATTNGEN_I32, 1, &n1);
  Storage k5({5, 2, 64}, 0), v5({5, 2, 64}, 0);
  std::mt19937_64 rng(fresh_seed());
  k5.fill_random(rng, -1.0, 1.0);
  v5.fill_random(rng, -1.0, 1.0);
  const auto call_k = [&] {
    return attngen_attention_varlen(&q.t, &k5.t, &v5.t, &out.t, &cu_t, &cu_k, &opt);
  };
  opt.scale = std::nanf("");
  expect_error(call_k(), ATTNGEN_ERROR_INVALID_ARGUMENT, "scale");
  opt.scale = 0.0f;
  opt.pattern.kind = ATTNGEN_PATTERN_STRIDED;
  opt.pattern.stride = 0;
  expect_error(call_k(), ATTNGEN_ERROR_INVALID_ARGUMENT, "stride");
  opt.pattern = attngen_pattern{};
  ASSERT_EQ(call_k(), ATTNGEN_OK) << attngen_last_error();
  for (float x : out.buf) ASSERT_EQ(x, 0.0f) << "rows without keys are zeros";
}

TEST_F(VarlenValidation, OptionsShapedByTheBatch) {
  std::vector<int32_t> len(3, 1);
  const int64_t three = 3;
  attngen_tensor kv_len = attngen_tensor_contiguous(len.data(), ATTNGEN_I32, 1, &three);
  opt.kv_len = &kv_len;
  expect_error(call(), ATTNGEN_ERROR_INVALID_ARGUMENT, "options.kv_len");
  opt.kv_len = nullptr;
  std::vector<float> lse(120);
  const int64_t ls[3] = {1, 4, 10};
  attngen_tensor lse_t = attngen_tensor_contiguous(lse.data(), ATTNGEN_F32, 3, ls);
  opt.lse = &lse_t;
  expect_error(call(), ATTNGEN_ERROR_INVALID_ARGUMENT, "options.lse");
}

TEST_F(VarlenValidation, Shapes) {
  Storage k9({9, 2, 64}, 0), v9({9, 2, 64}, 0);
  expect_error(attngen_attention_varlen(&q.t, &k9.t, &v9.t, &out.t, &cu_t, nullptr, &opt),
               ATTNGEN_ERROR_SHAPE, "Tk");
  Storage out3({10, 3, 64}, 0);
  EXPECT_EQ(attngen_attention_varlen(&q.t, &k.t, &v.t, &out3.t, &cu_t, nullptr, &opt),
            ATTNGEN_ERROR_SHAPE);
  Storage q4({1, 10, 4, 64}, 0);
  expect_error(attngen_attention_varlen(&q4.t, &k.t, &v.t, &out.t, &cu_t, nullptr, &opt),
               ATTNGEN_ERROR_RANK, "q");
  Storage k3({10, 3, 64}, 0), v3({10, 3, 64}, 0);
  expect_error(attngen_attention_varlen(&q.t, &k3.t, &v3.t, &out.t, &cu_t, nullptr, &opt),
               ATTNGEN_ERROR_HEADS, "multiple of Hkv");
}

// In a workspace: its size query measures every sequence; too small is refused before any row is
// written (the first sequence's own check).
TEST_F(VarlenValidation, Workspace) {
  size_t bytes = 0;
  ASSERT_EQ(attngen_attention_varlen_workspace_size(&q.t, &k.t, &v.t, &out.t, &cu_t, nullptr, &opt,
                                                    &bytes),
            ATTNGEN_OK)
      << attngen_last_error();
  EXPECT_TRUE(out.all_poison()) << "the size query wrote";
  Storage heap({10, 4, 64}, 0);
  ASSERT_EQ(attngen_attention_varlen(&q.t, &k.t, &v.t, &heap.t, &cu_t, nullptr, &opt), ATTNGEN_OK);
  std::vector<uint8_t> ws(bytes);
  ASSERT_EQ(attngen_set_workspace(ws.data(), bytes), ATTNGEN_OK);
  const attngen_status st = call();
  ASSERT_EQ(attngen_set_workspace(nullptr, 0), ATTNGEN_OK);
  ASSERT_EQ(st, ATTNGEN_OK) << attngen_last_error();
  EXPECT_EQ(std::memcmp(heap.buf.data(), out.buf.data(), out.buf.size() * 4), 0);
}

// With a rope the rotated copies of each sequence's q and k come from the workspace too (checked
// for every sequence first, then taken again by its run): the same rows as without a workspace,
// and in half the size an error with nothing written.
TEST_F(VarlenValidation, WorkspaceWithRope) {
  const PlainRope plain(64);
  opt.rope = &plain.rope;
  opt.mask = ATTNGEN_MASK_CAUSAL;
  size_t bytes = 0;
  ASSERT_EQ(attngen_attention_varlen_workspace_size(&q.t, &k.t, &v.t, &out.t, &cu_t, nullptr, &opt,
                                                    &bytes),
            ATTNGEN_OK)
      << attngen_last_error();
  Storage heap({10, 4, 64}, 0);
  ASSERT_EQ(attngen_attention_varlen(&q.t, &k.t, &v.t, &heap.t, &cu_t, nullptr, &opt), ATTNGEN_OK)
      << attngen_last_error();
  for (const size_t size : {bytes / 2, bytes}) {
    SCOPED_TRACE("workspace of " + std::to_string(size) + " of " + std::to_string(bytes));
    std::vector<uint8_t> ws(size);
    ASSERT_EQ(attngen_set_workspace(ws.data(), size), ATTNGEN_OK);
    const attngen_status st = call();
    const std::string error = attngen_last_error();
    ASSERT_EQ(attngen_set_workspace(nullptr, 0), ATTNGEN_OK);
    if (size < bytes) {
      EXPECT_EQ(st, ATTNGEN_ERROR_WORKSPACE) << attngen_status_name(st) << ": " << error;
      EXPECT_TRUE(out.all_poison()) << "output written on error";
    } else {
      ASSERT_EQ(st, ATTNGEN_OK) << error;
      EXPECT_EQ(std::memcmp(heap.buf.data(), out.buf.data(), out.buf.size() * 4), 0);
    }
  }
}

// In a workspace whose size query measured other cu_seqlens: every sequence's run is checked
// before the first runs, so a configuration the query did not measure (here the second and third
// sequences' lengths) is refused with nothing written, also where an earlier sequence's would run.
TEST_F(VarlenValidation, WorkspaceOfOtherSequences) {
  size_t bytes = 0;
  ASSERT_EQ(attngen_attention_varlen_workspace_size(&q.t, &k.t, &v.t, &out.t, &cu_t, nullptr, &opt,
                                                    &bytes),
            ATTNGEN_OK)
      << attngen_last_error();
  cu = {0, 3, 5, 10};  // the first sequence as measured, then 2 and 5 rows
  std::vector<uint8_t> ws(4 * bytes);
  ASSERT_EQ(attngen_set_workspace(ws.data(), ws.size()), ATTNGEN_OK);
  const attngen_status st = call();
  const std::string error = attngen_last_error();
  ASSERT_EQ(attngen_set_workspace(nullptr, 0), ATTNGEN_OK);
  EXPECT_EQ(st, ATTNGEN_ERROR_WORKSPACE) << attngen_status_name(st) << ": " << error;
  EXPECT_NE(error.find("sequence 1"), std::string::npos) << error;
  EXPECT_TRUE(out.all_poison()) << "output written on error";
}

}  // namespace
}  // namespace attngen::test
