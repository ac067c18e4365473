// f16 -> f32 by the CPU's own conversion instruction, which Halide 14 does not emit where the
// target has no f16 arithmetic: x86-64 with F16C (vcvtph2ps) and aarch64 without ARMv8.2-A FP16
// (fcvtl, fcvtl2; base ARMv8-A). Halide's f16 casts there are an emulation in integer and float
// code (on x86 about 8 instructions per vector, against 1). The kernel calls a function by name
// (widen_f16_native); the generator adds LLVM bitcode defining it, a vector fpext from half, to
// the kernel's module (Generator::get_externs_map, Halide::ExternalCode), where Halide's code
// generation finds its vector forms by their names (attngen_f16_to_f32x16 for 16 lanes) and LLVM
// inlines them, so each vector of halves becomes one conversion (on x86 its load folded in).
#pragma once

#include "Halide.h"
#include "core/targets.h"
#include "generator/native_code.h"

namespace attngen {

// Whether kernels for `target`, of the target table's `row` (the schedule's choice of row, passed
// in: the algorithm does not look targets up), widen f16 natively: the row says so
// (row_widens_f16: avx2, avx512, avx512bf16, neon), and on x86 the target has F16C.
bool widens_f16_natively(const Halide::Target& target, const TargetRow& row);

// x (Float(16)) as f32 by a call that the bitcode use_native_f16 adds resolves.
Halide::Expr widen_f16_native(const Halide::Expr& x);

// For a generator's generate(): whether the kernel widens f16 natively, true only for a
// kernel that reads f16 (`reads_f16`) on such a target; then the bitcode is added to the
// generator's externs (pass get_externs_map()).
bool use_native_f16(const ExternsMap& externs, const Halide::Target& target, const TargetRow& row,
                    bool reads_f16);

}  // namespace attngen
