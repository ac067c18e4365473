// Where an I8 KV cache keeps an element of K and of V (attngen.h, "Incremental decoding"):
// written by the runtime's append (runtime/src/kv_cache.cpp) and read by the decode kernels
// (generator/decode_algorithm.cpp), both from these formulas (templates: plain integers in the
// runtime, Halide expressions in the generator).
//
// An I8 cache stores each kv head's slots in groups of kI8SlotGroup consecutive slots. A group
// holds K of its 16 slots, then V of its 16 slots:
//  - K as [ceil(Dqk / 4)][16][4] bytes: element d of the group's slot j at (d / 4) * 64 + j * 4 +
//    d % 4 (zeros past Dqk), so that one 64-byte vector holds 4 adjacent elements of the head
//    dim of 16 keys: the operand of a 32-bit-lane integer dot product (x86 VNNI's vpdpbusd, Arm's
//    sdot) whose lanes are the keys, and no horizontal sums per key and query row;
//  - V as [4][Dv][4] bytes: element d of slot j at (j / 4) * Dv * 4 + d * 4 + j % 4, the same
//    element of 4 adjacent slots side by side, so that one 64-byte vector holds 16 elements of
//    the head dim of 4 keys: the operand of an integer dot product whose lanes are the head dim
//    and which sums 4 keys' weighted values per lane (P.V).
// A kv head's groups follow one another, so attending still streams one contiguous range. The
// slots of the capacity are rounded up to whole groups; the scales (one f32 per slot for K and
// one for V) take the rounded slot count too, so a kernel reads whole groups of them as well.
#pragma once

#include <cstdint>

namespace attngen {

constexpr int kI8SlotGroup = 16;
constexpr int kI8DotBytes = 4;  // adjacent head-dim elements per 32-bit lane of K's part

// Slots of an I8 cache's capacity, rounded up to whole groups.
constexpr int64_t i8_padded_slots(int64_t capacity) {
  return (capacity + kI8SlotGroup - 1) / kI8SlotGroup * kI8SlotGroup;
}

// Bytes of a group's K part, and of the whole group (K then V).
template <typename T>
T i8_group_k_bytes(const T& dqk) {
  return (dqk + (kI8DotBytes - 1)) / kI8DotBytes * (kI8DotBytes * kI8SlotGroup);
}
template <typename T>
T i8_group_bytes(const T& dqk, const T& dv) {
  return i8_group_k_bytes(dqk) + dv * kI8SlotGroup;
}

// Byte of K's element d of slot j (< kI8SlotGroup) in its group's K part; of V's element d of
// slot j in its group's V part (any slot j >= 0 gives the same as j % 16 there: it is written
// with j / 4 and j % 4, which for a vector of 4 adjacent keys from a multiple of 4 stay a scalar
// and a ramp).
template <typename T>
T i8_k_offset(const T& d, const T& j) {
  return d / kI8DotBytes * (kI8DotBytes * kI8SlotGroup) + j * kI8DotBytes + d % kI8DotBytes;
}
template <typename T>
T i8_v_offset(const T& d, const T& j, const T& dv) {
  return j / kI8DotBytes % (kI8SlotGroup / kI8DotBytes) * (dv * kI8DotBytes) + d * kI8DotBytes +
         j % kI8DotBytes;
}

}  // namespace attngen
