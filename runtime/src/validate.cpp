#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>

#include "runtime/src/internal.h"

namespace attngen::rt {

namespace {

// Halide buffers index with 32-bit extents and strides, and (without the large_buffers
// feature) address at most 2^31 - 1 bytes per buffer.
constexpr int64_t kMaxIndex = std::numeric_limits<int32_t>::max();

std::string dim_label(const attngen_tensor&, const TensorSpec& spec, int d) {
  return std::string(spec.name) + ".shape[" + std::to_string(d) + "] (" + spec.dims[d] + ")";
}

}  // namespace

bool Check::fail(attngen_status status, std::string message) {
  if (status_ == ATTNGEN_OK) {
    status_ = status;
    message_ = std::move(message);
  }
  return false;
}

bool is_dtype(int32_t v) { return v >= ATTNGEN_F32 && v <= ATTNGEN_I8; }

const char* dtype_name(int32_t dtype) {
  static const char* const kNames[] = {"F32", "F16", "BF16", "BOOL", "I32", "I8"};
  return is_dtype(dtype) ? kNames[dtype] : "unknown dtype";
}

size_t dtype_size(int32_t dtype) {
  static const size_t kSizes[] = {4, 2, 2, 1, 4, 1};
  return is_dtype(dtype) ? kSizes[dtype] : 0;
}

bool check_tensor(Check& c, const attngen_tensor* t, const TensorSpec& spec) {
  const std::string name = spec.name;
  if (t == nullptr) return c.fail(ATTNGEN_ERROR_NULL_POINTER, name + " is NULL");
  if (t->data == nullptr) return c.fail(ATTNGEN_ERROR_NULL_POINTER, name + ".data is NULL");
  const int32_t dtype = enum_value(t->dtype);  // any int a caller stored
  const bool floating = dtype == ATTNGEN_F32 || dtype == ATTNGEN_F16 || dtype == ATTNGEN_BF16;
  if (spec.floating ? !floating : dtype != spec.dtype && !(spec.or_f32 && dtype == ATTNGEN_F32)) {
    std::string expected = spec.floating ? "F32, F16 or BF16" : dtype_name(spec.dtype);
    if (spec.dtype_of != nullptr) expected += std::string(" (the dtype of ") + spec.dtype_of + ")";
    if (spec.or_f32 && spec.dtype != ATTNGEN_F32) expected += " or F32";
    return c.fail(ATTNGEN_ERROR_DTYPE,
                  name + " has dtype " + dtype_name(dtype) + ", expected " + expected);
  }
  if (t->rank != spec.rank) {
    std::string dims;
    for (int d = 0; d < spec.rank; ++d) dims += std::string(d ? ", " : "") + spec.dims[d];
    return c.fail(ATTNGEN_ERROR_RANK, name + " has rank " + std::to_string(t->rank) +
                                          ", expected " + std::to_string(spec.rank) + " [" + dims +
                                          "]");
  }
  int64_t last_byte = 0;  // offset of the last element, in elements
  for (int d = 0; d < spec.rank; ++d) {
    const int64_t n = t->shape[d], s = t->strides[d];
    if (n == 0) return c.fail(ATTNGEN_ERROR_EMPTY, dim_label(*t, spec, d) + " is 0");
    if (n < 0) {
      return c.fail(ATTNGEN_ERROR_SHAPE,
                    dim_label(*t, spec, d) + " is negative (" + std::to_string(n) + ")");
    }
    if (n > kMaxIndex) {
      return c.fail(ATTNGEN_ERROR_TOO_LARGE,
                    dim_label(*t, spec, d) + " = " + std::to_string(n) + " exceeds 2^31 - 1");
    }
    if (s < 0) {
      return c.fail(ATTNGEN_ERROR_STRIDE, name + ".strides[" + std::to_string(d) + "] is " +
                                              std::to_string(s) +
                                              ", negative strides are "
                                              "not supported");
    }
    if (s > kMaxIndex) {
      return c.fail(ATTNGEN_ERROR_TOO_LARGE, name + ".strides[" + std::to_string(d) +
                                                 "] = " + std::to_string(s) + " exceeds 2^31 - 1");
    }
    if (last_byte <= kMaxIndex) last_byte += (n - 1) * s;  // saturates past 2^31: no overflow
  }
  const int inner = spec.rank - 1;
  if (t->shape[inner] > 1 && t->strides[inner] != 1) {
    return c.fail(ATTNGEN_ERROR_STRIDE, name + ".strides[" + std::to_string(inner) + "] is " +
                                            std::to_string(t->strides[inner]) +
                                            ", the innermost dimension must be contiguous (1)");
  }
  const int64_t bytes =
      last_byte > kMaxIndex ? last_byte : (last_byte + 1) * static_cast<int64_t>(dtype_size(dtype));
  if (bytes > kMaxIndex) {
    return c.fail(ATTNGEN_ERROR_TOO_LARGE,
                  name + " spans more than 2^31 - 1 bytes, the most a kernel can address");
  }
  if (spec.output) {
    // Written elements must be distinct: sorted by stride, each dimension must step over the
    // whole extent of the ones inside it.
    int order[ATTNGEN_MAX_RANK];
    for (int d = 0; d < spec.rank; ++d) order[d] = d;
    std::sort(order, order + spec.rank,
              [&](int a, int b) { return t->strides[a] < t->strides[b]; });
    int64_t extent = 1;
    for (int k = 0; k < spec.rank; ++k) {
      const int d = order[k];
      if (t->shape[d] == 1) continue;
      if (t->strides[d] < extent) {
        return c.fail(ATTNGEN_ERROR_STRIDE,
                      name + ".strides[" + std::to_string(d) +
                          "] = " + std::to_string(t->strides[d]) +
                          " makes output elements overlap; outputs need distinct elements");
      }
      extent = t->strides[d] * t->shape[d];
    }
  }
  return true;
}

bool check_dim(Check& c, const attngen_tensor& t, const TensorSpec& spec, int dim, int64_t expected,
               const char* what) {
  if (t.shape[dim] == expected) return true;
  return c.fail(ATTNGEN_ERROR_SHAPE, dim_label(t, spec, dim) + " is " +
                                         std::to_string(t.shape[dim]) + ", expected " +
                                         std::to_string(expected) + " (" + what + ")");
}

bool check_no_alias(Check& c, const attngen_tensor& out, const char* out_name,
                    const attngen_tensor& in, const char* in_name) {
  const auto range = [](const attngen_tensor& t, uintptr_t& lo, uintptr_t& hi) {
    int64_t last = 0;
    for (int d = 0; d < t.rank; ++d) last += (t.shape[d] - 1) * t.strides[d];
    lo = reinterpret_cast<uintptr_t>(t.data);
    hi = lo + static_cast<uintptr_t>((last + 1) * static_cast<int64_t>(dtype_size(t.dtype)));
  };
  uintptr_t a0, a1, b0, b1;
  range(out, a0, a1);
  range(in, b0, b1);
  if (a0 < b1 && b0 < a1) {
    return c.fail(ATTNGEN_ERROR_ALIAS, std::string(out_name) + " overlaps " + in_name +
                                           " in memory; the output must not alias an input");
  }
  return true;
}

void make_view(HalideView& view, const attngen_tensor& t) {
  halide_buffer_t& b = view.buf;
  b.device = 0;
  b.device_interface = nullptr;
  b.host = static_cast<uint8_t*>(t.data);
  b.flags = 0;
  switch (t.dtype) {
    case ATTNGEN_F32:
      b.type = halide_type_t(halide_type_float, 32);
      break;
    case ATTNGEN_F16:
      b.type = halide_type_t(halide_type_float, 16);
      break;
    case ATTNGEN_BF16:
      b.type = halide_type_t(halide_type_bfloat, 16);
      break;
    case ATTNGEN_BOOL:
      b.type = halide_type_t(halide_type_uint, 8);
      break;
    case ATTNGEN_I8:
      b.type = halide_type_t(halide_type_int, 8);
      break;
    case ATTNGEN_I32:
    case ATTNGEN_DTYPE_FORCE_32BIT:  // rejected by check_tensor before any view is made
      b.type = halide_type_t(halide_type_int, 32);
      break;
  }
  b.dimensions = t.rank;
  b.dim = view.dims;
  for (int d = 0; d < t.rank; ++d) {
    halide_dimension_t& hd = view.dims[t.rank - 1 - d];
    hd.min = 0;
    hd.extent = static_cast<int32_t>(t.shape[d]);
    // A size-1 dimension's stride is never used; normalise it so the innermost is always 1.
    hd.stride = t.shape[d] == 1 && d == t.rank - 1 ? 1 : static_cast<int32_t>(t.strides[d]);
    hd.flags = 0;
  }
  b.padding = nullptr;
}

bool check_mha_layer(Check& c, const attngen_tensor* x, const attngen_mha_weights& weights,
                     const attngen_tensor* y, int64_t num_heads, const char* seq, bool floating) {
  static const char* const kInWDims[] = {"3E", "E"};
  static const char* const kInBDims[] = {"3E"};
  static const char* const kOutWDims[] = {"E", "E"};
  static const char* const kOutBDims[] = {"E"};
  const char* const rows_dims[] = {"B", seq, "E"};
  const TensorSpec xs{"x", ATTNGEN_F32, 3, rows_dims, false, floating};
  if (!check_tensor(c, x, xs)) return false;
  // The others in x's dtype (F32 unless `floating`).
  const attngen_dtype dt = x->dtype;
  const char* of = floating ? "x" : nullptr;
  const TensorSpec iws{"in_proj_weight", dt, 2, kInWDims, false, false, of};
  const TensorSpec ibs{"in_proj_bias", dt, 1, kInBDims, false, false, of};
  const TensorSpec ows{"out_proj_weight", dt, 2, kOutWDims, false, false, of};
  const TensorSpec obs{"out_proj_bias", dt, 1, kOutBDims, false, false, of};
  const TensorSpec ys{"y", dt, 3, rows_dims, /*output=*/true, false, of};
  const attngen_tensor* in_b = weights.in_proj_bias;
  const attngen_tensor* out_b = weights.out_proj_bias;
  if (!check_tensor(c, weights.in_proj_weight, iws) ||
      (in_b != nullptr && !check_tensor(c, in_b, ibs)) ||
      !check_tensor(c, weights.out_proj_weight, ows) ||
      (out_b != nullptr && !check_tensor(c, out_b, obs)) || !check_tensor(c, y, ys)) {
    return false;
  }
  const int64_t batch = x->shape[0], rows = x->shape[1], embed = x->shape[2];
  const attngen_tensor& iw = *weights.in_proj_weight;
  const attngen_tensor& ow = *weights.out_proj_weight;
  const std::string rows_of_x = std::string(seq) + " of x";
  if (!check_dim(c, iw, iws, 0, 3 * embed, "3 * E of x") ||
      !check_dim(c, iw, iws, 1, embed, "E of x") ||
      (in_b != nullptr && !check_dim(c, *in_b, ibs, 0, 3 * embed, "3 * E of x")) ||
      !check_dim(c, ow, ows, 0, embed, "E of x") || !check_dim(c, ow, ows, 1, embed, "E of x") ||
      (out_b != nullptr && !check_dim(c, *out_b, obs, 0, embed, "E of x")) ||
      !check_dim(c, *y, ys, 0, batch, "B of x") ||
      !check_dim(c, *y, ys, 1, rows, rows_of_x.c_str()) ||
      !check_dim(c, *y, ys, 2, embed, "E of x")) {
    return false;
  }
  if (num_heads <= 0 || embed % num_heads != 0) {
    return c.fail(ATTNGEN_ERROR_HEADS,
                  "num_heads is " + std::to_string(num_heads) +
                      "; it must be positive and divide E = " + std::to_string(embed));
  }
  const std::pair<const attngen_tensor*, const char*> inputs[] = {{x, "x"},
                                                                  {&iw, "in_proj_weight"},
                                                                  {in_b, "in_proj_bias"},
                                                                  {&ow, "out_proj_weight"},
                                                                  {out_b, "out_proj_bias"}};
  for (const auto& [in, name] : inputs) {
    if (in != nullptr && !check_no_alias(c, *y, "y", *in, name)) return false;
  }
  return true;
}

}  // namespace attngen::rt
