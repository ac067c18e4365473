// Builders of the small entry points (tests/fuzz/calls.h): attngen_pattern_attends against the
// reference's patterns, and tensor_contiguous, status_name, set_isa, set_num_threads, the kernel
// table and the option defaults.
#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "attngen/attngen.h"
#include "attngen/kernel.h"
#include "tests/fuzz/calls.h"
#include "tests/fuzz/oracle.h"
#include "tests/reference.h"
#include "tests/tensor.h"

namespace attngen::fuzz {

void fuzz_pattern_attends(Input& in, Fill& fill) {
  GuardTensor layout;
  const int64_t sq = dim(in, 40), skv = dim(in, 40);
  PatternSpec ps = make_pattern(in, sq, skv, layout, fill);
  static constexpr int64_t kPos[] = {0, 1, 5, 63, -1, -64, INT64_MIN, INT64_MAX, 1LL << 40};
  const auto position = [&]() -> int64_t {
    const uint8_t b = in.u8();
    if (b < 220) return b % 48;
    int64_t v = in.pick(kPos);
    return v;
  };
  const int64_t p = position(), i = position(), j = position();
  g_call = "pattern_attends" + dims_string({{"kind", ps.kind},
                                            {"left", ps.p.window_left},
                                            {"right", ps.p.window_right},
                                            {"stride", ps.p.stride},
                                            {"block", ps.p.block},
                                            {"local", ps.p.local},
                                            {"global", ps.p.global_tokens},
                                            {"p", p},
                                            {"i", i},
                                            {"j", j}});
  ++g_calls;
  const bool null_p = in.chance(3);
  const int got = attngen_pattern_attends(null_p ? nullptr : &ps.p, p, i, j);
  if (got != 0 && got != 1) fail("pattern_attends returned %d", got);
  // Compare where the pattern is well-formed and the numbers small.
  const bool small = std::abs(p) < 1000 && i >= 0 && i < 1000 && j >= 0 && j < 1000;
  bool valid = !null_p && small && ps.kind >= 0 && ps.kind <= 4;
  if (ps.kind == ATTNGEN_PATTERN_STRIDED) valid = valid && ps.p.stride > 0 && ps.p.stride < 1000;
  if (ps.kind == ATTNGEN_PATTERN_WINDOW) {
    // (Sides below -1, or both unbounded, are rejected by calls: malformed, answered 0.)
    valid = valid && ps.p.window_left < 1000 && ps.p.window_right < 1000 &&
            ps.p.window_left >= -1 && ps.p.window_right >= -1 &&
            (ps.p.window_left >= 0 || ps.p.window_right >= 0);
    if (!valid && !null_p && small &&
        (ps.p.window_left < -1 || ps.p.window_right < -1 ||
         (ps.p.window_left < 0 && ps.p.window_right < 0))) {
      if (got != 0) fail("pattern_attends returned %d for a malformed window", got);
    }
  }
  if (ps.kind == ATTNGEN_PATTERN_GLOBAL_LOCAL) {
    valid = valid && ps.p.local >= 0 && ps.p.local < 1000 && ps.p.global_tokens >= 0 &&
            ps.p.global_tokens < 1000;
  }
  if (ps.kind == ATTNGEN_PATTERN_BLOCK_SPARSE) {
    // The layout checks of a call (docs/semantics.md, "Defined for every input"), all of them:
    // a layout a call rejects answers 0. (A stride past 2^31 - 1 is rejected even on a dimension
    // of size 1, where it is never stepped: CI's run drew shape [1, 2] with strides
    // [INT64_MAX, 1], which this oracle took for valid; regression fixed14.)
    const attngen_tensor* l = ps.p.layout;
    const auto index_ok = [](int64_t v, int64_t lo) { return v >= lo && v <= INT32_MAX; };
    const bool layout_ok = l != nullptr && l->data != nullptr && layout.dtype() == ATTNGEN_BOOL &&
                           l->rank == 2 && ps.p.block > 0 && index_ok(l->shape[0], 1) &&
                           index_ok(l->shape[1], 1) && index_ok(l->strides[0], 0) &&
                           index_ok(l->strides[1], 0) && (l->shape[1] == 1 || l->strides[1] == 1) &&
                           layout.addressable();
    if (!layout_ok && !null_p && got != 0) {
      fail("pattern_attends returned %d for a layout a call rejects", got);
    }
    // Compared where the harness holds the entries (small layouts of the drawn [rows, cols]).
    valid = valid && layout_ok && ps.p.block < 1000 && !ps.layout.empty() &&
            l->shape[0] == ps.rows && l->shape[1] == ps.cols;
  }
  if (valid && got != static_cast<int>(attngen::test::reference_pattern_attends(ps, p, i, j))) {
    fail("pattern_attends returned %d, the contract says %d", got, !got);
  }
}

void fuzz_small(Input& in) {
  switch (in.u8() % 6) {
    case 0: {  // attngen_tensor_contiguous
      const int32_t rank = !in.chance(26) ? in.u8() % 6 : static_cast<int32_t>(in.u32());
      const int dtype = dtype_near(in, ATTNGEN_F32);
      // The shape array holds exactly min(max(rank, 0), 5) values, between guard pages.
      const int64_t n = std::min<int64_t>(std::max<int32_t>(rank, 0), ATTNGEN_MAX_RANK);
      GuardTensor shape;
      shape.make(ATTNGEN_I32, {{n * 2}, {1}}, 0, false);
      std::vector<int64_t> dims(static_cast<size_t>(n));
      for (int64_t d = 0; d < n; ++d) {
        dims[d] = !in.chance(16) ? 1 + in.u8() % 16 : in.pick(kHostile);
        std::memcpy(shape.at(d * 2), &dims[d], 8);
      }
      g_call = "tensor_contiguous rank=" + std::to_string(rank);
      ++g_calls;
      // A converted prvalue, not a load of an enum lvalue (which UBSan checks) in the harness.
      const attngen_tensor t = attngen_tensor_contiguous(
          reinterpret_cast<void*>(0x1000), static_cast<attngen_dtype>(dtype), rank,
          in.chance(4) ? nullptr : reinterpret_cast<const int64_t*>(shape.at(0)));
      int got_dtype;
      std::memcpy(&got_dtype, &t.dtype, sizeof got_dtype);
      if (t.data != reinterpret_cast<void*>(0x1000) || got_dtype != dtype || t.rank < 0 ||
          t.rank > ATTNGEN_MAX_RANK) {
        fail("tensor_contiguous: wrong data, dtype or rank %d", t.rank);
      }
      break;
    }
    case 1: {  // attngen_status_name
      int s = !in.chance(56) ? in.u8() % (kStatuses + 3) : in.pick({0x7fffffff, 1000, -1});
      g_call = "status_name " + std::to_string(s);
      ++g_calls;
      const char* name = attngen_status_name(static_cast<attngen_status>(s));
      if (name == nullptr || name[0] == '\0') fail("status_name(%d) is empty", s);
      if (s >= 0 && s < kStatuses && std::strncmp(name, "ATTNGEN_", 8) != 0) {
        fail("status_name(%d) = '%s'", s, name);
      }
      break;
    }
    case 2: {  // attngen_set_isa / attngen_isa
      static const char* const kIsas[] = {nullptr, "",     "avx2",       "avx512",
                                          "sse41", "neon", "cuda",       "generic",
                                          "bogus", "AVX2", "avx512bf16", "neonfp16"};
      const char* isa = in.pick(kIsas);
      g_call = std::string("set_isa ") + (isa ? isa : "NULL");
      const attngen_status s = note(attngen_set_isa(isa));
      const char* now = attngen_isa();
      if (now == nullptr || now[0] == '\0') fail("attngen_isa() is empty");
      if (s == ATTNGEN_OK && isa != nullptr && isa[0] != '\0' && std::strcmp(now, isa) != 0) {
        fail("set_isa(%s) succeeded but attngen_isa() is %s", isa, now);
      }
      break;
    }
    case 3: {  // attngen_set_num_threads
      const int n = in.pick({0, 1, 2, -1, INT32_MIN, 3});
      g_call = "set_num_threads " + std::to_string(n);
      const attngen_status s = note(attngen_set_num_threads(n));
      if ((s == ATTNGEN_OK) != (n >= 0))
        fail("set_num_threads(%d) returned %s", n, attngen_status_name(s));
      break;
    }
    case 4: {  // attngen_kernel_at / find_kernel
      ++g_calls;
      const size_t n = attngen_kernel_count();
      if (n == 0) fail("no kernels");
      const attngen_kernel_info* k = attngen_kernel_at(in.u8() % n);
      if (k == nullptr || attngen_find_kernel(k->name) != k) fail("kernel table inconsistent");
      if (attngen_kernel_at(n) != nullptr || attngen_find_kernel("no_such_kernel") != nullptr ||
          attngen_find_kernel(nullptr) != nullptr) {
        fail("kernel lookup past the table");
      }
      break;
    }
    default: {  // defaults
      ++g_calls;
      const attngen_decode_options d = attngen_decode_options_default();
      if (d.scale != 0 || d.counts != nullptr || d.kv_splits != 0 || d.kernel != nullptr) {
        fail("attngen_decode_options_default() not all zero");
      }
      const attngen_pattern l = attngen_pattern_local(in.pick({1, 2, 16, 0, -1, INT32_MIN}));
      int kind;
      std::memcpy(&kind, &l.kind, sizeof kind);
      if (kind != ATTNGEN_PATTERN_WINDOW || l.window_left != l.window_right || l.window_left < 0) {
        fail("attngen_pattern_local: kind %d, %d/%d", kind, l.window_left, l.window_right);
      }
      break;
    }
  }
}

}  // namespace attngen::fuzz
