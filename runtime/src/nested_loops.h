// How the runtime runs a kernel's nested parallel loops (Halide's do_par_for hook): a loop whose
// enclosing loops already spread evenly over the threads runs its tasks in order on the thread
// that reached it (attention's query tiles of one of 96 heads, decode's splits of one of 8 kv
// heads on 2 threads). Through Halide's pool each of its tasks costs a queue lock, and a thread
// that ends a head's tasks waits for the last of them (ViT's B8 H12 S197 ran 1.2x faster so,
// bench/RESULTS.md). The runtime (allocator.cpp, do_par_for) and bench/autotune_harness.cpp (which
// times candidate kernels as the runtime runs them) share it; header-only and free of attngen's
// other headers for that reason, like block_cache.h.
#pragma once

#include <algorithm>
#include <cstdint>

#include "HalideRuntime.h"

#ifndef ATTNGEN_THREAD_LOCAL
#define ATTNGEN_THREAD_LOCAL thread_local
#endif

namespace attngen::nested_loops {

using ParFor = int (*)(void* user_context, halide_task_t fn, int min, int size, uint8_t* closure);
using DoTask = int (*)(void* user_context, halide_task_t fn, int idx, uint8_t* closure);

// The tasks of the parallel loops enclosing the one this thread runs a task of (their sizes
// multiplied; 0 outside any), set by with_width() around each task of a loop started by run().
inline int& width() {
  static ATTNGEN_THREAD_LOCAL int w = 0;
  return w;
}

struct WidthClosure {
  halide_task_t fn;
  uint8_t* closure;
  int width;  // tasks of this loop times those of the loops enclosing it
};

inline int with_width(void* user_context, int idx, uint8_t* closure) {
  const WidthClosure& w = *reinterpret_cast<const WidthClosure*>(closure);
  int& current = width();
  const int saved = current;
  current = w.width;
  const int result = w.fn(user_context, idx, w.closure);
  current = saved;
  return result;
}

// Whether `width` tasks of equal size keep `threads` threads busy without more: at least 0.85
// of the time of `threads` threads taking them in rounds (16 heads on 2 or 8 threads, any count
// from 8 per thread on; not 3 on 2, 20 on 16).
inline bool spreads_evenly(int64_t width, int64_t threads) {
  if (width < threads) return false;
  const int64_t rounds = (width + threads - 1) / threads;
  return width * 100 >= 85 * threads * rounds;
}

// The loop's tasks in order on this thread, each through `do_task` (Halide's hook).
inline int run_in_order(void* user_context, halide_task_t fn, int min, int size, uint8_t* closure,
                        DoTask do_task) {
  for (int i = min; i < min + size; ++i) {
    const int result = do_task(user_context, fn, i, closure);
    if (result != 0) return result;
  }
  return 0;
}

// A parallel loop of `size` tasks: in order where the loops enclosing it spread evenly over
// `threads`, else through `par_for` (the Halide runtime's default do_par_for), each task knowing
// the width of the loops up to this one.
inline int run(void* user_context, halide_task_t fn, int min, int size, uint8_t* closure,
               int threads, ParFor par_for, DoTask do_task) {
  const int enclosing = width();
  if (enclosing > 0 && spreads_evenly(enclosing, threads)) {
    return run_in_order(user_context, fn, min, size, closure, do_task);
  }
  WidthClosure w{fn, closure,
                 static_cast<int>(
                     std::min<int64_t>(int64_t{std::max(enclosing, 1)} * size, int64_t{1} << 30))};
  return par_for(user_context, with_width, min, size, reinterpret_cast<uint8_t*>(&w));
}

}  // namespace attngen::nested_loops
