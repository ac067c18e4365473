#include "tests/fuzz/guarded_tensor.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "tests/tensor.h"

namespace attngen::fuzz {

using attngen::test::BFloat16;
using attngen::test::ElementTraits;
using attngen::test::Half;
using attngen::test::View;

const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));

size_t element_size(int d) {
  switch (d) {
    case ATTNGEN_F32:
    case ATTNGEN_I32:
      return 4;
    case ATTNGEN_F16:
    case ATTNGEN_BF16:
      return 2;
    default:
      return 1;  // BOOL, I8, and (for allocation) invalid dtypes
  }
}

GuardTensor::~GuardTensor() {
  if (map_ != nullptr) munmap(map_, map_len_);
}

void GuardTensor::make(int dtype, const Layout& l, size_t misalign, bool null_data) {
  dtype_ = dtype;
  put_enum(t.dtype, dtype);
  t.rank = static_cast<int32_t>(l.shape.size());
  for (size_t d = 0; d < l.shape.size() && d < ATTNGEN_MAX_RANK; ++d) {
    t.shape[d] = l.shape[d];
    t.strides[d] = l.strides[d];
  }
  es_ = element_size(dtype);
  compute_span();
  // Mapped wherever the memory span is bounded, whatever the count of logical elements: the
  // API accepts a tensor whose broadcast (stride 0) dimensions make 2^40 elements or more of a
  // small span, and reads it (a block-sparse layout of [2^28, 2^27] with strides [0, 1] in
  // attngen_pattern_attends read unmapped memory: regression fixed13-*).
  uint64_t bytes = 0;
  if (span_bounded_) bytes = static_cast<uint64_t>(hi_ - lo_ + 1) * es_;
  if (logical_ == 0) bytes = 0;
  mapped_ = span_bounded_ && bytes <= kMaxMapped;
  if (!mapped_) bytes = 0;
  const size_t body = ((bytes + misalign + kPage - 1) / kPage) * kPage;
  map_len_ = body + 2 * kPage;
  void* m = mmap(nullptr, map_len_, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) {
    std::fprintf(stderr, "mmap of %zu bytes failed\n", map_len_);
    std::abort();
  }
  map_ = static_cast<uint8_t*>(m);
  mprotect(map_, kPage, PROT_NONE);
  mprotect(map_ + kPage + body, kPage, PROT_NONE);
  end_ = map_ + kPage + body;
  begin_ = end_ - bytes - misalign;
  // The data pointer: element lo_ is at begin_.
  data_ = begin_ - (mapped_ && logical_ > 0 ? lo_ * static_cast<int64_t>(es_) : 0);
  t.data = null_data ? nullptr : static_cast<void*>(data_);
}

void GuardTensor::poison() {
  if (!mapped_) return;
  uint8_t pat[4];
  poison_bytes(pat);
  if (end_ - begin_ <= static_cast<ptrdiff_t>(kMaxCompared)) {
    for (uint8_t* b = begin_; b < end_; ++b) {
      pat_at(b, pat);
    }
  } else {
    for_each([&](int64_t, int64_t off) {
      for (size_t k = 0; k < es_; ++k) pat_at(at(off) + k, pat);
    });
  }
}

std::vector<uint8_t> GuardTensor::snapshot() const {
  std::vector<uint8_t> s;
  if (!mapped_) return s;
  if (end_ - begin_ <= static_cast<ptrdiff_t>(kMaxCompared)) {
    s.assign(begin_, end_);
  } else {
    for_each([&](int64_t, int64_t off) { s.insert(s.end(), at(off), at(off) + es_); });
  }
  return s;
}

bool GuardTensor::gaps_unchanged(const std::vector<uint8_t>& before) const {
  if (!mapped_ || end_ - begin_ > static_cast<ptrdiff_t>(kMaxCompared)) return true;
  std::vector<uint8_t> now(begin_, end_);
  std::vector<bool> logical(now.size(), false);
  for_each([&](int64_t, int64_t off) {
    for (size_t k = 0; k < es_; ++k) logical[static_cast<size_t>(at(off) + k - begin_)] = true;
  });
  for (size_t i = 0; i < now.size(); ++i) {
    if (!logical[i] && now[i] != before[i]) return false;
  }
  return true;
}

double GuardTensor::get(int64_t off) const {
  const uint8_t* p = at(off);
  switch (dtype_) {
    case ATTNGEN_F32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case ATTNGEN_F16: {
      Half h;
      std::memcpy(&h.bits, p, 2);
      return ElementTraits<Half>::to_double(h);
    }
    case ATTNGEN_BF16: {
      BFloat16 h;
      std::memcpy(&h.bits, p, 2);
      return ElementTraits<BFloat16>::to_double(h);
    }
    case ATTNGEN_I32: {
      int32_t i;
      std::memcpy(&i, p, 4);
      return i;
    }
    case ATTNGEN_I8:
      return static_cast<int8_t>(*p);
    default:
      return *p;
  }
}

double GuardTensor::set(int64_t off, double x) {
  uint8_t* p = at(off);
  switch (dtype_) {
    case ATTNGEN_F32: {
      const float f = static_cast<float>(x);
      std::memcpy(p, &f, 4);
      return f;
    }
    case ATTNGEN_F16: {
      const Half h = ElementTraits<Half>::from_double(x);
      std::memcpy(p, &h.bits, 2);
      return ElementTraits<Half>::to_double(h);
    }
    case ATTNGEN_BF16: {
      const BFloat16 h = ElementTraits<BFloat16>::from_double(x);
      std::memcpy(p, &h.bits, 2);
      return ElementTraits<BFloat16>::to_double(h);
    }
    default: {
      // Integer types (and invalid dtypes, stored as bytes): random floats become integers.
      const double c = std::isfinite(x) ? std::max(-2147483648.0, std::min(2147483647.0, x)) : 0;
      const int32_t i = static_cast<int32_t>(c);
      if (dtype_ == ATTNGEN_I32) {
        std::memcpy(p, &i, 4);
        return i;
      }
      *p = static_cast<uint8_t>(i & 0xff);
      return dtype_ == ATTNGEN_I8 ? static_cast<int8_t>(*p) : *p;
    }
  }
}

bool GuardTensor::is_poison(int64_t off) const {
  uint8_t pat[4];
  poison_bytes(pat);
  for (size_t k = 0; k < es_; ++k) {
    if (at(off)[k] != pat[k]) return false;
  }
  return true;
}

std::vector<double> GuardTensor::dense() const {
  std::vector<double> v(static_cast<size_t>(small() ? logical_ : 0));
  for_each([&](int64_t e, int64_t off) { v[static_cast<size_t>(e)] = get(off); });
  return v;
}

void GuardTensor::poison_bytes(uint8_t pat[4]) const {
  uint32_t bits = 0xa5a5a5a5u;
  if (dtype_ == ATTNGEN_F32) bits = 0x7fc0deadu;
  if (dtype_ == ATTNGEN_F16) bits = 0x7e5d7e5du;
  if (dtype_ == ATTNGEN_BF16) bits = 0x7fde7fdeu;
  std::memcpy(pat, &bits, 4);
}

void GuardTensor::pat_at(uint8_t* b, const uint8_t pat[4]) const {
  const int64_t rel = b - data_;
  const int64_t e = static_cast<int64_t>(es_);
  *b = pat[((rel % e) + e) % e];
}

void GuardTensor::compute_span() {
  logical_ = 1;
  lo_ = hi_ = 0;
  span_ok_ = span_bounded_ = t.rank >= 0 && t.rank <= ATTNGEN_MAX_RANK;
  if (!span_ok_) return;
  for (int d = 0; d < t.rank; ++d) {
    if (t.shape[d] <= 0) {
      logical_ = 0;
      continue;
    }
    if (__builtin_mul_overflow(logical_, t.shape[d], &logical_)) {
      logical_ = INT64_MAX;
      span_ok_ = false;
    }
    __int128 ext = static_cast<__int128>(t.shape[d] - 1) * t.strides[d];
    if (ext > (static_cast<__int128>(1) << 62) || ext < -(static_cast<__int128>(1) << 62)) {
      span_ok_ = span_bounded_ = false;
      continue;
    }
    if (ext > 0) hi_ = sat_add(hi_, static_cast<int64_t>(ext));
    if (ext < 0) lo_ = sat_add(lo_, static_cast<int64_t>(ext));
  }
  if (t.rank >= 0 && logical_ < 0) span_ok_ = false;
  if (logical_ > (1LL << 40)) span_ok_ = false;
  if (hi_ > (1LL << 40) || lo_ < -(1LL << 40)) span_ok_ = span_bounded_ = false;
}

double random_value(Fill& f) {
  std::uniform_real_distribution<double> u(f.lo, f.hi);
  if (f.nonfinite && (f.rng() & 63) == 0) {
    static constexpr double kBad[] = {std::numeric_limits<double>::quiet_NaN(),
                                      std::numeric_limits<double>::infinity(),
                                      -std::numeric_limits<double>::infinity()};
    return kBad[f.rng() % 3];
  }
  return u(f.rng);
}

void fill_input(GuardTensor& g, Fill& f) {
  g.poison();
  g.for_each([&](int64_t, int64_t off) { g.set(off, random_value(f)); });
}

void fill_mha_weights(std::initializer_list<GuardTensor*> weights, int64_t embed, Fill& f) {
  const double a =
      embed > 0 && embed < (1 << 20) ? 1.0 / std::sqrt(static_cast<double>(embed)) : 1.0;
  f.lo = -a;
  f.hi = a;
  for (GuardTensor* g : weights) fill_input(*g, f);
  f.lo = -1;
  f.hi = 1;
}

Dense dense_of(const GuardTensor& g) {
  return dense_from(g.dense(), std::vector<int64_t>(g.t.shape, g.t.shape + g.t.rank));
}

Dense dense_from(const std::vector<double>& x, const std::vector<int64_t>& shape) {
  Dense d;
  for (double e : x) d.data.push_back(static_cast<float>(e));
  std::vector<int64_t> strides(shape.size(), 1);
  for (int i = static_cast<int>(shape.size()) - 2; i >= 0; --i) {
    strides[i] = strides[i + 1] * shape[i + 1];
  }
  d.view = View{d.data.data(), shape, strides};
  return d;
}

}  // namespace attngen::fuzz
