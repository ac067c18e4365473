// The decoding of a fuzz input: the byte reader (Input) and the draws the call builders make from
// it, shared by every API entry point (sizes, head dims, dtypes, enum values, strides, kernel
// names, scales). What each draw consumes, and the order of the draws in the builders
// (tests/fuzz/*_calls.cpp), are the meaning of the saved inputs: the seed corpus and every
// finding in tests/fuzz/regressions are replayed by ctest and must keep decoding to the same
// calls, so a change here shifts them all.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "attngen/attngen.h"

namespace attngen::fuzz {

class Input {
 public:
  Input(const uint8_t* data, size_t size) : p_(data), n_(size) {}
  uint8_t u8() {
    if (n_ == 0) return 0;
    --n_;
    return *p_++;
  }
  uint16_t u16() { return static_cast<uint16_t>(u8() | (u8() << 8)); }
  uint32_t u32() { return u16() | (static_cast<uint32_t>(u16()) << 16); }
  uint64_t u64() { return u32() | (static_cast<uint64_t>(u32()) << 32); }
  // true with probability about k/256; false once the input is used up (the usual path)
  bool chance(int k) { return n_ > 0 && u8() >= 256 - k; }
  template <typename T, size_t N>
  T pick(const T (&options)[N]) {
    return options[u8() % N];
  }

 private:
  const uint8_t* p_;
  size_t n_;
};

// Hostile sizes: zero, negative, just past 32 bits, huge, the extremes.
inline constexpr int64_t kHostile[] = {0,         -1,        -2,          INT64_MIN,
                                       INT64_MAX, 1LL << 31, 1LL << 32,   1LL << 40,
                                       INT32_MAX, 1LL << 62, -(1LL << 40)};

// A size: 1..max most of the time, sometimes hostile (0 more often than the rest).
int64_t dim(Input& in, int64_t max);

// Head dims: small odd ones and the buckets' edges (specialised 64, generic 128/256/512).
int64_t head_dim(Input& in);

// Enum fields are filled as ints (memcpy): a C caller may store any int there, and the harness
// itself never loads an enum lvalue holding a value outside the enum (UBSan's -fsanitize=enum).
template <typename E>
void put_enum(E& field, int value) {
  static_assert(sizeof(E) == sizeof(int), "attngen enums are int-sized");
  std::memcpy(&field, &value, sizeof value);
}

// Out-of-range enum values a C caller may pass.
int bad_enum(Input& in);

// A dtype: mostly `usual`, sometimes another float type, sometimes not a float type at all.
int dtype_near(Input& in, int usual);

// An enum value: one of the valid_count first values mostly, sometimes an invalid one.
int enum_value(Input& in, int valid_count);

// A small int32 parameter: 0..max mostly, sometimes negative or huge.
int32_t small_param(Input& in, int32_t max);

// Bytes of slack after a tensor's span, usually none: a data pointer that is not a multiple of
// the element size.
size_t misalign(Input& in, int dtype);

// a + b without overflow (hostile sizes are near the limits).
int64_t sat_add(int64_t a, int64_t b);

// A stored value read back as an int32 (a kv_len or count tensor of a float dtype stores
// infinities and fractions; such a call must fail anyway, the value only has to be defined).
int32_t as_i32(double x);

// A tensor's shape and strides, outermost first.
struct Layout {
  std::vector<int64_t> shape, strides;
};

// Strides for a shape: contiguous most of the time, else padded, broadcast (0), negative,
// overlapping, huge, or an innermost stride other than 1.
Layout layout_for(Input& in, std::vector<int64_t> shape);

// A kernel name for a call's options: none mostly, else one from the table or one that names
// none.
const char* kernel_name(Input& in);

// Well-conditioned options: the reference comparison is meaningful (scores of moderate size).
float scale_value(Input& in, int64_t dqk, bool& wild);

}  // namespace attngen::fuzz
