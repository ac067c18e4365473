// F16 / BF16 <-> F32: the element conversions, in portable bit manipulation (no _Float16 or
// F16C needed), and the staging that lets an F32 kernel run a call of F16 / BF16 tensors that no
// kernel of those dtypes takes (a sparse pattern, the weights output, a head dim past the
// buckets built in those dtypes): inputs are converted into F32 scratch, the kernel runs, and its
// F32 output is rounded into the caller's tensor.
#include <cstring>
#include <limits>
#include <string>

#include "runtime/src/convert.h"
#include "runtime/src/internal.h"
#include "runtime/src/workspace.h"

namespace attngen::rt {

namespace {

// One row of n elements: F16 / BF16 / F32 -> F32.
void row_to_f32(const void* src, attngen_dtype dtype, float* dst, int64_t n) {
  if (dtype == ATTNGEN_F32) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  const auto* h = static_cast<const uint16_t*>(src);
  if (dtype == ATTNGEN_F16) {
    f16_to_f32_n(h, dst, n);
  } else {
    bf16_to_f32_n(h, dst, n);
  }
}

// One row of n elements: F32 -> F16 / BF16 / F32.
void row_from_f32(const float* src, void* dst, attngen_dtype dtype, int64_t n) {
  if (dtype == ATTNGEN_F32) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  auto* h = static_cast<uint16_t*>(dst);
  if (dtype == ATTNGEN_F16) {
    for (int64_t i = 0; i < n; ++i) h[i] = f32_to_f16(src[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) h[i] = f32_to_bf16(src[i]);
  }
}

// Calls row(offset of the row in t, in elements, dense row index) for every innermost row of t.
template <typename Row>
void for_each_row(const attngen_tensor& t, Row row) {
  int64_t idx[ATTNGEN_MAX_RANK] = {};
  const int outer = t.rank - 1;
  for (int64_t r = 0;; ++r) {
    int64_t off = 0;
    for (int d = 0; d < outer; ++d) off += idx[d] * t.strides[d];
    row(off, r);
    int d = outer - 1;
    for (; d >= 0; --d) {
      if (++idx[d] < t.shape[d]) break;
      idx[d] = 0;
    }
    if (d < 0) return;
  }
}

}  // namespace

void f16_to_f32_n(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t h = src[i];
    const uint32_t exponent = h & 0x7c00u, mantissa = h & 0x3ffu;
    // A normal number rebiased (2^-14 .. 65504); an infinity or NaN (payload kept); a subnormal
    // or zero, mantissa * 2^-24, exact in float32 arithmetic (a normal float32 or 0). Chosen by
    // masks, not branches, so that the loop vectorises.
    const uint32_t normal = ((h & 0x7fffu) << 13) + (112u << 23);
    const uint32_t special = 0x7f800000u | (mantissa << 13);
    const uint32_t subnormal =
        f32_bits(static_cast<float>(static_cast<int32_t>(mantissa)) * 0x1p-24f);
    const uint32_t is_special = 0u - static_cast<uint32_t>(exponent == 0x7c00u);
    const uint32_t is_subnormal = 0u - static_cast<uint32_t>(exponent == 0);
    const uint32_t bits = (special & is_special) | (subnormal & is_subnormal) |
                          (normal & ~(is_special | is_subnormal));
    dst[i] = f32_from_bits(((h & 0x8000u) << 16) | bits);
  }
}

void bf16_to_f32_n(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(src[i]);
}

F32Staging::~F32Staging() {
  for (int i = 0; i < count_; ++i) {
    if (staged_[i].owned) scratch_release(staged_[i].scratch);
  }
}

bool F32Staging::stage(Check& c, const attngen_tensor& t, const char* name, attngen_tensor* f32) {
  *f32 = t;
  if (t.dtype == ATTNGEN_F32) return true;
  // A dense F32 copy holds up to twice the bytes of the (validated) tensor, or far more for an
  // input repeated with stride 0: it must still be addressable by a kernel (and its count fit
  // int64: up to five sizes below 2^31).
  int64_t count = 1;
  bool fits = true;
  for (int d = 0; d < t.rank && fits; ++d) fits = checked_mul(count, t.shape[d], &count);
  if (!fits || count > std::numeric_limits<int32_t>::max() / static_cast<int64_t>(sizeof(float))) {
    return c.fail(ATTNGEN_ERROR_TOO_LARGE,
                  std::string(name) +
                      " in F32 (for the F32 kernel that runs this call) would span "
                      "more than 2^31 - 1 bytes, the most a kernel can address");
  }
  if (count_ == kMaxStaged) {
    return c.fail(ATTNGEN_ERROR_OUT_OF_MEMORY, std::string("no room to stage ") + name);
  }
  const size_t bytes = static_cast<size_t>(count) * sizeof(float);
  // The call's workspace, or a size query's counted buffers; else the block cache.
  CallScratch* call = CallScratch::current();
  const bool owned = call == nullptr || !(call->in_workspace() || call->sizing());
  void* scratch = nullptr;
  if (!owned) {
    scratch = call->take(c, bytes, name, " in F32");
    if (scratch == nullptr) return false;
  } else if ((scratch = scratch_allocate(bytes)) == nullptr) {
    return c.fail(ATTNGEN_ERROR_OUT_OF_MEMORY, "cannot allocate " + std::to_string(count * 4) +
                                                   " bytes for " + name + " in F32");
  }
  staged_[count_++] = {scratch, t, false, owned};
  int64_t shape[ATTNGEN_MAX_RANK];
  for (int d = 0; d < t.rank; ++d) shape[d] = t.shape[d];
  *f32 = attngen_tensor_contiguous(scratch, ATTNGEN_F32, t.rank, shape);
  return true;
}

bool F32Staging::input(Check& c, const attngen_tensor& t, const char* name, attngen_tensor* f32) {
  if (!stage(c, t, name, f32)) return false;
  if (t.dtype == ATTNGEN_F32) return true;
  const int64_t n = t.shape[t.rank - 1];
  const size_t bytes = dtype_size(t.dtype);
  auto* dst = static_cast<float*>(f32->data);
  for_each_row(t, [&](int64_t off, int64_t r) {
    row_to_f32(static_cast<const char*>(t.data) + off * static_cast<int64_t>(bytes), t.dtype,
               dst + r * n, n);
  });
  return true;
}

bool F32Staging::output(Check& c, const attngen_tensor& t, const char* name, attngen_tensor* f32) {
  if (!stage(c, t, name, f32)) return false;
  if (t.dtype != ATTNGEN_F32) staged_[count_ - 1].output = true;
  return true;
}

void F32Staging::commit() {
  const CallScratch* call = CallScratch::current();
  if (call != nullptr && (call->sizing() || call->checking())) return;  // no output written
  for (int i = 0; i < count_; ++i) {
    const Staged& s = staged_[i];
    if (!s.output) continue;
    const attngen_tensor& t = s.caller;
    const int64_t n = t.shape[t.rank - 1];
    const size_t bytes = dtype_size(t.dtype);
    const auto* src = static_cast<const float*>(s.scratch);
    for_each_row(t, [&](int64_t off, int64_t r) {
      row_from_f32(src + r * n, static_cast<char*>(t.data) + off * static_cast<int64_t>(bytes),
                   t.dtype, n);
    });
  }
}

}  // namespace attngen::rt
