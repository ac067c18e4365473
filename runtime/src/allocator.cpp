// The kernels' scratch memory (halide_malloc / halide_free) comes from a per-thread cache of
// freed blocks in power-of-two size classes, handed out again last freed first (block_cache.h).
//
// A kernel allocates per parallel task (the scores and probabilities of a query tile, the state
// of the key-block form) and frees at the end of the task. Through glibc each of these blocks
// (hundreds of KiB) could come back as memory that is no longer in cache, or as a fresh mmap
// whose pages fault on first touch; in the causal row form the sizes also grow from tile to
// tile, so an exact-size cache misses every time. Power-of-two classes
// were measured faster than an exact-size cache and than glibc (bench/RESULTS.md,
// "Measurements behind the code's choices").
//
// Each thread's cache is bounded (block_cache.h: at most 16 blocks and 16 MiB) and freed when the
// thread exits, or by attngen_release_memory() on the thread that calls it (threads.cpp).
#include <cstdlib>

#include "HalideRuntime.h"
#include "runtime/src/block_cache.h"
#include "runtime/src/internal.h"

namespace attngen::rt {

void install_allocator() {
#if !defined(__SANITIZE_ADDRESS__) && !ATTNGEN_SINGLE_THREADED
  // Under AddressSanitizer the kernels' blocks come from the instrumented malloc instead, so a
  // kernel that touches freed scratch memory is caught rather than served from the cache.
  halide_set_custom_malloc(block_cache::allocate);
  halide_set_custom_free(block_cache::release);
#endif
}

// The same blocks serve the runtime's own scratch (F32 copies of F16 / BF16 tensors): a call
// that converts allocates and frees them on the calling thread, like a kernel's task.
void* scratch_allocate(size_t bytes) {
#if !defined(__SANITIZE_ADDRESS__)
  return block_cache::allocate(nullptr, bytes);
#else
  return std::malloc(bytes);
#endif
}

void scratch_release(void* p) {
#if !defined(__SANITIZE_ADDRESS__)
  block_cache::release(nullptr, p);
#else
  std::free(p);
#endif
}

void release_thread_scratch() {
#if !defined(__SANITIZE_ADDRESS__)
  block_cache::release_all();
#endif
}

}  // namespace attngen::rt

#if ATTNGEN_SINGLE_THREADED
// Halide's noos runtime has no halide_set_custom_malloc: its kernels call these directly.
extern "C" void* halide_malloc(void* user_context, size_t bytes) {
#if !defined(__SANITIZE_ADDRESS__)
  return attngen::block_cache::allocate(user_context, bytes);
#else
  (void)user_context;
  return std::aligned_alloc(
      attngen::block_cache::kAlignment,
      (bytes + attngen::block_cache::kAlignment - 1) & ~(attngen::block_cache::kAlignment - 1));
#endif
}

extern "C" void halide_free(void* user_context, void* p) {
#if !defined(__SANITIZE_ADDRESS__)
  attngen::block_cache::release(user_context, p);
#else
  (void)user_context;
  std::free(p);
#endif
}
#endif
