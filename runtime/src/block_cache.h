// A per-thread cache of freed memory blocks in power-of-two size classes, handed out again last
// freed first: the kernels' halide_malloc / halide_free in the runtime (allocator.cpp) and in
// bench/autotune_harness.cpp, which includes this header so that its timings see the same
// allocator. Header-only and free of attngen's other headers for that reason.
//
// Bounded: a thread keeps at most kMaxCachedBlocks blocks and kMaxCachedBytes bytes (a block
// freed past either limit goes back to the system), and its blocks are freed when the thread
// exits or calls release_all() (attngen_release_memory()). Blocks of a class above the thread's
// budget (the MHA kernel's projections, 18 MiB at B4 S512 E768) go to one reserve for the whole
// process instead, at most kMaxReservedBlocks of them and kMaxReservedBytes, freed by
// release_reserve() (attngen_release_memory()): without it every such call mapped and faulted
// its block in again (the MHA layer B4 S512 E768 7-11% slower on 2 threads, bench/RESULTS.md).
// Blocks of kMapClass bytes and more are mapped pages of their own, so what the cache gives back
// leaves the process at once instead of staying behind in malloc's per-thread arenas. The bound
// costs the kernels nothing measurable (their per-task blocks are a few MiB at most): medians of 15
// calls, 1 thread, 3 alternating runs on the loaded 2-core dev machine, before -> after: causal B1
// H2 S2048 D64 19.6-22.9 -> 21.7-22.2 ms, dense 38.5-40.0 -> 39.0-41.4 ms, causal B4 H8
// S512 22.0-24.2 -> 23.8-24.3 ms.
#pragma once

#include <cstddef>
#include <cstdlib>
#if !ATTNGEN_SINGLE_THREADED
#include <mutex>
#endif

#if __has_include(<sys/mman.h>)
#include <sys/mman.h>
#define ATTNGEN_BLOCK_CACHE_MMAP 1
#else
#define ATTNGEN_BLOCK_CACHE_MMAP 0
#endif

namespace attngen::block_cache {

constexpr size_t kAlignment = 128;            // >= halide_malloc_alignment() on every target
constexpr size_t kSmallestClass = 4096;       // bytes, header included
constexpr size_t kMapClass = 64 << 10;        // and larger: mmap / munmap
constexpr size_t kMaxCachedBlocks = 16;       // per thread
constexpr size_t kMaxCachedBytes = 16 << 20;  // per thread
constexpr size_t kMaxReservedBlocks = 2;      // per process: blocks of a larger class
constexpr size_t kMaxReservedBytes = size_t{256} << 20;

inline void* system_allocate(size_t c) {
#if ATTNGEN_BLOCK_CACHE_MMAP
  if (c >= kMapClass) {
    void* p = mmap(nullptr, c, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? nullptr : p;
  }
#endif
  return std::aligned_alloc(kAlignment, c);
}

inline void system_free(void* base, size_t c) {
#if ATTNGEN_BLOCK_CACHE_MMAP
  if (c >= kMapClass) {
    munmap(base, c);
    return;
  }
#endif
  (void)c;
  std::free(base);
}

// Plain arrays, no vector: a block freed by another thread-local object's destructor after this
// one's has run still finds consistent (empty) state, and goes back to the system.
struct Cache {
  size_t sizes[kMaxCachedBlocks];  // class bytes
  void* bases[kMaxCachedBlocks];   // block base; last freed at the back
  size_t count = 0;
  size_t bytes = 0;
  bool closed = false;  // the thread is exiting: cache nothing more
  void release_all() {
    for (size_t i = 0; i < count; ++i) system_free(bases[i], sizes[i]);
    count = 0;
    bytes = 0;
  }
  ~Cache() {
    release_all();
    closed = true;
  }
};

#if ATTNGEN_SINGLE_THREADED  // the runtime for one thread (runtime/src/internal.h)
inline Cache t_cache;
#else
inline thread_local Cache t_cache;
#endif

// The process's reserve of blocks above a thread's budget, under its lock.
struct Reserve {
  Cache cache;
#if !ATTNGEN_SINGLE_THREADED
  std::mutex mutex;
#endif
};
inline Reserve g_reserve;

struct ReserveLock {
#if ATTNGEN_SINGLE_THREADED
  explicit ReserveLock(Reserve&) {}
#else
  explicit ReserveLock(Reserve& r) : lock(r.mutex) {}
  std::lock_guard<std::mutex> lock;
#endif
};

// A cached block of class c taken out of `cache` (the most recently freed), or nullptr.
inline char* take(Cache& cache, size_t c) {
  for (size_t i = cache.count; i-- > 0;) {
    if (cache.sizes[i] == c) {
      char* base = static_cast<char*>(cache.bases[i]);
      for (size_t j = i + 1; j < cache.count; ++j) {
        cache.sizes[j - 1] = cache.sizes[j];
        cache.bases[j - 1] = cache.bases[j];
      }
      --cache.count;
      cache.bytes -= c;
      return base;
    }
  }
  return nullptr;
}

// Keeps the block at `base` (class c) in `cache`, making room within max_blocks and max_bytes:
// the oldest blocks go first (the most recently freed are the likeliest reused).
inline void put(Cache& cache, char* base, size_t c, size_t max_blocks, size_t max_bytes) {
  if (cache.closed || c > max_bytes) {
    system_free(base, c);
    return;
  }
  size_t drop = 0, dropped = 0;
  while (drop < cache.count &&
         (cache.count - drop >= max_blocks || cache.bytes - dropped + c > max_bytes)) {
    system_free(cache.bases[drop], cache.sizes[drop]);
    dropped += cache.sizes[drop];
    ++drop;
  }
  if (drop > 0) {
    for (size_t j = drop; j < cache.count; ++j) {
      cache.sizes[j - drop] = cache.sizes[j];
      cache.bases[j - drop] = cache.bases[j];
    }
    cache.count -= drop;
    cache.bytes -= dropped;
  }
  cache.sizes[cache.count] = c;
  cache.bases[cache.count] = base;
  ++cache.count;
  cache.bytes += c;
}

// The block holds a header (its class) before the caller's memory, and 8 bytes of slack after:
// Halide may read a vector's worth past either end.
inline size_t class_of(size_t size) {
  const size_t need = kAlignment + size + 8;
  size_t c = kSmallestClass;
  while (c < need) c <<= 1;
  return c;
}

inline void* allocate(void*, size_t size) {
  if (size > (~size_t{0} >> 2)) return nullptr;  // no class holds it
  const size_t c = class_of(size);
  char* base = nullptr;
  if (c <= kMaxCachedBytes) {
    base = take(t_cache, c);
  } else if (c <= kMaxReservedBytes) {
    ReserveLock lock(g_reserve);
    base = take(g_reserve.cache, c);
  }
  if (base != nullptr) return base + kAlignment;
  base = static_cast<char*>(system_allocate(c));
  if (base == nullptr) return nullptr;
  *reinterpret_cast<size_t*>(base) = c;
  return base + kAlignment;
}

inline void release(void*, void* p) {
  if (p == nullptr) return;
  char* base = static_cast<char*>(p) - kAlignment;
  const size_t c = *reinterpret_cast<size_t*>(base);
  if (c <= kMaxCachedBytes) {
    put(t_cache, base, c, kMaxCachedBlocks, kMaxCachedBytes);
  } else {
    ReserveLock lock(g_reserve);
    put(g_reserve.cache, base, c, kMaxReservedBlocks, kMaxReservedBytes);
  }
}

// Frees the calling thread's cached blocks.
inline void release_all() { t_cache.release_all(); }

// Frees the process's reserve.
inline void release_reserve() {
  ReserveLock lock(g_reserve);
  g_reserve.cache.release_all();
}

}  // namespace attngen::block_cache
