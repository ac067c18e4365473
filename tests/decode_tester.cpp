#include "tests/decode_tester.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <utility>

#include "core/dtype.h"
#include "tests/kv_dtype.h"

namespace attngen::test {
namespace {

bool fatal() { return ::testing::Test::HasFatalFailure(); }

size_t at(int64_t b) { return static_cast<size_t>(b); }

// Rounds each row (innermost dimension) of s to what a cache or tensor of `dtype` holds.
void round_rows(Storage& s, attngen_dtype dtype) {
  if (dtype == ATTNGEN_F32) return;
  const int64_t n = s.t.shape[3];
  std::vector<float> row(static_cast<size_t>(n));
  for (int64_t b = 0; b < s.t.shape[0]; ++b) {
    for (int64_t p = 0; p < s.t.shape[1]; ++p) {
      for (int64_t h = 0; h < s.t.shape[2]; ++h) {
        const int64_t off = s.offset({b, p, h, 0});
        for (int64_t d = 0; d < n; ++d) row[at(d)] = static_cast<float>(s.get(off + d));
        if (dtype == ATTNGEN_I8) {
          kv::quantise_row(row.data(), n);
        } else {
          for (float& x : row) x = static_cast<float>(kv::round_to(dtype, x));
        }
        for (int64_t d = 0; d < n; ++d) s.set(off + d, row[at(d)]);
      }
    }
  }
}

// The same tensor as 16-bit elements of `dtype` (F16 or BF16; values already rounded to it).
struct Bits16 {
  std::vector<uint16_t> buf;
  attngen_tensor t{};

  Bits16(const Storage& s, attngen_dtype dtype) : buf(s.buf.size()), t(s.t) {
    for (size_t i = 0; i < buf.size(); ++i) {
      const double x = s.buf[i];
      buf[i] = dtype == ATTNGEN_F16 ? kv::f16_bits(x) : kv::bf16_bits(x);
    }
    t.data = buf.data();
    t.dtype = dtype;
  }
};

// counts as the API takes them: NULL where every sequence takes all t tokens.
struct Counts {
  std::vector<int32_t> n;
  attngen_tensor t{};
  const attngen_tensor* arg = nullptr;

  explicit Counts(const std::vector<int32_t>& counts) : n(counts) {
    const int64_t b = static_cast<int64_t>(n.size());
    t = attngen_tensor_contiguous(n.data(), ATTNGEN_I32, 1, &b);
    const int32_t most = *std::max_element(n.begin(), n.end());
    if (std::any_of(n.begin(), n.end(), [most](int32_t c) { return c != most; })) arg = &t;
  }
  Counts(const Counts&) = delete;
};

}  // namespace

struct DecodeTester::Run {
  const attngen_kernel_info* kernel = nullptr;
  // The ISAs every decode call runs under in turn ("": dispatch as the caller set it), and where
  // the kernel of each call goes (Test()'s `ran`).
  std::vector<std::string> isas;
  std::vector<std::string>* ran = nullptr;
  // The modifier (empty: none), its parameters (a tensor of f32 values or of i32 ones) and the
  // reference's version of it, with the batch's sequence index b.
  std::string modifier_name;
  attngen_modifier modifier{};
  Storage mod_floats;
  std::vector<int32_t> mod_ints;
  attngen_tensor t_mod_ints{};
  std::function<double(double, int64_t, int64_t, int64_t, int64_t)> score_mod;
  std::function<bool(int64_t, int64_t, int64_t, int64_t)> mask_mod;
  std::function<double(int64_t)> sink_logit;
  // Per sequence: tokens before the steps, and the final length.
  std::vector<int64_t> prefix, lengths;
  int64_t longest = 0, capacity = 0;
  // Whole sequences [B, longest, H, D]; each call copies its tokens out of them. q_ref: the
  // queries the reference takes where they differ from q (unrounded_q()), else empty.
  Storage q, k, v, q_ref;
  // With a rope: its frequencies, and q and K rotated at their positions (the reference's).
  std::vector<float> inv_freq;
  Storage q_rot, k_rot;
  attngen_kv_cache* cache = nullptr;
  // Per sequence: positions appended so far, the first position attended (-1: none yet); per
  // ISA of `isas` and sequence, the output rows (Hq x Dv each) of the attended positions, in order.
  std::vector<int64_t> len, first_attended;
  std::vector<std::vector<std::vector<double>>> got;

  Run() = default;
  Run(const Run&) = delete;
  Run& operator=(const Run&) = delete;
  ~Run() { attngen_kv_cache_destroy(cache); }
};

std::string DecodeTester::describe() const {
  std::string s = "B" + std::to_string(batch_) + " H" + std::to_string(hq_) + "/" +
                  std::to_string(hkv_) + " D" + std::to_string(dqk_) + "/" + std::to_string(dv_);
  if (!prefix_.empty()) {
    s += attend_prefix_ ? " prefill" : " cached";
    for (int64_t n : prefix_) s += " " + std::to_string(n);
  }
  s += " new_tokens " + std::to_string(new_tokens_);
  if (lengths_.empty()) {
    s += " steps " + std::to_string(steps_);
  } else {
    s += " lengths";
    for (int64_t n : lengths_) s += " " + std::to_string(n);
  }
  if (window_ >= 0) s += " window " + std::to_string(window_);
  if (capacity_) s += " capacity " + std::to_string(capacity_);
  if (page_slots_) s += " paged " + std::to_string(page_slots_) + "/" + std::to_string(pages_);
  if (scattered_) s += " scattered";
  if (layers_ != 1) s += " layer " + std::to_string(layer_) + "/" + std::to_string(layers_);
  s += " splits " + std::to_string(kv_splits_);
  if (pad_) s += " padded";
  s += std::string(" cache ") + attngen::dtype_row(cache_dtype_)->name;
  if (input_dtype_ != ATTNGEN_F32)
    s += std::string(" input ") + attngen::dtype_row(input_dtype_)->name;
  if (realistic_) s += " realistic";
  if (raw_) s += " raw";
  if (nonfinite_) s += " nonfinite";
  if (tiny_) s += " tiny";
  if (unrounded_q_) s += " unrounded_q";
  if (zero_q_rows_) s += " zero_q_rows";
  if (rope_) {
    s += " rope " + std::to_string(rotary_dim_) +
         (pairs_ == ATTNGEN_ROPE_INTERLEAVED ? " interleaved" : " half");
  }
  if (!modifier_.empty()) {
    s += " modifier " + modifier_ + (symmetric_ ? " symmetric" : "") +
         (standard_slopes_ ? " standard" : "");
  }
  if (!isas_.empty()) {
    s += " isas";
    for (const std::string& isa : isas_) s += " " + isa;
  }
  return s;
}

void DecodeTester::Test(const attngen_kernel_info* kernel, std::vector<std::string>* ran) const {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(describe() + " seed " + std::to_string(seed) +
               (kernel ? std::string(" kernel ") + kernel->name : std::string()));
  std::mt19937_64 rng(seed);

  Run r;
  r.kernel = kernel;
  r.ran = ran;
  r.isas = isas_.empty() ? std::vector<std::string>{""} : isas_;
  r.modifier_name = modifier_;
  if (r.modifier_name.empty() && kernel != nullptr && kernel->modifier != nullptr) {
    r.modifier_name = kernel->modifier;
  }
  struct RestoreIsa {
    bool set;
    ~RestoreIsa() {
      if (set) attngen_set_isa(nullptr);
    }
  } restore{!isas_.empty()};
  plan(r);
  if (fatal()) return;
  make_sequences(r, rng);
  if (!r.modifier_name.empty()) add_modifier(r, rng);
  if (fatal()) return;
  create_cache(r);
  if (fatal()) return;
  if (scattered_) scatter_pages(r, rng);
  if (fatal()) return;
  fill_prefix(r, rng);
  if (fatal()) return;
  while (true) {
    std::vector<int32_t> counts(at(batch_));
    for (int64_t b = 0; b < batch_; ++b) {
      counts[at(b)] =
          static_cast<int32_t>(std::min<int64_t>(new_tokens_, r.lengths[at(b)] - r.len[at(b)]));
    }
    if (*std::max_element(counts.begin(), counts.end()) == 0) break;
    step(r, counts, /*attend=*/true, rng);
    if (fatal()) return;
  }
  compare_with_reference(r);
}

// Per-sequence prefix and lengths, and the cache's capacity.
void DecodeTester::plan(Run& r) const {
  const auto per_sequence = [&](const std::vector<int64_t>& n, const char* what) {
    if (n.size() == 1) return std::vector<int64_t>(at(batch_), n[0]);
    EXPECT_EQ(n.size(), at(batch_)) << what << " needs one value or one per sequence";
    return n;
  };
  r.prefix = prefix_.empty() ? std::vector<int64_t>(at(batch_), 0)
                             : per_sequence(prefix_, "cached()/prefill()");
  if (lengths_.empty()) {
    r.lengths = r.prefix;
    for (int64_t& n : r.lengths) n += steps_ * new_tokens_;
  } else {
    r.lengths = per_sequence(lengths_, "lengths()");
  }
  ASSERT_EQ(r.prefix.size(), at(batch_));
  ASSERT_EQ(r.lengths.size(), at(batch_));
  r.longest = *std::max_element(r.lengths.begin(), r.lengths.end());
  ASSERT_GT(r.longest, 0) << "nothing to decode";
  int64_t per_call = new_tokens_;
  if (attend_prefix_)
    per_call = std::max(per_call, *std::max_element(r.prefix.begin(), r.prefix.end()));
  const bool ring = window_ >= 0 && page_slots_ == 0;
  r.capacity = capacity_ > 0 ? capacity_ : ring ? window_ + per_call : r.longest;
  r.len.assign(at(batch_), 0);
  r.first_attended.assign(at(batch_), -1);
  r.got.assign(r.isas.size(), std::vector<std::vector<double>>(at(batch_)));
}

// Fresh random q, k and v for every position of every sequence.
void DecodeTester::make_sequences(Run& r, std::mt19937_64& rng) const {
  r.q.init({batch_, r.longest, hq_, dqk_}, 0);
  r.k.init({batch_, r.longest, hkv_, dqk_}, 0);
  r.v.init({batch_, r.longest, hkv_, dv_}, 0);
  if (realistic_) {
    std::normal_distribution<double> normal(0.0, 1.0);
    // Per kv head and channel: an offset, and a few outlier channels 8x the others.
    std::vector<double> offset(at(hkv_ * dqk_)), gain(at(hkv_ * dqk_), 1.0);
    for (double& o : offset) o = 0.5 * normal(rng);
    std::uniform_int_distribution<int64_t> channel(0, dqk_ - 1);
    for (int64_t h = 0; h < hkv_; ++h) {
      for (int i = 0; i < 4; ++i) gain[at(h * dqk_ + channel(rng))] = 8.0;
    }
    for (int64_t b = 0; b < batch_; ++b) {
      for (int64_t p = 0; p < r.longest; ++p) {
        for (int64_t h = 0; h < hq_; ++h) {
          for (int64_t d = 0; d < dqk_; ++d) r.q.set(r.q.offset({b, p, h, d}), normal(rng));
        }
        for (int64_t h = 0; h < hkv_; ++h) {
          for (int64_t d = 0; d < dqk_; ++d) {
            const size_t c = at(h * dqk_ + d);
            r.k.set(r.k.offset({b, p, h, d}), offset[c] + gain[c] * normal(rng));
          }
          for (int64_t d = 0; d < dv_; ++d) r.v.set(r.v.offset({b, p, h, d}), normal(rng));
        }
      }
    }
  } else {
    r.q.fill_random(rng, -1.0, 1.0);
    r.k.fill_random(rng, -1.0, 1.0);
    r.v.fill_random(rng, -1.0, 1.0);
  }
  if (tiny_) {
    for (Storage* s : {&r.k, &r.v}) {
      for (float& x : s->buf) x = std::ldexp(x, -16);
    }
    for (float& x : r.q.buf) x = std::ldexp(x, 16);
  }
  if (zero_q_rows_) {
    for (int64_t b = 0; b < batch_; ++b) {
      for (int64_t p = 0; p < r.longest; ++p) {
        for (int64_t h = 0; h < hq_; h += 2) {
          for (int64_t d = 0; d < dqk_; ++d) r.q.set(r.q.offset({b, p, h, d}), 0.0);
        }
      }
    }
  }
  if (nonfinite_) {
    const double values[3] = {std::numeric_limits<double>::quiet_NaN(),
                              std::numeric_limits<double>::infinity(),
                              -std::numeric_limits<double>::infinity()};
    const auto pick = [&rng](int64_t n) {
      return std::uniform_int_distribution<int64_t>(0, n - 1)(rng);
    };
    for (Storage* s : {&r.q, &r.k, &r.v}) {
      const attngen_tensor& t = s->t;
      s->set(s->offset({pick(t.shape[0]), pick(t.shape[1]), pick(t.shape[2]), pick(t.shape[3])}),
             values[pick(3)]);
    }
  }
  // What the appends take (their input type), and unless raw_kv(), what the cache stores: the
  // reference sees the same values.
  for (Storage* s : {&r.k, &r.v}) {
    round_rows(*s, input_dtype_);
    if (!raw_) round_rows(*s, cache_dtype_);
  }
  // The i8-cache kernels of the avx512bf16 row quantise each query row as the cache quantises
  // a K row (docs/semantics.md, "I8"): unless raw_kv() or unrounded_q(), q is given quantised
  // so, and every kernel must meet the f32 tolerance.
  if (!raw_ && !unrounded_q_ && cache_dtype_ == ATTNGEN_I8) round_rows(r.q, ATTNGEN_I8);
  if (unrounded_q_) {
    r.q_ref.init({batch_, r.longest, hq_, dqk_}, 0);
    std::copy(r.q.buf.begin(), r.q.buf.end(), r.q_ref.buf.begin());
    round_rows(r.q_ref, ATTNGEN_I8);
  }
  if (rope_) make_rotated(r, rng);
}

// The rope's frequencies (base^(-2i / r) of a random base) and the reference's q and K, rotated
// at their positions (position p of a sequence in row p).
void DecodeTester::make_rotated(Run& r, std::mt19937_64& rng) const {
  ASSERT_TRUE(cache_dtype_ == ATTNGEN_F32 || raw_) << "rope() with a rounding cache needs raw_kv()";
  ASSERT_FALSE(unrounded_q_) << "rope() and unrounded_q() do not combine";
  const int64_t dim = rotary_dim_ ? rotary_dim_ : dqk_;
  const double base = std::uniform_real_distribution<double>(500.0, 20000.0)(rng);
  std::vector<double> freq(at(dim / 2));
  r.inv_freq.resize(freq.size());
  for (size_t i = 0; i < freq.size(); ++i) {
    r.inv_freq[i] = static_cast<float>(std::pow(base, -2.0 * static_cast<double>(i) / dim));
    freq[i] = r.inv_freq[i];  // the reference takes the frequencies the cache is given
  }
  std::vector<int64_t> positions;
  for (int64_t b = 0; b < batch_; ++b) {
    for (int64_t p = 0; p < r.longest; ++p) positions.push_back(p);
  }
  const bool interleaved = pairs_ == ATTNGEN_ROPE_INTERLEAVED;
  for (const auto& [from, to] : {std::pair<Storage*, Storage*>{&r.q, &r.q_rot}, {&r.k, &r.k_rot}}) {
    const std::vector<double> rotated =
        reference_rope(view_of(from->t), dim, interleaved, freq, positions);
    to->init({from->t.shape[0], from->t.shape[1], from->t.shape[2], from->t.shape[3]}, 0);
    for (size_t i = 0; i < rotated.size(); ++i) to->buf[i] = static_cast<float>(rotated[i]);
  }
}

namespace {

// The key block of the decode kernels generated with `modifier` (the largest; 64 where none is
// built): where sinks and windows cross block edges, and which blocks a long cache skips.
int64_t modifier_key_block(const std::string& modifier) {
  int64_t block = 0;
  for (size_t i = 0; i < attngen_kernel_count(); ++i) {
    const attngen_kernel_info* k = attngen_kernel_at(i);
    if (k->op == ATTNGEN_OP_DECODE && k->modifier != nullptr && modifier == k->modifier) {
      block = std::max<int64_t>(block, k->key_block);
    }
  }
  return block > 0 ? block : 64;
}

}  // namespace

// The modifier's parameters, fresh, in the call's dims (Skv: the cache's capacity), and the
// reference's own version of it over absolute positions (p of the query row, j of the key).
void DecodeTester::add_modifier(Run& r, std::mt19937_64& rng) const {
  const std::string& name = r.modifier_name;
  r.modifier.name = name.c_str();
  const bool ring = window_ >= 0 && page_slots_ == 0;
  const auto pick = [&rng](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  std::bernoulli_distribution coin(0.5);
  if (name == "document") {
    ASSERT_FALSE(ring) << "document ids [B, capacity] over a ring buffer are an error, not a test";
    // Documents of 1 to capacity / 3 + 1 positions (a quarter of them 1), packed one after
    // another, ids counting up.
    const int64_t cap = r.capacity;
    const auto length = [&] { return pick(0, 3) == 0 ? 1 : pick(1, cap / 3 + 1); };
    r.mod_ints.resize(at(batch_ * cap));
    for (int64_t b = 0; b < batch_; ++b) {
      int32_t id = 0;
      for (int64_t j = 0, left = length(); j < cap; ++j, --left) {
        if (left == 0) {
          ++id;
          left = length();
        }
        r.mod_ints[at(b * cap + j)] = id;
      }
    }
    const int64_t shape[2] = {batch_, cap};
    r.t_mod_ints = attngen_tensor_contiguous(r.mod_ints.data(), ATTNGEN_I32, 2, shape);
    r.modifier.tensors[0] = &r.t_mod_ints;
    const std::vector<int32_t> ids = r.mod_ints;
    r.mask_mod = [ids, cap](int64_t b, int64_t, int64_t p, int64_t j) {
      return reference_document_attends(ids.data() + b * cap, cap, p, j);
    };
    return;
  }
  if (name == "prefix") {
    // Prefixes of 0 to past the capacity, the edges among them (decode being causal, they change
    // nothing: the mask adds no pair to the causal one).
    r.mod_ints.resize(at(batch_));
    for (int32_t& x : r.mod_ints) x = static_cast<int32_t>(pick(0, r.capacity + 2));
    if (batch_ > 1) r.mod_ints[0] = 0;
    r.t_mod_ints = attngen_tensor_contiguous(r.mod_ints.data(), ATTNGEN_I32, 1, &batch_);
    r.modifier.tensors[0] = &r.t_mod_ints;
    const std::vector<int32_t> lengths = r.mod_ints;
    r.mask_mod = [lengths](int64_t b, int64_t, int64_t p, int64_t j) {
      return reference_prefix_attends(lengths[at(b)], p, j);
    };
    return;
  }
  if (name == "sinks") {
    // Sinks: a few, or about a key block (the sink keys across its edge); a window of none, a few
    // keys (within a short ring's), under a key block, past one, or up to half the longest
    // sequence: in a long cache the blocks between the sinks and the window are skipped, and
    // windows start across block edges.
    // Non-integral values half the time (they round down).
    const int64_t block = modifier_key_block(name);
    const int64_t sink_choices[] = {0, pick(1, 5), block - 1, block + 2};
    const int64_t window_choices[] = {-1, pick(0, 8), pick(0, block - 1), block + pick(0, block),
                                      pick(0, std::max<int64_t>(r.longest / 2, 1))};
    const float n = static_cast<float>(sink_choices[pick(0, 3)]) + (coin(rng) ? 0.75f : 0.0f);
    const float w = static_cast<float>(window_choices[pick(0, 4)]) + (coin(rng) ? 0.5f : 0.0f);
    r.modifier.scalars[0] = n;
    r.modifier.scalars[1] = w;
    r.mask_mod = [n, w](int64_t, int64_t, int64_t p, int64_t j) {
      return reference_sinks_attends(n, w, p, j);
    };
    return;
  }
  if (name == "sink_logit") {
    // Logits around the scores' range; the first head's -inf (no sink), the last's large (the
    // sink outweighs a short sequence's keys).
    r.mod_floats.init({hq_}, 0);
    r.mod_floats.fill_random(rng, -3.0, 3.0);
    if (hq_ > 1) r.mod_floats.buf[0] = -std::numeric_limits<float>::infinity();
    if (hq_ > 2) r.mod_floats.buf[at(hq_ - 1)] = static_cast<float>(pick(5, 8));
    r.modifier.tensors[0] = &r.mod_floats.t;
    const std::vector<double> logits = r.mod_floats.dense();
    r.sink_logit = [logits](int64_t h) { return logits[at(h)]; };
    return;
  }
  if (name == "t5_bias") {
    // T5's configuration (32 buckets, 128) and others: few buckets, an odd count, a reach
    // shorter than the sequence or below max_exact; either direction (decode being causal, only
    // keys at or before the query).
    const int64_t bucket_counts[] = {32, 8, 33, 6};
    const float reaches[] = {128.0f, 20.0f, 7.5f, 2.0f};
    const int64_t buckets = bucket_counts[pick(0, 3)];
    const float reach = reaches[pick(0, 3)];
    const bool bidirectional = coin(rng);
    r.mod_floats.init({buckets, hq_}, 0);
    r.mod_floats.fill_random(rng, -3.0, 3.0);
    r.modifier.tensors[0] = &r.mod_floats.t;
    r.modifier.scalars[0] = bidirectional ? 1.0f : 0.0f;
    r.modifier.scalars[1] = reach;
    const std::vector<double> table = r.mod_floats.dense();
    const int64_t hq = hq_;
    // Each relative position's bucket computed once (long double logarithms); rel = j - p lies
    // within +-longest.
    const int64_t span = r.longest;
    auto bucket_of = std::make_shared<std::vector<int64_t>>(at(2 * span + 1), -1);
    r.score_mod = [=](double x, int64_t, int64_t h, int64_t p, int64_t j) {
      const int64_t rel = j - p;
      int64_t bucket = -1;
      if (rel >= -span && rel <= span) {
        int64_t& known = (*bucket_of)[at(rel + span)];
        if (known < 0) known = reference_t5_bucket(rel, bidirectional, buckets, reach);
        bucket = known;
      } else {
        bucket = reference_t5_bucket(rel, bidirectional, buckets, reach);
      }
      return x + table[at(bucket * hq + h)];
    };
    return;
  }
  ASSERT_EQ(name, "alibi") << "no reference for modifier " << name;
  r.mod_floats.init({hq_}, 0);
  if (standard_slopes_) {
    ASSERT_EQ(attngen_alibi_slopes(hq_, r.mod_floats.buf.data()), ATTNGEN_OK)
        << attngen_last_error();
  } else {
    // Positive slopes, scaled so that the bias (up to slope * length) stays within about 40: a
    // score of magnitude x holds in f32 only to x * 2^-24, which the float64 reference does not
    // share.
    const double reach = std::min(1.0, 64.0 / static_cast<double>(r.longest));
    r.mod_floats.fill_random(rng, 0.01 * reach, 0.6 * reach);
  }
  const bool symmetric = symmetric_;
  r.modifier.tensors[0] = &r.mod_floats.t;
  r.modifier.scalars[0] = symmetric ? 1.0f : 0.0f;
  const std::vector<double> slopes = r.mod_floats.dense();
  r.score_mod = [slopes, symmetric](double x, int64_t, int64_t h, int64_t p, int64_t j) {
    return reference_alibi(x, slopes[at(h)], p, j, symmetric);
  };
}

void DecodeTester::create_cache(Run& r) const {
  attngen_kv_cache_options o = attngen_kv_cache_options_default();
  o.layers = layers_;
  o.batch = batch_;
  o.heads_kv = hkv_;
  o.head_dim_qk = dqk_;
  o.head_dim_v = dv_;
  o.capacity = r.capacity;
  o.window = window_;
  o.dtype = cache_dtype_;
  o.page_slots = page_slots_;
  o.pages = pages_;
  const int64_t half = static_cast<int64_t>(r.inv_freq.size());
  const attngen_tensor freq = attngen_tensor_contiguous(r.inv_freq.data(), ATTNGEN_F32, 1, &half);
  attngen_rope rope = attngen_rope_default();
  rope.rotary_dim = rotary_dim_;
  rope.pairs = pairs_;
  rope.inv_freq = &freq;
  if (rope_) o.rope = &rope;
  ASSERT_EQ(attngen_kv_cache_create(&o, &r.cache), ATTNGEN_OK) << attngen_last_error();
}

// Other random K and V in every sequence of the layer (the pool's pages shared out evenly, each
// page at least partly filled), then the sequences reset in a random order, so that the free
// pages come back in no order and hold finite stale data.
void DecodeTester::scatter_pages(Run& r, std::mt19937_64& rng) const {
  ASSERT_GT(page_slots_, 0) << "scattered_pages() needs paged()";
  int64_t pool = -1;
  ASSERT_EQ(attngen_kv_cache_free_pages(r.cache, &pool), ATTNGEN_OK);
  const int64_t per_sequence =
      std::min(pool / batch_, (r.capacity + page_slots_ - 1) / page_slots_);
  const int64_t n = std::min(r.capacity, per_sequence * page_slots_);
  if (n <= 0) return;
  Storage k({batch_, n, hkv_, dqk_}, 0), v({batch_, n, hkv_, dv_}, 0);
  k.fill_random(rng, -4.0, 4.0);
  v.fill_random(rng, -4.0, 4.0);
  ASSERT_EQ(attngen_kv_cache_append(r.cache, layer_, &k.t, &v.t, nullptr), ATTNGEN_OK)
      << attngen_last_error();
  std::vector<int64_t> order(at(batch_));
  for (int64_t b = 0; b < batch_; ++b) order[at(b)] = b;
  std::shuffle(order.begin(), order.end(), rng);
  for (int64_t b : order) ASSERT_EQ(attngen_kv_cache_reset(r.cache, b), ATTNGEN_OK);
  int64_t free_after = -1;
  ASSERT_EQ(attngen_kv_cache_free_pages(r.cache, &free_after), ATTNGEN_OK);
  EXPECT_EQ(free_after, pool) << "pages lost by the resets";
}

// A prompt in one call, attended; or cached tokens, appended only (a ring buffer in appends of
// at most capacity - window tokens).
void DecodeTester::fill_prefix(Run& r, std::mt19937_64& rng) const {
  const bool ring = window_ >= 0 && page_slots_ == 0;
  const int64_t limit = ring ? r.capacity - window_ : r.capacity;
  while (true) {
    std::vector<int32_t> counts(at(batch_));
    for (int64_t b = 0; b < batch_; ++b) {
      const int64_t left = std::min(r.prefix[at(b)], r.lengths[at(b)]) - r.len[at(b)];
      counts[at(b)] = static_cast<int32_t>(attend_prefix_ ? left : std::min(left, limit));
    }
    if (*std::max_element(counts.begin(), counts.end()) == 0) return;
    step(r, counts, attend_prefix_, rng);
    if (fatal() || attend_prefix_) return;
  }
}

// One call's tokens: the next counts[b] positions of each sequence appended, and their queries
// decoded if `attend`. K and V rows past counts[b] stay poisoned (they are never appended);
// query rows past it are random (their outputs must be 0 all the same).
void DecodeTester::step(Run& r, const std::vector<int32_t>& counts, bool attend,
                        std::mt19937_64& rng) const {
  const int32_t t = *std::max_element(counts.begin(), counts.end());
  Storage q, k({batch_, t, hkv_, dqk_}, 0), v({batch_, t, hkv_, dv_}, 0);
  if (attend) {
    q.init({batch_, t, hq_, dqk_}, pad_);
    q.fill_random(rng, -1.0, 1.0);
  }
  for (int64_t b = 0; b < batch_; ++b) {
    for (int64_t i = 0; i < counts[at(b)]; ++i) {
      const int64_t p = r.len[at(b)] + i;
      for (int64_t h = 0; h < hkv_; ++h) {
        for (int64_t d = 0; d < dqk_; ++d)
          k.set(k.offset({b, i, h, d}), r.k.get(r.k.offset({b, p, h, d})));
        for (int64_t d = 0; d < dv_; ++d)
          v.set(v.offset({b, i, h, d}), r.v.get(r.v.offset({b, p, h, d})));
      }
      if (!attend) continue;
      for (int64_t h = 0; h < hq_; ++h) {
        for (int64_t d = 0; d < dqk_; ++d)
          q.set(q.offset({b, i, h, d}), r.q.get(r.q.offset({b, p, h, d})));
      }
    }
  }
  append(r, counts, k, v);
  if (fatal()) return;
  if (attend) decode(r, counts, q);
  for (int64_t b = 0; b < batch_; ++b) r.len[at(b)] += counts[at(b)];
}

// The append succeeds, and each sequence's length grows by its count.
void DecodeTester::append(Run& r, const std::vector<int32_t>& counts, const Storage& k,
                          const Storage& v) const {
  const Counts c(counts);
  attngen_status st;
  if (input_dtype_ == ATTNGEN_F32) {
    st = attngen_kv_cache_append(r.cache, layer_, &k.t, &v.t, c.arg);
  } else {
    const Bits16 k16(k, input_dtype_), v16(v, input_dtype_);
    st = attngen_kv_cache_append(r.cache, layer_, &k16.t, &v16.t, c.arg);
  }
  ASSERT_EQ(st, ATTNGEN_OK) << attngen_status_name(st) << ": " << attngen_last_error();
  for (int64_t b = 0; b < batch_; ++b) {
    int64_t n = -1;
    ASSERT_EQ(attngen_kv_cache_length(r.cache, layer_, b, &n), ATTNGEN_OK);
    EXPECT_EQ(n, r.len[at(b)] + counts[at(b)]) << "length of sequence " << b;
  }
}

// The decode into a poisoned output, under each ISA of the run in turn: rows past counts[b] must
// be 0, the gaps untouched; the other rows are kept for the comparison with the reference.
void DecodeTester::decode(Run& r, const std::vector<int32_t>& counts, const Storage& q) const {
  const Counts c(counts);
  const int64_t t = q.t.shape[1];
  attngen_decode_options opt = attngen_decode_options_default();
  opt.counts = c.arg;
  opt.kv_splits = kv_splits_;
  opt.kernel = r.kernel ? r.kernel->name : nullptr;
  if (!r.modifier_name.empty()) opt.modifier = &r.modifier;
  for (size_t u = 0; u < r.isas.size(); ++u) {
    const std::string& isa = r.isas[u];
    SCOPED_TRACE(isa.empty() ? std::string("ISA as set") : "ISA " + isa);
    if (!isa.empty()) {
      ASSERT_EQ(attngen_set_isa(isa.c_str()), ATTNGEN_OK) << attngen_last_error();
    }
    Storage out({batch_, t, hq_, dv_}, pad_);
    const attngen_status st = attngen_decode(&q.t, r.cache, layer_, &out.t, &opt);
    ASSERT_EQ(st, ATTNGEN_OK) << attngen_status_name(st) << ": " << attngen_last_error();
    check_kernel(r, isa);
    if (fatal()) return;
    EXPECT_EQ(out.gaps_written(), 0) << "the kernel wrote outside the output view";
    for (int64_t b = 0; b < batch_; ++b) {
      for (int64_t i = 0; i < t; ++i) {
        for (int64_t h = 0; h < hq_; ++h) {
          for (int64_t d = 0; d < dv_; ++d) {
            const double x = out.get(out.offset({b, i, h, d}));
            if (i < counts[at(b)]) {
              r.got[u][at(b)].push_back(x);
            } else {
              ASSERT_EQ(x, 0.0) << "padding row " << i << " of sequence " << b;
            }
          }
        }
      }
    }
  }
  for (int64_t b = 0; b < batch_; ++b) {
    if (r.first_attended[at(b)] < 0 && counts[at(b)] > 0) r.first_attended[at(b)] = r.len[at(b)];
  }
}

// The kernel the last decode call ran: the one named, where one was; with a modifier one
// generated with it (with an F32 cache, which the modifier kernels read, one of the turn's ISA),
// without one none generated with a modifier.
void DecodeTester::check_kernel(const Run& r, const std::string& isa) const {
  const std::string name = attngen_last_kernel();
  if (r.ran != nullptr) r.ran->push_back(name);
  if (r.kernel) {
    EXPECT_EQ(name, r.kernel->name);
  }
  const attngen_kernel_info* k = attngen_find_kernel(name.c_str());
  ASSERT_NE(k, nullptr) << "attngen_last_kernel() names no kernel: '" << name << "'";
  const std::string modifier = k->modifier != nullptr ? k->modifier : "";
  EXPECT_EQ(modifier, r.modifier_name)
      << name << " ran a decode call with modifier '" << r.modifier_name << "'";
  if (!r.modifier_name.empty() && !isa.empty() && cache_dtype_ == ATTNGEN_F32) {
    EXPECT_EQ(std::string(k->isa), isa) << name << " ran a call restricted to ISA " << isa;
  }
}

// Per sequence: the reference for its attended positions [first, n), one decode of n - first
// rows over all its n positions (reference_decode: queries aligned bottom-right over keys
// [0, n), the rows of one full causal pass; with a window, p - L <= j <= p; the modifier's
// reference at absolute positions); each ISA's rows against it.
void DecodeTester::compare_with_reference(const Run& r) const {
  const Storage& q = rope_ ? r.q_rot : unrounded_q_ ? r.q_ref : r.q;
  const Storage& k = rope_ ? r.k_rot : r.k;
  std::vector<int64_t> rows(at(batch_), 0);
  for (int64_t b = 0; b < batch_; ++b) {
    const int64_t n = r.lengths[at(b)], first = r.first_attended[at(b)];
    if (n == 0) continue;  // an empty sequence of the batch (its rows were checked as 0)
    ASSERT_GE(first, 0) << "sequence " << b << " was never attended";
    rows[at(b)] = n - first;
  }
  const int64_t t = *std::max_element(rows.begin(), rows.end());
  std::vector<double> dq(at(batch_ * t * hq_ * dqk_), 0.0);
  std::vector<std::vector<double>> dk(at(batch_)), dv(at(batch_));
  for (int64_t b = 0; b < batch_; ++b) {
    const int64_t first = r.first_attended[at(b)];
    for (int64_t i = 0; i < rows[at(b)]; ++i) {
      for (int64_t h = 0; h < hq_; ++h) {
        for (int64_t d = 0; d < dqk_; ++d) {
          dq[at(((b * t + i) * hq_ + h) * dqk_ + d)] = q.get(q.offset({b, first + i, h, d}));
        }
      }
    }
    for (int64_t p = 0; p < r.lengths[at(b)]; ++p) {
      for (int64_t h = 0; h < hkv_; ++h) {
        for (int64_t d = 0; d < dqk_; ++d) dk[at(b)].push_back(k.get(k.offset({b, p, h, d})));
        for (int64_t d = 0; d < dv_; ++d) dv[at(b)].push_back(r.v.get(r.v.offset({b, p, h, d})));
      }
    }
  }
  RefDecode ref;
  ref.heads_kv = hkv_;
  ref.head_dim_qk = dqk_;
  ref.head_dim_v = dv_;
  ref.window = window_;
  ref.counts = rows;
  ref.score_mod = r.score_mod;
  ref.mask_mod = r.mask_mod;
  ref.sink_logit = r.sink_logit;
  const std::vector<double> out = reference_decode(dq, batch_, t, hq_, dk, dv, ref);
  std::vector<double> all_want;
  for (int64_t b = 0; b < batch_; ++b) {
    const auto from = out.begin() + static_cast<std::ptrdiff_t>(b * t * hq_ * dv_);
    all_want.insert(all_want.end(), from,
                    from + static_cast<std::ptrdiff_t>(rows[at(b)] * hq_ * dv_));
  }
  const double max_v = max_abs(view_of(r.v.t));
  double worst_rel = 0, worst_abs = 0;
  for (size_t u = 0; u < r.isas.size(); ++u) {
    SCOPED_TRACE(r.isas[u].empty() ? std::string("ISA as set") : "ISA " + r.isas[u]);
    std::vector<double> all_got;
    for (int64_t b = 0; b < batch_; ++b) {
      const std::vector<double>& got = r.got[u][at(b)];
      ASSERT_EQ(got.size(), at(rows[at(b)] * hq_ * dv_)) << "rows of sequence " << b;
      all_got.insert(all_got.end(), got.begin(), got.end());
    }
    const kv::Error e = kv::measure(all_got, all_want);
    worst_rel = std::max(worst_rel, e.rel_l2);
    worst_abs = std::max(worst_abs, e.max_abs / max_v);
    if (raw_) {
      EXPECT_LE(e.rel_l2, raw_rel_l2_) << "relative L2 error, K/V unrounded";
      EXPECT_LE(e.max_abs, raw_max_abs_ * max_v) << "max abs error, K/V unrounded";
    } else {
      expect_close(all_got, all_want, max_v, ATTNGEN_F32);
    }
  }
  if (report_rel_ != nullptr) *report_rel_ = worst_rel;
  if (report_abs_ != nullptr) *report_abs_ = worst_abs;
}

}  // namespace attngen::test
