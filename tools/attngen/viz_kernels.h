// The built-in kernels `attngen viz` draws with: those of plain attention with a weights output
// (WEIGHTS in generated/variants.cmake), found for a sparse pattern (a specialised kernel of its
// parameters, else the generic one of its kind), described in the tool's own option words and
// listed when none fits; and the head dims they take, for real heads.
#pragma once

#include <cstdio>
#include <string>

#include "attngen/kernel.h"
#include "tools/attngen/patterns.h"

namespace attngen::cli::viz {

// Exit status when no kernel with a weights output fits.
constexpr int kExitNoKernel = 3;

// What the kernel computes in a few words, the same on every ISA: its descriptor's shape class.
std::string variant_name(const attngen_kernel_info& k);

// The kernel's pattern and mask as `attngen viz` options, e.g. "local --window 32 --causal".
std::string describe_kernel(const attngen_kernel_info& k);

// Whether the kernel's pattern parameters are those in p.
bool kernel_matches_params(const attngen_kernel_info& k, PatternId id, const PatternParams& p);

// The pattern's parameters in p taken from the kernel's.
void take_kernel_params(const attngen_kernel_info& k, PatternId id, PatternParams& p);

// A specialised weights kernel of the pattern (its parameters built in), or with `generic` the
// generic one of the pattern's kind (any parameters, causal or not); nullptr where none.
const attngen_kernel_info* find_weights_kernel(PatternId id, bool causal, bool generic = false);

// One line per kernel with a weights output: its --pattern options and shape class.
void list_weights_kernels(FILE* f);

// For real heads: the head dims the kernels with a weights output of dense attention take.
std::string weights_head_dims();

// --pattern NAME; a UsageError naming `command` for an unknown name.
PatternId parse_pattern(const std::string& command, const std::string& s);

}  // namespace attngen::cli::viz
