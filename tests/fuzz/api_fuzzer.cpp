// libFuzzer harness over the whole C API (issue 17). Each input is decoded into one structured
// call (or, for the KV cache, a short session of calls): shapes, strides, dtypes, options and
// pointers, small and valid most of the time and hostile sometimes. Every tensor lives in its own
// mapping between two PROT_NONE guard pages, its span ending at the upper one, so any read or
// write outside the span faults. The runtime is built with ASan and UBSan (no recover).
//
// The oracle (docs/semantics.md):
// - a call that fails leaves every byte of its outputs as it was (compared byte for byte with a
//   copy), never writes its inputs, and says why (attngen_last_error() not empty);
// - a call that succeeds matches the float64 reference (tests/reference.h) within the tolerance
//   of its storage dtype (tests/tensor.h), writes every output element (outputs are poisoned with
//   a NaN of their dtype) and nothing between them.
// A violation prints what was wrong and traps; libFuzzer saves the input.
//
// ATTNGEN_FUZZ_KNOWN=all (or "3,5") turns the exclusions off. ATTNGEN_FUZZ_NONFINITE=1 also injects
// NaN and Inf into the inputs (more of them into keys a row cannot attend) and checks the
// contract's rules for them against an IEEE float64 reference: keys a row does not attend never
// affect it, and a non-finite value reaches exactly the rows that read it. Not part of CI (the
// kernels are being fixed for it).
//
// Exclusions of known, not yet fixed bugs are marked KNOWN(issue17-N) (guarded by excluded(N)):
// remove when fixed. None is open: every one found so far is fixed and replayed as
// tests/fuzz/regressions/fixed<N>-*.
//
// The harness by responsibility: fuzz_input.h (decoding the input's bytes), guarded_tensor.h
// (tensors between guard pages, their fills), oracle.h (findings, statistics and the checks of a
// call), calls.h (the call builders of each entry point: attention_calls.cpp,
// kv_cache_calls.cpp, small_calls.cpp), and this file, libFuzzer's entry points. A feature added
// to an entry point draws where the saved inputs (seeds, regressions) do not reach, so that they
// keep decoding to the same calls: attention's rope and positions after its other draws, a KV
// cache's rope only in the sessions of op 4 (the saved ones are of 5), attngen_attention_varlen
// at op % 8 == 1 from 128 on (none saved there). print_stats() counts the calls of these
// features by status on their own lines.
#include <cstdint>
#include <cstdlib>

#include "attngen/attngen.h"
#include "tests/fuzz/calls.h"
#include "tests/fuzz/fuzz_input.h"
#include "tests/fuzz/guarded_tensor.h"
#include "tests/fuzz/oracle.h"

using attngen::fuzz::fail;
using attngen::fuzz::Fill;
using attngen::fuzz::fuzz_attention;
using attngen::fuzz::fuzz_attention_varlen;
using attngen::fuzz::fuzz_kv_cache;
using attngen::fuzz::fuzz_linear;
using attngen::fuzz::fuzz_mha;
using attngen::fuzz::fuzz_pattern_attends;
using attngen::fuzz::fuzz_small;
using attngen::fuzz::g_call;
using attngen::fuzz::g_known_off;
using attngen::fuzz::g_nonfinite;
using attngen::fuzz::Input;
using attngen::fuzz::print_stats;

// Out-of-memory is a status of the API, not a crash: let allocations fail (ASan).
extern "C" const char* __asan_default_options() { return "allocator_may_return_null=1"; }

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* nf = std::getenv("ATTNGEN_FUZZ_NONFINITE");
  g_nonfinite = nf != nullptr && nf[0] == '1';
  g_known_off = std::getenv("ATTNGEN_FUZZ_KNOWN");
  attngen_set_num_threads(1);
  std::atexit(print_stats);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in(data, size);
  const uint8_t op = in.u8();
  Fill fill;
  fill.rng.seed(in.u32());
  fill.nonfinite = g_nonfinite;
  switch (op % 8) {
    case 0:
      fuzz_attention(in, fill);
      break;
    case 1:  // packed sequences from 128 on (no saved input is there)
      if (op < 128) {
        fuzz_attention(in, fill);
      } else {
        fuzz_attention_varlen(in, fill);
      }
      break;
    case 2:
      fuzz_linear(in, fill);
      break;
    case 3:
      fuzz_mha(in, fill);
      break;
    case 4:  // the cache may be paged and have a rope (the saved KV cache inputs are of 5:
             // they decode as before)
      fuzz_kv_cache(in, fill, true);
      break;
    case 5:
      fuzz_kv_cache(in, fill, false);
      break;
    case 6:
      fuzz_pattern_attends(in, fill);
      break;
    default:
      fuzz_small(in);
      break;
  }
  // Process-wide settings back to what every input starts from.
  if (attngen_set_isa(nullptr) != ATTNGEN_OK) fail("set_isa(NULL) failed");
  attngen_set_num_threads(1);
  g_call.clear();
  return 0;
}
