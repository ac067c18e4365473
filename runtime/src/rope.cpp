#include "runtime/src/rope.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <new>
#include <string>

#include "runtime/src/convert.h"

namespace attngen::rt {

namespace {
const char* const kFreqDims[] = {"r / 2"};
}  // namespace

bool check_rope(Check& c, const attngen_rope* rope, int64_t head_dim, const char* name,
                attngen_rope* read) {
  *read = attngen_rope_default();
  if (rope == nullptr) return true;
  attngen_rope& r = *read;
  if (!read_options(c, rope, name, &r)) return false;
  const std::string who(name);
  const int32_t kind = enum_value(r.pairs);
  if (kind != ATTNGEN_ROPE_HALF && kind != ATTNGEN_ROPE_INTERLEAVED) {
    return c.fail(ATTNGEN_ERROR_INVALID_ARGUMENT,
                  who + ".pairs is " + std::to_string(kind) +
                      ", expected ATTNGEN_ROPE_HALF (0) or ATTNGEN_ROPE_INTERLEAVED (1)");
  }
  const int64_t n = r.rotary_dim == 0 ? head_dim : r.rotary_dim;
  if (n < 2 || n > head_dim || n % 2 != 0) {
    return c.fail(ATTNGEN_ERROR_INVALID_ARGUMENT,
                  who + ".rotary_dim is " + std::to_string(r.rotary_dim) +
                      ", expected an even number from 2 to the head dim " +
                      std::to_string(head_dim) + " (0: the head dim)");
  }
  const std::string freq_name = who + ".inv_freq";
  if (r.inv_freq == nullptr) return c.fail(ATTNGEN_ERROR_NULL_POINTER, freq_name + " is NULL");
  const TensorSpec spec{freq_name.c_str(), ATTNGEN_F32, 1, kFreqDims};
  if (!check_tensor(c, r.inv_freq, spec) ||
      !check_dim(c, *r.inv_freq, spec, 0, n / 2, "rotary_dim / 2")) {
    return false;
  }
  const auto* data = static_cast<const float*>(r.inv_freq->data);
  for (int64_t i = 0; i < n / 2; ++i) {
    if (!std::isfinite(data[i * r.inv_freq->strides[0]])) {
      return c.fail(ATTNGEN_ERROR_INVALID_ARGUMENT,
                    freq_name + "[" + std::to_string(i) + "] is not finite");
    }
  }
  r.rotary_dim = n;
  return true;
}

void copy_inv_freq(const attngen_rope& rope, float* freq) {
  const auto* data = static_cast<const float*>(rope.inv_freq->data);
  for (int64_t i = 0; i < rope.rotary_dim / 2; ++i) freq[i] = data[i * rope.inv_freq->strides[0]];
}

bool KeptRope::keep(Check& c, const attngen_rope* rope, int64_t head_dim, const char* name) {
  attngen_rope r;
  if (!check_rope(c, rope, head_dim, name, &r)) return false;
  dim = r.rotary_dim;
  pairs = r.pairs;
  if (dim == 0) return true;
  try {
    inv_freq.resize(static_cast<size_t>(dim / 2));
  } catch (const std::bad_alloc&) {
    return c.fail(ATTNGEN_ERROR_OUT_OF_MEMORY, std::string("cannot copy ") + name + ".inv_freq");
  }
  copy_inv_freq(r, inv_freq.data());
  return true;
}

attngen_rope KeptRope::described(attngen_tensor* freq_tensor) const {
  const int64_t half = dim / 2;
  *freq_tensor =
      attngen_tensor_contiguous(const_cast<float*>(inv_freq.data()), ATTNGEN_F32, 1, &half);
  attngen_rope r = attngen_rope_default();
  r.rotary_dim = dim;
  r.pairs = pairs;
  r.inv_freq = freq_tensor;
  return r;
}

const float* RopeAngles::at(int64_t position) {
  const int64_t half = rope_.dim / 2;
  double* cos_t = state_;
  double* sin_t = state_ + half;
  double* cos_f = state_ + 2 * half;
  double* sin_f = state_ + 3 * half;
  if (any_ && position == last_) return cs_;
  if (any_ && position == last_ + 1 && since_anchor_ < kAnchorEvery) {
    if (!turns_) {  // the turn by f_i, once a position follows another (a decode has one)
      for (int64_t i = 0; i < half; ++i) {
        cos_f[i] = std::cos(static_cast<double>(rope_.inv_freq[i]));
        sin_f[i] = std::sin(static_cast<double>(rope_.inv_freq[i]));
      }
      turns_ = true;
    }
    for (int64_t i = 0; i < half; ++i) {
      const double c = cos_t[i] * cos_f[i] - sin_t[i] * sin_f[i];
      const double s = sin_t[i] * cos_f[i] + cos_t[i] * sin_f[i];
      cos_t[i] = c;
      sin_t[i] = s;
    }
    ++since_anchor_;
  } else {
    const double t = static_cast<double>(position);
    for (int64_t i = 0; i < half; ++i) {
      const double a = t * static_cast<double>(rope_.inv_freq[i]);
      cos_t[i] = std::cos(a);
      sin_t[i] = std::sin(a);
    }
    since_anchor_ = 0;
  }
  for (int64_t i = 0; i < half; ++i) {
    cs_[i] = static_cast<float>(cos_t[i]);
    cs_[half + i] = static_cast<float>(sin_t[i]);
  }
  any_ = true;
  last_ = position;
  return cs_;
}

void rope_row(const RopeView& rope, const float* cs, const float* src, float* dst) {
  const int64_t half = rope.dim / 2;
  const float* cos_t = cs;
  const float* sin_t = cs + half;
  if (rope.pairs == ATTNGEN_ROPE_HALF) {
    for (int64_t i = 0; i < half; ++i) {
      const float a = src[i], b = src[i + half];
      dst[i] = a * cos_t[i] - b * sin_t[i];
      dst[i + half] = a * sin_t[i] + b * cos_t[i];
    }
  } else {
    for (int64_t i = 0; i < half; ++i) {
      const float a = src[2 * i], b = src[2 * i + 1];
      dst[2 * i] = a * cos_t[i] - b * sin_t[i];
      dst[2 * i + 1] = a * sin_t[i] + b * cos_t[i];
    }
  }
}

bool RopedTensor::take(Check& c, CallScratch& scratch, const RopeView& rope,
                       const attngen_tensor& x, const char* what) {
  rope_ = rope;
  workers_ = std::max(1, thread_count());
  const size_t esize = dtype_size(x.dtype);
  const size_t elements = static_cast<size_t>(x.shape[0] * x.shape[1] * x.shape[2] * x.shape[3]);
  void* data = scratch.take(c, elements * esize, what);
  state_stride_ = static_cast<int64_t>(RopeAngles::state_doubles(rope));
  cs_stride_ = rope.dim;
  // Every worker's state (doubles), then every worker's angles (floats), in one block.
  const size_t state_bytes = static_cast<size_t>(workers_ * state_stride_) * sizeof(double);
  auto* angles = data != nullptr
                     ? static_cast<uint8_t*>(scratch.take(
                           c, state_bytes + static_cast<size_t>(workers_ * cs_stride_) * 4,
                           "the rope's angles"))
                     : nullptr;
  if (angles == nullptr) return false;
  state_ = reinterpret_cast<double*>(angles);
  cs_ = reinterpret_cast<float*>(angles + state_bytes);
  rotated_ = attngen_tensor_contiguous(data, x.dtype, 4, x.shape);
  return true;
}

namespace {

// The rotated dims of a row of 16-bit elements (F16 or BF16, `to_f32` and `from_f32` their
// conversions), through F32 in one pass: pair by pair, no row buffer.
template <typename ToF32, typename FromF32>
void rope_row16(const RopeView& rope, const float* cs, const uint16_t* src, uint16_t* dst,
                ToF32 to_f32, FromF32 from_f32) {
  const int64_t half = rope.dim / 2;
  const float* cos_t = cs;
  const float* sin_t = cs + half;
  if (rope.pairs == ATTNGEN_ROPE_HALF) {  // (the two forms apart: each loop vectorises)
    for (int64_t i = 0; i < half; ++i) {
      const float a = to_f32(src[i]), b = to_f32(src[i + half]);
      dst[i] = from_f32(a * cos_t[i] - b * sin_t[i]);
      dst[i + half] = from_f32(a * sin_t[i] + b * cos_t[i]);
    }
  } else {
    for (int64_t i = 0; i < half; ++i) {
      const float a = to_f32(src[2 * i]), b = to_f32(src[2 * i + 1]);
      dst[2 * i] = from_f32(a * cos_t[i] - b * sin_t[i]);
      dst[2 * i + 1] = from_f32(a * sin_t[i] + b * cos_t[i]);
    }
  }
}

}  // namespace

void RopedTensor::rotate_rows(const attngen_tensor& x, const void* position, PositionFn at,
                              int worker, int64_t first, int64_t last) const {
  RopeAngles angles(rope_, state_ + worker * state_stride_, cs_ + worker * cs_stride_);
  const int64_t seq = x.shape[1], heads = x.shape[2], dim = x.shape[3];
  const size_t esize = dtype_size(x.dtype);
  const auto* in = static_cast<const uint8_t*>(x.data);
  auto* out = static_cast<uint8_t*>(rotated_.data);
  for (int64_t r = first; r < last; ++r) {
    const int64_t b = r / seq, s = r % seq;
    const float* turn = angles.at(at(position, b, s));
    for (int64_t h = 0; h < heads; ++h) {
      const uint8_t* src = in + (b * x.strides[0] + s * x.strides[1] + h * x.strides[2]) * esize;
      uint8_t* dst = out + static_cast<size_t>((r * heads + h) * dim) * esize;
      if (x.dtype == ATTNGEN_F32) {
        rope_row(rope_, turn, reinterpret_cast<const float*>(src), reinterpret_cast<float*>(dst));
      } else if (x.dtype == ATTNGEN_BF16) {
        rope_row16(rope_, turn, reinterpret_cast<const uint16_t*>(src),
                   reinterpret_cast<uint16_t*>(dst), bf16_to_f32, f32_to_bf16);
      } else {
        rope_row16(rope_, turn, reinterpret_cast<const uint16_t*>(src),
                   reinterpret_cast<uint16_t*>(dst), f16_to_f32, f32_to_f16);
      }
      // The dims past the rotary ones pass through.
      std::memcpy(dst + rope_.dim * esize, src + rope_.dim * esize,
                  static_cast<size_t>(dim - rope_.dim) * esize);
    }
  }
}

namespace {

struct RotateJob {
  const RopedTensor* tensor;
  const attngen_tensor* x;
  const void* position;
  RopedTensor::PositionFn at;
  int64_t rows, per_task;
};

int rotate_task(void* user_context, int task, uint8_t* closure) {
  (void)user_context;
  const RotateJob& j = *reinterpret_cast<const RotateJob*>(closure);
  const int64_t first = task * j.per_task;
  j.tensor->rotate_rows(*j.x, j.position, j.at, task, first, std::min(j.rows, first + j.per_task));
  return 0;
}

}  // namespace

void RopedTensor::fill_rows(const attngen_tensor& x, const void* position, PositionFn at) {
  const int64_t rows = x.shape[0] * x.shape[1];
  // A task per worker, each of at least 64 KiB of the tensor.
  const int64_t row_bytes = x.shape[2] * x.shape[3] * static_cast<int64_t>(dtype_size(x.dtype));
  const int64_t min_rows =
      std::max<int64_t>(1, (int64_t{64} << 10) / std::max<int64_t>(row_bytes, 1));
  const int64_t tasks = std::clamp<int64_t>(rows / min_rows, 1, workers_);
  RotateJob job{this, &x, position, at, rows, (rows + tasks - 1) / tasks};
  if (tasks == 1) {
    rotate_rows(x, position, at, 0, 0, rows);
    return;
  }
  const KernelRunScope running;
  halide_do_par_for(nullptr, rotate_task, 0,
                    static_cast<int>((rows + job.per_task - 1) / job.per_task),
                    reinterpret_cast<uint8_t*>(&job));
}

}  // namespace attngen::rt

using namespace attngen::rt;

extern "C" {

attngen_rope attngen_rope_default(void) {
  attngen_rope r{};
  r.struct_size = sizeof r;
  r.pairs = ATTNGEN_ROPE_HALF;
  return r;
}

attngen_status attngen_rope_inv_freq(double base, int64_t rotary_dim, float* freq) {
  Check c;
  if (freq == nullptr) {
    c.fail(ATTNGEN_ERROR_NULL_POINTER, "freq is NULL");
  } else if (rotary_dim < 2 || rotary_dim % 2 != 0) {
    c.fail(ATTNGEN_ERROR_INVALID_ARGUMENT,
           "rotary_dim is " + std::to_string(rotary_dim) + ", expected an even number >= 2");
  } else if (!(base > 1.0) || !std::isfinite(base)) {
    c.fail(ATTNGEN_ERROR_INVALID_ARGUMENT, "base must be finite and > 1");
  } else {
    for (int64_t i = 0; i < rotary_dim / 2; ++i) {
      freq[i] = static_cast<float>(
          std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(rotary_dim)));
    }
  }
  return finish(c, nullptr);
}

}  // extern "C"
