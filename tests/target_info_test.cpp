// The target helper that every schedule reads its vector width and register budget from.
#include <cstring>

#include <gtest/gtest.h>

#include "schedules/target_info.h"

namespace attngen {
namespace {

TEST(TargetInfo, KnowsEachIsa) {
  const TargetInfo avx512 =
      target_info(Halide::Target("x86-64-linux-sse41-avx-f16c-fma-avx2-avx512-avx512_skylake"));
  EXPECT_EQ(avx512.isa, Isa::kAvx512);
  EXPECT_EQ(avx512.f32_lanes, 16);
  EXPECT_EQ(avx512.vector_registers, 32);
  const TargetInfo avx2 = target_info(Halide::Target("x86-64-linux-sse41-avx-f16c-fma-avx2"));
  EXPECT_EQ(avx2.isa, Isa::kAvx2);
  EXPECT_EQ(avx2.f32_lanes, 8);
  EXPECT_EQ(target_info(Halide::Target("x86-64-linux-sse41")).isa, Isa::kSse41);
  const TargetInfo neon = target_info(Halide::Target("arm-64-linux"));
  EXPECT_EQ(neon.isa, Isa::kNeon);
  EXPECT_EQ(neon.f32_lanes, 4);
  EXPECT_EQ(neon.vector_registers, 32);
  EXPECT_EQ(target_info(Halide::Target("arm-64-linux-arm_fp16")).isa, Isa::kNeonFp16);
  EXPECT_EQ(target_info(Halide::Target("arm-64-linux-arm_dot_prod")).isa, Isa::kNeonDot);
  // 32-bit ARM: NEON's 16 q registers, never the aarch64 rows (no FP16 arithmetic on ARMv7).
  const TargetInfo neon32 = target_info(Halide::Target("arm-32-linux"));
  EXPECT_EQ(neon32.isa, Isa::kNeon32);
  EXPECT_EQ(neon32.f32_lanes, 4);
  EXPECT_EQ(neon32.vector_registers, 16);
  EXPECT_STREQ(isa_name(Isa::kNeon32), "neon32");
  EXPECT_EQ(target_info(Halide::Target("arm-32-linux-arm_fp16")).isa, Isa::kNeon32);
  EXPECT_EQ(target_info(Halide::Target("arm-32-linux-no_neon")).isa, Isa::kGeneric);
  EXPECT_EQ(target_info(Halide::Target("x86-64-linux-cuda")).isa, Isa::kCuda);
  EXPECT_EQ(target_info(Halide::Target("x86-32-linux")).isa, Isa::kGeneric);
  EXPECT_STREQ(isa_name(Isa::kAvx512), "avx512");
}

// Every row's Halide target is read back as that row, so the schedules size a row's kernels from
// its own vector width and registers (the generic row's target is the build machine's, "host").
// A row that shares its target with an earlier one (amx with avx512bf16) reads back as that one,
// with the same vector width and registers; the generator tells them apart by the row's name.
TEST(TargetInfo, EachRowsTargetIsItsRow) {
  for (const TargetRow& row : kTargets) {
    if (row.isa == Isa::kGeneric) continue;
    const TargetRow* owner = &row;
    for (const TargetRow& other : kTargets) {
      if (!std::strcmp(other.halide_target, row.halide_target)) {
        owner = &other;
        break;
      }
    }
    if (owner != &row) {
      EXPECT_EQ(row.isa, Isa::kAmx) << row.name << " shares its target with " << owner->name;
      EXPECT_EQ(row.vector_bytes, owner->vector_bytes) << row.name;
    }
    const TargetInfo info = target_info(Halide::Target(row.halide_target));
    EXPECT_EQ(info.isa, owner->isa) << row.name << ": " << row.halide_target;
    EXPECT_EQ(info.vector_registers, row.vector_registers) << row.name;
    EXPECT_LT(row.accumulators, row.vector_registers) << row.name;
  }
}

TEST(TargetInfo, AccumulatorsFitTheRegisterFile) {
  for (const char* t : {"x86-64-linux-sse41-avx-f16c-fma-avx2-avx512-avx512_skylake",
                        "x86-64-linux-sse41-avx-f16c-fma-avx2", "arm-64-linux", "arm-32-linux"}) {
    const TargetInfo info = target_info(Halide::Target(t));
    EXPECT_LT(info.accumulators, info.vector_registers) << t;
  }
}

TEST(TargetInfo, LanesDivideHeadDims) {
  const TargetInfo avx512 =
      target_info(Halide::Target("x86-64-linux-sse41-avx-f16c-fma-avx2-avx512-avx512_skylake"));
  EXPECT_EQ(lanes_dividing(64, avx512), 16);
  EXPECT_EQ(lanes_dividing(80, avx512), 16);
  EXPECT_EQ(lanes_dividing(40, avx512), 8);
  EXPECT_EQ(lanes_dividing(24, avx512), 8);
  EXPECT_EQ(lanes_dividing(7, avx512), 16);            // nothing divides: native width, with a tail
  EXPECT_EQ(rows_for_accumulators(4, 32, avx512), 6);  // 6 rows x 4 vectors = 24 <= 24
  EXPECT_EQ(rows_for_accumulators(4, 64, avx512), 6);
  EXPECT_EQ(rows_for_accumulators(6, 64, avx512), 4);  // D96: 4 x 6, 6 loaded, 1 broadcast
  // D128: 3 x 8 = 24 accumulators would leave no register for the 8 loaded vectors.
  EXPECT_EQ(rows_for_accumulators(8, 32, avx512), 2);
  EXPECT_EQ(rows_for_accumulators(1, 4, avx512), 4);  // capped by the limit
}

}  // namespace
}  // namespace attngen
