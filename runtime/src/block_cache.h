// A per-thread cache of freed memory blocks in power-of-two size classes, handed out again last
// freed first: the kernels' halide_malloc / halide_free in the runtime (allocator.cpp) and in
// bench/autotune_harness.cpp, which includes this header so that its timings see the same
// allocator. Header-only and free of attngen's other headers for that reason.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <utility>
#include <vector>

namespace attngen::block_cache {

constexpr size_t kAlignment = 128;             // >= halide_malloc_alignment() on every target
constexpr size_t kSmallestClass = 4096;        // bytes, header included
constexpr size_t kMaxCachedBlocks = 32;        // per thread
constexpr size_t kMaxCachedBytes = 256 << 20;  // per thread

struct Cache {
  std::vector<std::pair<size_t, void*>> blocks;  // (class bytes, block base), last freed at back
  size_t bytes = 0;
  ~Cache() {
    for (const auto& b : blocks) std::free(b.second);
  }
};

inline thread_local Cache t_cache;

// The block holds a header (its class) before the caller's memory, and 8 bytes of slack after:
// Halide may read a vector's worth past either end.
inline size_t class_of(size_t size) {
  const size_t need = kAlignment + size + 8;
  size_t c = kSmallestClass;
  while (c < need) c <<= 1;
  return c;
}

inline void* allocate(void*, size_t size) {
  const size_t c = class_of(size);
  Cache& cache = t_cache;
  for (size_t i = cache.blocks.size(); i-- > 0;) {
    if (cache.blocks[i].first == c) {
      char* base = static_cast<char*>(cache.blocks[i].second);
      cache.blocks.erase(cache.blocks.begin() + static_cast<std::ptrdiff_t>(i));
      cache.bytes -= c;
      return base + kAlignment;
    }
  }
  char* base = static_cast<char*>(std::aligned_alloc(kAlignment, c));
  if (base == nullptr) return nullptr;
  *reinterpret_cast<size_t*>(base) = c;
  return base + kAlignment;
}

inline void release(void*, void* p) {
  if (p == nullptr) return;
  char* base = static_cast<char*>(p) - kAlignment;
  const size_t c = *reinterpret_cast<size_t*>(base);
  Cache& cache = t_cache;
  if (cache.blocks.size() >= kMaxCachedBlocks || cache.bytes + c > kMaxCachedBytes) {
    std::free(base);
    return;
  }
  cache.blocks.emplace_back(c, base);
  cache.bytes += c;
}

}  // namespace attngen::block_cache
