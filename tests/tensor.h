// Test helpers: strided float storage with poisoned gaps, random fill, contract tolerances.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "attngen/attngen.h"
#include "tests/reference.h"

namespace attngen::test {

// A quiet NaN with a recognisable payload: outputs are filled with it before a call, so an
// element the kernel did not write fails every comparison, and gaps must still hold it after.
inline float poison() {
  const uint32_t bits = 0x7fc0dead;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

inline bool is_poison(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return bits == 0x7fc0dead;
}

// Seeds differ per run; failures print the seed (SCOPED_TRACE) so a case can be replayed by
// setting ATTNGEN_TEST_SEED.
inline uint64_t fresh_seed() {
  if (const char* s = std::getenv("ATTNGEN_TEST_SEED")) return std::strtoull(s, nullptr, 10);
  return std::random_device{}() ^ (static_cast<uint64_t>(std::random_device{}()) << 32);
}

// Float storage for a tensor of `shape` whose non-innermost strides are padded by `pad`
// elements per dimension (0 = dense), filled with poison.
struct Storage {
  std::vector<float> buf;
  attngen_tensor t{};

  Storage() = default;
  Storage(std::vector<int64_t> shape, int64_t pad) { init(std::move(shape), pad); }

  void init(std::vector<int64_t> shape, int64_t pad) {
    const int rank = static_cast<int>(shape.size());
    t.dtype = ATTNGEN_F32;
    t.rank = rank;
    int64_t stride = 1;
    for (int d = rank - 1; d >= 0; --d) {
      t.shape[d] = shape[d];
      t.strides[d] = stride;
      stride *= shape[d] + (d == rank - 1 ? pad : (pad ? 1 : 0));
    }
    buf.assign(static_cast<size_t>(stride), poison());
    t.data = buf.data();
  }

  int64_t offset(const std::vector<int64_t>& idx) const {
    int64_t off = 0;
    for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * t.strides[d];
    return off;
  }

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

  void fill_random(std::mt19937_64& rng, float lo, float hi) {
    std::uniform_real_distribution<float> dist(lo, hi);
    for_each([&](const std::vector<int64_t>&, int64_t off) {
      buf[static_cast<size_t>(off)] = dist(rng);
    });
  }

  // Logical elements, densely, as doubles.
  std::vector<double> dense() const {
    std::vector<double> out;
    out.reserve(static_cast<size_t>(count()));
    for_each([&](const std::vector<int64_t>&, int64_t off) {
      out.push_back(buf[static_cast<size_t>(off)]);
    });
    return out;
  }

  // Every element outside the logical tensor still holds poison.
  int64_t gaps_written() const {
    std::vector<bool> logical(buf.size(), false);
    for_each([&](const std::vector<int64_t>&, int64_t off) {
      logical[static_cast<size_t>(off)] = true;
    });
    int64_t n = 0;
    for (size_t i = 0; i < buf.size(); ++i) n += !logical[i] && !is_poison(buf[i]);
    return n;
  }
};

// The contract's f32 tolerance: relative L2 <= 1e-5 and max abs <= 1e-5 * max|V| + 1e-6.
inline void expect_close_f32(const std::vector<double>& got, const std::vector<double>& want,
                             double max_abs_v) {
  ASSERT_EQ(got.size(), want.size());
  double err2 = 0, ref2 = 0, max_err = 0;
  int64_t not_finite = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) {
      ++not_finite;
      continue;
    }
    const double e = got[i] - want[i];
    err2 += e * e;
    ref2 += want[i] * want[i];
    max_err = std::max(max_err, std::abs(e));
  }
  EXPECT_EQ(not_finite, 0) << "outputs not written or not finite";
  const double rel = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  EXPECT_LE(rel, 1e-5) << "relative L2 error";
  EXPECT_LE(max_err, 1e-5 * max_abs_v + 1e-6) << "max abs error (max|V| = " << max_abs_v << ")";
}

inline double max_abs(const std::vector<double>& x) {
  double m = 0;
  for (double v : x) m = std::max(m, std::abs(v));
  return m;
}

inline double max_abs(const View& v) {
  double m = 0;
  std::vector<int64_t> idx(v.shape.size(), 0);
  while (true) {
    int64_t off = 0;
    for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * v.strides[d];
    m = std::max(m, std::abs(static_cast<double>(v.data[off])));
    size_t d = idx.size();
    while (d > 0 && ++idx[d - 1] == v.shape[d - 1]) idx[--d] = 0;
    if (d == 0) return m;
  }
}

}  // namespace attngen::test
