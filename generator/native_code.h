// Functions written in LLVM IR that kernels call by name. A kernel's Halide code calls them as
// extern functions (PureExtern where the result depends on the arguments alone); the generator adds
// their bitcode to the kernel's module (Generator::get_externs_map, Halide::ExternalCode), where
// Halide's code generation finds the vector forms by name (`<name>x16` for a call on 16 lanes, or
// the next power of two, split or padded to it) and LLVM inlines them. This reaches instructions
// that Halide 14 does not emit (generator/native_f16.h: f16 widening; generator/online_softmax.h:
// the softmax's exps by vscalefps), or works around its code (add_amx_tile_zero).
#pragma once

#include <map>
#include <memory>
#include <string>

#include "Halide.h"

namespace attngen {

using ExternsMap = std::shared_ptr<std::map<std::string, Halide::ExternalCode>>;

// Adds the module `ir` (LLVM IR text without a data layout: the kernel's is prepended) to
// `externs` as bitcode under `code_name`, once per kernel. The functions should be
// `weak_odr hidden` (every kernel object carries a copy; a program that links many keeps one)
// and alwaysinline. A module that does not parse is a Halide::CompileError.
void add_native_code(const ExternsMap& externs, const Halide::Target& target,
                     const std::string& code_name, const std::string& ir);

// AMX: a zeroed f32 tile by a call that LLVM does not merge with others. Halide 14 declares
// its own tile_zero function readnone, so LLVM merges the zeroing of every tile in a block into
// one tilezero and copies that tile to the others through the stack (AMX has no tile moves):
// a 1 KiB store and reload per tile, the reload waiting for the store. The amx schedule's
// lowering pass calls this one instead (an impure extern call of type Float(32, 256)).
constexpr char kAmxTileZeroF32[] = "attngen_amx_tile_zero_f32";
void add_amx_tile_zero(const ExternsMap& externs, const Halide::Target& target);

// A prefetch into L2 (x86: prefetcht1) of the byte at a buffer's host pointer plus a byte
// offset: an impure extern call of type Int(32) taking a Handle and an Int(64). Halide 14's own
// prefetch is a prefetchnta on x86; for the decode kernels on a Zen 4 VM prefetcht1 was 1.5x
// faster than prefetcht0 over a DRAM-sized cache (one thread), prefetcht2 within 5%
// (bench/RESULTS.md).
constexpr char kPrefetchL2[] = "attngen_prefetch_l2";
void add_prefetch_l2(const ExternsMap& externs, const Halide::Target& target);

// `value` as an LLVM IR floating-point literal (the hexadecimal double of the float, exact).
std::string ir_float(float value);

}  // namespace attngen
