// A fluent tester for incremental decoding, in the style of AttentionTester:
//   DecodeTester().batch(2).heads(8, 2).head_dim(128).cached(300).new_tokens(3).window(64)
//       .Test(kernel);
// Test() makes a KV cache through the public API, appends fresh random K/V (a prompt or cached
// tokens first, then steps of new tokens), decodes each step's queries into a poisoned output,
// and checks every output row: the attended ones against one full causal pass over the whole
// sequence (the float64 reference, windowed for a ring buffer), the rows past a sequence's
// count as 0, the gaps of strided outputs as untouched.
//
// Cache dtypes: with cache_dtype(F16 / BF16 / I8) the K and V given to the appends are first
// rounded (quantised, per row) to what the cache stores, for the reference too (with an I8 cache
// q too, as the VNNI kernels quantise it), so the result must meet the f32 tolerance;
// raw_kv(rel_l2, max_abs) gives them unrounded instead and checks the stated bound (the error of
// the storage type itself). input_dtype(F16 / BF16) appends tensors of that type (their values are
// the reference's).
//
// Modifiers: modifier(name) draws fresh random parameters of a library modifier for every Test(),
// gives them to every decode call (options.modifier) and its own float64 version to the
// reference; every call must then run a kernel generated with it. isas() runs every decode call
// under each of a list of ISAs in turn, one draw of inputs and one reference for all of them.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "attngen/attngen.h"
#include "attngen/kernel.h"
#include "tests/reference.h"
#include "tests/tensor.h"

namespace attngen::test {

class DecodeTester {
 public:
  DecodeTester& batch(int64_t b) {
    batch_ = b;
    return *this;
  }
  DecodeTester& heads(int64_t hq, int64_t hkv) {
    hq_ = hq;
    hkv_ = hkv;
    return *this;
  }
  DecodeTester& head_dim(int64_t dqk, int64_t dv = 0) {
    dqk_ = dqk;
    dv_ = dv ? dv : dqk;
    return *this;
  }
  // Tokens already in the cache when decoding starts (appended, never attended), one count
  // for every sequence or one per sequence. A ring buffer takes them in appends of at most
  // capacity - window tokens.
  DecodeTester& cached(int64_t n) { return prefix({n}, false); }
  DecodeTester& cached(std::vector<int64_t> n) { return prefix(std::move(n), false); }
  // A prompt appended in one call whose queries are attended too (counts where they differ).
  DecodeTester& prefill(int64_t n) { return prefix({n}, true); }
  DecodeTester& prefill(std::vector<int64_t> n) { return prefix(std::move(n), true); }
  // Then steps of `t` new tokens per sequence (one append and one decode call each).
  DecodeTester& new_tokens(int32_t t) {
    new_tokens_ = t;
    return *this;
  }
  // How many steps (default 1), or, with lengths(), until each sequence reaches its length (the
  // last step of a sequence may be shorter; finished sequences take part with a count of 0).
  DecodeTester& steps(int64_t s) {
    steps_ = s;
    return *this;
  }
  DecodeTester& lengths(std::vector<int64_t> n) {
    lengths_ = std::move(n);
    return *this;
  }
  // A ring buffer keeping the last `left` + 1 positions at least.
  DecodeTester& window(int64_t left) {
    window_ = left;
    return *this;
  }
  // Slots per sequence; 0 (default): the longest sequence, or for a window the window plus the
  // most tokens one call takes.
  DecodeTester& capacity(int64_t c) {
    capacity_ = c;
    return *this;
  }
  // A cache of `n` layers, of which `layer` is used.
  DecodeTester& layers(int64_t n, int64_t layer) {
    layers_ = n;
    layer_ = layer;
    return *this;
  }
  DecodeTester& kv_splits(int32_t s) {
    kv_splits_ = s;
    return *this;
  }
  // Strided q and out: rows padded by `pad` floats, outer dims by one element.
  DecodeTester& padded(int64_t pad) {
    pad_ = pad;
    return *this;
  }
  DecodeTester& cache_dtype(attngen_dtype d) {
    cache_dtype_ = d;
    return *this;
  }
  DecodeTester& input_dtype(attngen_dtype d) {
    input_dtype_ = d;
    return *this;
  }
  // K and V as they are (not rounded to the cache's type): relative L2 error <= rel_l2 and max
  // abs error <= max_abs * max|V| against the reference of the unrounded K and V.
  DecodeTester& raw_kv(double rel_l2, double max_abs) {
    raw_ = true;
    raw_rel_l2_ = rel_l2;
    raw_max_abs_ = max_abs;
    return *this;
  }
  // q given as it is to a kernel that quantises it per row as an i8 cache does a K row (the
  // i8-cache decode kernels of the avx512bf16 row: docs/semantics.md, "I8"), the reference
  // taking it so quantised; with cache_dtype(I8), K and V rounded: the f32 tolerance.
  DecodeTester& unrounded_q() {
    unrounded_q_ = true;
    return *this;
  }
  // Every other query head's rows all zeros (the scores of such a row all 0).
  DecodeTester& zero_q_rows() {
    zero_q_rows_ = true;
    return *this;
  }
  // K and V like a model's rather than uniform: normal, K with a few outlier channels (x8) and
  // per-channel offsets, as in the keys of trained LLMs (what makes per-token int8 scales coarse).
  DecodeTester& realistic() {
    realistic_ = true;
    return *this;
  }
  // NaN or infinities at one random element each of q, K and V (docs/semantics.md, "NaN and
  // infinities"): only the rows that attend them (or, for q, the row itself) may change.
  DecodeTester& nonfinite() {
    nonfinite_ = true;
    return *this;
  }
  // K and V scaled by 2^-16 and q by 2^16 (the scores as before): in an f16 cache every K and V
  // element is then a subnormal half (|x| < 2^-14), which targets that flush subnormal f32
  // operands (32-bit NEON) must still widen exactly.
  DecodeTester& tiny_kv() {
    tiny_ = true;
    return *this;
  }
  // A cache with a rope (attngen.h, "Rotary position embeddings"): rotary_dim (0: Dqk) and the
  // pairs, fresh frequencies of a random base; the appends give K as projected and the decodes q,
  // the reference takes both rotated at their positions (in double). With an F16, BF16 or I8
  // cache only with raw_kv() (the cache rounds the rotated K, which the reference does not).
  DecodeTester& rope(int64_t rotary_dim, attngen_rope_pairs pairs) {
    rope_ = true;
    rotary_dim_ = rotary_dim;
    pairs_ = pairs;
    return *this;
  }
  // A paged cache of pages of `page_slots` slots (attngen.h), `pages` in its pool (0: every
  // sequence's capacity). A window then masks (no ring buffer): the capacity defaults to the
  // longest sequence.
  DecodeTester& paged(int64_t page_slots, int64_t pages = 0) {
    page_slots_ = page_slots;
    pages_ = pages;
    return *this;
  }
  // Before the test's appends, every sequence of the used layer is filled with other random K
  // and V (as many pages each as the pool allows) and reset, in a random order: the test's
  // sequences then hold pages in no particular order, which held another sequence's data.
  DecodeTester& scattered_pages() {
    scattered_ = true;
    return *this;
  }
  // A library modifier (attngen.h, "Modifiers") with fresh random parameters on every Test(),
  // checked against the reference's own implementation of it; its dims in decode are B, Hq, Hkv,
  // Sq = the call's new tokens t and Skv = the cache's capacity. "alibi" (random positive slopes
  // that keep the bias within about 40, or with standard_slopes those of attngen_alibi_slopes();
  // the symmetric form with symmetric), "sinks" (a few sinks or about a key block of them, a
  // window of none, a few keys, under a key block, past one or up to half the longest sequence: key
  // blocks of a long cache skipped, sinks and windows across block edges; fractional values among
  // them), "sink_logit" (logits in [-3, 3], the first head's -inf, the last's large), "document"
  // (ids [B, capacity] of packed documents of random lengths, some of 1; no ring buffer), "prefix"
  // (lengths [B] of 0 to capacity + 2), "t5_bias" (a random table of 6 to 33 buckets, a reach of
  // 2 to 128, either direction). Test(kernel) of a modifier kernel takes the kernel's modifier.
  DecodeTester& modifier(std::string name, bool symmetric = false, bool standard_slopes = false) {
    modifier_ = std::move(name);
    symmetric_ = symmetric;
    standard_slopes_ = standard_slopes;
    return *this;
  }
  // Every decode call run under each of these ISAs in turn (attngen_set_isa(); automatic again
  // afterwards), on one draw of inputs and one cache, each ISA's outputs checked against the one
  // reference. With a modifier and an F32 cache, each run must take a kernel of its ISA.
  DecodeTester& isas(std::vector<std::string> list) {
    isas_ = std::move(list);
    return *this;
  }
  // Where Test() reports the error it measured (relative L2, max abs / max|V|).
  DecodeTester& report(double* rel_l2, double* max_abs_per_v) {
    report_rel_ = rel_l2;
    report_abs_ = max_abs_per_v;
    return *this;
  }

  std::string describe() const;

  // Runs `kernel` (by name) for every decode call and checks it; with kernel == nullptr the
  // runtime chooses (under each of isas(), where given). `ran`, where given, receives the kernel
  // of each decode call, in order.
  void Test(const attngen_kernel_info* kernel = nullptr,
            std::vector<std::string>* ran = nullptr) const;

 private:
  // One Test()'s sequences, cache and outputs so far.
  struct Run;

  DecodeTester& prefix(std::vector<int64_t> n, bool attend) {
    prefix_ = std::move(n);
    attend_prefix_ = attend;
    return *this;
  }

  // The steps of Test(), in order.
  void plan(Run& r) const;
  void make_sequences(Run& r, std::mt19937_64& rng) const;
  void make_rotated(Run& r, std::mt19937_64& rng) const;
  void add_modifier(Run& r, std::mt19937_64& rng) const;
  void create_cache(Run& r) const;
  void scatter_pages(Run& r, std::mt19937_64& rng) const;
  void fill_prefix(Run& r, std::mt19937_64& rng) const;
  void step(Run& r, const std::vector<int32_t>& counts, bool attend, std::mt19937_64& rng) const;
  void append(Run& r, const std::vector<int32_t>& counts, const Storage& k, const Storage& v) const;
  void decode(Run& r, const std::vector<int32_t>& counts, const Storage& q) const;
  void check_kernel(const Run& r, const std::string& isa) const;
  void compare_with_reference(const Run& r) const;

  int64_t batch_ = 1, hq_ = 1, hkv_ = 1, dqk_ = 64, dv_ = 64;
  std::vector<int64_t> prefix_, lengths_;
  bool attend_prefix_ = false;
  int32_t new_tokens_ = 1;
  int64_t steps_ = 1;
  int64_t window_ = -1, capacity_ = 0, layers_ = 1, layer_ = 0, pad_ = 0;
  int32_t kv_splits_ = 0;
  attngen_dtype cache_dtype_ = ATTNGEN_F32, input_dtype_ = ATTNGEN_F32;
  bool raw_ = false, realistic_ = false, nonfinite_ = false, tiny_ = false, unrounded_q_ = false;
  bool zero_q_rows_ = false, rope_ = false, scattered_ = false;
  int64_t page_slots_ = 0, pages_ = 0;
  int64_t rotary_dim_ = 0;
  attngen_rope_pairs pairs_ = ATTNGEN_ROPE_HALF;
  double raw_rel_l2_ = 0, raw_max_abs_ = 0;
  double *report_rel_ = nullptr, *report_abs_ = nullptr;
  std::string modifier_;  // empty: none
  bool symmetric_ = false, standard_slopes_ = false;
  std::vector<std::string> isas_;  // empty: dispatch as set by the caller
};

}  // namespace attngen::test
