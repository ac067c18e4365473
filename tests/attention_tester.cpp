#include "tests/attention_tester.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace attngen::test {

std::string AttentionTester::describe() const {
  std::ostringstream s;
  s << "B" << batch_ << " H" << hq_ << "/" << hkv_ << " S" << sq_ << "/" << skv_ << " D" << dqk_
    << "/" << dv_ << (causal_ ? " causal" : "") << (top_left_ ? " top-left" : "")
    << (pad_ ? " padded" : "") << (fused_ ? " fused-qkv" : "");
  if (!kv_len_.empty()) s << " kv_len";
  if (!mask_shape_.empty())
    s << (mask_bool_ ? " bool-mask" : " additive-mask") << (mask_values_.empty() ? "" : " given")
      << "(rank " << mask_shape_.size() << ")";
  if (softcap_ > 0) s << " softcap " << softcap_;
  if (pattern_.kind != ATTNGEN_PATTERN_NONE) {
    s << " pattern " << pattern_.kind << (layout_.empty() ? "" : " given layout");
  }
  if (!modifier_.empty()) {
    s << " modifier " << modifier_ << (symmetric_ ? " symmetric" : "")
      << (standard_slopes_ ? " standard" : "");
  }
  if (nonfinite_) s << " nonfinite";
  if (negative_dots_) s << " negative-dots";
  if (weights_) s << " weights";
  if (lse_) s << " lse";
  if (integer_) s << " integers " << integer_;
  if (dtype_ != ATTNGEN_F32 || out_dtype_ != ATTNGEN_F32) {
    s << " dtype " << dtype_ << " out " << out_dtype_;
  }
  return s.str();
}

struct AttentionTester::Call {
  // The element types of q, k, v and out.
  attngen_dtype dq = ATTNGEN_F32, dk = ATTNGEN_F32, dv = ATTNGEN_F32, dout = ATTNGEN_F32;
  // Inputs: separate tensors, or views into one fused QKV buffer.
  AnyTensor q, k, v, fused;
  attngen_tensor tq{}, tk{}, tv{};
  // Outputs, poisoned (out in its dtype's NaN; weights and log-sum-exp are F32).
  AnyTensor out;
  Storage weights, lse;
  // Optional inputs and the options that point to them.
  attngen_tensor t_kv_len{}, t_mask{}, t_layout{};
  std::vector<uint8_t> mask_bytes, layout_bytes;
  std::vector<float> mask_floats;
  attngen_modifier modifier{};
  std::string modifier_name;
  // A modifier's tensor: f32 values (ALiBi's slopes, T5's table, sink logits) or i32 ones
  // (document ids, prefix lengths).
  Storage mod_floats;
  std::vector<int32_t> mod_ints;
  attngen_tensor t_mod_ints{};
  attngen_attention_options opt = attngen_attention_options_default();
  // The same configuration for the reference, what it computes (once per draw of inputs), and
  // the bound of the output's error (max |V|).
  RefAttention ref;
  std::vector<double> want, want_weights, want_lse;
  double max_v = 0.0;
  bool have_reference = false;
  // Per kernel run so far on these inputs: its outputs, which a later run on it must repeat.
  std::map<std::string, Outputs> by_kernel;

  Call() = default;
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;
};

void AttentionTester::Test(const attngen_kernel_info* kernel, std::vector<std::string>* ran) const {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(describe() + " seed " + std::to_string(seed) +
               (kernel ? std::string(" kernel ") + kernel->name : std::string()));
  std::mt19937_64 rng(seed);

  Call c;
  choose_dtypes(c, kernel);
  make_inputs(c, rng);
  if (::testing::Test::HasFatalFailure()) return;
  if (nonfinite_) add_nonfinite(c, rng);
  if (::testing::Test::HasFatalFailure()) return;
  build_options(c, kernel, rng);
  if (isas_.empty()) {
    poison_outputs(c);
    check_run(c, kernel, ran);
    return;
  }
  struct RestoreIsa {
    ~RestoreIsa() { attngen_set_isa(nullptr); }
  } restore;
  int turns = 0;
  for (const std::string& isa : isas_) {
    if (!fallbacks_ && !has_own_kernel(isa, c.dq)) continue;
    SCOPED_TRACE("ISA " + isa);
    ASSERT_EQ(attngen_set_isa(isa.c_str()), ATTNGEN_OK) << attngen_last_error();
    poison_outputs(c);
    check_run(c, kernel, ran);
    if (::testing::Test::HasFatalFailure()) return;
    ++turns;
  }
  EXPECT_GT(turns, 0) << "no ISA of the list has an attention kernel of its own for the call";
}

// Whether `isa` has an attention kernel of its own for q of `dtype`, or of F32 (a call of another
// dtype converted).
bool AttentionTester::has_own_kernel(const std::string& isa, attngen_dtype dtype) const {
  for (size_t i = 0; i < attngen_kernel_count(); ++i) {
    const attngen_kernel_info* k = attngen_kernel_at(i);
    if (k->op == ATTNGEN_OP_ATTENTION && isa == k->isa &&
        (k->dtypes.q == dtype || k->dtypes.q == ATTNGEN_F32)) {
      return true;
    }
  }
  return false;
}

// One run on the call's inputs, checked: against the reference on the first run of its kernel,
// bit for bit against that run on a later one; the output views' gaps untouched either way.
void AttentionTester::check_run(Call& c, const attngen_kernel_info* kernel,
                                std::vector<std::string>* ran) const {
  run(c, kernel);
  if (::testing::Test::HasFatalFailure()) return;
  const std::string name = attngen_last_kernel();
  if (ran != nullptr) ran->push_back(name);
  Outputs got{c.out.dense(), weights_ ? c.weights.dense() : std::vector<double>{},
              lse_ ? c.lse.dense() : std::vector<double>{}};
  const auto same = [](const std::vector<double>& a, const std::vector<double>& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](double x, double y) {
      return x == y || (std::isnan(x) && std::isnan(y));
    });
  };
  const auto earlier = c.by_kernel.find(name);
  if (earlier != c.by_kernel.end()) {
    EXPECT_TRUE(same(got.out, earlier->second.out))
        << name << ": not the output of its earlier run";
    EXPECT_TRUE(same(got.weights, earlier->second.weights)) << name << ": weights differ";
    EXPECT_TRUE(same(got.lse, earlier->second.lse)) << name << ": log-sum-exp differs";
  } else {
    if (!c.have_reference) compute_reference(c);
    compare_with_reference(c, got);
    c.by_kernel.emplace(name, std::move(got));
  }
  check_gaps(c);
}

// The kernel's dtypes, or the tester's.
void AttentionTester::choose_dtypes(Call& c, const attngen_kernel_info* kernel) const {
  if (kernel != nullptr) {
    c.dq = kernel->dtypes.q;
    c.dk = kernel->dtypes.k;
    c.dv = kernel->dtypes.v;
    c.dout = kernel->dtypes.out;
  } else {
    c.dq = c.dk = c.dv = dtype_;
    c.dout = out_dtype_;
  }
}

// Fresh random q, k, v in [-1, 1) (q and k integers with integer_inputs()), as three tensors
// or as views into one fused [B, S, 3, H, D] buffer.
void AttentionTester::make_inputs(Call& c, std::mt19937_64& rng) const {
  if (fused_) {
    ASSERT_TRUE(sq_ == skv_ && hq_ == hkv_ && dqk_ == dv_) << "fused_qkv needs equal shapes";
    ASSERT_TRUE(c.dq == c.dk && c.dk == c.dv) << "fused_qkv needs one dtype";
    c.fused.init(c.dq, {batch_, sq_, 3, hq_, dqk_}, pad_);
    c.fused.fill_random(rng, -1.0, 1.0);
    const attngen_tensor& f = c.fused.t();
    const int src[4] = {0, 1, 3, 4};  // [B, S, 3, H, D] without the 3
    const int64_t bytes = static_cast<int64_t>(c.fused.element_bytes());
    int part = 0;
    for (attngen_tensor* t : {&c.tq, &c.tk, &c.tv}) {
      *t = attngen_tensor{};
      t->data = static_cast<char*>(f.data) + part++ * f.strides[2] * bytes;
      t->dtype = f.dtype;
      t->rank = 4;
      for (int d = 0; d < 4; ++d) {
        t->shape[d] = f.shape[src[d]];
        t->strides[d] = f.strides[src[d]];
      }
    }
    return;
  }
  c.q.init(c.dq, {batch_, sq_, hq_, dqk_}, pad_);
  c.k.init(c.dk, {batch_, skv_, hkv_, dqk_}, pad_);
  c.v.init(c.dv, {batch_, skv_, hkv_, dv_}, pad_);
  c.q.fill_random(rng, -1.0, 1.0);
  c.k.fill_random(rng, -1.0, 1.0);
  c.v.fill_random(rng, -1.0, 1.0);
  if (integer_) {
    c.q.fill_integers(rng, integer_);
    c.k.fill_integers(rng, integer_);
  }
  if (negative_dots_) {
    c.q.fill_random(rng, 0.1, 1.0);
    std::uniform_real_distribution<double> dir(0.1, 1.0);
    std::vector<int64_t> rank(static_cast<size_t>(skv_));
    for (int64_t b = 0; b < batch_; ++b) {
      for (int64_t h = 0; h < hkv_; ++h) {
        std::vector<double> u(static_cast<size_t>(dqk_));
        for (double& x : u) x = dir(rng);
        std::iota(rank.begin(), rank.end(), 0);
        std::shuffle(rank.begin(), rank.end(), rng);
        for (int64_t j = 0; j < skv_; ++j) {
          const double f = 1.0 + static_cast<double>(rank[static_cast<size_t>(j)]) / 20.0;
          for (int64_t d = 0; d < dqk_; ++d) c.k.set({b, j, h, d}, -f * u[static_cast<size_t>(d)]);
        }
      }
    }
  }
  c.tq = c.q.t();
  c.tk = c.k.t();
  c.tv = c.v.t();
}

void AttentionTester::add_nonfinite(Call& c, std::mt19937_64& rng) const {
  ASSERT_FALSE(fused_) << "nonfinite() takes separate q, k and v";
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const double values[3] = {nan, inf, -inf};
  const auto pick = [&rng](int64_t n) {
    return std::uniform_int_distribution<int64_t>(0, n - 1)(rng);
  };
  for (AnyTensor* x : {&c.q, &c.k, &c.v}) {
    const attngen_tensor& t = x->t();
    x->set({pick(t.shape[0]), pick(t.shape[1]), pick(t.shape[2]), pick(t.shape[3])},
           values[pick(3)]);
  }
  c.v.set({pick(batch_), skv_ - 1, pick(hkv_), pick(dv_)}, nan);
  for (int64_t b = 0; b < static_cast<int64_t>(kv_len_.size()); ++b) {
    for (int64_t j = kv_len_[static_cast<size_t>(b)]; j < skv_; ++j) {
      for (int64_t h = 0; h < hkv_; ++h) {
        for (int64_t d = 0; d < dqk_; ++d) c.k.set({b, j, h, d}, values[(j + d) % 3]);
        for (int64_t d = 0; d < dv_; ++d) c.v.set({b, j, h, d}, values[(j + d + 1) % 3]);
      }
    }
  }
}

// Every output the call asks for, filled with poison (gaps included).
void AttentionTester::poison_outputs(Call& c) const {
  c.out.init(c.dout, {batch_, sq_, hq_, dv_}, pad_);
  if (weights_) {
    c.weights.init({batch_, hq_, sq_, skv_}, pad_);
    c.opt.weights = &c.weights.t;
    c.ref.weights = &c.want_weights;
  }
  if (lse_) {
    c.lse.init({batch_, hq_, sq_}, pad_);
    c.opt.lse = &c.lse.t;
    c.ref.lse = &c.want_lse;
  }
}

// The call's options and the reference's configuration, from the same settings.
void AttentionTester::build_options(Call& c, const attngen_kernel_info* kernel,
                                    std::mt19937_64& rng) const {
  c.opt.mask = causal_ ? ATTNGEN_MASK_CAUSAL : ATTNGEN_MASK_NONE;
  c.opt.alignment = top_left_ ? ATTNGEN_ALIGN_TOP_LEFT : ATTNGEN_ALIGN_BOTTOM_RIGHT;
  c.opt.scale = scale_;
  c.opt.softcap = softcap_;
  c.opt.kernel = kernel ? kernel->name : nullptr;
  c.ref.scale = scale_;
  c.ref.softcap = softcap_;
  c.ref.causal = causal_;
  c.ref.bottom_right = !top_left_;
  add_kv_len(c);
  add_mask(c, rng);
  add_pattern(c, rng);
  add_modifier(c, kernel, rng);
}

// A modifier's f32 values in [-limit, limit]: with integer inputs multiples of 1/16, so that every
// modified score stays exact in f32 (the test's one-hot rows must not hang on the rounding of a
// near-tie).
void AttentionTester::fill_modifier_values(Storage& values, std::mt19937_64& rng,
                                           double limit) const {
  if (integer_ > 0) {
    values.fill_integers(rng, static_cast<int>(16 * limit));
    for (float& x : values.buf) x /= 16.0f;
  } else {
    values.fill_random(rng, -limit, limit);
  }
}

// The tester's modifier, or the kernel's, with fresh parameters; the reference's own version.
void AttentionTester::add_modifier(Call& c, const attngen_kernel_info* kernel,
                                   std::mt19937_64& rng) const {
  c.modifier_name = modifier_;
  if (c.modifier_name.empty() && kernel != nullptr && kernel->modifier != nullptr) {
    c.modifier_name = kernel->modifier;
  }
  if (c.modifier_name.empty()) return;
  c.modifier.name = c.modifier_name.c_str();
  c.opt.modifier = &c.modifier;
  if (c.modifier_name == "document") {
    // Documents of 1 to Skv / 3 + 1 tokens, packed one after another, ids counting up.
    std::uniform_int_distribution<int64_t> length(1, skv_ / 3 + 1);
    c.mod_ints.resize(static_cast<size_t>(batch_ * skv_));
    for (int64_t b = 0; b < batch_; ++b) {
      int32_t id = 0;
      for (int64_t j = 0, left = length(rng); j < skv_; ++j, --left) {
        if (left == 0) {
          ++id;
          left = length(rng);
        }
        c.mod_ints[static_cast<size_t>(b * skv_ + j)] = id;
      }
    }
    const int64_t shape[2] = {batch_, skv_};
    c.t_mod_ints = attngen_tensor_contiguous(c.mod_ints.data(), ATTNGEN_I32, 2, shape);
    c.modifier.tensors[0] = &c.t_mod_ints;
    const std::vector<int32_t> ids = c.mod_ints;
    const int64_t skv = skv_;
    c.ref.mask_mod = [ids, skv](int64_t b, int64_t, int64_t p, int64_t j) {
      return reference_document_attends(ids.data() + b * skv, skv, p, j);
    };
    return;
  }
  if (c.modifier_name == "prefix") {
    // Prefixes of 0 to past Skv keys, the edges (none, all) included.
    std::uniform_int_distribution<int32_t> length(0, static_cast<int32_t>(skv_ + 2));
    c.mod_ints.resize(static_cast<size_t>(batch_));
    for (int32_t& x : c.mod_ints) x = length(rng);
    if (batch_ > 1) c.mod_ints[0] = 0;
    if (batch_ > 2) c.mod_ints[1] = static_cast<int32_t>(skv_);
    c.t_mod_ints = attngen_tensor_contiguous(c.mod_ints.data(), ATTNGEN_I32, 1, &batch_);
    c.modifier.tensors[0] = &c.t_mod_ints;
    const std::vector<int32_t> lengths = c.mod_ints;
    c.ref.mask_mod = [lengths](int64_t b, int64_t, int64_t p, int64_t j) {
      return reference_prefix_attends(lengths[static_cast<size_t>(b)], p, j);
    };
    return;
  }
  if (c.modifier_name == "sinks") {
    // 0 to 5 sinks (past a short sequence too) and a window of -1 (none) to about Skv / 2,
    // given as non-integral values half the time (they round down).
    std::uniform_int_distribution<int> sinks(0, 5), window(-1, static_cast<int>(skv_ / 2 + 1));
    std::bernoulli_distribution fraction(0.5);
    const float n = static_cast<float>(sinks(rng)) + (fraction(rng) ? 0.75f : 0.0f);
    const float w = static_cast<float>(window(rng)) + (fraction(rng) ? 0.5f : 0.0f);
    c.modifier.scalars[0] = n;
    c.modifier.scalars[1] = w;
    c.ref.mask_mod = [n, w](int64_t, int64_t, int64_t p, int64_t j) {
      return reference_sinks_attends(n, w, p, j);
    };
    return;
  }
  if (c.modifier_name == "sink_logit") {
    // Logits around the scores' range, one head's -inf (no sink).
    c.mod_floats.init({hq_}, 0);
    fill_modifier_values(c.mod_floats, rng, 3.0);
    if (hq_ > 1) c.mod_floats.buf[0] = -std::numeric_limits<float>::infinity();
    c.modifier.tensors[0] = &c.mod_floats.t;
    const std::vector<double> logits = c.mod_floats.dense();
    c.ref.sink_logit = [logits](int64_t h) { return logits[static_cast<size_t>(h)]; };
    return;
  }
  if (c.modifier_name == "t5_bias") {
    // T5's configurations (32 buckets, 128) and others: few buckets, an odd count, a reach
    // shorter than the sequence (its last bucket shared) or below max_exact, both directions.
    const int64_t bucket_counts[] = {32, 8, 33, 6};
    const float reaches[] = {128.0f, 20.0f, 7.5f, 2.0f};
    std::uniform_int_distribution<int> pick(0, 3);
    std::bernoulli_distribution coin(0.5);
    const int64_t buckets = bucket_counts[pick(rng)];
    const float reach = reaches[pick(rng)];
    const bool bidirectional = coin(rng);
    c.mod_floats.init({buckets, hq_}, 0);
    fill_modifier_values(c.mod_floats, rng, 3.0);
    c.modifier.tensors[0] = &c.mod_floats.t;
    c.modifier.scalars[0] = bidirectional ? 1.0f : 0.0f;
    c.modifier.scalars[1] = reach;
    const std::vector<double> table = c.mod_floats.dense();
    const int64_t hq = hq_;
    // Each relative position's bucket computed once (its long double logs are most of a
    // reference's time, and under qemu emulated in software); rel = j - p lies within
    // +-(Sq + Skv).
    const int64_t span = sq_ + skv_;
    auto bucket_of = std::make_shared<std::vector<int64_t>>(static_cast<size_t>(2 * span + 1), -1);
    c.ref.score_mod = [=](double x, int64_t, int64_t h, int64_t p, int64_t j) {
      const int64_t rel = j - p;
      int64_t bucket = -1;
      if (rel >= -span && rel <= span) {
        int64_t& known = (*bucket_of)[static_cast<size_t>(rel + span)];
        if (known < 0) known = reference_t5_bucket(rel, bidirectional, buckets, reach);
        bucket = known;
      } else {
        bucket = reference_t5_bucket(rel, bidirectional, buckets, reach);
      }
      return x + table[static_cast<size_t>(bucket * hq + h)];
    };
    return;
  }
  ASSERT_EQ(c.modifier_name, "alibi") << "no reference for modifier " << c.modifier_name;
  c.mod_floats.init({hq_}, 0);
  if (standard_slopes_) {
    ASSERT_EQ(attngen_alibi_slopes(hq_, c.mod_floats.buf.data()), ATTNGEN_OK)
        << attngen_last_error();
  } else if (integer_ > 0) {
    fill_modifier_values(c.mod_floats, rng, 0.5);
  } else {
    // Slopes of either sign and size, as learned ones may be, scaled so that the bias (up to
    // slope * Skv) stays within about 40: a score of magnitude x holds in f32 only to x * 2^-24,
    // which the float64 reference does not share (at 600, with S1031, the rounding of the biased
    // scores alone passed the f32 tolerance).
    const double reach = std::min(1.0, 64.0 / static_cast<double>(skv_));
    c.mod_floats.fill_random(rng, -0.3 * reach, 0.6 * reach);
  }
  const bool symmetric = symmetric_;
  c.modifier.tensors[0] = &c.mod_floats.t;
  c.modifier.scalars[0] = symmetric ? 1.0f : 0.0f;
  const std::vector<double> slopes = c.mod_floats.dense();
  c.ref.score_mod = [slopes, symmetric](double x, int64_t, int64_t h, int64_t p, int64_t j) {
    return reference_alibi(x, slopes[static_cast<size_t>(h)], p, j, symmetric);
  };
}

void AttentionTester::add_kv_len(Call& c) const {
  if (kv_len_.empty()) return;
  const int64_t n = static_cast<int64_t>(kv_len_.size());
  c.t_kv_len = attngen_tensor_contiguous(const_cast<int32_t*>(kv_len_.data()), ATTNGEN_I32, 1, &n);
  c.opt.kv_len = &c.t_kv_len;
  c.ref.kv_len = kv_len_;
}

// A mask drawn per element of its own (broadcast) shape.
void AttentionTester::add_mask(Call& c, std::mt19937_64& rng) const {
  if (mask_shape_.empty()) return;
  const int rank = static_cast<int>(mask_shape_.size());
  c.t_mask = attngen_tensor_contiguous(nullptr, mask_bool_ ? ATTNGEN_BOOL : ATTNGEN_F32, rank,
                                       mask_shape_.data());
  int64_t n = 1;
  for (int64_t s : mask_shape_) n *= s;
  std::bernoulli_distribution keep(density_);
  std::uniform_real_distribution<float> val(-2.0f, 2.0f);
  if (mask_bool_) {
    c.mask_bytes.resize(static_cast<size_t>(n));
    for (auto& m : c.mask_bytes) m = keep(rng) ? 1 : 0;
    c.t_mask.data = c.mask_bytes.data();
  } else if (!mask_values_.empty()) {
    EXPECT_EQ(mask_values_.size(), static_cast<size_t>(n)) << "additive mask values for its shape";
    c.mask_floats = mask_values_;
    c.mask_floats.resize(static_cast<size_t>(n), 0.0f);
    c.t_mask.data = c.mask_floats.data();
  } else {
    c.mask_floats.resize(static_cast<size_t>(n));
    for (auto& m : c.mask_floats) {
      const float x = integer_ ? std::round(4.0f * val(rng)) : val(rng);
      m = keep(rng) ? x : -std::numeric_limits<float>::infinity();
    }
    // A NaN in the mask is added to its score: its row becomes NaN.
    if (nonfinite_) {
      c.mask_floats[std::uniform_int_distribution<size_t>(0, c.mask_floats.size() - 1)(rng)] =
          std::numeric_limits<float>::quiet_NaN();
    }
    c.t_mask.data = c.mask_floats.data();
  }
  c.opt.mask_tensor = &c.t_mask;
  const attngen_tensor tm = c.t_mask;
  const auto index = [tm](int64_t b, int64_t h, int64_t i, int64_t j) {
    const int64_t full[4] = {b, h, i, j};
    int64_t off = 0;
    for (int d = 0; d < tm.rank; ++d) {
      const int64_t idx = full[4 - tm.rank + d];
      off += (tm.shape[d] == 1 ? 0 : idx) * tm.strides[d];
    }
    return off;
  };
  if (mask_bool_) {
    const uint8_t* m = c.mask_bytes.data();
    c.ref.keep = [m, index](int64_t b, int64_t h, int64_t i, int64_t j) {
      return m[index(b, h, i, j)] != 0;
    };
  } else {
    const float* m = c.mask_floats.data();
    c.ref.add = [m, index](int64_t b, int64_t h, int64_t i, int64_t j) {
      return static_cast<double>(m[index(b, h, i, j)]);
    };
  }
}

// Sparse pattern: the reference's reading of docs/semantics.md (tests/reference.h), independent
// of the runtime's.
void AttentionTester::add_pattern(Call& c, std::mt19937_64& rng) const {
  c.opt.pattern = pattern_;
  if (pattern_.kind == ATTNGEN_PATTERN_NONE) return;
  RefPattern s;
  s.kind = pattern_.kind;
  s.p = pattern_;
  if (pattern_.kind == ATTNGEN_PATTERN_BLOCK_SPARSE) {
    const int64_t bs = pattern_.block;
    const int64_t shape[2] = {(sq_ + bs - 1) / bs, (skv_ + bs - 1) / bs};
    const size_t n = static_cast<size_t>(shape[0] * shape[1]);
    if (layout_.empty()) {
      c.layout_bytes.resize(n);
      std::bernoulli_distribution on(layout_density_);
      for (auto& x : c.layout_bytes) x = on(rng) ? 1 : 0;
    } else {
      EXPECT_EQ(layout_.size(), n) << "block layout for ceil(Sq / block) x ceil(Skv / block)";
      c.layout_bytes = layout_;
      c.layout_bytes.resize(n, 0);
    }
    c.t_layout = attngen_tensor_contiguous(c.layout_bytes.data(), ATTNGEN_BOOL, 2, shape);
    c.opt.pattern.layout = &c.t_layout;
    s.layout = c.layout_bytes;
    s.rows = shape[0];
    s.cols = shape[1];
  }
  c.ref.pattern = [s](int64_t p, int64_t i, int64_t j) {
    return reference_pattern_attends(s, p, i, j);
  };
}

// The call through the public API; it succeeds, with the kernel asked for.
void AttentionTester::run(Call& c, const attngen_kernel_info* kernel) const {
  const attngen_status st = attngen_attention(&c.tq, &c.tk, &c.tv, &c.out.t(), &c.opt);
  ASSERT_EQ(st, ATTNGEN_OK) << attngen_status_name(st) << ": " << attngen_last_error();
  if (kernel) EXPECT_STREQ(attngen_last_kernel(), kernel->name);
}

// The float64 reference's output (and weights and log-sum-exp, if asked for), which reads the
// inputs as the call stored them (rounded to their dtype), widened to float32.
void AttentionTester::compute_reference(Call& c) const {
  std::vector<float> wq, wk, wv;
  View vq{}, vk{}, vv{};
  if (fused_) {
    wq = c.fused.widened();
    vq = c.fused.view_in(c.tq, wq);
    vk = c.fused.view_in(c.tk, wq);
    vv = c.fused.view_in(c.tv, wq);
  } else {
    wq = c.q.widened();
    wk = c.k.widened();
    wv = c.v.widened();
    vq = c.q.view_in(c.tq, wq);
    vk = c.k.view_in(c.tk, wk);
    vv = c.v.view_in(c.tv, wv);
  }
  c.want = reference_attention(vq, vk, vv, c.ref);
  c.max_v = max_abs(vv);
  c.have_reference = true;
}

// The run's outputs against the reference's.
void AttentionTester::compare_with_reference(const Call& c, const Outputs& got) const {
  expect_close(got.out, c.want, c.max_v, tolerance_dtype(c.dq, c.dout));
  if (weights_) check_weights(c, got.weights);
  if (lse_) check_lse(c, got.lse);
}

// Weights are in [0, 1]: the contract's absolute bound with max|V| = 1. Each row sums to what the
// reference's does: 1, 0 when the row attends nothing, less than 1 with a sink logit (its share
// of the denominator has no key). F32 outputs, computed from the inputs' dtype: its bound.
void AttentionTester::check_weights(const Call& c, const std::vector<double>& got) const {
  expect_close(got, c.want_weights, 1.0, c.dq);
  for (int64_t r = 0; r < batch_ * hq_ * sq_; ++r) {
    double sum = 0, want_sum = 0;
    for (int64_t j = 0; j < skv_; ++j) {
      sum += got[static_cast<size_t>(r * skv_ + j)];
      want_sum += c.want_weights[static_cast<size_t>(r * skv_ + j)];
    }
    if (std::isnan(want_sum)) continue;  // a row made NaN (compared element by element above)
    ASSERT_NEAR(sum, want_sum, 1e-5) << "weights of row " << r;
  }
}

// A fully masked row's log-sum-exp is -inf; the others match to a relative 1e-5 (F32 inputs; the
// bound of their dtype otherwise).
void AttentionTester::check_lse(const Call& c, const std::vector<double>& got) const {
  const double rel = c.dq == ATTNGEN_F32 ? 1e-5 : tolerance_of(c.dq).rel_l2;
  for (size_t r = 0; r < got.size(); ++r) {
    if (std::isnan(c.want_lse[r])) {
      ASSERT_TRUE(std::isnan(got[r])) << "lse of a row made NaN " << r << ": got " << got[r];
    } else if (std::isinf(c.want_lse[r])) {
      ASSERT_TRUE(std::isinf(got[r]) && got[r] < 0) << "lse of fully masked row " << r;
    } else {
      ASSERT_NEAR(got[r], c.want_lse[r], rel * (1.0 + std::abs(c.want_lse[r]))) << "lse row " << r;
    }
  }
}

// The gaps of strided outputs still hold poison.
void AttentionTester::check_gaps(const Call& c) const {
  EXPECT_EQ(c.out.gaps_written(), 0) << "the kernel wrote outside the output view";
  if (weights_) {
    EXPECT_EQ(c.weights.gaps_written(), 0) << "the kernel wrote outside the weights view";
  }
  if (lse_) EXPECT_EQ(c.lse.gaps_written(), 0) << "the kernel wrote outside the lse view";
}

}  // namespace attngen::test
