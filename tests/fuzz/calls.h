// The call builders, one per entry point of the C API: each decodes one call (for the KV cache, a
// short session of calls) from the input (tests/fuzz/fuzz_input.h), makes its guarded tensors,
// runs it and checks it with the oracle (tests/fuzz/oracle.h) against the float64 reference
// (tests/reference.h). attention_calls.cpp: attngen_attention and its plan, attngen_linear,
// attngen_mha; kv_cache_calls.cpp: the KV cache with attngen_decode and attngen_mha_decode;
// small_calls.cpp: attngen_pattern_attends and the small entry points.
#pragma once

#include <cstdint>

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

void fuzz_attention(Input& in, Fill& fill);
void fuzz_linear(Input& in, Fill& fill);
void fuzz_mha(Input& in, Fill& fill);
void fuzz_kv_cache(Input& in, Fill& fill);
void fuzz_pattern_attends(Input& in, Fill& fill);
void fuzz_small(Input& in);

}  // namespace attngen::fuzz
