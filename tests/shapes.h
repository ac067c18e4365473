// Edge shapes derived from a kernel's descriptor, as XNNPACK's tests derive them from a
// microkernel's tile: lengths just below, at, just above and past two of each unit the kernel
// tiles a sequence by, where partial tiles and blocks are easy to get wrong.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "attngen/kernel.h"

namespace attngen::test {

// Used where a descriptor says 0 (an op without such a unit).
constexpr int32_t kDefaultUnit = 64;

// unit - 1, unit, unit + 1 and 2 * unit + 1, positive and each once, ascending.
inline std::vector<int64_t> edge_lengths(int32_t unit) {
  const int64_t u = unit > 0 ? unit : kDefaultUnit;
  std::vector<int64_t> out;
  for (int64_t n : {u - 1, u, u + 1, 2 * u + 1}) {
    if (n > 0 && std::find(out.begin(), out.end(), n) == out.end()) out.push_back(n);
  }
  return out;
}

// Query rows per tile of a kernel, and the keys it takes at a time: its key block in the
// key-block form, else the chunk of the row form's passes (the descriptor's resolved units);
// kDefaultUnit where it has none.
inline int32_t query_tile_of(const attngen_kernel_info& k) {
  return k.query_tile > 0 ? k.query_tile : kDefaultUnit;
}
inline int32_t key_block_of(const attngen_kernel_info& k) {
  return k.key_block > 0 ? k.key_block : k.key_chunk > 0 ? k.key_chunk : kDefaultUnit;
}

}  // namespace attngen::test
