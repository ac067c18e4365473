// A paged KV cache (attngen.h, "Incremental decoding"; F32, F16, BF16): forks that share pages
// until one of the sequences writes into a shared one, a pool that runs out (a named error, nothing
// changed), random lifecycles of appends, forks, resets and decodes, each decode equal bit for bit
// to the same decode over a contiguous cache fed the same sequences (the same kernels: the
// contiguous cache is one page per sequence) and, for an F32 cache, to the float64 reference; the
// options' validation. The decode kernels themselves over pages: DecodeKernel.PagedCache.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "attngen/attngen.h"
#include "tests/reference.h"
#include "tests/tensor.h"

namespace attngen::test {
namespace {

size_t at(int64_t i) { return static_cast<size_t>(i); }

// One paged cache and one contiguous cache of the same sequences, with every sequence's K and V
// (as given, each layer its own) kept for the reference.
class Twins {
 public:
  Twins(attngen_dtype dtype, int64_t batch, int64_t page_slots, int64_t pages, int64_t capacity,
        int64_t layers = 2)
      : batch_(batch),
        layers_(layers),
        dtype_(dtype),
        k_(at(layers * batch)),
        v_(at(layers * batch)) {
    attngen_kv_cache_options o = attngen_kv_cache_options_default();
    o.layers = layers;
    o.batch = batch;
    o.heads_kv = kHkv;
    o.head_dim_qk = kD;
    o.capacity = capacity;
    o.dtype = dtype;
    EXPECT_EQ(attngen_kv_cache_create(&o, &contiguous_), ATTNGEN_OK) << attngen_last_error();
    o.page_slots = page_slots;
    o.pages = pages;
    EXPECT_EQ(attngen_kv_cache_create(&o, &paged_), ATTNGEN_OK) << attngen_last_error();
  }
  ~Twins() {
    attngen_kv_cache_destroy(paged_);
    attngen_kv_cache_destroy(contiguous_);
  }
  Twins(const Twins&) = delete;
  Twins& operator=(const Twins&) = delete;

  attngen_kv_cache* paged() { return paged_; }
  int64_t length(int64_t layer, int64_t b) const {
    return static_cast<int64_t>(k_[at(layer * batch_ + b)].size() / (kHkv * kD));
  }
  int64_t free_pages() const {
    int64_t n = -1;
    EXPECT_EQ(attngen_kv_cache_free_pages(paged_, &n), ATTNGEN_OK);
    return n;
  }

  // Appends counts[b] fresh random tokens to each sequence of the layer in both caches; the
  // paged one's status is returned (on an error the contiguous one is left as the paged one:
  // nothing appended).
  attngen_status append(int64_t layer, const std::vector<int32_t>& counts, std::mt19937_64& rng) {
    const int32_t t = std::max(1, *std::max_element(counts.begin(), counts.end()));
    Storage k({batch_, t, kHkv, kD}, 0), v({batch_, t, kHkv, kD}, 0);
    k.fill_random(rng, -1.0, 1.0);
    v.fill_random(rng, -1.0, 1.0);
    std::vector<int32_t> n = counts;
    const int64_t b = batch_;
    const attngen_tensor ct = attngen_tensor_contiguous(n.data(), ATTNGEN_I32, 1, &b);
    const attngen_status st = attngen_kv_cache_append(paged_, layer, &k.t, &v.t, &ct);
    if (st != ATTNGEN_OK) return st;
    EXPECT_EQ(attngen_kv_cache_append(contiguous_, layer, &k.t, &v.t, &ct), ATTNGEN_OK)
        << attngen_last_error();
    for (int64_t s = 0; s < batch_; ++s) {
      for (int32_t i = 0; i < counts[at(s)]; ++i) {
        for (int64_t h = 0; h < kHkv; ++h) {
          for (int64_t d = 0; d < kD; ++d) {
            k_[at(layer * batch_ + s)].push_back(static_cast<float>(k.get(k.offset({s, i, h, d}))));
            v_[at(layer * batch_ + s)].push_back(static_cast<float>(v.get(v.offset({s, i, h, d}))));
          }
        }
      }
    }
    return st;
  }

  void fork(int64_t from, int64_t to) {
    ASSERT_EQ(attngen_kv_cache_fork(paged_, from, to), ATTNGEN_OK) << attngen_last_error();
    ASSERT_EQ(attngen_kv_cache_fork(contiguous_, from, to), ATTNGEN_OK) << attngen_last_error();
    for (int64_t l = 0; l < layers_; ++l) {
      k_[at(l * batch_ + to)] = k_[at(l * batch_ + from)];
      v_[at(l * batch_ + to)] = v_[at(l * batch_ + from)];
    }
  }

  void reset(int64_t b) {
    ASSERT_EQ(attngen_kv_cache_reset(paged_, b), ATTNGEN_OK);
    ASSERT_EQ(attngen_kv_cache_reset(contiguous_, b), ATTNGEN_OK);
    for (int64_t l = 0; l < layers_; ++l) {
      k_[at(l * batch_ + b)].clear();
      v_[at(l * batch_ + b)].clear();
    }
  }

  // The last counts[b] positions of each sequence of the layer attended by fresh queries over
  // both caches: the outputs equal bit for bit, every row written (rows past a count 0), and an
  // F32 cache's rows against the float64 reference of the sequence's K and V.
  void decode(int64_t layer, const std::vector<int32_t>& counts, std::mt19937_64& rng) {
    const int32_t t = std::max(1, *std::max_element(counts.begin(), counts.end()));
    Storage q({batch_, t, kHq, kD}, 0), out_p({batch_, t, kHq, kD}, 0),
        out_c({batch_, t, kHq, kD}, 0);
    q.fill_random(rng, -1.0, 1.0);
    std::vector<int32_t> n = counts;
    const int64_t b = batch_;
    const attngen_tensor ct = attngen_tensor_contiguous(n.data(), ATTNGEN_I32, 1, &b);
    attngen_decode_options opt = attngen_decode_options_default();
    opt.counts = &ct;
    ASSERT_EQ(attngen_decode(&q.t, paged_, layer, &out_p.t, &opt), ATTNGEN_OK)
        << attngen_last_error();
    ASSERT_EQ(attngen_decode(&q.t, contiguous_, layer, &out_c.t, &opt), ATTNGEN_OK)
        << attngen_last_error();
    ASSERT_EQ(std::memcmp(out_p.buf.data(), out_c.buf.data(), out_p.buf.size() * sizeof(float)), 0)
        << "the paged cache's decode differs from the contiguous cache's";
    for (int64_t s = 0; s < batch_; ++s) {
      const int64_t len = length(layer, s), rows = counts[at(s)];
      for (int64_t i = 0; i < t; ++i) {
        for (int64_t h = 0; h < kHq; ++h) {
          for (int64_t d = 0; d < kD; ++d) {
            const double x = out_p.get(out_p.offset({s, i, h, d}));
            ASSERT_FALSE(is_poison(static_cast<float>(x))) << "row " << i << " not written";
            if (i >= rows) ASSERT_EQ(x, 0.0) << "padding row " << i << " of sequence " << s;
          }
        }
      }
      if (dtype_ != ATTNGEN_F32 || rows == 0) continue;
      const std::vector<float>& ks = k_[at(layer * batch_ + s)];
      const std::vector<float>& vs = v_[at(layer * batch_ + s)];
      View vq = view_of(q.t),
           vk{ks.data(), {1, len, kHkv, kD}, {len * kHkv * kD, kHkv * kD, kD, 1}},
           vv{vs.data(), {1, len, kHkv, kD}, {len * kHkv * kD, kHkv * kD, kD, 1}};
      vq.data += q.offset({s, 0, 0, 0});
      vq.shape = {1, rows, kHq, kD};
      RefAttention ref;
      ref.causal = true;
      ref.bottom_right = true;
      const std::vector<double> want = reference_attention(vq, vk, vv, ref);
      std::vector<double> got;
      for (int64_t i = 0; i < rows; ++i) {
        for (int64_t h = 0; h < kHq; ++h) {
          for (int64_t d = 0; d < kD; ++d) got.push_back(out_p.get(out_p.offset({s, i, h, d})));
        }
      }
      expect_close(got, want, max_abs(vv), ATTNGEN_F32);
    }
  }

  static constexpr int64_t kHq = 4, kHkv = 2, kD = 64;

 private:
  int64_t batch_, layers_;
  attngen_dtype dtype_;
  attngen_kv_cache* paged_ = nullptr;
  attngen_kv_cache* contiguous_ = nullptr;
  std::vector<std::vector<float>> k_, v_;  // [layer * B + b]: [position, Hkv, D]
};

// The dtypes a cache may be paged in (an I8 cache is contiguous: OptionsAndForkValidation).
const attngen_dtype kCacheDtypes[] = {ATTNGEN_F32, ATTNGEN_F16, ATTNGEN_BF16};

std::string dtype_label(attngen_dtype d) {
  switch (d) {
    case ATTNGEN_F16:
      return "F16";
    case ATTNGEN_BF16:
      return "BF16";
    case ATTNGEN_I8:
      return "I8";
    default:
      return "F32";
  }
}

// A prompt of 40 tokens (two full pages of 16 and half a third) forked twice: no page taken;
// the first append of the source and of one fork into the shared third page copies it (one page
// each), a fork appending nothing keeps reading it; full pages stay shared.
TEST(PagedKv, ForkSharesPagesUntilWritten) {
  for (attngen_dtype dtype : kCacheDtypes) {
    SCOPED_TRACE(dtype_label(dtype));
    std::mt19937_64 rng(fresh_seed());
    Twins twins(dtype, 3, 16, 12, 64);
    for (int64_t layer : {0, 1}) {
      ASSERT_EQ(twins.append(layer, {40, 0, 0}, rng), ATTNGEN_OK) << attngen_last_error();
    }
    EXPECT_EQ(twins.free_pages(), 9);
    twins.decode(1, {40, 0, 0}, rng);
    twins.fork(0, 1);
    twins.fork(0, 2);
    EXPECT_EQ(twins.free_pages(), 9) << "a fork takes no page";
    twins.decode(0, {1, 2, 3}, rng);  // the forks read the source's pages
    for (int64_t layer : {0, 1}) {
      ASSERT_EQ(twins.append(layer, {1, 3, 0}, rng), ATTNGEN_OK) << attngen_last_error();
    }
    EXPECT_EQ(twins.free_pages(), 7) << "one copied page for each sequence that wrote";
    for (int64_t layer : {0, 1}) twins.decode(layer, {1, 3, 2}, rng);
    // Sequence 2 alone holds the third page now: its append writes in place.
    for (int64_t layer : {0, 1}) {
      ASSERT_EQ(twins.append(layer, {0, 0, 2}, rng), ATTNGEN_OK) << attngen_last_error();
    }
    EXPECT_EQ(twins.free_pages(), 7);
    twins.decode(1, {41, 43, 42}, rng);
    // Resets give back only the pages nobody else holds.
    twins.reset(0);
    EXPECT_EQ(twins.free_pages(), 8);
    twins.reset(1);
    EXPECT_EQ(twins.free_pages(), 9);
    twins.decode(0, {0, 0, 42}, rng);
    twins.reset(2);
    EXPECT_EQ(twins.free_pages(), 12);
  }
}

// An append the pool cannot serve (new pages, or a copy of a shared page) is
// ATTNGEN_ERROR_CAPACITY with nothing appended, no page taken and every sequence as it was.
TEST(PagedKv, PoolExhaustedIsCapacityError) {
  for (attngen_dtype dtype : kCacheDtypes) {
    SCOPED_TRACE(dtype_label(dtype));
    std::mt19937_64 rng(fresh_seed());
    Twins twins(dtype, 3, 16, 4, 200);
    ASSERT_EQ(twins.append(0, {40, 0, 0}, rng), ATTNGEN_OK) << attngen_last_error();
    EXPECT_EQ(twins.free_pages(), 1);
    EXPECT_EQ(twins.append(0, {0, 30, 0}, rng), ATTNGEN_ERROR_CAPACITY);
    EXPECT_NE(std::string(attngen_last_error()).find("pages"), std::string::npos)
        << attngen_last_error();
    EXPECT_EQ(twins.free_pages(), 1);
    int64_t n = -1;
    ASSERT_EQ(attngen_kv_cache_length(twins.paged(), 0, 1, &n), ATTNGEN_OK);
    EXPECT_EQ(n, 0);
    twins.decode(0, {5, 0, 0}, rng);
    // Two forks writing into the shared third page need two copies; one page is free.
    twins.fork(0, 1);
    twins.fork(0, 2);
    EXPECT_EQ(twins.append(0, {0, 1, 1}, rng), ATTNGEN_ERROR_CAPACITY);
    EXPECT_EQ(twins.free_pages(), 1);
    ASSERT_EQ(twins.append(0, {0, 1, 0}, rng), ATTNGEN_OK) << attngen_last_error();
    EXPECT_EQ(twins.free_pages(), 0);
    twins.decode(0, {3, 2, 1}, rng);
    // Sequence 1's copy back to the pool serves sequence 2's.
    twins.reset(1);
    EXPECT_EQ(twins.free_pages(), 1);
    ASSERT_EQ(twins.append(0, {0, 0, 1}, rng), ATTNGEN_OK) << attngen_last_error();
    EXPECT_EQ(twins.free_pages(), 0);
    twins.decode(0, {3, 0, 2}, rng);
  }
}

// Random lifecycles: appends of random counts to random layers, forks into empty sequences,
// resets and decodes over a tight pool, for pages of 16 to 256 slots; every decode as the
// contiguous cache's, and an F32 cache's as the reference.
TEST(PagedKv, RandomLifecycleMatchesContiguous) {
  for (attngen_dtype dtype : kCacheDtypes) {
    for (int64_t page_slots : {16, 256}) {
      SCOPED_TRACE(dtype_label(dtype) + " P" + std::to_string(page_slots));
      const uint64_t seed = fresh_seed();
      SCOPED_TRACE("seed " + std::to_string(seed));
      std::mt19937_64 rng(seed);
      constexpr int64_t kBatch = 5, kCapacity = 300;
      const int64_t pages = 3 * ((kCapacity + page_slots - 1) / page_slots);
      Twins twins(dtype, kBatch, page_slots, pages, kCapacity);
      std::uniform_int_distribution<int> op(0, 9), seq(0, kBatch - 1), layer(0, 1);
      int capacity_errors = 0;
      for (int step = 0; step < 40 && !::testing::Test::HasFatalFailure(); ++step) {
        const int what = op(rng);
        if (what < 5) {
          std::vector<int32_t> counts(kBatch);
          const int64_t l = layer(rng);
          for (int64_t b = 0; b < kBatch; ++b) {
            const int64_t room = kCapacity - twins.length(l, b);
            const int most = static_cast<int>(std::min<int64_t>(room, what == 0 ? 70 : 4));
            counts[at(b)] = std::uniform_int_distribution<int>(0, most)(rng);
          }
          const int64_t before = twins.free_pages();
          const attngen_status st = twins.append(l, counts, rng);
          if (st == ATTNGEN_ERROR_CAPACITY) {
            ++capacity_errors;
            EXPECT_EQ(twins.free_pages(), before) << "a failed append took pages";
          } else {
            ASSERT_EQ(st, ATTNGEN_OK) << attngen_last_error();
          }
        } else if (what < 8) {
          std::vector<int32_t> counts(kBatch);
          const int64_t l = layer(rng);
          for (int64_t b = 0; b < kBatch; ++b) {
            const int most = static_cast<int>(std::min<int64_t>(twins.length(l, b), 3));
            counts[at(b)] = std::uniform_int_distribution<int>(0, most)(rng);
          }
          twins.decode(l, counts, rng);
        } else if (what == 8) {
          const int64_t from = seq(rng), to = seq(rng);
          if (from != to && twins.length(0, to) == 0 && twins.length(1, to) == 0) {
            twins.fork(from, to);
          }
        } else {
          twins.reset(seq(rng));
        }
      }
      (void)capacity_errors;
    }
  }
}

TEST(PagedKv, OptionsAndForkValidation) {
  attngen_kv_cache_options o = attngen_kv_cache_options_default();
  o.layers = 1;
  o.batch = 2;
  o.heads_kv = 1;
  o.head_dim_qk = 64;
  o.capacity = 100;
  attngen_kv_cache* cache = nullptr;
  for (int64_t p : {1, 8, 24, 100, 512, -16}) {
    o.page_slots = p;
    EXPECT_EQ(attngen_kv_cache_create(&o, &cache), ATTNGEN_ERROR_INVALID_ARGUMENT) << p;
    EXPECT_EQ(cache, nullptr);
  }
  o.page_slots = 32;
  o.dtype = ATTNGEN_I8;
  EXPECT_EQ(attngen_kv_cache_create(&o, &cache), ATTNGEN_ERROR_DTYPE);
  EXPECT_NE(std::string(attngen_last_error()).find("I8"), std::string::npos);
  o.dtype = ATTNGEN_F32;
  o.page_slots = 0;
  o.pages = 4;
  EXPECT_EQ(attngen_kv_cache_create(&o, &cache), ATTNGEN_ERROR_INVALID_ARGUMENT);
  o.page_slots = 32;
  o.pages = -1;
  EXPECT_EQ(attngen_kv_cache_create(&o, &cache), ATTNGEN_ERROR_INVALID_ARGUMENT);
  o.pages = 0;  // every sequence's capacity: 2 * ceil(100 / 32)
  size_t bytes = 0;
  ASSERT_EQ(attngen_kv_cache_storage_size(&o, &bytes), ATTNGEN_OK);
  EXPECT_EQ(bytes, size_t{8} * 32 * (64 + 64) * 4);
  ASSERT_EQ(attngen_kv_cache_create(&o, &cache), ATTNGEN_OK) << attngen_last_error();
  int64_t free = -1;
  ASSERT_EQ(attngen_kv_cache_free_pages(cache, &free), ATTNGEN_OK);
  EXPECT_EQ(free, 8);
  EXPECT_EQ(attngen_kv_cache_free_pages(cache, nullptr), ATTNGEN_ERROR_NULL_POINTER);
  EXPECT_EQ(attngen_kv_cache_fork(nullptr, 0, 1), ATTNGEN_ERROR_NULL_POINTER);
  EXPECT_EQ(attngen_kv_cache_fork(cache, 0, 0), ATTNGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(attngen_kv_cache_fork(cache, 0, 2), ATTNGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(attngen_kv_cache_fork(cache, -1, 1), ATTNGEN_ERROR_INVALID_ARGUMENT);
  // Into a sequence that holds positions: refused, nothing changed.
  std::vector<float> kv(128, 0.5f);
  const int64_t shape[4] = {2, 1, 1, 64};
  const attngen_tensor k = attngen_tensor_contiguous(kv.data(), ATTNGEN_F32, 4, shape);
  ASSERT_EQ(attngen_kv_cache_append(cache, 0, &k, &k, nullptr), ATTNGEN_OK) << attngen_last_error();
  EXPECT_EQ(attngen_kv_cache_fork(cache, 0, 1), ATTNGEN_ERROR_INVALID_ARGUMENT);
  ASSERT_EQ(attngen_kv_cache_free_pages(cache, &free), ATTNGEN_OK);
  EXPECT_EQ(free, 6);
  attngen_kv_cache_destroy(cache);
  // A contiguous cache has no free pages to report.
  o.page_slots = 0;
  ASSERT_EQ(attngen_kv_cache_create(&o, &cache), ATTNGEN_OK) << attngen_last_error();
  ASSERT_EQ(attngen_kv_cache_free_pages(cache, &free), ATTNGEN_OK);
  EXPECT_EQ(free, 0);
  attngen_kv_cache_destroy(cache);
}

}  // namespace
}  // namespace attngen::test
