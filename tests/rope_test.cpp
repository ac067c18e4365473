// Rotary position embeddings (attngen.h, "Rotary position embeddings"; docs/semantics.md): the
// KV cache's rotated keys and decode's rotated queries, attention's rotated q and k at default
// and given positions, plans with a rope, against the float64 reference's own rotation; the
// validation of a rope (named errors, nothing written or created).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "attngen/attngen.h"
#include "tests/decode_tester.h"
#include "tests/kv_dtype.h"
#include "tests/plain_rope.h"
#include "tests/tensor.h"

namespace attngen::test {
namespace {

size_t at(int64_t i) { return static_cast<size_t>(i); }

// ---- Decoding over a cache with a rope ----

TEST(RopeDecode, TokenByTokenEqualsRotatedFullPass) {
  for (attngen_rope_pairs pairs : {ATTNGEN_ROPE_HALF, ATTNGEN_ROPE_INTERLEAVED}) {
    DecodeTester().batch(2).heads(8, 2).head_dim(64).rope(0, pairs).prefill(7).steps(20).Test();
  }
}

// Phi-2's partial rotary dims (32 of 80), a head dim no specialised kernel has (the generic one),
// Dqk != Dv.
TEST(RopeDecode, PartialRotaryDims) {
  DecodeTester().heads(4, 4).head_dim(80).rope(32, ATTNGEN_ROPE_HALF).prefill(5).steps(9).Test();
  DecodeTester()
      .heads(4, 2)
      .head_dim(48, 40)
      .rope(16, ATTNGEN_ROPE_INTERLEAVED)
      .cached(3)
      .new_tokens(2)
      .steps(6)
      .Test();
}

// Sequences of different lengths in one call, several tokens a step (speculative verification),
// positions past 1024 (the angles re-anchored), a ring buffer (keys keep the rotation of their
// append once the window moves), a layer other than the first.
TEST(RopeDecode, LengthsChunksWindowsAndLayers) {
  DecodeTester()
      .batch(3)
      .heads(8, 2)
      .head_dim(128)
      .rope(0, ATTNGEN_ROPE_HALF)
      .cached({0, 700, 1300})
      .new_tokens(3)
      .steps(4)
      .kv_splits(0)
      .Test();
  DecodeTester()
      .batch(2)
      .heads(4, 1)
      .head_dim(64)
      .rope(0, ATTNGEN_ROPE_HALF)
      .window(24)
      .new_tokens(2)
      .steps(40)
      .Test();
  DecodeTester()
      .heads(4, 2)
      .head_dim(64)
      .layers(3, 2)
      .padded(3)
      .rope(0, ATTNGEN_ROPE_INTERLEAVED)
      .lengths({50})
      .new_tokens(4)
      .Test();
}

// Every cache dtype: the cache rounds the rotated K (the reference rotates the unrounded one),
// within the bounds of storing K and V in that type; F16 and BF16 inputs to the appends.
TEST(RopeDecode, EveryCacheDtype) {
  for (attngen_dtype dtype : {ATTNGEN_F16, ATTNGEN_BF16, ATTNGEN_I8}) {
    const auto [rel_l2, max_abs] = kv::storage_bound(dtype);
    DecodeTester()
        .batch(2)
        .heads(8, 2)
        .head_dim(128)
        .cache_dtype(dtype)
        .raw_kv(rel_l2, max_abs)
        .rope(0, ATTNGEN_ROPE_HALF)
        .prefill(9)
        .steps(24)
        .Test();
  }
  DecodeTester()
      .heads(4, 2)
      .head_dim(64)
      .input_dtype(ATTNGEN_BF16)
      .rope(0, ATTNGEN_ROPE_HALF)
      .prefill(6)
      .steps(8)
      .Test();
}

// One decode step of the multi-head layer over a cache with a rope: its q and k are rotated as
// the cache says, so a step equals attngen_attention() with the same rope over the projections.
TEST(RopeDecode, MhaDecodeRotates) {
  std::mt19937_64 rng(fresh_seed());
  const int64_t B = 1, E = 64, H = 4, D = E / H, prompt = 6;
  Storage w_in({3 * E, E}, 0), w_out({E, E}, 0), x({B, prompt, E}, 0), y({B, 1, E}, 0);
  w_in.fill_random(rng, -0.3, 0.3);
  w_out.fill_random(rng, -0.3, 0.3);
  x.fill_random(rng, -1.0, 1.0);
  PlainRope plain(D);
  const std::vector<float>& freq = plain.freq;
  const attngen_rope& rope = plain.rope;
  attngen_kv_cache_options o = attngen_kv_cache_options_default();
  o.layers = 1;
  o.batch = B;
  o.heads_kv = H;
  o.head_dim_qk = D;
  o.capacity = prompt;
  o.rope = &rope;
  attngen_kv_cache* cache = nullptr;
  ASSERT_EQ(attngen_kv_cache_create(&o, &cache), ATTNGEN_OK) << attngen_last_error();
  const attngen_mha_weights weights{&w_in.t, nullptr, &w_out.t, nullptr};
  attngen_mha_decode_options opt = attngen_mha_decode_options_default();
  opt.num_heads = H;
  // The prompt token by token; the last step's output is checked.
  for (int64_t s = 0; s < prompt; ++s) {
    attngen_tensor xs = x.t;
    xs.data = x.buf.data() + s * E;
    xs.shape[1] = 1;
    ASSERT_EQ(attngen_mha_decode(&xs, &weights, cache, 0, &y.t, &opt), ATTNGEN_OK)
        << attngen_last_error();
  }
  attngen_kv_cache_destroy(cache);
  // The same in double: projections, rotation at positions 0 .. prompt - 1, causal attention of
  // the last query, output projection.
  const auto project = [&](int64_t s, int64_t part, int64_t f) {
    double acc = 0;
    for (int64_t e = 0; e < E; ++e) {
      acc += x.get(x.offset({0, s, e})) * w_in.get(w_in.offset({part * E + f, e}));
    }
    return acc;
  };
  std::vector<double> want_attn(at(E));
  for (int64_t h = 0; h < H; ++h) {
    std::vector<std::vector<double>> q(at(prompt)), k(at(prompt));
    for (int64_t s = 0; s < prompt; ++s) {
      q[at(s)].resize(at(D));
      k[at(s)].resize(at(D));
      for (int64_t d = 0; d < D; ++d) {
        q[at(s)][at(d)] = project(s, 0, h * D + d);
        k[at(s)][at(d)] = project(s, 1, h * D + d);
      }
      for (auto* row : {&q[at(s)], &k[at(s)]}) {
        for (int64_t i = 0; i < D / 2; ++i) {
          const double angle = static_cast<double>(s) * freq[at(i)];
          const double a = (*row)[at(i)], c = (*row)[at(i + D / 2)];
          (*row)[at(i)] = a * std::cos(angle) - c * std::sin(angle);
          (*row)[at(i + D / 2)] = a * std::sin(angle) + c * std::cos(angle);
        }
      }
    }
    std::vector<double> score(at(prompt));
    double top = -INFINITY, sum = 0;
    for (int64_t j = 0; j < prompt; ++j) {
      double dot = 0;
      for (int64_t d = 0; d < D; ++d) dot += q[at(prompt - 1)][at(d)] * k[at(j)][at(d)];
      score[at(j)] = dot / std::sqrt(static_cast<double>(D));
      top = std::max(top, score[at(j)]);
    }
    for (double& sc : score) sum += sc = std::exp(sc - top);
    for (int64_t d = 0; d < D; ++d) {
      double acc = 0;
      for (int64_t j = 0; j < prompt; ++j) acc += score[at(j)] / sum * project(j, 2, h * D + d);
      want_attn[at(h * D + d)] = acc;
    }
  }
  std::vector<double> want(at(E)), got(at(E));
  for (int64_t f = 0; f < E; ++f) {
    for (int64_t e = 0; e < E; ++e)
      want[at(f)] += want_attn[at(e)] * w_out.get(w_out.offset({f, e}));
    got[at(f)] = y.get(y.offset({0, 0, f}));
  }
  expect_close(got, want, max_abs(want), ATTNGEN_F32);
}

// ---- Attention with a rope ----

struct RopeCall {
  int64_t batch = 2, seq_q = 37, seq_kv = 53, heads_q = 4, heads_kv = 2, dim = 64, dim_v = 64;
  int64_t rotary_dim = 0;
  attngen_rope_pairs pairs = ATTNGEN_ROPE_HALF;
  attngen_dtype dtype = ATTNGEN_F32;
  bool causal = false, top_left = false, kv_len = false, positions = false, plan = false;

  std::string describe() const {
    std::string s = "B" + std::to_string(batch) + " Sq" + std::to_string(seq_q) + " Skv" +
                    std::to_string(seq_kv) + " H" + std::to_string(heads_q) + "/" +
                    std::to_string(heads_kv) + " D" + std::to_string(dim) + " rotary " +
                    std::to_string(rotary_dim) +
                    (pairs == ATTNGEN_ROPE_INTERLEAVED ? " interleaved" : " half") + " " +
                    attngen::dtype_row(dtype)->name;
    if (causal) s += " causal";
    if (top_left) s += " top-left";
    if (kv_len) s += " kv_len";
    if (positions) s += " positions";
    if (plan) s += " plan";
    return s;
  }

  // attngen_attention() (or a plan's run) with the rope against the reference over q and k
  // rotated in double at the positions the call documents; every output element written.
  void Test() const {
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE(describe() + " seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    AnyTensor q(dtype, {batch, seq_q, heads_q, dim}, 2),
        k(dtype, {batch, seq_kv, heads_kv, dim}, 1), v(dtype, {batch, seq_kv, heads_kv, dim_v}, 0),
        out(dtype, {batch, seq_q, heads_q, dim_v}, 1);
    q.fill_random(rng, -1.0, 1.0);
    k.fill_random(rng, -1.0, 1.0);
    v.fill_random(rng, -1.0, 1.0);
    const int64_t r = rotary_dim ? rotary_dim : dim;
    const double base = std::uniform_real_distribution<double>(500.0, 20000.0)(rng);
    PlainRope plain(r, base);
    std::vector<float>& freq = plain.freq;
    const std::vector<double> freq_d(freq.begin(), freq.end());
    attngen_rope rope = plain.rope;
    rope.rotary_dim = rotary_dim;
    rope.pairs = pairs;

    std::vector<int32_t> lens(at(batch), static_cast<int32_t>(seq_kv));
    if (kv_len) {
      for (int32_t& n : lens) {
        n = std::uniform_int_distribution<int32_t>(1, static_cast<int32_t>(seq_kv))(rng);
      }
    }
    // Positions: given (random, large and negative ones too), or the documented defaults.
    std::vector<int32_t> q_pos(at(batch * seq_q)), k_pos(at(batch * seq_kv));
    std::vector<int64_t> q_ref(q_pos.size()), k_ref(k_pos.size());
    std::uniform_int_distribution<int32_t> any_position(-50, 100000);
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t i = 0; i < seq_q; ++i) {
        const int64_t p = positions ? any_position(rng) : top_left ? i : lens[at(b)] - seq_q + i;
        q_pos[at(b * seq_q + i)] = static_cast<int32_t>(p);
        q_ref[at(b * seq_q + i)] = p;
      }
      for (int64_t j = 0; j < seq_kv; ++j) {
        const int64_t p = positions ? any_position(rng) : j;
        k_pos[at(b * seq_kv + j)] = static_cast<int32_t>(p);
        k_ref[at(b * seq_kv + j)] = p;
      }
    }
    const int64_t q_shape[2] = {batch, seq_q}, k_shape[2] = {batch, seq_kv};
    const attngen_tensor q_pos_t = attngen_tensor_contiguous(q_pos.data(), ATTNGEN_I32, 2, q_shape);
    const attngen_tensor k_pos_t = attngen_tensor_contiguous(k_pos.data(), ATTNGEN_I32, 2, k_shape);
    const attngen_tensor lens_t = attngen_tensor_contiguous(lens.data(), ATTNGEN_I32, 1, &batch);

    attngen_attention_options opt = attngen_attention_options_default();
    opt.mask = causal ? ATTNGEN_MASK_CAUSAL : ATTNGEN_MASK_NONE;
    opt.alignment = top_left ? ATTNGEN_ALIGN_TOP_LEFT : ATTNGEN_ALIGN_BOTTOM_RIGHT;
    opt.rope = &rope;
    if (kv_len) opt.kv_len = &lens_t;
    if (positions) {
      opt.q_positions = &q_pos_t;
      opt.k_positions = &k_pos_t;
    }
    const std::vector<float> q_given = q.widened(), k_given = k.widened();
    if (plan) {
      attngen_attention_plan* p = nullptr;
      ASSERT_EQ(attngen_attention_plan_create(&q.t(), &k.t(), &v.t(), &out.t(), &opt, &p),
                ATTNGEN_OK)
          << attngen_last_error();
      // The run's data only: the rope's frequencies are the plan's copy.
      std::fill(freq.begin(), freq.end(), std::nanf(""));
      attngen_attention_data d = attngen_attention_data_default();
      d.q = q.t().data;
      d.k = k.t().data;
      d.v = v.t().data;
      d.out = out.t().data;
      if (kv_len) d.kv_len = lens.data();
      if (positions) {
        d.q_positions = q_pos.data();
        d.k_positions = k_pos.data();
      }
      const attngen_status st = attngen_attention_plan_run(p, &d);
      attngen_attention_plan_destroy(p);
      ASSERT_EQ(st, ATTNGEN_OK) << attngen_last_error();
    } else {
      ASSERT_EQ(attngen_attention(&q.t(), &k.t(), &v.t(), &out.t(), &opt), ATTNGEN_OK)
          << attngen_last_error();
    }
    const auto same_bits = [](const std::vector<float>& a, const std::vector<float>& b) {
      return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
    };
    EXPECT_TRUE(same_bits(q.widened(), q_given)) << "q written";
    EXPECT_TRUE(same_bits(k.widened(), k_given)) << "k written";
    EXPECT_EQ(out.gaps_written(), 0);

    // The reference over the rotated q and k (as F32: the reference's views are of floats).
    const std::vector<float> q_wide = q.widened(), k_wide = k.widened(), v_wide = v.widened();
    const auto rotated = [&](const AnyTensor& x, const std::vector<float>& wide,
                             const std::vector<int64_t>& pos) {
      const std::vector<double> r_d =
          reference_rope(x.view_in(x.t(), wide), r, pairs == ATTNGEN_ROPE_INTERLEAVED, freq_d, pos);
      Storage s({x.t().shape[0], x.t().shape[1], x.t().shape[2], x.t().shape[3]}, 0);
      for (size_t i = 0; i < r_d.size(); ++i) s.buf[i] = static_cast<float>(r_d[i]);
      return s;
    };
    const Storage q_rot = rotated(q, q_wide, q_ref), k_rot = rotated(k, k_wide, k_ref);
    RefAttention ref;
    ref.causal = causal;
    ref.bottom_right = !top_left;
    if (kv_len) ref.kv_len = lens;
    const View vv = v.view_in(v.t(), v_wide);
    const std::vector<double> want =
        reference_attention(view_of(q_rot.t), view_of(k_rot.t), vv, ref);
    expect_close(out.dense(), want, max_abs(vv), dtype);
  }
};

TEST(RopeAttention, DefaultPositions) {
  RopeCall c;
  c.Test();
  c.pairs = ATTNGEN_ROPE_INTERLEAVED;
  c.causal = true;
  c.Test();
  c.top_left = true;
  c.Test();
  c.top_left = false;
  c.kv_len = true;
  c.Test();
}

TEST(RopeAttention, GivenPositionsAndPartialDims) {
  RopeCall c;
  c.positions = true;
  c.Test();
  c.dim = 80;
  c.dim_v = 80;
  c.rotary_dim = 32;
  c.heads_q = c.heads_kv = 3;
  c.causal = true;
  c.Test();
}

TEST(RopeAttention, HalfPrecisionInputs) {
  for (attngen_dtype dtype : {ATTNGEN_F16, ATTNGEN_BF16}) {
    RopeCall c;
    c.dtype = dtype;
    c.causal = true;
    c.Test();
  }
}

// A plan keeps its own copy of the frequencies (the test overwrites the caller's before the run)
// and takes the positions with each run's data.
TEST(RopeAttention, Plans) {
  RopeCall c;
  c.plan = true;
  c.causal = true;
  c.Test();
  c.positions = true;
  c.kv_len = true;
  c.Test();
}

// A prompt and then single tokens decoded over a cache with a rope equal one causal attention
// with the same rope over the whole sequence: the cache's positions are attention's defaults.
TEST(RopeAttention, AgreesWithDecodeOverARopeCache) {
  std::mt19937_64 rng(fresh_seed());
  const int64_t S = 40, Hq = 4, Hkv = 2, D = 64;
  Storage q({1, S, Hq, D}, 0), k({1, S, Hkv, D}, 0), v({1, S, Hkv, D}, 0);
  Storage full({1, S, Hq, D}, 0), step({1, S, Hq, D}, 0);
  q.fill_random(rng, -1.0, 1.0);
  k.fill_random(rng, -1.0, 1.0);
  v.fill_random(rng, -1.0, 1.0);
  PlainRope plain(D);
  const std::vector<float>& freq = plain.freq;
  const attngen_rope& rope = plain.rope;
  attngen_attention_options opt = attngen_attention_options_default();
  opt.mask = ATTNGEN_MASK_CAUSAL;
  opt.rope = &rope;
  ASSERT_EQ(attngen_attention(&q.t, &k.t, &v.t, &full.t, &opt), ATTNGEN_OK) << attngen_last_error();
  attngen_kv_cache_options o = attngen_kv_cache_options_default();
  o.layers = 1;
  o.batch = 1;
  o.heads_kv = Hkv;
  o.head_dim_qk = D;
  o.capacity = S;
  o.rope = &rope;
  attngen_kv_cache* cache = nullptr;
  ASSERT_EQ(attngen_kv_cache_create(&o, &cache), ATTNGEN_OK) << attngen_last_error();
  // A prompt of 16 in one call, then one token at a time.
  for (int64_t s = 0; s < S;) {
    const int64_t n = s == 0 ? 16 : 1;
    const auto rows = [&](const Storage& x, int64_t heads) {
      attngen_tensor t = x.t;
      t.data = const_cast<float*>(x.buf.data()) + s * heads * D;
      t.shape[1] = n;
      return t;
    };
    const attngen_tensor qs = rows(q, Hq), ks = rows(k, Hkv), vs = rows(v, Hkv),
                         os = rows(step, Hq);
    ASSERT_EQ(attngen_kv_cache_append(cache, 0, &ks, &vs, nullptr), ATTNGEN_OK)
        << attngen_last_error();
    ASSERT_EQ(attngen_decode(&qs, cache, 0, const_cast<attngen_tensor*>(&os), nullptr), ATTNGEN_OK)
        << attngen_last_error();
    s += n;
  }
  attngen_kv_cache_destroy(cache);
  expect_close(step.dense(), full.dense(), max_abs(view_of(v.t)), ATTNGEN_F32);
}

// Calls with a rope in a workspace: they take their rotated copies from it (its size query counts
// them), with the results of the calls without one, bit for bit.
TEST(RopeAttention, InAWorkspace) {
  std::mt19937_64 rng(fresh_seed());
  const int64_t S = 70, Hq = 4, Hkv = 2, D = 64;
  Storage q({2, S, Hq, D}, 0), k({2, S, Hkv, D}, 0), v({2, S, Hkv, D}, 0);
  Storage heap({2, S, Hq, D}, 0), in_ws({2, S, Hq, D}, 0);
  for (Storage* t : {&q, &k, &v}) t->fill_random(rng, -1.0, 1.0);
  PlainRope plain(D);
  const std::vector<float>& freq = plain.freq;
  const attngen_rope& rope = plain.rope;
  attngen_attention_options opt = attngen_attention_options_default();
  opt.mask = ATTNGEN_MASK_CAUSAL;
  opt.rope = &rope;
  ASSERT_EQ(attngen_attention(&q.t, &k.t, &v.t, &heap.t, &opt), ATTNGEN_OK) << attngen_last_error();
  size_t bytes = 0, without_rope = 0;
  ASSERT_EQ(attngen_attention_workspace_size(&q.t, &k.t, &v.t, &in_ws.t, &opt, &bytes), ATTNGEN_OK)
      << attngen_last_error();
  opt.rope = nullptr;
  ASSERT_EQ(attngen_attention_workspace_size(&q.t, &k.t, &v.t, &in_ws.t, &opt, &without_rope),
            ATTNGEN_OK);
  opt.rope = &rope;
  EXPECT_GE(bytes, without_rope + (q.buf.size() + k.buf.size()) * sizeof(float))
      << "the copies counted";
  std::vector<uint8_t> ws(bytes);
  ASSERT_EQ(attngen_set_workspace(ws.data(), bytes / 2), ATTNGEN_OK);
  EXPECT_EQ(attngen_attention(&q.t, &k.t, &v.t, &in_ws.t, &opt), ATTNGEN_ERROR_WORKSPACE);
  EXPECT_TRUE(in_ws.all_poison()) << "written though the workspace was too small";
  ASSERT_EQ(attngen_set_workspace(ws.data(), bytes), ATTNGEN_OK);
  const attngen_status st = attngen_attention(&q.t, &k.t, &v.t, &in_ws.t, &opt);
  ASSERT_EQ(attngen_set_workspace(nullptr, 0), ATTNGEN_OK);
  ASSERT_EQ(st, ATTNGEN_OK) << attngen_last_error();
  EXPECT_EQ(std::memcmp(heap.buf.data(), in_ws.buf.data(), heap.buf.size() * sizeof(float)), 0);
}

TEST(Rope, InvFreqIsPlainRope) {
  for (int64_t r : {2, 32, 64, 128}) {
    std::vector<float> got(at(r / 2), -1.0f);
    ASSERT_EQ(attngen_rope_inv_freq(500000.0, r, got.data()), ATTNGEN_OK);
    for (int64_t i = 0; i < r / 2; ++i) {
      EXPECT_EQ(got[at(i)], static_cast<float>(std::pow(500000.0, -2.0 * i / r))) << i;
    }
  }
  float f[2];
  EXPECT_EQ(attngen_rope_inv_freq(10000.0, 3, f), ATTNGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(attngen_rope_inv_freq(1.0, 4, f), ATTNGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(attngen_rope_inv_freq(NAN, 4, f), ATTNGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(attngen_rope_inv_freq(10000.0, 4, nullptr), ATTNGEN_ERROR_NULL_POINTER);
}

// ---- Validation ----

class RopeValidation : public ::testing::Test {
 protected:
  void SetUp() override {
    std::mt19937_64 rng(fresh_seed());
    for (Storage* s : {&q, &k, &v}) s->fill_random(rng, -1.0, 1.0);
    ASSERT_EQ(attngen_rope_inv_freq(10000.0, 64, freq.data()), ATTNGEN_OK);
    freq_t = attngen_tensor_contiguous(freq.data(), ATTNGEN_F32, 1, &half);
    rope.inv_freq = &freq_t;
    opt.rope = &rope;
  }

  // The call fails with `status`, its message naming `needle`, out untouched.
  void expect_error(attngen_status status, const std::string& needle) {
    const attngen_status got = attngen_attention(&q.t, &k.t, &v.t, &out.t, &opt);
    EXPECT_EQ(got, status) << attngen_status_name(got) << ": " << attngen_last_error();
    EXPECT_NE(std::string(attngen_last_error()).find(needle), std::string::npos)
        << "message '" << attngen_last_error() << "' does not mention '" << needle << "'";
    EXPECT_TRUE(out.all_poison()) << "output written on error";
    // A cache with that rope is refused too (where the rope itself is wrong).
    if (opt.q_positions == nullptr && opt.k_positions == nullptr) {
      attngen_kv_cache_options o = attngen_kv_cache_options_default();
      o.layers = o.batch = 1;
      o.heads_kv = 2;
      o.head_dim_qk = 64;
      o.capacity = 8;
      o.rope = opt.rope;
      attngen_kv_cache* cache = reinterpret_cast<attngen_kv_cache*>(&o);
      EXPECT_EQ(attngen_kv_cache_create(&o, &cache), status) << attngen_last_error();
    }
  }

  std::vector<float> freq = std::vector<float>(32);
  int64_t half = 32;
  attngen_tensor freq_t{};
  attngen_rope rope = attngen_rope_default();
  attngen_attention_options opt = attngen_attention_options_default();
  Storage q{{1, 5, 4, 64}, 0}, k{{1, 7, 2, 64}, 0}, v{{1, 7, 2, 64}, 0}, out{{1, 5, 4, 64}, 0};
};

TEST_F(RopeValidation, ValidCallSucceeds) {
  EXPECT_EQ(attngen_attention(&q.t, &k.t, &v.t, &out.t, &opt), ATTNGEN_OK) << attngen_last_error();
}

TEST_F(RopeValidation, RotaryDim) {
  rope.rotary_dim = 33;
  expect_error(ATTNGEN_ERROR_INVALID_ARGUMENT, "rotary_dim");
  rope.rotary_dim = 66;
  expect_error(ATTNGEN_ERROR_INVALID_ARGUMENT, "rotary_dim");
  rope.rotary_dim = -2;
  expect_error(ATTNGEN_ERROR_INVALID_ARGUMENT, "rotary_dim");
}

TEST_F(RopeValidation, Frequencies) {
  rope.inv_freq = nullptr;
  expect_error(ATTNGEN_ERROR_NULL_POINTER, "inv_freq");
  rope.inv_freq = &freq_t;
  freq_t.shape[0] = 31;
  expect_error(ATTNGEN_ERROR_SHAPE, "inv_freq");
  freq_t.shape[0] = 32;
  freq_t.dtype = ATTNGEN_F16;
  expect_error(ATTNGEN_ERROR_DTYPE, "inv_freq");
  freq_t.dtype = ATTNGEN_F32;
  freq[7] = INFINITY;
  expect_error(ATTNGEN_ERROR_INVALID_ARGUMENT, "inv_freq[7]");
}

TEST_F(RopeValidation, PairsAndStructSize) {
  int32_t bad = 2;
  std::memcpy(&rope.pairs, &bad, sizeof bad);
  expect_error(ATTNGEN_ERROR_INVALID_ARGUMENT, "pairs");
  rope.pairs = ATTNGEN_ROPE_HALF;
  rope.struct_size = 0;
  expect_error(ATTNGEN_ERROR_INVALID_ARGUMENT, "rope.struct_size");
}

TEST_F(RopeValidation, Positions) {
  std::vector<int32_t> pos(64, 3);
  const int64_t q_shape[2] = {1, 5}, wrong[2] = {1, 6};
  attngen_tensor qp = attngen_tensor_contiguous(pos.data(), ATTNGEN_I32, 2, q_shape);
  opt.q_positions = &qp;
  opt.rope = nullptr;
  expect_error(ATTNGEN_ERROR_INVALID_ARGUMENT, "without options.rope");
  opt.rope = &rope;
  qp = attngen_tensor_contiguous(pos.data(), ATTNGEN_I32, 2, wrong);
  expect_error(ATTNGEN_ERROR_SHAPE, "q_positions");
  qp = attngen_tensor_contiguous(pos.data(), ATTNGEN_F32, 2, q_shape);
  expect_error(ATTNGEN_ERROR_DTYPE, "q_positions");
  qp = attngen_tensor_contiguous(out.buf.data(), ATTNGEN_I32, 2, q_shape);
  expect_error(ATTNGEN_ERROR_ALIAS, "q_positions");
}

// A decode plan made over a cache with a rope runs only over caches with the same rope dims.
TEST_F(RopeValidation, DecodePlanNeedsTheSameRope) {
  attngen_kv_cache_options o = attngen_kv_cache_options_default();
  o.layers = o.batch = 1;
  o.heads_kv = 2;
  o.head_dim_qk = 64;
  o.capacity = 8;
  o.rope = &rope;
  attngen_kv_cache *with = nullptr, *without = nullptr;
  ASSERT_EQ(attngen_kv_cache_create(&o, &with), ATTNGEN_OK) << attngen_last_error();
  o.rope = nullptr;
  ASSERT_EQ(attngen_kv_cache_create(&o, &without), ATTNGEN_OK) << attngen_last_error();
  Storage q1({1, 1, 4, 64}, 0), o1({1, 1, 4, 64}, 0), k1({1, 1, 2, 64}, 0), v1({1, 1, 2, 64}, 0);
  std::mt19937_64 rng(fresh_seed());
  for (Storage* s : {&q1, &k1, &v1}) s->fill_random(rng, -1.0, 1.0);
  attngen_decode_plan* plan = nullptr;
  ASSERT_EQ(attngen_decode_plan_create(&q1.t, with, 0, &o1.t, nullptr, &plan), ATTNGEN_OK)
      << attngen_last_error();
  for (attngen_kv_cache* c : {with, without}) {
    ASSERT_EQ(attngen_kv_cache_append(c, 0, &k1.t, &v1.t, nullptr), ATTNGEN_OK);
  }
  attngen_decode_data d = attngen_decode_data_default();
  d.q = q1.buf.data();
  d.out = o1.buf.data();
  EXPECT_EQ(attngen_decode_plan_run(plan, without, 0, &d), ATTNGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(attngen_last_error()).find("rope"), std::string::npos);
  EXPECT_TRUE(o1.all_poison());
  // Over the cache it was made for: one position, so q and k at position 0 are not rotated and
  // the output is v's row.
  ASSERT_EQ(attngen_decode_plan_run(plan, with, 0, &d), ATTNGEN_OK) << attngen_last_error();
  for (int64_t h = 0; h < 4; ++h) {
    for (int64_t e = 0; e < 64; ++e) {
      EXPECT_FLOAT_EQ(o1.get(o1.offset({0, 0, h, e})), v1.get(v1.offset({0, 0, h / 2, e})));
    }
  }
  attngen_decode_plan_destroy(plan);
  attngen_kv_cache_destroy(with);
  attngen_kv_cache_destroy(without);
}

}  // namespace
}  // namespace attngen::test
