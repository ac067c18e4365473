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

// Per index type: Bool, the type of a comparison; always(), a true Bool; abs(x); floor_div(x, n)
// for n > 0, rounding toward minus infinity (Halide's integer division); and side(param, cond,
// otherwise): cond where a window side or similar parameter is >= 0, else otherwise (for a
// compile-time int a choice made here, for a run-time value a select in the kernel).
template <typename T>
struct PatternOps;

template <>
struct PatternOps<int64_t> {
  using Bool = bool;
  static bool always() { return true; }
  static int64_t abs(int64_t x) { return std::llabs(x); }
  static int64_t floor_div(int64_t x, int64_t n) { return x / n - (x % n < 0 ? 1 : 0); }
  static bool side(int param, bool cond, bool otherwise) { return param >= 0 ? cond : otherwise; }
};

template <typename T>
using PatternBool = typename PatternOps<T>::Bool;

// A pattern's parameters (PatternSpec's), as compile-time ints or as run-time values P (a
// generic kernel's inputs).
template <typename P>
struct PatternValues {
  P left, right, stride, block, local, global_tokens;
};

inline PatternValues<int> values_of(const PatternSpec& ps) {
  return {ps.left, ps.right, ps.stride, ps.block, ps.local, ps.global_tokens};
}

// p - left <= j <= p + right, a negative side unbounded.
template <typename T, typename P>
PatternBool<T> window_attends(const T& p, const T& j, const P& left, const P& right) {
  using Ops = PatternOps<T>;
  PatternBool<T> in_window = Ops::always();
  in_window = Ops::side(left, in_window && j >= p - left, in_window);
  in_window = Ops::side(right, in_window && j <= p + right, in_window);
  return in_window;
}

// |p - j| < stride, or p - j a multiple of the stride (stride > 0).
template <typename T, typename P>
PatternBool<T> strided_attends(const T& p, const T& j, const P& stride) {
  return PatternOps<T>::abs(p - j) < stride || (p - j) % stride == 0;
}

// |p - j| <= local, or j or p one of the first global_tokens.
template <typename T, typename P>
PatternBool<T> global_local_attends(const T& p, const T& j, const P& local,
                                    const P& global_tokens) {
  return PatternOps<T>::abs(p - j) <= local || j < global_tokens || p < global_tokens;
}

// The layout block of query index i (its row) or of key j (its column); indices are >= 0.
template <typename T, typename P>
T layout_block(const T& index, const P& block) {
  return index / block;
}

// layout[i / block, j / block] != 0, with layout(row, column) the caller's lookup of one layout
// entry as a Bool.
template <typename T, typename P, typename Layout>
PatternBool<T> block_sparse_attends(const T& i, const T& j, const P& block, const Layout& layout) {
  return layout(layout_block(i, block), layout_block(j, block));
}

// Whether query position p (query index i) attends key j under the pattern; layout as for
// block_sparse_attends (only called for kBlockSparse).
template <typename T, typename P, typename Layout>
PatternBool<T> pattern_attends(Pattern kind, const PatternValues<P>& v, const T& p, const T& i,
                               const T& j, const Layout& layout) {
  switch (kind) {
    case Pattern::kNone:
      return PatternOps<T>::always();
    case Pattern::kWindow:
      return window_attends(p, j, v.left, v.right);
    case Pattern::kStrided:
      return strided_attends(p, j, v.stride);
    case Pattern::kBlockSparse:
      return block_sparse_attends(i, j, v.block, layout);
    case Pattern::kGlobalLocal:
      return global_local_attends(p, j, v.local, v.global_tokens);
  }
  return PatternOps<T>::always();
}

template <typename T, typename Layout>
PatternBool<T> pattern_attends(const PatternSpec& ps, const T& p, const T& i, const T& j,
                               const Layout& layout) {
  return pattern_attends(ps.kind, values_of(ps), p, i, j, layout);
}

// Whether keys [k0, k1] may hold an attended key for some query of positions [p0, p1] (query
// indices from i0): false only where the pattern excludes the whole block. Block-sparse relies
// on the queries and the keys each lying in one layout block (for the kernels, plan_attention
// makes the query tile and the key block so; a generic kernel checks it at run time).
template <typename T, typename P, typename Layout>
PatternBool<T> pattern_visits(Pattern kind, const PatternValues<P>& v, const T& p0, const T& p1,
                              const T& i0, const T& k0, const T& k1, const Layout& layout) {
  using Ops = PatternOps<T>;
  switch (kind) {
    case Pattern::kNone:
      return Ops::always();
    case Pattern::kWindow: {
      PatternBool<T> visit = Ops::always();
      visit = Ops::side(v.left, visit && k1 >= p0 - v.left, visit);
      visit = Ops::side(v.right, visit && k0 <= p1 + v.right, visit);
      return visit;
    }
    case Pattern::kStrided: {
      // Near the diagonal, or p - j a multiple of the stride for some pair: the differences
      // span [p0 - k1, p1 - k0]; its largest multiple of the stride must not fall below it.
      PatternBool<T> band = k1 > p0 - v.stride && k0 < p1 + v.stride;
      PatternBool<T> multiple = Ops::floor_div(p1 - k0, v.stride) * v.stride >= p0 - k1;
      return band || multiple;
    }
    case Pattern::kBlockSparse:
      return block_sparse_attends(i0, k0, v.block, layout);
    case Pattern::kGlobalLocal:
      return (k1 >= p0 - v.local && k0 <= p1 + v.local) || k0 < v.global_tokens ||
             p0 < v.global_tokens;
  }
  return Ops::always();
}

template <typename T, typename Layout>
PatternBool<T> pattern_visits(const PatternSpec& ps, const T& p0, const T& p1, const T& i0,
                              const T& k0, const T& k1, const Layout& layout) {
  return pattern_visits(ps.kind, values_of(ps), p0, p1, i0, k0, k1, layout);
}

}  // namespace attngen
