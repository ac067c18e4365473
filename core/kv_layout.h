// Where a grouped KV cache (I8, F16 and BF16) keeps an element of K and of V (attngen.h,
// "Incremental decoding"): written by the runtime's append (runtime/src/kv_cache.cpp) and read by
// the decode kernels (generator/decode_algorithm.cpp), both from these formulas (templates: plain
// integers in the runtime, Halide expressions in the generator).
//
// A grouped cache stores each kv head's slots in groups of kSlotGroup consecutive slots. A group
// holds K of its 16 slots, then V of its 16 slots, with `pack` adjacent elements in one lane:
// kI8DotBytes (4) in an I8 cache, 1 in an F16 or BF16 one (group_pack):
//  - K as [ceil(Dqk / pack)][16][pack] elements: element d of the group's slot j at (d / pack) *
//    16 * pack + j * pack + d % pack (zeros past Dqk), so that one vector holds `pack` adjacent
//    elements of the head dim of 16 keys and the lanes are the keys: q.k needs no horizontal sum
//    per key and query row. An I8 cache's 64-byte vector is the operand of a 32-bit-lane integer
//    dot product (x86 VNNI's vpdpbusd, Arm's sdot); a 16-bit cache's 32-byte vector holds
//    element d of 16 keys, converted to one f32 vector for one FMA per query row against q[d]
//    broadcast;
//  - V as [16 / pack][Dv][pack] elements: element d of slot j at (j / pack) * Dv * pack + d * pack
//    + j % pack, the same element of `pack` adjacent slots side by side. An I8 cache's 64-byte
//    vector holds 16 elements of the head dim of 4 keys: the operand of an integer dot product
//    whose lanes are the head dim and which sums 4 keys' weighted values per lane (P.V); a
//    16-bit cache's V of a slot is its Dv elements in a row, as an F32 cache's.
// A kv head's groups follow one another, so attending still streams one contiguous range. The
// slots of the capacity are rounded up to whole groups.
// An I8 cache's scales (one f32 per slot for K and one for V) come in the same groups, in an
// array of their own: per kv head and group, the 16 slots' K scales, then their V scales
// (group_scale_offset), so that the 16 keys of a vector find theirs in one load.
// An F32 cache is not grouped: each slot holds its K and then its V (attngen.h). Grouped, its
// decode took 0.8 of the time L3-resident but 1.03-1.08x from DRAM (schedules/cpu_decode.cpp).
#pragma once

#include <cstdint>

namespace attngen {

constexpr int kSlotGroup = 16;
constexpr int kI8DotBytes = 4;  // adjacent head-dim elements per 32-bit lane of an I8 cache's K

// Adjacent elements per lane of a grouped cache of `bytes`-byte elements (1: I8, 2: F16, BF16).
constexpr int group_pack(int bytes) { return bytes == 1 ? kI8DotBytes : 1; }

// Slots of a grouped cache's capacity, rounded up to whole groups.
constexpr int64_t padded_slots(int64_t capacity) {
  return (capacity + kSlotGroup - 1) / kSlotGroup * kSlotGroup;
}

// Elements of a group's K part, and of the whole group (K then V).
template <typename T>
T group_k_elements(const T& dqk, int pack) {
  return (dqk + (pack - 1)) / pack * (pack * kSlotGroup);
}
template <typename T>
T group_elements(const T& dqk, const T& dv, int pack) {
  return group_k_elements(dqk, pack) + dv * kSlotGroup;
}

// Element of K's element d of slot j (< kSlotGroup) in its group's K part; of V's element d of
// slot j in its group's V part (any slot j >= 0 gives the same as j % 16 there: it is written
// with j / pack and j % pack, which for a vector of `pack` adjacent keys from a multiple of pack
// stay a scalar and a ramp).
template <typename T>
T group_k_offset(const T& d, const T& j, int pack) {
  return d / pack * (pack * kSlotGroup) + j * pack + d % pack;
}
template <typename T>
T group_v_offset(const T& d, const T& j, const T& dv, int pack) {
  return j / pack % (kSlotGroup / pack) * (dv * pack) + d * pack + j % pack;
}

// An I8 cache's scales: kScaleGroup floats per group, slot j's (< 16) K scale (part 0) or V scale
// (part 1) at group_scale_offset(part, j) among them.
constexpr int kScaleGroup = 2 * kSlotGroup;
template <typename T>
T group_scale_offset(int part, const T& j) {
  return part * kSlotGroup + j;
}

}  // namespace attngen
