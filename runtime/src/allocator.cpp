// The kernels' scratch memory (halide_malloc / halide_free): a per-thread cache of freed blocks
// in power-of-two size classes, handed out again last-freed first.
//
// A kernel allocates per parallel task (the scores and probabilities of a query tile, the state
// of the key-block form) and frees at the end of the task. Through glibc each of these blocks
// (hundreds of KiB) could come back as memory that is no longer in cache, or as a fresh mmap
// whose pages fault on first touch; in the causal row form the sizes also grow from tile to
// tile, so an exact-size cache misses every time. Measured (2-core Ice Lake VM, 1 thread,
// B1 H2 S2048 D64, autotune harness): causal row form 18.9 ms with an exact-size cache,
// 14.9 ms with power-of-two classes (dense 27.3 / 27.9 ms); through glibc the dense kernel
// took 64 ms in the same harness.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "HalideRuntime.h"
#include "runtime/src/internal.h"

namespace attngen::rt {
namespace {

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

thread_local Cache t_cache;

// The block holds a header (its class) before the kernel's memory, and 8 bytes of slack after:
// Halide may read a vector's worth past either end.
size_t class_of(size_t size) {
  const size_t need = kAlignment + size + 8;
  size_t c = kSmallestClass;
  while (c < need) c <<= 1;
  return c;
}

void* cached_malloc(void*, size_t size) {
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

void cached_free(void*, void* p) {
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

}  // namespace

void install_allocator() {
#if !defined(__SANITIZE_ADDRESS__)
  // Under AddressSanitizer the kernels' blocks come from the instrumented malloc instead, so a
  // kernel that touches freed scratch memory is caught rather than served from the cache.
  halide_set_custom_malloc(cached_malloc);
  halide_set_custom_free(cached_free);
#endif
}

}  // namespace attngen::rt
