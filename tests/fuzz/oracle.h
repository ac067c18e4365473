// The oracle of a fuzzed call (docs/semantics.md), common to every entry point: findings (fail():
// report and trap, libFuzzer saves the input), the count of statuses, the KNOWN(issue17-N)
// exclusions, and the checks: a failing call leaves its outputs and inputs byte for byte as they
// were and says why; a successful one was given valid arguments, wrote every output element and
// nothing between them, and matches the float64 reference (tests/reference.h) within its dtype's
// tolerance (tests/tensor.h); an attention call's plan behaves as the call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "attngen/attngen.h"
#include "tests/fuzz/guarded_tensor.h"
#include "tests/tensor.h"

namespace attngen::fuzz {

// ---------------------------------------------------------------------------------------------
// Failures, statistics

extern std::string g_call;  // what the current input does, printed with a failure

// Reports a finding (the call, the message, attngen_last_error()) and traps.
[[noreturn]] void fail(const char* fmt, ...);

inline constexpr int kStatuses = ATTNGEN_ERROR_WORKSPACE + 1;
extern uint64_t g_status_count[kStatuses + 1];  // the last slot: values outside the enum
extern uint64_t g_calls, g_ok_checked;

// The counts of calls and statuses, at exit.
void print_stats();

extern bool g_nonfinite;  // ATTNGEN_FUZZ_NONFINITE=1

// Counts a returned status; an error must come with a message, success with none.
attngen_status note(attngen_status s);

// Also counts the status (already note()d) under a kind of call, a feature whose share of the
// run print_stats() shows on its own ("attention rope", "varlen", ...).
attngen_status note_kind(const char* kind, attngen_status s);

// Whether the KNOWN(issue17-<id>) exclusion is active. ATTNGEN_FUZZ_KNOWN turns exclusions off to
// check fixes or reproduce: "all", or a list of ids ("3,5").
extern const char* g_known_off;
bool excluded(int id);

// ---------------------------------------------------------------------------------------------
// Checking calls

// The tensors of one call: inputs (must not change) and outputs (poisoned; unchanged on error).
struct Call {
  std::vector<GuardTensor*> inputs, outputs;
  std::vector<std::vector<uint8_t>> in_before, out_before;

  void before() {
    for (GuardTensor* o : outputs) o->poison();
    in_before.clear();
    out_before.clear();
    for (GuardTensor* i : inputs) in_before.push_back(i->snapshot());
    for (GuardTensor* o : outputs) out_before.push_back(o->snapshot());
  }

  // After a call: inputs intact; on error outputs intact; on success no gap written.
  void after(attngen_status s) {
    for (size_t k = 0; k < inputs.size(); ++k) {
      if (!inputs[k]->unchanged(in_before[k])) fail("input %zu was written", k);
    }
    for (size_t k = 0; k < outputs.size(); ++k) {
      if (s != ATTNGEN_OK && !outputs[k]->unchanged(out_before[k])) {
        fail("output %zu written although the call returned %s", k, attngen_status_name(s));
      }
      if (s == ATTNGEN_OK && !outputs[k]->gaps_unchanged(out_before[k])) {
        fail("output %zu: bytes between its elements were written", k);
      }
    }
  }
};

// The arguments of an attention call that returned `status`, through a plan: its creation
// returns the same status (and no plan on error); on success, its run over the same data writes
// what the call wrote, bit for bit (the outputs poisoned again first, inputs left intact). Every
// fourth call, as creation measures the kernel twice.
void check_plan(Call& c, attngen_status status, const attngen_tensor* q, const attngen_tensor* k,
                const attngen_tensor* v, const attngen_tensor* out,
                const attngen_attention_options* o);

// Whether a tensor has exactly this shape (what a successful call must have been given).
bool has_shape(const GuardTensor& g, std::initializer_list<int64_t> shape);

// "[2, 3, 5]"
std::string shape_of(const GuardTensor& g);

// A tensor for the report of a finding: dtype, shape, strides, where its data lies.
std::string describe(const char* name, const GuardTensor& g);

// The tensors of a successful call: each must span less than 2^31 bytes (docs/semantics.md).
void check_accepted(std::initializer_list<const GuardTensor*> ts);

// The contract's tolerance of a call whose inputs are of dtype d (tests/tensor.h).
attngen::test::Tolerance tolerance(int d);

// got (the output's logical elements) against the reference within the tolerance of `dtype`
// (docs/semantics.md, "Precision and tolerance"); every element written; NaN and infinities
// exactly where the reference has them.
//
// The contract's relative L2 bound is meant for fresh random inputs, whose outputs have many
// elements; a fuzzed call may have one output element that is a sum cancelling to almost 0
// (a dot product of 512 terms giving 0.12), which no float32 arithmetic meets relative to
// itself. So the denominator is the larger of the reference's norm and the norm of `mag`, the
// same sums over absolute values (sum |x w|, sum p |v|), which bounds the terms' size. For the
// random inputs of the tests the two differ by a small factor (~sqrt(Skv)); errors of a wrong
// result are of the order of the values themselves and still fail. mag empty: want itself.
void check_close(const char* what, const GuardTensor& out, const std::vector<double>& want,
                 const std::vector<double>& mag, double max_abs_v,
                 const attngen::test::Tolerance& tol);

// |x| elementwise; the largest finite |x|.
std::vector<double> abs_of(std::vector<double> v);
double max_abs(const std::vector<double>& v);

// " name=value" for each pair, what g_call says of a call's sizes and options.
std::string dims_string(std::initializer_list<std::pair<const char*, int64_t>> dims);

}  // namespace attngen::fuzz
