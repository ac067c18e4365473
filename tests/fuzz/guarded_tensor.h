// Guarded tensors and their data: every tensor of a fuzzed call lives in its own mapping between
// two PROT_NONE guard pages, its span ending at the upper one, so that a read or write outside
// the span faults (GuardTensor: allocation, poisoning with a NaN of the dtype, snapshots, element
// access in the dtype's storage). Also the random fills of inputs (Fill) and the float32 views of
// a tensor that the float64 reference reads (Dense).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <random>
#include <vector>

#include "attngen/attngen.h"
#include "tests/fuzz/fuzz_input.h"
#include "tests/reference.h"

namespace attngen::fuzz {

// The bytes of an element of dtype d (1 for BOOL, I8 and, for allocation, invalid dtypes).
size_t element_size(int d);

// Spans up to this are mapped (lazily: untouched pages cost nothing) so a call that accepts a
// sparse tensor with large strides runs on real memory; larger ones get a token page, and the
// call must refuse them (every tensor must span less than 2^31 bytes).
inline constexpr uint64_t kMaxMapped = 1ull << 32;
// Spans up to this are poisoned and compared whole; larger ones element by element.
inline constexpr uint64_t kMaxCompared = 1ull << 22;
inline constexpr int64_t kMaxElements = 1 << 20;  // logical elements we fill or check

// A tensor in its own mapping: [guard][... span ...][slack][guard]. Owns the mapping.
class GuardTensor {
 public:
  attngen_tensor t{};
  bool is_output = false;

  GuardTensor() = default;
  GuardTensor(const GuardTensor&) = delete;
  GuardTensor& operator=(const GuardTensor&) = delete;
  ~GuardTensor();

  // Describes and allocates. misalign: bytes of slack after the span (the data pointer then is
  // not a multiple of the element size when misalign is not).
  void make(int dtype, const Layout& l, size_t misalign, bool null_data);

  bool mapped() const { return mapped_; }
  int64_t logical() const { return logical_; }
  bool small() const { return mapped_ && logical_ <= kMaxElements; }
  // Whether the span fits in 2^31 bytes (what the API accepts).
  bool addressable() const {
    return span_ok_ && (logical_ == 0 || static_cast<uint64_t>(hi_ - lo_ + 1) * es_ < (1ull << 31));
  }
  size_t es() const { return es_; }
  int dtype() const { return dtype_; }
  uint8_t* at(int64_t off) const { return data_ + off * static_cast<int64_t>(es_); }

  // Calls f(dense index, element offset) over the logical elements (only for small tensors).
  template <typename F>
  void for_each(F f) const {
    if (!small() || logical_ == 0) return;
    const int rank = t.rank;
    std::array<int64_t, ATTNGEN_MAX_RANK> idx{};
    for (int64_t e = 0; e < logical_; ++e) {
      int64_t off = 0;
      for (int d = 0; d < rank; ++d) off += idx[d] * t.strides[d];
      f(e, off);
      for (int d = rank - 1; d >= 0; --d) {
        if (++idx[d] < t.shape[d]) break;
        idx[d] = 0;
      }
    }
  }

  // Fills the whole mapped region with a byte pattern of the dtype (anchored at data).
  void poison();

  // A copy of what the call may not change: the whole region, or the logical elements.
  std::vector<uint8_t> snapshot() const;

  bool unchanged(const std::vector<uint8_t>& s) const { return snapshot() == s; }

  // The region's bytes that are not logical elements, as they must still be after a call.
  bool gaps_unchanged(const std::vector<uint8_t>& before) const;

  // The element at offset `off` (in elements from data) as a double, whatever its dtype.
  double get(int64_t off) const;

  // Stores x rounded to the dtype (float types), and returns what was stored.
  double set(int64_t off, double x);

  // Whether the element still holds the poison of the dtype (an element the call did not write).
  bool is_poison(int64_t off) const;

  // Logical elements as doubles, densely (row-major).
  std::vector<double> dense() const;

 private:
  void poison_bytes(uint8_t pat[4]) const;
  void pat_at(uint8_t* b, const uint8_t pat[4]) const;

  // The span [lo_, hi_] in elements, with overflow checks; span_ok_ false if it overflows.
  void compute_span();

  uint8_t* map_ = nullptr;
  size_t map_len_ = 0;
  uint8_t *begin_ = nullptr, *end_ = nullptr, *data_ = nullptr;
  size_t es_ = 4;
  int dtype_ = ATTNGEN_F32;
  int64_t lo_ = 0, hi_ = 0, logical_ = 0;
  // span_bounded_: [lo_, hi_] computed without overflow and within 2^40 elements; span_ok_:
  // that and at most 2^40 logical elements.
  bool span_ok_ = false, span_bounded_ = false, mapped_ = false;
};

// ---------------------------------------------------------------------------------------------
// Data

// The random source of one input's data (seeded from its bytes) and the range of the values.
struct Fill {
  std::mt19937_64 rng;
  bool nonfinite = false;
  double lo = -1, hi = 1;
};

// A random value of the fill's range (NaN and infinities sometimes, in non-finite mode).
double random_value(Fill& f);

// Fills an input's gaps with a NaN of its dtype (padding is often uninitialised; a kernel must
// not read it) and its elements with random values rounded to its dtype.
void fill_input(GuardTensor& g, Fill& f);
// An MHA layer's weights and biases (in_w, in_b, out_w, out_b) filled uniform in +-1/sqrt(E), a
// trained projection's scale, with f's other settings; f is back to [-1, 1] after.
void fill_mha_weights(std::initializer_list<GuardTensor*> weights, int64_t embed, Fill& f);

// A float32 dense copy of a float tensor, and its View (what the reference reads).
struct Dense {
  std::vector<float> data;
  attngen::test::View view;
};

Dense dense_of(const GuardTensor& g);

// A float32 copy of dense values x of this shape, and its View.
Dense dense_from(const std::vector<double>& x, const std::vector<int64_t>& shape);

}  // namespace attngen::fuzz
