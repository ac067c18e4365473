#include "tests/fuzz/fuzz_input.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "attngen/kernel.h"

namespace attngen::fuzz {

int64_t dim(Input& in, int64_t max) {
  const uint8_t b = in.u8();
  if (b < 240) return 1 + b % max;
  if (b < 246) return 0;
  return in.pick(kHostile);
}

int64_t head_dim(Input& in) {
  static constexpr int64_t kDims[] = {1,   2,   3,  5,  7,  8,   16,  24,  31,  32,  40,
                                      63,  64,  65, 80, 96, 127, 128, 129, 200, 256, 257,
                                      512, 513, 64, 64, 32, 16,  8,   4,   12,  3};
  const uint8_t b = in.u8();
  if (b < 248) return kDims[b % (sizeof kDims / sizeof kDims[0])];
  return dim(in, 8);
}

int bad_enum(Input& in) {
  static constexpr int kBad[] = {-1, 2, 3, 5, 6, 7, 0x7fffffff, INT32_MIN, 0x40000000};
  int v = in.pick(kBad);
  return v;
}

int dtype_near(Input& in, int usual) {
  const uint8_t b = in.u8();
  if (b < 200) return usual;
  if (b < 240) return b % 6;  // F32, F16, BF16, BOOL, I32, I8
  return bad_enum(in);
}

int enum_value(Input& in, int valid_count) {
  const uint8_t b = in.u8();
  if (b < 236) return b % valid_count;
  return bad_enum(in);
}

int32_t small_param(Input& in, int32_t max) {
  const uint8_t b = in.u8();
  if (b < 230) return static_cast<int32_t>(b % (max + 1));
  static constexpr int32_t kBad[] = {-1, -2, 0, INT32_MAX, INT32_MIN, 1 << 30};
  return in.pick(kBad);
}

size_t misalign(Input& in, int dtype) {
  if (!in.chance(8)) return 0;
  // Misaligned data pointers (not a multiple of the element size).
  return 1 + in.u8() % 3;
}

int64_t sat_add(int64_t a, int64_t b) {
  int64_t r;
  return __builtin_add_overflow(a, b, &r) ? (b > 0 ? INT64_MAX : INT64_MIN) : r;
}

int32_t as_i32(double x) {
  if (!std::isfinite(x)) return INT32_MIN;
  return static_cast<int32_t>(std::max(-2147483648.0, std::min(2147483647.0, x)));
}

Layout layout_for(Input& in, std::vector<int64_t> shape) {
  Layout l{shape, std::vector<int64_t>(shape.size(), 0)};
  const uint8_t mode = in.u8();
  int64_t stride = 1;
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    l.strides[d] = stride;
    int64_t extent = shape[d] > 0 ? shape[d] : 1;
    if (mode >= 160 && mode < 200 && d < static_cast<int>(shape.size()) - 1) {
      extent = sat_add(extent, in.u8() % 5);  // padded
    }
    if (__builtin_mul_overflow(stride, extent, &stride)) stride = INT64_MAX / 2;
  }
  if (mode >= 200 && !shape.empty()) {
    const size_t d = in.u8() % shape.size();
    static constexpr int64_t kStrides[] = {
        0, -1, -3, 2, 1, 1LL << 31, 1LL << 40, INT64_MAX, INT64_MIN, 1LL << 20, -(1LL << 40), 7};
    l.strides[d] = in.pick(kStrides);
  }
  return l;
}

const char* kernel_name(Input& in) {
  const uint8_t b = in.u8();
  if (b < 200) return nullptr;
  if (b < 240 && attngen_kernel_count() > 0) {
    return attngen_kernel_at(in.u8() % attngen_kernel_count())->name;
  }
  static const char* const kNames[] = {"", "no_such_kernel", "attention", "avx2"};
  return in.pick(kNames);
}

float scale_value(Input& in, int64_t dqk, bool& wild) {
  const uint8_t b = in.u8();
  const float def = dqk > 0 && dqk < (1 << 20) ? 1.0f / std::sqrt(static_cast<float>(dqk)) : 1.0f;
  if (b < 150) return 0.0f;
  if (b < 230) return def * (static_cast<float>(in.u8()) / 64.0f - 2.0f);
  wild = true;
  static constexpr float kWild[] = {std::numeric_limits<float>::quiet_NaN(),
                                    std::numeric_limits<float>::infinity(),
                                    -std::numeric_limits<float>::infinity(),
                                    1e30f,
                                    -1e30f,
                                    std::numeric_limits<float>::denorm_min(),
                                    -0.0f,
                                    1e4f};
  return in.pick(kWild);
}

}  // namespace attngen::fuzz
