// Caller-provided workspaces (attngen_set_workspace()): the per-call scratch of the runtime and
// of the kernels, so that a call with a workspace bound never allocates (docs/semantics.md,
// "Resources"). The size queries run each call's code path in a sizing mode: the runtime's own
// buffers are counted as they are taken, and every kernel run is replaced by measured runs of
// that kernel on the call's shapes (allocator.cpp) whose peaks are kept per configuration.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "runtime/src/internal.h"

namespace attngen::rt {

// Every block in a workspace starts on this boundary and has a multiple of it in bytes (Halide
// wants 32 bytes on AVX2 and 64 on AVX-512); a region has this many bytes of guard at either end,
// as Halide may read a vector's worth past either end of a block.
constexpr size_t kWorkspaceAlignment = 64;
constexpr size_t kWorkspaceGuard = 64;

inline size_t workspace_round(size_t n) {
  return (n + kWorkspaceAlignment - 1) / kWorkspaceAlignment * kWorkspaceAlignment;
}

// The blocks of one region (a kernel run's outer allocations, or one task's), handed out as a
// stack: a block is freed in any order, and the stack's top comes down past every freed block
// at the top (the kernels free a task's blocks in nearly, not exactly, reverse order). Fixed
// size: no allocation of its own.
struct BlockStack {
  static constexpr int kMaxBlocks = 64;
  struct Entry {
    size_t offset, bytes;
    void* address;  // the block handed out
    void* raw;      // a measured run's heap block (nullptr in a workspace)
    bool freed;
  };
  size_t top = 0, peak = 0;
  int count = 0;
  Entry entries[kMaxBlocks]{};

  // The offset of a new block of `bytes` (rounded), or SIZE_MAX with no entry left.
  size_t push(size_t bytes) {
    if (count == kMaxBlocks) return SIZE_MAX;
    const size_t b = workspace_round(bytes == 0 ? 1 : bytes);
    entries[count] = {top, b, nullptr, nullptr, false};
    ++count;
    const size_t offset = top;
    top += b;
    if (top > peak) peak = top;
    return offset;
  }
  // Frees the block at `address`; false if it is not one of this stack's live blocks. *raw is
  // its heap block, if any.
  bool pop(void* address, void** raw) {
    for (int i = count; i-- > 0;) {
      Entry& e = entries[i];
      if (e.address == address && !e.freed) {
        e.freed = true;
        *raw = e.raw;
        while (count > 0 && entries[count - 1].freed) top = entries[--count].offset;
        return true;
      }
    }
    return false;
  }
  bool empty() const { return count == 0; }
};

// What a kernel run allocates, measured: the peak of its outer allocations (made on the calling
// thread outside any parallel task) and the largest peak of one parallel task.
struct KernelNeed {
  size_t outer = 0, task = 0;
};

// Workspace bytes a kernel run of that need takes with `threads` task slots.
inline size_t kernel_area_bytes(const KernelNeed& need, int threads) {
  return need.outer + static_cast<size_t>(threads) * need.task + kWorkspaceGuard;
}

// The memory of one kernel run, attached to its CallContext: the kernels' halide_malloc /
// halide_free (allocator.cpp) serve it from a workspace area, or measure it on the heap.
struct KernelMemory {
  enum Kind { kWorkspace, kMeasure } kind;
  // kWorkspace: the outer region, then `slots` task slots of `slot_bytes` each.
  char* outer_base = nullptr;
  size_t outer_bytes = 0;
  char* slots_base = nullptr;
  size_t slot_bytes = 0;
  int slots = 0;
  std::atomic<uint64_t> slot_used[ATTNGEN_MAX_THREADS / 64]{};
  // Outer allocations: on the calling thread only, so unsynchronised.
  BlockStack outer;
  // kMeasure: the largest task peak.
  std::atomic<size_t> task_peak{0};
  // Something the bound does not cover: a block past a region's end or its entries, or on a
  // thread holding another run's (a workspace run's allocation then fails, with no fallback to
  // the heap); a task that ended with blocks live. And whether a parallel loop ran on the thread
  // of the task that started it, holding blocks (allocator.cpp, do_par_for()).
  std::atomic<bool> overflow{false}, leak{false}, nested{false};
};

// Per-call sink for Halide's error messages, passed to kernels as their user_context, and the
// call's kernel memory (nullptr: the per-thread block cache).
struct CallContext {
  std::string halide_error;
  KernelMemory* memory = nullptr;
};

// Makes `ctx` known to the allocator hooks while it runs a kernel with memory of its own
// (user_context values of other Halide pipelines of the process are never dereferenced).
class ActiveContext {
 public:
  explicit ActiveContext(CallContext* ctx);
  ~ActiveContext();
  ActiveContext(const ActiveContext&) = delete;
  ActiveContext& operator=(const ActiveContext&) = delete;
  // False with 1024 runs active at once: the run must not start (its blocks would not be found).
  bool registered() const { return index_ >= 0; }

 private:
  int index_;
};

// kRun: the call itself. kSize: its workspace size query. kCheck: a run's checks in its bound
// workspace, nothing run or written (its runtime buffers taken there as a run takes them, each
// kernel's measured need checked against the rest; outputs untouched): what a call made of several
// runs (a packed call's sequences) does for each before the first runs.
enum class CallMode { kRun, kSize, kCheck };

// The scratch of one C API call: runtime buffers (key padding, zero biases, F32 staging, ...) and
// the area its kernels run in. In kRun with a workspace bound on the thread, everything comes
// from it, or the call fails with ATTNGEN_ERROR_WORKSPACE before writing anything; without one,
// buffers come from the heap and kernels from the block cache, as before. In kSize nothing runs
// on the caller's outputs: buffers come from the heap and are counted, and kernel runs are
// measured (run_kernel()); bytes() is then the workspace the call needs.
class CallScratch {
 public:
  explicit CallScratch(CallMode mode);
  ~CallScratch();
  CallScratch(const CallScratch&) = delete;
  CallScratch& operator=(const CallScratch&) = delete;

  bool sizing() const { return mode_ == CallMode::kSize; }
  bool checking() const { return mode_ == CallMode::kCheck; }
  bool in_workspace() const { return mode_ != CallMode::kSize && base_ != nullptr; }

  // A runtime buffer of `bytes`, 64-byte aligned, living until the call returns; nullptr (and c
  // says why, naming `what`) if the workspace cannot hold it or the heap is out of memory.
  void* take(Check& c, size_t bytes, const char* what, const char* what_suffix = "");
  template <typename T>
  T* array(Check& c, size_t n, const char* what) {
    return static_cast<T*>(take(c, n * sizeof(T), what));
  }

  // kRun in a workspace: whether the workspace holds a run of `kernel` of that need (else c
  // fails); the area for it is area_for()'s.
  bool check_kernel(Check& c, const attngen_kernel_info& kernel, const KernelNeed& need,
                    int threads);
  // The area (after the runtime buffers) that a kernel run of that need uses.
  void area_for(const KernelNeed& need, int threads, KernelMemory& memory);
  // kSize: a kernel run of that need; bytes() covers the largest.
  void add_kernel(const KernelNeed& need, int threads);
  // kSize: the largest need of the kernel runs measured (add_kernel()).
  const KernelNeed& measured_need() const { return measured_need_; }
  // A plan's run: the need of its kernel measured when the plan was made, in place of the
  // process-wide measurements of the size queries (nullptr: those).
  void set_planned_need(const KernelNeed* need) { planned_need_ = need; }
  const KernelNeed* planned_need() const { return planned_need_; }
  // kSize: the workspace bytes the call needs (alignment slack and guards included).
  size_t bytes() const;

  // The calling thread's CallScratch (every C API call that takes a workspace makes one), or
  // nullptr.
  static CallScratch* current();

 private:
  CallMode mode_;
  CallScratch* previous_;
  char* base_ = nullptr;           // the workspace, aligned; nullptr: none bound (or kSize)
  size_t capacity_ = 0;            // its bytes from base_
  size_t used_ = kWorkspaceGuard;  // runtime buffers so far (after the head guard)
  size_t kernel_max_ = 0;          // kSize: the largest kernel area
  KernelNeed measured_need_;
  const KernelNeed* planned_need_ = nullptr;
  static constexpr int kMaxHeap = 16;
  void* heap_[kMaxHeap] = {};
  int heap_count_ = 0;
  // Without a workspace, the first small buffers (a decode's counts and lengths, key padding)
  // come from here instead of the heap: no malloc and free per small call (a planned call's cost
  // above its kernel 0.43 -> 0.37 us for attention, 1.45 -> 1.34 for decode; bench/RESULTS.md,
  // "One vocabulary").
  static constexpr size_t kInlineBytes = 512;
  alignas(kWorkspaceAlignment) char inline_[kInlineBytes];
  size_t inline_used_ = 0;
};

// The kernel configuration a call's memory depends on: the kernel and every buffer's type and
// dimensions, and the scalar arguments but those that follow the data (bottom_right, decode's
// split and v_finite, whose measured runs cover every value; decode's slots are counted as the
// capacity). Fixed size: looked up without allocating.
struct KernelKey {
  static constexpr int kWords = 192;
  int64_t words[kWords];
  bool operator<(const KernelKey& o) const;
};
KernelKey kernel_key(const attngen_kernel_info& kernel, const attngen_kernel_args& args);

// The need recorded for a configuration (by earlier size queries), or false.
bool find_need(const KernelKey& key, KernelNeed* need);
// Records a measured need; returns the configuration's, the largest of all measured for it
// (what its calls check against).
KernelNeed record_need(const KernelKey& key, const KernelNeed& need);

// Runs the kernel once with its allocations measured (outputs redirected to scratch copies;
// allocator.cpp), into *need; false (c says why) if it fails or allocates in a way a workspace
// cannot bound.
bool measure_kernel(Check& c, const attngen_kernel_info& kernel, const attngen_kernel_args& args,
                    KernelNeed* need);

// Runs the kernel with its memory (ctx.memory set up by the caller): the Halide run itself.
int run_with_memory(const attngen_kernel_info& kernel, const attngen_kernel_args& args,
                    CallContext& ctx);

// The calling thread's bound workspace (attngen_set_workspace()); nullptr if none.
void* bound_workspace(size_t* bytes);

}  // namespace attngen::rt
