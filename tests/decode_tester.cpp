#include "tests/decode_tester.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "tests/kv_dtype.h"

namespace attngen::test {
namespace {

bool fatal() { return ::testing::Test::HasFatalFailure(); }

size_t at(int64_t b) { return static_cast<size_t>(b); }

const char* dtype_word(attngen_dtype d) {
  switch (d) {
    case ATTNGEN_F16:
      return "f16";
    case ATTNGEN_BF16:
      return "bf16";
    case ATTNGEN_I8:
      return "i8";
    default:
      return "f32";
  }
}

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
  // Per sequence: positions appended so far, the first position attended (-1: none yet), and
  // the output rows (Hq x Dv each) of the attended positions, in order.
  std::vector<int64_t> len, first_attended;
  std::vector<std::vector<double>> got;

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
  s += std::string(" cache ") + dtype_word(cache_dtype_);
  if (input_dtype_ != ATTNGEN_F32) s += std::string(" input ") + dtype_word(input_dtype_);
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
  return s;
}

void DecodeTester::Test(const attngen_kernel_info* kernel) const {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(describe() + " seed " + std::to_string(seed) +
               (kernel ? std::string(" kernel ") + kernel->name : std::string()));
  std::mt19937_64 rng(seed);

  Run r;
  r.kernel = kernel;
  plan(r);
  if (fatal()) return;
  make_sequences(r, rng);
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
  r.got.assign(at(batch_), {});
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

// The decode into a poisoned output: rows past counts[b] must be 0, the gaps untouched; the
// other rows are kept for the comparison with the reference.
void DecodeTester::decode(Run& r, const std::vector<int32_t>& counts, const Storage& q) const {
  const Counts c(counts);
  const int64_t t = q.t.shape[1];
  Storage out({batch_, t, hq_, dv_}, pad_);
  attngen_decode_options opt = attngen_decode_options_default();
  opt.counts = c.arg;
  opt.kv_splits = kv_splits_;
  opt.kernel = r.kernel ? r.kernel->name : nullptr;
  const attngen_status st = attngen_decode(&q.t, r.cache, layer_, &out.t, &opt);
  ASSERT_EQ(st, ATTNGEN_OK) << attngen_status_name(st) << ": " << attngen_last_error();
  if (r.kernel) EXPECT_STREQ(attngen_last_kernel(), r.kernel->name);
  EXPECT_EQ(out.gaps_written(), 0) << "the kernel wrote outside the output view";
  for (int64_t b = 0; b < batch_; ++b) {
    for (int64_t i = 0; i < t; ++i) {
      for (int64_t h = 0; h < hq_; ++h) {
        for (int64_t d = 0; d < dv_; ++d) {
          const double x = out.get(out.offset({b, i, h, d}));
          if (i < counts[at(b)]) {
            r.got[at(b)].push_back(x);
          } else {
            ASSERT_EQ(x, 0.0) << "padding row " << i << " of sequence " << b;
          }
        }
      }
    }
    if (r.first_attended[at(b)] < 0 && counts[at(b)] > 0) r.first_attended[at(b)] = r.len[at(b)];
  }
}

// Per sequence: the reference for its attended positions [first, n), queries aligned
// bottom-right over keys [0, n) -- the rows of one full causal pass (with a window, the local
// pattern p - L <= j <= p).
void DecodeTester::compare_with_reference(const Run& r) const {
  std::vector<double> all_got, all_want;
  for (int64_t b = 0; b < batch_; ++b) {
    const int64_t n = r.lengths[at(b)], first = r.first_attended[at(b)];
    if (n == 0) continue;  // an empty sequence of the batch (its rows were checked as 0)
    ASSERT_GE(first, 0) << "sequence " << b << " was never attended";
    const Storage& q = rope_ ? r.q_rot : unrounded_q_ ? r.q_ref : r.q;
    const Storage& k = rope_ ? r.k_rot : r.k;
    View vq = view_of(q.t), vk = view_of(k.t), vv = view_of(r.v.t);
    vq.data += q.offset({b, first, 0, 0});
    vk.data += k.offset({b, 0, 0, 0});
    vv.data += r.v.offset({b, 0, 0, 0});
    vq.shape = {1, n - first, hq_, dqk_};
    vk.shape = {1, n, hkv_, dqk_};
    vv.shape = {1, n, hkv_, dv_};
    RefAttention ref;
    ref.causal = true;
    ref.bottom_right = true;
    const int64_t L = window_;
    if (L >= 0) ref.pattern = [L](int64_t p, int64_t, int64_t j) { return j >= p - L; };
    const std::vector<double> want = reference_attention(vq, vk, vv, ref);
    ASSERT_EQ(r.got[at(b)].size(), at((n - first) * hq_ * dv_)) << "rows of sequence " << b;
    all_got.insert(all_got.end(), r.got[at(b)].begin(), r.got[at(b)].end());
    all_want.insert(all_want.end(), want.begin(), want.end());
  }
  const double max_v = max_abs(view_of(r.v.t));
  const kv::Error e = kv::measure(all_got, all_want);
  if (report_rel_ != nullptr) *report_rel_ = e.rel_l2;
  if (report_abs_ != nullptr) *report_abs_ = e.max_abs / max_v;
  if (raw_) {
    EXPECT_LE(e.rel_l2, raw_rel_l2_) << "relative L2 error, K/V unrounded";
    EXPECT_LE(e.max_abs, raw_max_abs_ * max_v) << "max abs error, K/V unrounded";
  } else {
    expect_close(all_got, all_want, max_v, ATTNGEN_F32);
  }
}

}  // namespace attngen::test
