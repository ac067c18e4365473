// The kernels' threads and memory: Halide's thread pool, resized by attngen_set_num_threads(),
// and the memory attngen_release_memory() gives back.
//
// Halide 14's pool never shrinks: halide_set_num_threads() only sets how many threads it creates,
// and every thread once created takes tasks of every later parallel loop. So lowering the count
// stops the pool (halide_shutdown_thread_pool(), which joins its threads) and lets the next call
// start it again at the new size. Stopping it under a running kernel would pull the work queue
// out from under it, so every kernel run holds a shared PoolGate (KernelRunScope, run_kernel())
// and the pool is resized or stopped only with it held exclusively: waiting for the kernels
// running on other threads to finish, and making kernels that start meanwhile wait (writers
// first, so a steady stream of calls cannot postpone it forever).
#include "runtime/src/internal.h"

#if ATTNGEN_SINGLE_THREADED
// The single-threaded runtime (internal.h): no pool to resize or stop, nothing to wait for.
namespace attngen::rt {

KernelRunScope::KernelRunScope() = default;
KernelRunScope::~KernelRunScope() = default;

int thread_count() { return 1; }

}  // namespace attngen::rt

using namespace attngen::rt;

extern "C" {

attngen_status attngen_set_num_threads(int threads) {
  Check c;
  if (threads != 0 && threads != 1) {
    c.fail(ATTNGEN_ERROR_INVALID_ARGUMENT,
           "threads is " + std::to_string(threads) +
               ", expected 0 or 1: this build of attngen is single-threaded "
               "(ATTNGEN_SINGLE_THREADED)");
  }
  return finish(c, nullptr);
}

attngen_status attngen_release_memory(void) {
  Check c;
  release_thread_scratch();
  return finish(c, nullptr);
}

}  // extern "C"

#else  // !ATTNGEN_SINGLE_THREADED

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace attngen::rt {

namespace {

class PoolGate {
 public:
  // Kernel runs enter with one atomic step unless a resize or stop waits or holds the gate (the
  // mutex only then): a planned call's cost above its kernel is a few hundred ns, and Halide's
  // pool makes every ns of it count several times over (bench/RESULTS.md, "Plans for every op").
  void enter_shared() {
    for (;;) {
      int state = state_.load(std::memory_order_relaxed);
      while ((state & kClosed) == 0) {
        if (state_.compare_exchange_weak(state, state + 1, std::memory_order_acquire,
                                         std::memory_order_relaxed)) {
          return;
        }
      }
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [&] { return (state_.load(std::memory_order_relaxed) & kClosed) == 0; });
    }
  }
  void leave_shared() {
    if (state_.fetch_sub(1, std::memory_order_release) == (kClosed | 1)) {
      std::lock_guard<std::mutex> lock(mutex_);  // the last run out wakes the waiting resize
      changed_.notify_all();
    }
  }
  template <typename F>
  void exclusive(F&& f) {
    std::unique_lock<std::mutex> lock(mutex_);
    ++waiting_;
    state_.fetch_or(kClosed, std::memory_order_relaxed);  // no new run enters from here
    changed_.wait(lock, [&] {
      return !exclusive_ && (state_.load(std::memory_order_acquire) & ~kClosed) == 0;
    });
    --waiting_;
    exclusive_ = true;
    lock.unlock();
    f();
    lock.lock();
    exclusive_ = false;
    if (waiting_ == 0) state_.fetch_and(~kClosed, std::memory_order_release);
    changed_.notify_all();
  }

 private:
  static constexpr int kClosed = 1 << 30;  // a resize or stop waits or runs
  std::atomic<int> state_{0};              // kernels running, and kClosed
  std::mutex mutex_;
  std::condition_variable changed_;
  int waiting_ = 0;  // exclusive users waiting (mutex_)
  bool exclusive_ = false;
};

PoolGate& pool_gate() {
  static PoolGate gate;
  return gate;
}

std::atomic<int> g_num_threads{0};  // attngen_set_num_threads(); 0: the default
// The most threads Halide's pool may have created since it last started (exclusive use only);
// 0: the default count.
int g_pool_threads = 0;

// Halide's own default: HL_NUM_THREADS, else one per core; at most ATTNGEN_MAX_THREADS. Read
// once per process, as Halide's pool reads it once: every parallel loop of every kernel asks
// (nested_loops::run, via thread_count()), and glibc's hardware_concurrency() opens and reads
// /sys/devices/system/cpu/online each time, which cost ~60 us of every decode call on a 2-core
// VM (bench/RESULTS.md, "Every call's thread count read once").
int default_threads() {
  static const int threads = [] {
    int n = 0;
    if (const char* env = std::getenv("HL_NUM_THREADS")) n = std::atoi(env);
    if (n <= 0) n = static_cast<int>(std::thread::hardware_concurrency());
    return std::clamp(n, 1, ATTNGEN_MAX_THREADS);
  }();
  return threads;
}

int resolve(int threads) { return threads > 0 ? threads : default_threads(); }

}  // namespace

KernelRunScope::KernelRunScope() { pool_gate().enter_shared(); }
KernelRunScope::~KernelRunScope() { pool_gate().leave_shared(); }

int thread_count() { return resolve(g_num_threads.load()); }

}  // namespace attngen::rt

using namespace attngen::rt;

extern "C" {

attngen_status attngen_set_num_threads(int threads) {
  Check c;
  if (threads < 0 || threads > ATTNGEN_MAX_THREADS) {
    c.fail(ATTNGEN_ERROR_INVALID_ARGUMENT,
           "threads is " + std::to_string(threads) + ", expected 0 (one per core) to " +
               std::to_string(ATTNGEN_MAX_THREADS) + " (ATTNGEN_MAX_THREADS)");
    return finish(c, nullptr);
  }
  pool_gate().exclusive([&] {
    const int want = resolve(threads);
    if (want < resolve(g_pool_threads)) {
      halide_shutdown_thread_pool();  // joins the threads; the next kernel starts `want`
      g_pool_threads = want;
    } else {
      g_pool_threads = std::max(resolve(g_pool_threads), want);
    }
    halide_set_num_threads(want);
    g_num_threads.store(threads);
  });
  return finish(c, nullptr);
}

attngen_status attngen_release_memory(void) {
  Check c;
  release_thread_scratch();
  // The pool's threads free their scratch caches as they exit; the next kernel starts them again.
  pool_gate().exclusive([] {
    halide_shutdown_thread_pool();
    halide_set_num_threads(resolve(g_num_threads.load()));
    g_pool_threads = g_num_threads.load();
  });
#if defined(__GLIBC__)
  malloc_trim(0);  // the free pages of malloc's arenas (the runtime's own small allocations)
#endif
  return finish(c, nullptr);
}

}  // extern "C"

#endif  // ATTNGEN_SINGLE_THREADED
