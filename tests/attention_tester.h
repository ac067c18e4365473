// A fluent tester for attention kernels, in the style of XNNPACK's testers:
//   AttentionTester().batch(2).heads(8, 2).seq(37, 53).head_dim(80).causal().Test(kernel);
// Test() makes fresh random inputs in the call's dtypes (rounded to them: the reference reads the
// rounded values), poisons the output (and the gaps of strided views), runs the kernel through
// the public C API, and checks the result against the float64 reference with the contract's
// tolerance for the inputs' dtype. Test(kernel) takes the kernel descriptor's dtypes. With
// isas(), one draw of inputs is run under each ISA in turn and checked against one reference.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "attngen/attngen.h"
#include "attngen/kernel.h"
#include "tests/reference.h"
#include "tests/tensor.h"

namespace attngen::test {

class AttentionTester {
 public:
  AttentionTester& batch(int64_t b) {
    batch_ = b;
    return *this;
  }
  AttentionTester& heads(int64_t hq, int64_t hkv) {
    hq_ = hq;
    hkv_ = hkv;
    return *this;
  }
  AttentionTester& seq(int64_t sq, int64_t skv) {
    sq_ = sq;
    skv_ = skv;
    return *this;
  }
  AttentionTester& head_dim(int64_t dqk, int64_t dv = 0) {
    dqk_ = dqk;
    dv_ = dv ? dv : dqk;
    return *this;
  }
  AttentionTester& causal(bool c = true) {
    causal_ = c;
    return *this;
  }
  AttentionTester& top_left(bool t = true) {
    top_left_ = t;
    return *this;
  }
  AttentionTester& scale(float s) {
    scale_ = s;
    return *this;
  }
  AttentionTester& softcap(float c) {
    softcap_ = c;
    return *this;
  }
  // Strided views: rows padded by `pad` elements, outer dims by one element.
  AttentionTester& padded(int64_t pad) {
    pad_ = pad;
    return *this;
  }
  // q, k and v as views into one fused [B, S, 3, H, D] buffer (needs Sq == Skv, Hq == Hkv,
  // Dqk == Dv).
  AttentionTester& fused_qkv(bool f = true) {
    fused_ = f;
    return *this;
  }
  // q and k hold integers in [-n, n] (and additive masks integers in [-8, 8]), so with a
  // power-of-two scale every score is exact in float32: large logits test the softmax, not
  // float32 rounding of the dot product.
  AttentionTester& integer_inputs(int n) {
    integer_ = n;
    return *this;
  }
  // q in [0.1, 1) and k[j] = -(1 + r_j / 20) * u with u in [0.1, 1) per (batch, kv head) and the
  // r_j a random permutation of the keys: every q.k is negative (with a large scale, every score is
  // very negative: scores, not masks), and the scores of a row are 5% apart, so that which key
  // wins (the softmax is one-hot at such a scale) does not hang on the f32 rounding of a near-tie
  // (random keys tied within it, at f16 resolution, about once in a thousand runs).
  AttentionTester& negative_dots(bool n = true) {
    negative_dots_ = n;
    return *this;
  }
  // Per-batch key padding (values in [0, Skv]).
  AttentionTester& kv_len(std::vector<int32_t> l) {
    kv_len_ = std::move(l);
    return *this;
  }
  // A random mask of this (broadcastable) shape: bool with P(attend) = density, or additive
  // with values in [-2, 2] and -inf where a bool mask would say false.
  AttentionTester& bool_mask(std::vector<int64_t> shape, double density = 0.7) {
    mask_shape_ = std::move(shape);
    mask_bool_ = true;
    density_ = density;
    return *this;
  }
  AttentionTester& additive_mask(std::vector<int64_t> shape, double density = 0.8) {
    mask_shape_ = std::move(shape);
    mask_bool_ = false;
    density_ = density;
    mask_values_.clear();
    return *this;
  }
  // An additive mask of given values, dense in its (broadcastable) shape: a model's own bias
  // (T5's relative position buckets, ALiBi's slopes times distances).
  AttentionTester& additive_mask(std::vector<int64_t> shape, std::vector<float> values) {
    mask_shape_ = std::move(shape);
    mask_bool_ = false;
    mask_values_ = std::move(values);
    return *this;
  }

  // A sparse pattern (for block-sparse, a random layout of this density is drawn per test).
  AttentionTester& pattern(const attngen_pattern& p, double layout_density = 0.5) {
    pattern_ = p;
    layout_density_ = layout_density;
    layout_.clear();
    return *this;
  }
  // A block-sparse pattern with a given layout, dense [ceil(Sq / block), ceil(Skv / block)]
  // (a model's own, BigBird's say).
  AttentionTester& pattern(const attngen_pattern& p, std::vector<uint8_t> layout) {
    pattern_ = p;
    layout_ = std::move(layout);
    return *this;
  }
  // A library modifier (attngen.h, "Modifiers") with fresh random parameters, checked against
  // the reference's own implementation of it: "alibi" (random slopes, or the standard ones of
  // attngen_alibi_slopes() with standard_slopes; the symmetric form with symmetric), "document"
  // (each sequence packed with documents of random lengths, some of 1), "prefix" (per batch a
  // prefix of 0 to Skv + 2 keys), "sinks" (0 to 5 sinks, a window of none to Skv / 2, fractional
  // values among them), "sink_logit" (logits in [-3, 3], the first head's -inf), "t5_bias" (a
  // random table in [-3, 3] of 6 to 33 buckets, a reach of 2 to 128, either direction).
  // Test(kernel) of a modifier kernel takes the kernel's modifier.
  AttentionTester& modifier(std::string name, bool symmetric = false,
                            bool standard_slopes = false) {
    modifier_ = std::move(name);
    symmetric_ = symmetric;
    standard_slopes_ = standard_slopes;
    return *this;
  }
  // Also ask for the attention weights / the row log-sum-exp, checked against the reference.
  AttentionTester& weights(bool w = true) {
    weights_ = w;
    return *this;
  }
  AttentionTester& lse(bool l = true) {
    lse_ = l;
    return *this;
  }

  // Non-finite inputs (docs/semantics.md, "NaN and infinities"): NaN, +inf or -inf at one
  // random element each of q, k and v, a NaN in V at the last key (attended by the last rows only
  // under causal masks, by no row past kv_len), and NaN / infinities in every K and V element past
  // kv_len (padding that was never written). The reference follows IEEE arithmetic over the
  // attended keys: keys a row does not attend never reach it.
  AttentionTester& nonfinite(bool n = true) {
    nonfinite_ = n;
    return *this;
  }

  // Element types: q, k, v and out in `d` (F32, F16 or BF16); then out_dtype() may make the
  // output F32. Ignored by Test(kernel), which takes the kernel's.
  AttentionTester& dtype(attngen_dtype d) {
    dtype_ = out_dtype_ = d;
    return *this;
  }
  AttentionTester& out_dtype(attngen_dtype d) {
    out_dtype_ = d;
    return *this;
  }

  // Automatic dispatch restricted to each of these ISAs in turn (attngen_set_isa(); automatic
  // again afterwards), all on one draw of inputs and options, so that the float64 reference (most
  // of a test's time under qemu) is computed once. An ISA none of whose own attention kernels takes
  // the call's dtype (as it is, or converted to F32) would only run the kernel of a row it extends,
  // which that row's turn runs: it is left out, unless `fallbacks`. A run whose kernel an earlier
  // ISA's run took (dispatch falling back to another row) must match that run bit for bit.
  AttentionTester& isas(std::vector<std::string> list, bool fallbacks = false) {
    isas_ = std::move(list);
    fallbacks_ = fallbacks;
    return *this;
  }

  std::string describe() const;

  // Runs `kernel` (by name) and checks it; with kernel == nullptr the runtime chooses (under each
  // of isas(), where given). `ran`, where given, receives the kernel of each run, in order.
  void Test(const attngen_kernel_info* kernel = nullptr,
            std::vector<std::string>* ran = nullptr) const;

 private:
  // The buffers and options of one Test(); the tensors point into it, so it stays in place.
  struct Call;
  // A run's outputs, dense (weights and log-sum-exp empty where not asked for).
  struct Outputs {
    std::vector<double> out, weights, lse;
  };

  // The steps of Test(), in order.
  void make_inputs(Call& c, std::mt19937_64& rng) const;
  void add_nonfinite(Call& c, std::mt19937_64& rng) const;
  void poison_outputs(Call& c) const;
  void build_options(Call& c, const attngen_kernel_info* kernel, std::mt19937_64& rng) const;
  void add_kv_len(Call& c) const;
  void add_mask(Call& c, std::mt19937_64& rng) const;
  void add_pattern(Call& c, std::mt19937_64& rng) const;
  void add_modifier(Call& c, const attngen_kernel_info* kernel, std::mt19937_64& rng) const;
  void fill_modifier_values(Storage& values, std::mt19937_64& rng, double limit) const;
  void run(Call& c, const attngen_kernel_info* kernel) const;
  void check_run(Call& c, const attngen_kernel_info* kernel, std::vector<std::string>* ran) const;
  bool has_own_kernel(const std::string& isa, attngen_dtype dtype) const;
  void choose_dtypes(Call& c, const attngen_kernel_info* kernel) const;
  void compute_reference(Call& c) const;
  void compare_with_reference(const Call& c, const Outputs& got) const;
  void check_weights(const Call& c, const std::vector<double>& got) const;
  void check_lse(const Call& c, const std::vector<double>& got) const;
  void check_gaps(const Call& c) const;

  int64_t batch_ = 1, hq_ = 1, hkv_ = 1, sq_ = 1, skv_ = 1, dqk_ = 64, dv_ = 64, pad_ = 0;
  bool causal_ = false, top_left_ = false, fused_ = false, mask_bool_ = true;
  bool weights_ = false, lse_ = false, nonfinite_ = false, negative_dots_ = false;
  attngen_dtype dtype_ = ATTNGEN_F32, out_dtype_ = ATTNGEN_F32;
  attngen_pattern pattern_{};
  double layout_density_ = 0.5;
  float scale_ = 0.0f, softcap_ = 0.0f;
  int integer_ = 0;
  double density_ = 0.7;
  std::vector<int32_t> kv_len_;
  std::vector<int64_t> mask_shape_;
  std::vector<float> mask_values_;  // empty: random
  std::vector<uint8_t> layout_;     // empty: random
  std::string modifier_;            // empty: none
  bool symmetric_ = false, standard_slopes_ = false;
  std::vector<std::string> isas_;  // empty: dispatch as set by the caller
  bool fallbacks_ = false;
};

}  // namespace attngen::test
