// Rotary position embeddings (attngen.h, "Rotary position embeddings"): validation of an
// attngen_rope, the angles of successive positions, and the rotation of rows and tensors, for the
// KV cache's append, decode's queries and attention's q and k.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/src/internal.h"
#include "runtime/src/workspace.h"

namespace attngen::rt {

// A validated rope over vectors of some head dim: its rotary dims r (0: none), pairs, and r / 2
// inverse frequencies, held by whoever made it (a cache's or a plan's copy, or a call's scratch).
struct RopeView {
  int64_t dim = 0;
  attngen_rope_pairs pairs = ATTNGEN_ROPE_HALF;
  const float* inv_freq = nullptr;
  explicit operator bool() const { return dim > 0; }
};

// Checks `rope` (`name` in messages, e.g. "options.rope") for vectors of head_dim elements: its
// struct_size, rotary_dim (even, 2 .. head_dim; 0: head_dim), pairs, and inv_freq (F32 [r / 2],
// finite). *read is the rope as read (the ABI rule), its rotary_dim resolved; 0 for no rope.
bool check_rope(Check& c, const attngen_rope* rope, int64_t head_dim, const char* name,
                attngen_rope* read);

// A checked rope's frequencies (rotary_dim / 2 of them) into freq.
void copy_inv_freq(const attngen_rope& rope, float* freq);

// A rope kept beyond the call that gave it (a KV cache, a plan): its own copy of the frequencies.
struct KeptRope {
  int64_t dim = 0;
  attngen_rope_pairs pairs = ATTNGEN_ROPE_HALF;
  std::vector<float> inv_freq;
  // Checks and copies `rope` (NULL: none); ATTNGEN_ERROR_OUT_OF_MEMORY if the copy fails.
  bool keep(Check& c, const attngen_rope* rope, int64_t head_dim, const char* name);
  RopeView view() const { return RopeView{dim, pairs, inv_freq.data()}; }
  // The rope as the C API describes it, over this copy (for a plan's runs).
  attngen_rope described(attngen_tensor* freq_tensor) const;
};

// The cos and sin of a rope's angles t f_i at one position t after another: exact (double sin
// and cos of the double product) at a position that does not follow the last one and every
// kAnchorEvery positions, otherwise the last angles turned by f_i (one complex product in double,
// whose error grows by about 1e-16 a step). `state` holds 2 r doubles, `cs` r floats.
class RopeAngles {
 public:
  RopeAngles(const RopeView& rope, double* state, float* cs)
      : rope_(rope), state_(state), cs_(cs) {}
  // cos(t f_i) for i < r / 2, then sin(t f_i).
  const float* at(int64_t position);

  static constexpr int64_t kAnchorEvery = 1024;
  // Scratch that one RopeAngles takes: doubles for `state`, floats for `cs`.
  static size_t state_doubles(const RopeView& rope) { return static_cast<size_t>(2 * rope.dim); }

 private:
  RopeView rope_;
  double* state_;  // cos, sin of the last position's angles [r / 2 each], then of f_i
  float* cs_;
  int64_t last_ = 0, since_anchor_ = kAnchorEvery;
  bool any_ = false, turns_ = false;
};

// The first rope.dim elements of the F32 row src rotated by the angles `cs` (RopeAngles) into dst
// (which may be src; the elements past rope.dim are not written).
void rope_row(const RopeView& rope, const float* cs, const float* src, float* dst);

// A rotated copy of a tensor x [B, S, H, D] (F32, F16 or BF16, innermost stride 1), dense and of
// x's dtype, in a call's scratch (taken first, so that a call can take all its scratch before it
// writes anything): row (b, s) rotated at position(b, s) (F16 / BF16 through F32, rounded back),
// the rows split among the threads (attngen_set_num_threads()).
class RopedTensor {
 public:
  // Takes the scratch for x's copy and the angles; false (c says why) if it cannot hold them.
  bool take(Check& c, CallScratch& scratch, const RopeView& rope, const attngen_tensor& x,
            const char* what);
  // The copy, described (valid once taken).
  const attngen_tensor& tensor() const { return rotated_; }
  // Rotates x (the tensor it was taken for) into the copy.
  template <typename Position>
  void fill(const attngen_tensor& x, const Position& position) {
    fill_rows(x, &position, [](const void* p, int64_t b, int64_t s) -> int64_t {
      return (*static_cast<const Position*>(p))(b, s);
    });
  }

  using PositionFn = int64_t (*)(const void* position, int64_t b, int64_t s);
  // Rows [first, last) of x (row r = b * S + s) with the angles of worker `worker`.
  void rotate_rows(const attngen_tensor& x, const void* position, PositionFn at, int worker,
                   int64_t first, int64_t last) const;

 private:
  void fill_rows(const attngen_tensor& x, const void* position, PositionFn at);

  RopeView rope_;
  attngen_tensor rotated_{};
  int workers_ = 0;
  // Per worker: its angles' state (RopeAngles::state_doubles()), and its angles (r floats).
  double* state_ = nullptr;
  float* cs_ = nullptr;
  int64_t state_stride_ = 0, cs_stride_ = 0;
};

}  // namespace attngen::rt
