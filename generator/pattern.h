// The masks and sparse attention patterns (docs/semantics.md, "Masks"): the kinds, and the
// patterns' definitions once for the kernels and the host: templates over the index type T,
// Halide::Expr in the generator and int64_t in the runtime (runtime/src/pattern.cpp) and the CLI.
// Halide-free, so the runtime can include it; what the definitions need beyond + - * / < <= && ||
// and `% ... == 0` comes from PatternOps<T>, given here for int64_t and in
// generator/attention_algorithm.cpp for Expr.
// (`(p - j) % stride == 0` holds for the same pairs under C++'s truncating % and Halide's
// Euclidean %: the two differ only in the sign of a non-zero remainder.)
#pragma once

#include <cstdint>
#include <cstdlib>

namespace attngen {

enum class MaskKind { kNone, kCausal };
enum class MaskTensor { kNone, kBool, kAdditive };

// Sparse attention patterns, for query position p = offset + i and key j, all combinable with
// causal:
//   kWindow       p - left <= j <= p + right (-1: unbounded side); a local window w is
//                 left = right = w - 1
//   kStrided      |p - j| < stride, or (p - j) mod stride == 0
//   kBlockSparse  layout[i / block, j / block] != 0, layout a run-time input
//   kGlobalLocal  |p - j| <= local, or j < global_tokens, or p < global_tokens
enum class Pattern { kNone, kWindow, kStrided, kBlockSparse, kGlobalLocal };

struct PatternSpec {
  Pattern kind = Pattern::kNone;
  int left = -1, right = -1;
  int stride = 0;
  int block = 0;
  int local = 0;
  int global_tokens = 0;
};

// Per index type: Bool, the type of a comparison; always(), a true Bool; abs(x); and
// floor_div(x, n) for n > 0, rounding toward minus infinity (Halide's integer division).
template <typename T>
struct PatternOps;

template <>
struct PatternOps<int64_t> {
  using Bool = bool;
  static bool always() { return true; }
  static int64_t abs(int64_t x) { return std::llabs(x); }
  static int64_t floor_div(int64_t x, int64_t n) { return x / n - (x % n < 0 ? 1 : 0); }
};

template <typename T>
using PatternBool = typename PatternOps<T>::Bool;

// p - left <= j <= p + right, a negative side unbounded.
template <typename T>
PatternBool<T> window_attends(const T& p, const T& j, int left, int right) {
  PatternBool<T> in_window = PatternOps<T>::always();
  if (left >= 0) in_window = in_window && j >= p - left;
  if (right >= 0) in_window = in_window && j <= p + right;
  return in_window;
}

// |p - j| < stride, or p - j a multiple of the stride (stride > 0).
template <typename T>
PatternBool<T> strided_attends(const T& p, const T& j, int stride) {
  return PatternOps<T>::abs(p - j) < stride || (p - j) % stride == 0;
}

// |p - j| <= local, or j or p one of the first global_tokens.
template <typename T>
PatternBool<T> global_local_attends(const T& p, const T& j, int local, int global_tokens) {
  return PatternOps<T>::abs(p - j) <= local || j < global_tokens || p < global_tokens;
}

// The layout block of query index i (its row) or of key j (its column); indices are >= 0.
template <typename T>
T layout_block(const T& index, int block) {
  return index / block;
}

// layout[i / block, j / block] != 0, with layout(row, column) the caller's lookup of one layout
// entry as a Bool.
template <typename T, typename Layout>
PatternBool<T> block_sparse_attends(const T& i, const T& j, int block, const Layout& layout) {
  return layout(layout_block(i, block), layout_block(j, block));
}

// Whether query position p (query index i) attends key j under the pattern; layout as for
// block_sparse_attends (only called for kBlockSparse).
template <typename T, typename Layout>
PatternBool<T> pattern_attends(const PatternSpec& ps, const T& p, const T& i, const T& j,
                               const Layout& layout) {
  switch (ps.kind) {
    case Pattern::kNone:
      return PatternOps<T>::always();
    case Pattern::kWindow:
      return window_attends(p, j, ps.left, ps.right);
    case Pattern::kStrided:
      return strided_attends(p, j, ps.stride);
    case Pattern::kBlockSparse:
      return block_sparse_attends(i, j, ps.block, layout);
    case Pattern::kGlobalLocal:
      return global_local_attends(p, j, ps.local, ps.global_tokens);
  }
  return PatternOps<T>::always();
}

// Whether keys [k0, k1] may hold an attended key for some query of positions [p0, p1] (query
// indices from i0): false only where the pattern excludes the whole block. Block-sparse relies
// on the queries and the keys each lying in one layout block (for the kernels, plan_attention
// makes the query tile and the key block so).
template <typename T, typename Layout>
PatternBool<T> pattern_visits(const PatternSpec& ps, const T& p0, const T& p1, const T& i0,
                              const T& k0, const T& k1, const Layout& layout) {
  using Ops = PatternOps<T>;
  switch (ps.kind) {
    case Pattern::kNone:
      return Ops::always();
    case Pattern::kWindow: {
      PatternBool<T> visit = Ops::always();
      if (ps.left >= 0) visit = visit && k1 >= p0 - ps.left;
      if (ps.right >= 0) visit = visit && k0 <= p1 + ps.right;
      return visit;
    }
    case Pattern::kStrided: {
      // Near the diagonal, or p - j a multiple of the stride for some pair: the differences
      // span [p0 - k1, p1 - k0]; its largest multiple of the stride must not fall below it.
      PatternBool<T> band = k1 > p0 - ps.stride && k0 < p1 + ps.stride;
      PatternBool<T> multiple = Ops::floor_div(p1 - k0, ps.stride) * ps.stride >= p0 - k1;
      return band || multiple;
    }
    case Pattern::kBlockSparse:
      return block_sparse_attends(i0, k0, ps.block, layout);
    case Pattern::kGlobalLocal:
      return (k1 >= p0 - ps.local && k0 <= p1 + ps.local) || k0 < ps.global_tokens ||
             p0 < ps.global_tokens;
  }
  return Ops::always();
}

}  // namespace attngen
