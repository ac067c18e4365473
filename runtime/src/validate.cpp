#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

#include "core/dtype.h"
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

bool read_options_bytes(Check& c, const void* in, size_t struct_size, size_t first_size,
                        size_t known_size, const char* name, void* out) {
  // A struct a later version grows stays far below this; a larger value is garbage, which must
  // not make the check below read that far.
  constexpr size_t kMaxStructSize = 4096;
  // The message's strings only on failure: a call in a workspace makes no heap allocation.
  const auto field = [name] { return std::string(name) + ".struct_size"; };
  if (struct_size < first_size) {
    return c.fail(ATTNGEN_ERROR_INVALID_ARGUMENT,
                  field() + " is " + std::to_string(struct_size) + ", expected at least " +
                      std::to_string(first_size) +
                      " (start from the struct's attngen_*_options_default(), which sets it)");
  }
  if (struct_size > kMaxStructSize) {
    return c.fail(ATTNGEN_ERROR_INVALID_ARGUMENT, field() + " is " + std::to_string(struct_size) +
                                                      ", more than any options struct's " +
                                                      std::to_string(kMaxStructSize) + " bytes");
  }
  const unsigned char* bytes = static_cast<const unsigned char*>(in);
  for (size_t i = known_size; i < struct_size; ++i) {
    if (bytes[i] != 0) {
      return c.fail(ATTNGEN_ERROR_INVALID_ARGUMENT,
                    field() + " is " + std::to_string(struct_size) + " and byte " +
                        std::to_string(i) + " is set: an option this library (" +
                        attngen_version_string() + ", " + std::to_string(known_size) +
                        " bytes) does not know");
    }
  }
  std::memcpy(out, in, struct_size < known_size ? struct_size : known_size);
  return true;
}

bool is_dtype(int32_t v) { return attngen::dtype_row(v) != nullptr; }

const char* dtype_name(int32_t dtype) {
  const attngen::DTypeRow* row = attngen::dtype_row(dtype);
  return row != nullptr ? row->c_name : "unknown dtype";
}

size_t dtype_size(int32_t dtype) {
  const attngen::DTypeRow* row = attngen::dtype_row(dtype);
  return row != nullptr ? static_cast<size_t>(row->bytes) : 0;
}

namespace {

// Exact overlap tests reduce to one question: is there an integer vector z, lo[d] <= z[d] <=
// hi[d], with target_lo <= sum of c[d] * z[d] <= target_hi (every c[d] > 0)? A depth-first
// search over the dimensions, largest coefficient first, keeps only the values of z[d] for which
// the dimensions still to choose can reach the target; the last dimension is then solved
// directly. The nodes visited are counted against a shared budget.
constexpr int kMaxTerms = 2 * ATTNGEN_MAX_RANK;
constexpr int64_t kSearchBudget = int64_t{1} << 20;  // nodes: a few milliseconds at most

struct Terms {
  int n = 0;
  int64_t c[kMaxTerms], lo[kMaxTerms], hi[kMaxTerms];
  void add(int64_t coefficient, int64_t low, int64_t high) {
    c[n] = coefficient;
    lo[n] = low;
    hi[n] = high;
    ++n;
  }
};

// Floor and ceiling of a / b for b > 0.
int64_t floor_div(int64_t a, int64_t b) { return a / b - (a % b < 0 ? 1 : 0); }
int64_t ceil_div(int64_t a, int64_t b) { return -floor_div(-a, b); }

class Search {
 public:
  // Sorts the terms by decreasing coefficient and precomputes what the tail of them can reach.
  explicit Search(const Terms& t) : t_(t) {
    int order[kMaxTerms];
    for (int d = 0; d < t.n; ++d) order[d] = d;
    std::sort(order, order + t.n, [&](int a, int b) { return t.c[a] > t.c[b]; });
    for (int d = 0; d < t.n; ++d) {
      t_.c[d] = t.c[order[d]];
      t_.lo[d] = t.lo[order[d]];
      t_.hi[d] = t.hi[order[d]];
    }
    min_tail_[t.n] = max_tail_[t.n] = 0;
    for (int d = t.n - 1; d >= 0; --d) {
      min_tail_[d] = min_tail_[d + 1] + t_.c[d] * t_.lo[d];
      max_tail_[d] = max_tail_[d + 1] + t_.c[d] * t_.hi[d];
    }
  }

  Overlap find(int64_t target_lo, int64_t target_hi, int64_t& budget) {
    target_lo_ = target_lo;
    target_hi_ = target_hi;
    if (t_.n == 0) return target_lo <= 0 && 0 <= target_hi ? Overlap::kOverlap : Overlap::kNone;
    return visit(0, 0, budget);
  }

 private:
  Overlap visit(int d, int64_t partial, int64_t& budget) {
    if (--budget < 0) return Overlap::kUnknown;
    // z[d] such that partial + c z + (what the later terms reach) meets the target.
    const int64_t lo =
        std::max(t_.lo[d], ceil_div(target_lo_ - partial - max_tail_[d + 1], t_.c[d]));
    const int64_t hi =
        std::min(t_.hi[d], floor_div(target_hi_ - partial - min_tail_[d + 1], t_.c[d]));
    if (lo > hi) return Overlap::kNone;
    if (d == t_.n - 1) return Overlap::kOverlap;
    bool unknown = false;
    for (int64_t z = lo; z <= hi; ++z) {
      const Overlap r = visit(d + 1, partial + t_.c[d] * z, budget);
      if (r == Overlap::kOverlap) return r;
      if (r == Overlap::kUnknown) {
        unknown = true;
        if (budget < 0) break;
      }
    }
    return unknown ? Overlap::kUnknown : Overlap::kNone;
  }

  Terms t_;
  int64_t min_tail_[kMaxTerms + 1], max_tail_[kMaxTerms + 1];
  int64_t target_lo_ = 0, target_hi_ = 0;
};

}  // namespace

Overlap self_overlap(int rank, const int64_t* shape, const int64_t* strides) {
  // Dimensions of size 1 add nothing; two elements coincide where a non-zero index difference
  // delta, |delta[d]| < shape[d], has sum of delta[d] * strides[d] = 0.
  int dims[ATTNGEN_MAX_RANK];
  int n = 0;
  for (int d = 0; d < rank; ++d) {
    if (shape[d] <= 1) continue;
    if (strides[d] == 0) return Overlap::kOverlap;
    dims[n++] = d;
  }
  std::sort(dims, dims + n, [&](int a, int b) { return strides[a] < strides[b]; });
  // Sufficient: each stride steps over everything the smaller ones reach (a mixed radix).
  int64_t reach = 0;
  int k = 0;
  for (; k < n && strides[dims[k]] > reach; ++k) reach += (shape[dims[k]] - 1) * strides[dims[k]];
  if (k == n) return Overlap::kNone;
  // Exact: some delta whose first non-zero entry, in order of decreasing stride, is positive.
  Terms terms;
  for (int i = n - 1; i >= 0; --i) {
    const int d = dims[i];
    terms.add(strides[d], -(shape[d] - 1), shape[d] - 1);
  }
  int64_t budget = kSearchBudget;
  bool unknown = false;
  for (int first = 0; first < n; ++first) {
    Terms t;
    for (int i = first; i < n; ++i) {
      t.add(terms.c[i], i == first ? 1 : terms.lo[i], terms.hi[i]);
    }
    const Overlap r = Search(t).find(0, 0, budget);
    if (r == Overlap::kOverlap) return r;
    if (r == Overlap::kUnknown) unknown = true;
  }
  return unknown ? Overlap::kUnknown : Overlap::kNone;
}

Overlap bytes_overlap(const attngen_tensor& a, const attngen_tensor& b) {
  const auto last_byte = [](const attngen_tensor& t) {
    int64_t last = 0;
    for (int d = 0; d < t.rank; ++d) last += (t.shape[d] - 1) * t.strides[d];
    return (last + 1) * static_cast<int64_t>(dtype_size(t.dtype));
  };
  const uintptr_t a0 = reinterpret_cast<uintptr_t>(a.data),
                  b0 = reinterpret_cast<uintptr_t>(b.data);
  const uintptr_t a1 = a0 + static_cast<uintptr_t>(last_byte(a));
  const uintptr_t b1 = b0 + static_cast<uintptr_t>(last_byte(b));
  if (!(a0 < b1 && b0 < a1)) return Overlap::kNone;
  // The byte ranges meet, so b starts within 2^31 bytes of a. Element x of a covers bytes
  // [A(x), A(x) + ea) from a's start, element y of b [d + B(y), d + B(y) + eb): they share one
  // where -(ea - 1) <= A(x) - B(y) - d <= eb - 1, with B's indices negated to keep every
  // coefficient positive.
  const int64_t ea = static_cast<int64_t>(dtype_size(a.dtype));
  const int64_t eb = static_cast<int64_t>(dtype_size(b.dtype));
  const int64_t d = b0 >= a0 ? static_cast<int64_t>(b0 - a0) : -static_cast<int64_t>(a0 - b0);
  Terms t;
  for (int i = 0; i < a.rank; ++i) {
    if (a.shape[i] > 1 && a.strides[i] > 0) t.add(a.strides[i] * ea, 0, a.shape[i] - 1);
  }
  for (int i = 0; i < b.rank; ++i) {
    if (b.shape[i] > 1 && b.strides[i] > 0) t.add(b.strides[i] * eb, -(b.shape[i] - 1), 0);
  }
  int64_t budget = kSearchBudget;
  return Search(t).find(d - (ea - 1), d + (eb - 1), budget);
}

bool check_tensor(Check& c, const attngen_tensor* t, const TensorSpec& spec) {
  // (The name as a string only where a message is made: every call passes here.)
  const auto name = [&] { return std::string(spec.name); };
  if (t == nullptr) return c.fail(ATTNGEN_ERROR_NULL_POINTER, name() + " is NULL");
  if (t->data == nullptr) return c.fail(ATTNGEN_ERROR_NULL_POINTER, name() + ".data is NULL");
  const int32_t dtype = enum_value(t->dtype);  // any int a caller stored
  const bool floating = dtype == ATTNGEN_F32 || dtype == ATTNGEN_F16 || dtype == ATTNGEN_BF16;
  if (spec.floating ? !floating : dtype != spec.dtype && !(spec.or_f32 && dtype == ATTNGEN_F32)) {
    std::string expected = spec.floating ? "F32, F16 or BF16" : dtype_name(spec.dtype);
    if (spec.dtype_of != nullptr) expected += std::string(" (the dtype of ") + spec.dtype_of + ")";
    if (spec.or_f32 && spec.dtype != ATTNGEN_F32) expected += " or F32";
    return c.fail(ATTNGEN_ERROR_DTYPE,
                  name() + " has dtype " + dtype_name(dtype) + ", expected " + expected);
  }
  // Float elements are read as their type (by kernels and conversions): their address must be a
  // multiple of their size. (I32 tensors, kv_len and counts, are read by the runtime byte-wise.)
  if (floating && reinterpret_cast<uintptr_t>(t->data) % dtype_size(dtype) != 0) {
    return c.fail(ATTNGEN_ERROR_STRIDE, name() + ".data is not aligned to its element size (" +
                                            std::to_string(dtype_size(dtype)) + " bytes)");
  }
  if (t->rank != spec.rank) {
    std::string dims;
    for (int d = 0; d < spec.rank; ++d) dims += std::string(d ? ", " : "") + spec.dims[d];
    return c.fail(ATTNGEN_ERROR_RANK, name() + " has rank " + std::to_string(t->rank) +
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
      return c.fail(ATTNGEN_ERROR_STRIDE, name() + ".strides[" + std::to_string(d) + "] is " +
                                              std::to_string(s) +
                                              ", negative strides are "
                                              "not supported");
    }
    if (s > kMaxIndex) {
      return c.fail(ATTNGEN_ERROR_TOO_LARGE, name() + ".strides[" + std::to_string(d) +
                                                 "] = " + std::to_string(s) + " exceeds 2^31 - 1");
    }
    if (last_byte <= kMaxIndex) last_byte += (n - 1) * s;  // saturates past 2^31: no overflow
  }
  const int inner = spec.rank - 1;
  if (t->shape[inner] > 1 && t->strides[inner] != 1) {
    return c.fail(ATTNGEN_ERROR_STRIDE, name() + ".strides[" + std::to_string(inner) + "] is " +
                                            std::to_string(t->strides[inner]) +
                                            ", the innermost dimension must be contiguous (1)");
  }
  const int64_t bytes =
      last_byte > kMaxIndex ? last_byte : (last_byte + 1) * static_cast<int64_t>(dtype_size(dtype));
  if (bytes > kMaxIndex) {
    return c.fail(ATTNGEN_ERROR_TOO_LARGE,
                  name() + " spans more than 2^31 - 1 bytes, the most a kernel can address");
  }
  if (spec.output) {
    // Written elements must be distinct (exactly: a stride that interleaves dimensions without
    // sharing an element passes).
    const Overlap overlap = self_overlap(spec.rank, t->shape, t->strides);
    if (overlap == Overlap::kOverlap) {
      return c.fail(ATTNGEN_ERROR_STRIDE,
                    name() +
                        "'s strides make two of its elements overlap (share memory); "
                        "outputs need distinct elements");
    }
    if (overlap == Overlap::kUnknown) {
      return c.fail(ATTNGEN_ERROR_STRIDE,
                    name() +
                        "'s strides interleave its dimensions in a way too large to check "
                        "that its elements are distinct; use strides where each dimension "
                        "steps over the extent of the smaller-strided ones");
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
  const Overlap overlap = bytes_overlap(out, in);
  if (overlap == Overlap::kOverlap) {
    return c.fail(ATTNGEN_ERROR_ALIAS, std::string(out_name) + " overlaps " + in_name +
                                           " in memory; the output must not alias an input");
  }
  if (overlap == Overlap::kUnknown) {
    return c.fail(ATTNGEN_ERROR_ALIAS, std::string(out_name) + " interleaves with " + in_name +
                                           " in a way too large to check that they share no "
                                           "byte; the output must not alias an input");
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

bool check_mha_weights(Check& c, const attngen_mha_weights& weights, int64_t embed,
                       attngen_dtype dtype, const char* dtype_of, const char* embed_of) {
  static const char* const kInWDims[] = {"3E", "E"};
  static const char* const kInBDims[] = {"3E"};
  static const char* const kOutWDims[] = {"E", "E"};
  static const char* const kOutBDims[] = {"E"};
  const TensorSpec iws{"in_proj_weight", dtype, 2, kInWDims, false, false, dtype_of};
  const TensorSpec ibs{"in_proj_bias", dtype, 1, kInBDims, false, false, dtype_of};
  const TensorSpec ows{"out_proj_weight", dtype, 2, kOutWDims, false, false, dtype_of};
  const TensorSpec obs{"out_proj_bias", dtype, 1, kOutBDims, false, false, dtype_of};
  const attngen_tensor* in_b = weights.in_proj_bias;
  const attngen_tensor* out_b = weights.out_proj_bias;
  if (!check_tensor(c, weights.in_proj_weight, iws) ||
      (in_b != nullptr && !check_tensor(c, in_b, ibs)) ||
      !check_tensor(c, weights.out_proj_weight, ows) ||
      (out_b != nullptr && !check_tensor(c, out_b, obs))) {
    return false;
  }
  const attngen_tensor& iw = *weights.in_proj_weight;
  const attngen_tensor& ow = *weights.out_proj_weight;
  const std::string e_of = std::string("E of ") + embed_of, three_e = "3 * " + e_of;
  const char* of_e = e_of.c_str();
  return check_dim(c, iw, iws, 0, 3 * embed, three_e.c_str()) &&
         check_dim(c, iw, iws, 1, embed, of_e) &&
         (in_b == nullptr || check_dim(c, *in_b, ibs, 0, 3 * embed, three_e.c_str())) &&
         check_dim(c, ow, ows, 0, embed, of_e) && check_dim(c, ow, ows, 1, embed, of_e) &&
         (out_b == nullptr || check_dim(c, *out_b, obs, 0, embed, of_e));
}

bool check_mha_rows(Check& c, const attngen_tensor* x, const attngen_tensor* y, int64_t embed,
                    const char* seq, const TensorSpec& xs) {
  const char* const rows_dims[] = {"B", seq, "E"};
  const TensorSpec ys{"y", x->dtype, 3, rows_dims, /*output=*/true, false, xs.dtype_of};
  if (!check_tensor(c, y, ys)) return false;
  const std::string rows_of_x = std::string(seq) + " of x";
  return check_dim(c, *y, ys, 0, x->shape[0], "B of x") &&
         check_dim(c, *y, ys, 1, x->shape[1], rows_of_x.c_str()) &&
         check_dim(c, *y, ys, 2, embed, "E of x") && check_no_alias(c, *y, "y", *x, "x");
}

bool check_heads(Check& c, int64_t num_heads, int64_t embed) {
  if (num_heads <= 0 || embed % num_heads != 0) {
    return c.fail(ATTNGEN_ERROR_HEADS,
                  "num_heads is " + std::to_string(num_heads) +
                      "; it must be positive and divide E = " + std::to_string(embed));
  }
  return true;
}

bool check_mha_layer(Check& c, const attngen_tensor* x, const attngen_mha_weights& weights,
                     const attngen_tensor* y, int64_t num_heads, const char* seq, bool floating) {
  const char* const rows_dims[] = {"B", seq, "E"};
  const TensorSpec xs{"x", ATTNGEN_F32, 3, rows_dims, false, floating};
  if (!check_tensor(c, x, xs)) return false;
  // The others in x's dtype (F32 unless `floating`).
  const attngen_dtype dt = x->dtype;
  const char* of = floating ? "x" : nullptr;
  const int64_t embed = x->shape[2];
  if (!check_mha_weights(c, weights, embed, dt, of, "x")) return false;
  const TensorSpec xs_of{"x", dt, 3, rows_dims, false, false, of};
  if (!check_mha_rows(c, x, y, embed, seq, xs_of) || !check_heads(c, num_heads, embed)) {
    return false;
  }
  const attngen_tensor* in_b = weights.in_proj_bias;
  const attngen_tensor* out_b = weights.out_proj_bias;
  const std::pair<const attngen_tensor*, const char*> inputs[] = {
      {weights.in_proj_weight, "in_proj_weight"},
      {in_b, "in_proj_bias"},
      {weights.out_proj_weight, "out_proj_weight"},
      {out_b, "out_proj_bias"}};
  for (const auto& [in, name] : inputs) {
    if (in != nullptr && !check_no_alias(c, *y, "y", *in, name)) return false;
  }
  return true;
}

}  // namespace attngen::rt
