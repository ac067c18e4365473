// The call builders, one per entry point of the C API: each decodes one call (for the KV cache, a
// short session of calls) from the input (tests/fuzz/fuzz_input.h), makes its guarded tensors,
// runs it and checks it with the oracle (tests/fuzz/oracle.h) against the float64 reference
// (tests/reference.h). attention_calls.cpp: attngen_attention and its plan (with a rope and
// positions sometimes), attngen_attention_varlen, attngen_linear, attngen_mha; kv_cache_calls.cpp:
// the KV cache (with a rope sometimes) with attngen_decode and attngen_mha_decode;
// small_calls.cpp: attngen_pattern_attends and the small entry points.
#pragma once

#include <cstdint>
#include <vector>

#include "tests/fuzz/fuzz_input.h"
#include "tests/fuzz/guarded_tensor.h"
#include "tests/reference.h"

namespace attngen::fuzz {

// A pattern as the harness draws it: what the reference reads (tests/reference.h: the kind as an
// int, which may be invalid, the parameters, and the layout's values densely when the layout
// tensor is rank 2), and whether a layout tensor was made.
struct PatternSpec : attngen::test::RefPattern {
  bool has_layout = false;
};

// A pattern for a call of Sq queries and Skv keys; its layout tensor (block-sparse) in layout_t.
PatternSpec make_pattern(Input& in, int64_t sq, int64_t skv, GuardTensor& layout_t, Fill& fill);

// A rope as the harness draws it (attngen.h, "Rotary position embeddings"): the struct given to
// the call or cache, its frequencies' tensor, and what the reference reads. Valid most of the
// time; else a bad struct_size, rotary_dim (odd, past the head dim, negative), pairs, or inv_freq
// (NULL, its shape, dtype or layout, a non-finite value).
struct RopeSpec {
  attngen_rope r{};
  GuardTensor freq;
  int64_t dim = 0;  // the rotary dims the contract resolves (rotary_dim, or the head dim for 0)
  int pairs = ATTNGEN_ROPE_HALF;  // as drawn (an int: it may be outside the enum)
  std::vector<double> inv_freq;   // the frequencies as stored (dense)
};

// Draws a rope for head dim dqk into s.
void make_rope(Input& in, int64_t dqk, RopeSpec& s, Fill& fill);

// A call or cache that accepted the rope: it must be valid for head dim dqk (else a finding).
void check_rope_accepted(const RopeSpec& s, int64_t dqk);

// x, dense [B, S, H, D], rotated by the rope at positions[b * S + s]: tests/reference.h's
// reference_rope over x rounded to float (what the reference's views hold). Dense [B, S, H, D].
std::vector<double> rope_dense(const RopeSpec& s, const std::vector<double>& x, int64_t B,
                               int64_t S, int64_t H, int64_t D,
                               const std::vector<int64_t>& positions);

void fuzz_attention(Input& in, Fill& fill);
void fuzz_attention_varlen(Input& in, Fill& fill);
void fuzz_linear(Input& in, Fill& fill);
void fuzz_mha(Input& in, Fill& fill);
// serving: the session's cache may be created in pages and with a rope (drawn at creation), and
// its sequences forked (off for the dispatch that the saved kv-cache inputs take, so they keep
// decoding as before).
void fuzz_kv_cache(Input& in, Fill& fill, bool serving);
void fuzz_pattern_attends(Input& in, Fill& fill);
void fuzz_small(Input& in);

}  // namespace attngen::fuzz
