// Test helpers: strided storage of any element type with poisoned gaps, random fill, and the
// contract's tolerance per dtype (docs/semantics.md, "Precision and tolerance").
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "attngen/attngen.h"
#include "core/dtype.h"
#include "tests/reference.h"

namespace attngen::test {

// A quiet NaN with a recognisable payload: outputs are filled with it before a call, so an
// element the kernel did not write fails every comparison, and gaps must still hold it after.
inline float poison() { return attngen::f32_from_bits(0x7fc0dead); }

inline bool is_poison(float f) { return attngen::f32_bits(f) == 0x7fc0dead; }

// What the tests need to know of an element type: its attngen_dtype, its poison value, and
// conversions to and from double (rounding to nearest even, in one step from the double). These
// are the tests' own conversions, written from the IEEE formats with frexp/ldexp, independent of
// the dtype rows' bit manipulation (core/dtype.h), which tests/dtype_test.cpp checks against
// them. Adding a dtype is one entry here (its tolerance is its row's in core/dtype.h).
template <typename T>
struct ElementTraits;

template <>
struct ElementTraits<float> {
  static constexpr attngen_dtype kDtype = ATTNGEN_F32;
  static float poison() { return test::poison(); }
  static bool is_poison(float f) { return test::is_poison(f); }
  static double to_double(float f) { return f; }
  static float from_double(double x) { return static_cast<float>(x); }
};

// IEEE binary16 and bfloat16, stored as their bits.
struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};

// A binary floating-point format of `mant` stored significand bits and exponent bias `bias`,
// with IEEE subnormals, infinities and NaNs, as 16 bits: sign, exponent, significand.
template <int kMant, int kBias>
struct Binary16Format {
  static constexpr int kExpBits = 15 - kMant;
  static constexpr uint16_t kExpMask = ((1u << kExpBits) - 1) << kMant;

  static double to_double(uint16_t h) {
    const double sign = (h & 0x8000u) ? -1.0 : 1.0;
    const int exp = (h & kExpMask) >> kMant;
    const int mant = h & ((1 << kMant) - 1);
    if (exp == (1 << kExpBits) - 1) {
      return mant ? std::numeric_limits<double>::quiet_NaN()
                  : sign * std::numeric_limits<double>::infinity();
    }
    if (exp == 0) return sign * std::ldexp(mant, 1 - kBias - kMant);
    return sign * std::ldexp((1 << kMant) + mant, exp - kBias - kMant);
  }

  static uint16_t from_double(double x) {
    const uint16_t sign = std::signbit(x) ? 0x8000u : 0;
    if (std::isnan(x)) return sign | kExpMask | (1u << (kMant - 1));
    const double a = std::abs(x);
    if (a == 0) return sign;
    if (std::isinf(a)) return sign | kExpMask;
    int e2;
    std::frexp(a, &e2);  // a = f * 2^e2, f in [0.5, 1): the exponent of a is e2 - 1
    const int e = std::max(e2 - 1, 1 - kBias);  // subnormals share the smallest exponent
    // The significand at this exponent, rounded to an integer, ties to even (nearbyint).
    double m = std::nearbyint(std::ldexp(a, kMant - e));
    int exp = e + kBias;
    if (m >= std::ldexp(1.0, kMant + 1)) {  // rounded up to the next binade
      m /= 2;
      ++exp;
    }
    if (m < std::ldexp(1.0, kMant)) exp = 0;                 // subnormal (or rounded down to 0)
    if (exp >= (1 << kExpBits) - 1) return sign | kExpMask;  // overflow: infinity
    const uint16_t frac = static_cast<uint16_t>(static_cast<uint32_t>(m) & ((1u << kMant) - 1));
    return sign | static_cast<uint16_t>(exp << kMant) | frac;
  }
};

template <>
struct ElementTraits<Half> {
  using Format = Binary16Format<10, 15>;
  static constexpr attngen_dtype kDtype = ATTNGEN_F16;
  static Half poison() { return {0x7e5d}; }  // a quiet NaN with a payload
  static bool is_poison(Half h) { return h.bits == 0x7e5d; }
  static double to_double(Half h) { return Format::to_double(h.bits); }
  static Half from_double(double x) { return {Format::from_double(x)}; }
};

template <>
struct ElementTraits<BFloat16> {
  using Format = Binary16Format<7, 127>;
  static constexpr attngen_dtype kDtype = ATTNGEN_BF16;
  static BFloat16 poison() { return {0x7fde}; }  // a quiet NaN with a payload
  static bool is_poison(BFloat16 h) { return h.bits == 0x7fde; }
  static double to_double(BFloat16 h) { return Format::to_double(h.bits); }
  static BFloat16 from_double(double x) { return {Format::from_double(x)}; }
};

// The contract's error bounds against the float64 reference, per storage dtype: relative L2
// error <= rel_l2 and, where the contract gives one, max abs error <= abs_per_max * max|V| +
// abs_floor (abs_per_max 0: no max-abs bound is documented, only the relative L2 one).
struct Tolerance {
  attngen_dtype dtype;
  double rel_l2;
  double abs_per_max;
  double abs_floor;
};

// The bound of a call whose inputs are of `dtype` (a call's is its inputs' dtype's:
// tolerance_dtype()), from the dtype rows (core/dtype.h); F32's for a dtype that has none.
inline Tolerance tolerance_for(int32_t dtype) {
  const attngen::DTypeRow* r = attngen::dtype_row(dtype);
  if (r == nullptr || r->rel_l2 == 0) r = &attngen::dtype_row(attngen::DType::kF32);
  return {static_cast<attngen_dtype>(dtype), r->rel_l2, r->abs_per_max, r->abs_floor};
}

inline Tolerance tolerance_of(attngen_dtype dtype) {
  const attngen::DTypeRow* r = attngen::dtype_row(dtype);
  if (r == nullptr || r->rel_l2 == 0) {
    ADD_FAILURE() << "no tolerance for dtype " << static_cast<int>(dtype);
  }
  return tolerance_for(dtype);
}

// Seeds differ per run; failures print the seed (SCOPED_TRACE) so a case can be replayed by
// setting ATTNGEN_TEST_SEED.
inline uint64_t fresh_seed() {
  if (const char* s = std::getenv("ATTNGEN_TEST_SEED")) return std::strtoull(s, nullptr, 10);
  return std::random_device{}() ^ (static_cast<uint64_t>(std::random_device{}()) << 32);
}

// Storage of element type T for a tensor of `shape` whose non-innermost strides are padded by
// `pad` elements per dimension (0 = dense), filled with poison. `t` describes the logical
// tensor to the API and carries T's dtype.
template <typename T>
struct Tensor {
  using Traits = ElementTraits<T>;
  static constexpr attngen_dtype kDtype = Traits::kDtype;

  std::vector<T> buf;
  attngen_tensor t{};

  Tensor() = default;
  Tensor(std::vector<int64_t> shape, int64_t pad) { init(std::move(shape), pad); }

  void init(std::vector<int64_t> shape, int64_t pad) {
    const int rank = static_cast<int>(shape.size());
    t.dtype = kDtype;
    t.rank = rank;
    int64_t stride = 1;
    for (int d = rank - 1; d >= 0; --d) {
      t.shape[d] = shape[d];
      t.strides[d] = stride;
      stride *= shape[d] + (d == rank - 1 ? pad : (pad ? 1 : 0));
    }
    buf.assign(static_cast<size_t>(stride), Traits::poison());
    t.data = buf.data();
  }

  int64_t offset(const std::vector<int64_t>& idx) const {
    int64_t off = 0;
    for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * t.strides[d];
    return off;
  }

  double get(int64_t off) const { return Traits::to_double(buf[static_cast<size_t>(off)]); }
  void set(int64_t off, double x) { buf[static_cast<size_t>(off)] = Traits::from_double(x); }

  // Calls f(index, offset) for every logical element.
  template <typename F>
  void for_each(F f) const {
    std::vector<int64_t> idx(static_cast<size_t>(t.rank), 0);
    const int64_t n = count();
    for (int64_t e = 0; e < n; ++e) {
      f(idx, offset(idx));
      for (int d = t.rank - 1; d >= 0; --d) {
        if (++idx[static_cast<size_t>(d)] < t.shape[d]) break;
        idx[static_cast<size_t>(d)] = 0;
      }
    }
  }

  int64_t count() const {
    int64_t n = 1;
    for (int d = 0; d < t.rank; ++d) n *= t.shape[d];
    return n;
  }

  // Uniform in [lo, hi), rounded to T.
  void fill_random(std::mt19937_64& rng, double lo, double hi) {
    std::uniform_real_distribution<float> dist(static_cast<float>(lo), static_cast<float>(hi));
    for_each([&](const std::vector<int64_t>&, int64_t off) { set(off, dist(rng)); });
  }

  // Integers in [-n, n], exact in every dtype for small n.
  void fill_integers(std::mt19937_64& rng, int n) {
    std::uniform_int_distribution<int> dist(-n, n);
    for_each([&](const std::vector<int64_t>&, int64_t off) { set(off, dist(rng)); });
  }

  // Logical elements, densely, as doubles.
  std::vector<double> dense() const {
    std::vector<double> out;
    out.reserve(static_cast<size_t>(count()));
    for_each([&](const std::vector<int64_t>&, int64_t off) { out.push_back(get(off)); });
    return out;
  }

  // Elements outside the logical tensor that no longer hold poison.
  int64_t gaps_written() const {
    std::vector<bool> logical(buf.size(), false);
    for_each([&](const std::vector<int64_t>&, int64_t off) {
      logical[static_cast<size_t>(off)] = true;
    });
    int64_t n = 0;
    for (size_t i = 0; i < buf.size(); ++i) n += !logical[i] && !Traits::is_poison(buf[i]);
    return n;
  }

  // Whether every element, logical or gap, still holds poison (nothing was written).
  bool all_poison() const {
    return std::all_of(buf.begin(), buf.end(), [](const T& x) { return Traits::is_poison(x); });
  }
};

// The tests' float32 storage.
using Storage = Tensor<float>;

// A float32 view of an attngen_tensor of F32 elements for the reference, which reads float32.
inline View view_of(const attngen_tensor& t) {
  View w{static_cast<const float*>(t.data), {}, {}};
  for (int d = 0; d < t.rank; ++d) {
    w.shape.push_back(t.shape[d]);
    w.strides.push_back(t.strides[d]);
  }
  return w;
}

// Storage whose element type is chosen at run time (F32, F16 or BF16): the testers' tensors,
// which take the dtypes of the kernel under test.
class AnyTensor {
 public:
  AnyTensor() = default;
  AnyTensor(attngen_dtype dtype, std::vector<int64_t> shape, int64_t pad) {
    init(dtype, std::move(shape), pad);
  }

  void init(attngen_dtype dtype, std::vector<int64_t> shape, int64_t pad) {
    switch (dtype) {
      case ATTNGEN_F16:
        v_.emplace<Tensor<Half>>();
        break;
      case ATTNGEN_BF16:
        v_.emplace<Tensor<BFloat16>>();
        break;
      default:
        ASSERT_EQ(dtype, ATTNGEN_F32) << "AnyTensor holds F32, F16 or BF16";
        v_.emplace<Tensor<float>>();
        break;
    }
    std::visit([&](auto& x) { x.init(std::move(shape), pad); }, v_);
  }

  attngen_tensor& t() {
    return *std::visit([](auto& x) { return &x.t; }, v_);
  }
  const attngen_tensor& t() const {
    return *std::visit([](const auto& x) { return &x.t; }, v_);
  }
  attngen_dtype dtype() const { return t().dtype; }
  size_t element_bytes() const {
    return std::visit([](const auto& x) { return sizeof(x.buf[0]); }, v_);
  }

  void fill_random(std::mt19937_64& rng, double lo, double hi) {
    std::visit([&](auto& x) { x.fill_random(rng, lo, hi); }, v_);
  }
  void fill_integers(std::mt19937_64& rng, int n) {
    std::visit([&](auto& x) { x.fill_integers(rng, n); }, v_);
  }
  // Element idx (a logical index), rounded to the dtype (NaN and infinities kept).
  void set(const std::vector<int64_t>& idx, double value) {
    std::visit([&](auto& x) { x.set(x.offset(idx), value); }, v_);
  }
  std::vector<double> dense() const {
    return std::visit([](const auto& x) { return x.dense(); }, v_);
  }
  int64_t gaps_written() const {
    return std::visit([](const auto& x) { return x.gaps_written(); }, v_);
  }
  bool all_poison() const {
    return std::visit([](const auto& x) { return x.all_poison(); }, v_);
  }

  // The whole storage (gaps too) widened to float32, element for element, so that views into it
  // (fused QKV) keep their offsets and strides: what the reference reads.
  std::vector<float> widened() const {
    return std::visit(
        [](const auto& x) {
          using Traits = typename std::decay_t<decltype(x)>::Traits;
          std::vector<float> out(x.buf.size());
          for (size_t i = 0; i < out.size(); ++i) {
            out[i] = static_cast<float>(Traits::to_double(x.buf[i]));
          }
          return out;
        },
        v_);
  }

  // The reference's view of `t`, a tensor into this storage, in `wide` (widened()).
  View view_in(const attngen_tensor& sub, const std::vector<float>& wide) const {
    const auto* base = static_cast<const char*>(t().data);
    const int64_t offset =
        (static_cast<const char*>(sub.data) - base) / static_cast<int64_t>(element_bytes());
    attngen_tensor w = sub;
    w.data = const_cast<float*>(wide.data() + offset);
    return view_of(w);
  }

 private:
  std::variant<Tensor<float>, Tensor<Half>, Tensor<BFloat16>> v_;
};

// The dtype whose bound applies to a call: its inputs' (F16 / BF16 storage), whatever the
// output's.
inline attngen_dtype tolerance_dtype(attngen_dtype input, attngen_dtype output) {
  return input != ATTNGEN_F32 ? input : output;
}

// got against the float64 reference `want` with the tolerance of `dtype`; max_abs_v scales the
// max-abs bound (max|V| for attention outputs, 1 for weights).
// Non-finite values (docs/semantics.md, "NaN and infinities"): where the reference is NaN the
// output must be NaN, where it is an infinity the same infinity, and everywhere else finite and
// within the tolerance (errors are taken over those elements).
// ref_l2_floor: the relative error's denominator is at least this L2 norm (0: ||want|| alone;
// the MHA checks pass the norm of the output projection before its bias, tests/mha_test.cpp).
inline void expect_close(const std::vector<double>& got, const std::vector<double>& want,
                         double max_abs_v, attngen_dtype dtype, double ref_l2_floor = 0) {
  ASSERT_EQ(got.size(), want.size());
  const Tolerance& tol = tolerance_of(dtype);
  double err2 = 0, ref2 = 0, max_err = 0;
  int64_t not_finite = 0, wrong_nonfinite = 0;
  size_t first_wrong = got.size();
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i]) || std::isinf(want[i])) {
      const bool ok = std::isnan(want[i]) ? std::isnan(got[i]) : got[i] == want[i];
      if (!ok && wrong_nonfinite++ == 0) first_wrong = i;
      continue;
    }
    if (!std::isfinite(got[i])) {
      if (not_finite++ == 0 && first_wrong == got.size()) first_wrong = i;
      continue;
    }
    const double e = got[i] - want[i];
    err2 += e * e;
    ref2 += want[i] * want[i];
    max_err = std::max(max_err, std::abs(e));
  }
  const auto first = [&] {
    if (first_wrong == got.size()) return std::string();
    return " (first at element " + std::to_string(first_wrong) + ": got " +
           std::to_string(got[first_wrong]) + ", want " + std::to_string(want[first_wrong]) + ")";
  };
  EXPECT_EQ(not_finite, 0) << "outputs not written or not finite where the reference is" << first();
  EXPECT_EQ(wrong_nonfinite, 0) << "NaN / infinities of the reference not reproduced" << first();
  ref2 = std::max(ref2, ref_l2_floor * ref_l2_floor);
  const double rel = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  EXPECT_LE(rel, tol.rel_l2) << "relative L2 error";
  if (tol.abs_per_max > 0) {
    EXPECT_LE(max_err, tol.abs_per_max * max_abs_v + tol.abs_floor)
        << "max abs error (max|V| = " << max_abs_v << ")";
  }
}

// The contract's f32 tolerance: relative L2 <= 1e-5 and max abs <= 1e-5 * max|V| + 1e-6.
inline void expect_close_f32(const std::vector<double>& got, const std::vector<double>& want,
                             double max_abs_v) {
  expect_close(got, want, max_abs_v, ATTNGEN_F32);
}

inline double max_abs(const std::vector<double>& x) {
  double m = 0;
  for (double v : x) {
    if (std::isfinite(v)) m = std::max(m, std::abs(v));
  }
  return m;
}

inline double max_abs(const View& v) {
  double m = 0;
  std::vector<int64_t> idx(v.shape.size(), 0);
  while (true) {
    int64_t off = 0;
    for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * v.strides[d];
    const double x = static_cast<double>(v.data[off]);
    if (std::isfinite(x)) m = std::max(m, std::abs(x));  // (the bound of finite outputs)
    size_t d = idx.size();
    while (d > 0 && ++idx[d - 1] == v.shape[d - 1]) idx[--d] = 0;
    if (d == 0) return m;
  }
}

}  // namespace attngen::test
