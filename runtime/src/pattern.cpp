// Sparse attention patterns on the host side, for tools that draw or count them: the
// definitions of core/pattern.h, which the kernels evaluate in generated code. Every input
// is defined: positions are evaluated exactly (no int64 overflow at either end, in 64-bit
// arithmetic: 32-bit targets have no __int128), a pattern whose parameters a call would reject
// answers 0, and a block-sparse layout is checked like any tensor argument before an entry is
// read.
#include "core/pattern.h"

#include <cstdint>

#include "attngen/attngen.h"
#include "runtime/src/internal.h"

namespace attngen {

// An integer of magnitude below 2^64, held as its sign and magnitude: exact for every value the
// definitions form from int64 positions and int32 parameters (p - j, p - left, p + right all lie
// in (-2^64, 2^64)). A sum past 2^64 (which the definitions never form) saturates, keeping its
// sign, so comparisons with int64 and int32 values still answer as the exact sum would.
class Wide {
 public:
  Wide(int64_t v)  // implicit: the definitions mix positions with int parameters
      : Wide(v < 0, v < 0 ? uint64_t{0} - static_cast<uint64_t>(v) : static_cast<uint64_t>(v)) {}

  friend Wide operator+(Wide a, Wide b) {
    if (a.neg_ == b.neg_) {
      uint64_t m;
      if (__builtin_add_overflow(a.mag_, b.mag_, &m)) m = UINT64_MAX;
      return Wide(a.neg_, m);
    }
    return a.mag_ >= b.mag_ ? Wide(a.neg_, a.mag_ - b.mag_) : Wide(b.neg_, b.mag_ - a.mag_);
  }
  friend Wide operator-(Wide a, Wide b) { return a + Wide(!b.neg_, b.mag_); }
  // C++'s truncating remainder (the sign of a), for b != 0.
  friend Wide operator%(Wide a, Wide b) { return Wide(a.neg_, a.mag_ % b.mag_); }
  friend bool operator<(Wide a, Wide b) {
    if (a.neg_ != b.neg_) return a.neg_;
    return a.neg_ ? a.mag_ > b.mag_ : a.mag_ < b.mag_;
  }
  friend bool operator>(Wide a, Wide b) { return b < a; }
  friend bool operator<=(Wide a, Wide b) { return !(b < a); }
  friend bool operator>=(Wide a, Wide b) { return !(a < b); }
  friend bool operator==(Wide a, Wide b) { return a.neg_ == b.neg_ && a.mag_ == b.mag_; }
  Wide abs() const { return Wide(false, mag_); }

 private:
  Wide(bool neg, uint64_t mag) : neg_(neg && mag != 0), mag_(mag) {}  // one zero, never -0
  bool neg_;
  uint64_t mag_;
};

template <>
struct PatternOps<Wide> {
  using Bool = bool;
  static bool always() { return true; }
  static Wide abs(Wide x) { return x.abs(); }
  static bool side(int param, bool cond, bool otherwise) { return param >= 0 ? cond : otherwise; }
};

namespace {

// The layout entry of query index i and key j, or false where the layout is no valid BOOL
// [rows, columns] tensor (the checks of a call's pattern.layout, without its shape against Sq and
// Skv) or (i, j) falls outside it.
bool layout_entry(const attngen_pattern& p, int64_t i, int64_t j) {
  if (p.block <= 0 || p.layout == nullptr || i < 0 || j < 0) return false;
  static const char* const kDims[] = {"Sq / block", "Skv / block"};
  rt::Check c;
  if (!rt::check_tensor(c, p.layout, rt::TensorSpec{"pattern.layout", ATTNGEN_BOOL, 2, kDims})) {
    return false;
  }
  const attngen_tensor& l = *p.layout;
  return block_sparse_attends(i, j, p.block, [&l](int64_t r, int64_t col) {
    if (r >= l.shape[0] || col >= l.shape[1]) return false;
    // Inside a validated tensor: the offset is below 2^31.
    return static_cast<const uint8_t*>(l.data)[r * l.strides[0] + col * l.strides[1]] != 0;
  });
}

}  // namespace
}  // namespace attngen

extern "C" {

attngen_pattern attngen_pattern_local(int32_t w) {
  attngen_pattern p{};
  p.kind = ATTNGEN_PATTERN_WINDOW;
  p.window_left = p.window_right = w > 0 ? w - 1 : 0;
  return p;
}

int attngen_pattern_attends(const attngen_pattern* p, int64_t pos, int64_t i, int64_t j) {
  using attngen::Wide;
  if (p == nullptr) return 0;
  const Wide wp = pos, wj = j;
  switch (attngen::rt::enum_value(p->kind)) {  // any int a caller stored
    case ATTNGEN_PATTERN_NONE:
      return 1;
    case ATTNGEN_PATTERN_WINDOW:
      // The parameters a call accepts: each side >= 0 or -1 (unbounded), not both unbounded.
      if (p->window_left < -1 || p->window_right < -1 ||
          (p->window_left < 0 && p->window_right < 0)) {
        return 0;
      }
      return attngen::window_attends(wp, wj, p->window_left, p->window_right);
    case ATTNGEN_PATTERN_STRIDED:
      return p->stride > 0 && attngen::strided_attends(wp, wj, Wide{p->stride});
    case ATTNGEN_PATTERN_BLOCK_SPARSE:
      return attngen::layout_entry(*p, i, j);
    case ATTNGEN_PATTERN_GLOBAL_LOCAL:
      if (p->local < 0 || p->global_tokens < 0) return 0;
      return attngen::global_local_attends(wp, wj, Wide{p->local}, Wide{p->global_tokens});
    default:
      return 0;
  }
}

}  // extern "C"
