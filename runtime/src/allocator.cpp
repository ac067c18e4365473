// The kernels' scratch memory (halide_malloc / halide_free): from a caller's workspace while a
// call with one bound runs (workspace.h), measured on the heap while a size query runs a
// kernel, and otherwise from a per-thread cache of freed blocks in power-of-two size classes,
// handed out again last freed first (block_cache.h).
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
// thread exits, or by attngen_release_memory() on the thread that calls it (threads.cpp), which
// also frees the process's reserve of larger blocks (at most 2 and 256 MiB).
//
// Workspaces. Every kernel run passes its CallContext as Halide's user_context, which reaches
// halide_malloc on whichever thread runs a task; the task hooks below (Halide's do_task,
// do_loop_task and do_par_for, wrapping the defaults) tell a task's allocations from the outer
// ones of the calling thread. A run in a workspace gets an outer region and one slot per thread
// of the pool (a task takes a free slot at its first allocation and gives it back when its
// blocks are all freed; a thread finding none free, e.g. the caller of another call helping
// with this call's tasks, waits for one: every slot is held by a task that allocates no more
// than it measured and starts no parallel loop, so it always ends). Each region is a stack
// (BlockStack); a size query runs the kernel with the same stacks over heap blocks and records
// their peaks.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "HalideRuntime.h"
#include "runtime/src/block_cache.h"
#include "runtime/src/internal.h"
#include "runtime/src/nested_loops.h"
#include "runtime/src/workspace.h"

namespace attngen::rt {

namespace {

// The per-thread block cache, or under AddressSanitizer the instrumented malloc (so that a
// kernel touching freed scratch memory is caught rather than served from the cache).
void* heap_allocate(size_t bytes) {
#if !defined(__SANITIZE_ADDRESS__)
  return block_cache::allocate(nullptr, bytes);
#elif ATTNGEN_SINGLE_THREADED  // Halide's noos runtime has no default allocator
  return std::aligned_alloc(
      block_cache::kAlignment,
      (bytes + block_cache::kAlignment - 1) / block_cache::kAlignment * block_cache::kAlignment);
#else
  return halide_default_malloc(nullptr, bytes);
#endif
}

void heap_release(void* p) {
#if !defined(__SANITIZE_ADDRESS__)
  block_cache::release(nullptr, p);
#elif ATTNGEN_SINGLE_THREADED
  std::free(p);
#else
  halide_default_free(nullptr, p);
#endif
}

// The contexts of the kernel runs with memory of their own, compared by address only.
constexpr int kMaxActive = 1024;
std::atomic<void*> g_active[kMaxActive];
std::atomic<int> g_active_count{0};
std::atomic<int> g_active_end{0};  // no active context at or past this index

KernelMemory* memory_of(void* user_context) {
  if (user_context == nullptr || g_active_count.load(std::memory_order_acquire) == 0) {
    return nullptr;
  }
  const int end = g_active_end.load(std::memory_order_acquire);
  for (int i = 0; i < end; ++i) {
    if (g_active[i].load(std::memory_order_acquire) == user_context) {
      return static_cast<CallContext*>(user_context)->memory;
    }
  }
  return nullptr;
}

// The caller thread of the kernel run whose memory this is (outer allocations come from it).
ATTNGEN_THREAD_LOCAL const KernelMemory* t_running = nullptr;

// One parallel task being run on this thread (tasks nest: a task's parallel loop runs subtasks,
// some on the thread waiting for them).
struct TaskFrame {
  void* user_context;
  KernelMemory* memory;  // nullptr: not a run with memory of its own
  TaskFrame* parent;
};
ATTNGEN_THREAD_LOCAL TaskFrame* t_frame = nullptr;

// The blocks this thread's tasks hold (of one kernel run at a time: a thread holding some never
// waits in Halide's pool, where it could pick up another run's task, see do_par_for()), and in
// a workspace the slot they are in.
struct ThreadBlocks {
  KernelMemory* memory = nullptr;  // whose blocks, while stack is not empty
  int slot = -1;
  char* base = nullptr;
  size_t capacity = 0;
  BlockStack stack;
};
// Constant-initialised, as every thread_local of this file but the block cache's: a first use
// on a thread then runs no initialisation, which would also register the block cache's
// destructor (one TLS init per file), an allocation.
ATTNGEN_THREAD_LOCAL ThreadBlocks t_blocks;

bool claim_slot(ThreadBlocks& t, KernelMemory& m) {
  for (;;) {
    for (int w = 0; w * 64 < m.slots; ++w) {
      const int n = std::min(64, m.slots - w * 64);
      const uint64_t all = n == 64 ? ~uint64_t{0} : (uint64_t{1} << n) - 1;
      uint64_t used = m.slot_used[w].load(std::memory_order_relaxed);
      while ((used & all) != all) {
        const int bit = __builtin_ctzll(~used & all);
        if (m.slot_used[w].compare_exchange_weak(used, used | (uint64_t{1} << bit),
                                                 std::memory_order_acquire)) {
          t.slot = w * 64 + bit;
          t.base = m.slots_base + static_cast<size_t>(t.slot) * m.slot_bytes;
          t.capacity = m.slot_bytes;
          return true;
        }
      }
    }
    if (m.slots == 0) return false;
    std::this_thread::yield();  // every slot is held by a thread running a task, which ends
  }
}

// The thread's blocks are all freed: its slot goes back (a measured run records the peak).
void release_blocks(ThreadBlocks& t) {
  KernelMemory& m = *t.memory;
  if (m.kind == KernelMemory::kMeasure) {
    size_t seen = m.task_peak.load();
    while (t.stack.peak > seen && !m.task_peak.compare_exchange_weak(seen, t.stack.peak)) {
    }
  } else if (t.slot >= 0) {
    m.slot_used[t.slot / 64].fetch_and(~(uint64_t{1} << (t.slot % 64)), std::memory_order_release);
  }
  t.slot = -1;
  t.memory = nullptr;
  t.stack.top = t.stack.peak = 0;
}

void* stack_allocate(KernelMemory& m, BlockStack& s, char* base, size_t capacity, size_t size) {
  const size_t top = s.top;
  const size_t offset = s.push(size);
  if (offset == SIZE_MAX) {
    m.overflow.store(true);
    return nullptr;
  }
  BlockStack::Entry& e = s.entries[s.count - 1];
  if (m.kind == KernelMemory::kWorkspace) {
    if (s.top > capacity) {  // more than measured: fail, never the heap
      --s.count;
      s.top = top;
      m.overflow.store(true);
      return nullptr;
    }
    e.address = base + offset;
    return e.address;
  }
  void* raw = std::aligned_alloc(kWorkspaceAlignment, e.bytes + 2 * kWorkspaceGuard);
  if (raw == nullptr) {
    --s.count;
    s.top = top;
    return nullptr;
  }
  e.raw = raw;
  e.address = static_cast<char*>(raw) + kWorkspaceGuard;
  return e.address;
}

void* kernel_malloc(void* user_context, size_t size) {
  TaskFrame* f = t_frame;
  if (f != nullptr && f->user_context == user_context) {
    KernelMemory* m = f->memory;
    if (m == nullptr) return heap_allocate(size);
    ThreadBlocks& t = t_blocks;
    if (t.memory == nullptr) {
      if (m->kind == KernelMemory::kWorkspace && !claim_slot(t, *m)) {
        m->overflow.store(true);
        return nullptr;
      }
      t.memory = m;
      if (m->kind == KernelMemory::kMeasure) t.capacity = SIZE_MAX;
    } else if (t.memory != m) {  // another run's blocks on this thread: not bounded
      m->overflow.store(true);
      return nullptr;
    }
    void* p = stack_allocate(*m, t.stack, t.base, t.capacity, size);
    if (t.stack.empty()) release_blocks(t);
    return p;
  }
  KernelMemory* m = memory_of(user_context);
  if (m == nullptr) return heap_allocate(size);
  if (t_running != m) {  // outside a task but not on the calling thread: not bounded
    m->overflow.store(true);
    return nullptr;
  }
  return stack_allocate(*m, m->outer, m->outer_base, m->outer_bytes, size);
}

void kernel_free(void* user_context, void* p) {
  if (p == nullptr) return;
  TaskFrame* f = t_frame;
  KernelMemory* m = nullptr;
  void* raw = nullptr;
  if (f != nullptr && f->user_context == user_context) {
    m = f->memory;
    if (m == nullptr) return heap_release(p);
    ThreadBlocks& t = t_blocks;
    if (t.memory == m && t.stack.pop(p, &raw)) {
      std::free(raw);
      if (t.stack.empty()) release_blocks(t);
      return;
    }
  } else {
    m = memory_of(user_context);
    if (m == nullptr) return heap_release(p);
  }
  if (t_running == m && m->outer.pop(p, &raw)) {
    std::free(raw);
    return;
  }
  m->leak.store(true);  // freed on another thread than the one that allocated it
}

// A task's end: the outermost task of its run on this thread must have freed its blocks.
void end_frame(const TaskFrame& f) {
  if (f.memory == nullptr || t_blocks.memory != f.memory) return;
  for (const TaskFrame* p = f.parent; p != nullptr; p = p->parent) {
    if (p->memory == f.memory) return;  // its blocks may be the enclosing task's
  }
  f.memory->leak.store(true);  // they outlive the task: the slot stays taken
}

int do_task(void* user_context, halide_task_t fn, int idx, uint8_t* closure) {
  TaskFrame frame{user_context, memory_of(user_context), t_frame};
  t_frame = &frame;
  const int result = halide_default_do_task(user_context, fn, idx, closure);
  end_frame(frame);
  t_frame = frame.parent;
  return result;
}

int do_loop_task(void* user_context, halide_loop_task_t fn, int min, int extent, uint8_t* closure,
                 void* task_parent) {
  TaskFrame frame{user_context, memory_of(user_context), t_frame};
  t_frame = &frame;
  const int result =
      halide_default_do_loop_task(user_context, fn, min, extent, closure, task_parent);
  end_frame(frame);
  t_frame = frame.parent;
  return result;
}

// SerialRuns held on this thread (internal.h).
ATTNGEN_THREAD_LOCAL int t_serial_runs = 0;

// A parallel loop started by a task while this thread holds blocks of a run with memory of its
// own runs its tasks here, in order: a thread holding blocks never waits in Halide's pool (where
// it could take other tasks, of this run or another, each holding more), so a run's blocks are
// at most one stack per thread, and a thread waiting for a slot always gets one (every slot is
// held by a thread that runs to the end of its tasks). Such loops (attention's query tiles of a
// head whose K and V tiles it holds) lose their parallelism; the loops above them keep it.
//
// A nested loop whose enclosing loops already spread evenly over the pool's threads runs in
// order too (nested_loops.h). Loops of other Halide pipelines of the process go through here as
// well: the choice reads no user_context.
int do_par_for(void* user_context, halide_task_t fn, int min, int size, uint8_t* closure) {
  if (t_serial_runs > 0) {
    return nested_loops::run_in_order(user_context, fn, min, size, closure, halide_do_task);
  }
  if (t_blocks.memory != nullptr) {
    t_blocks.memory->nested.store(true);
    return nested_loops::run_in_order(user_context, fn, min, size, closure, halide_do_task);
  }
  return nested_loops::run(user_context, fn, min, size, closure, thread_count(),
                           halide_default_do_par_for, halide_do_task);
}

Mutex& needs_mutex() {
  static Mutex m;
  return m;
}

std::map<KernelKey, KernelNeed>& needs() {
  static std::map<KernelKey, KernelNeed> n;
  return n;
}

ATTNGEN_THREAD_LOCAL void* t_workspace = nullptr;
ATTNGEN_THREAD_LOCAL size_t t_workspace_bytes = 0;
ATTNGEN_THREAD_LOCAL CallScratch* t_scratch = nullptr;

}  // namespace

SerialRuns::SerialRuns(bool serial) : serial_(serial) {
  if (serial_) ++t_serial_runs;
}

SerialRuns::~SerialRuns() {
  if (serial_) --t_serial_runs;
}

void install_allocator() {
#if ATTNGEN_SINGLE_THREADED
  // Halide's noos runtime calls halide_malloc / halide_free (below) directly and runs parallel
  // loops serially through do_par_for and do_task; it has no loop-task hook (and no loop tasks).
  halide_set_custom_do_task(do_task);
  halide_set_custom_do_par_for(do_par_for);
  (void)do_loop_task;
#else
  halide_set_custom_malloc(kernel_malloc);
  halide_set_custom_free(kernel_free);
  halide_set_custom_do_task(do_task);
  halide_set_custom_do_loop_task(do_loop_task);
  halide_set_custom_do_par_for(do_par_for);
#endif
}

// The same blocks serve the runtime's own scratch (F32 copies of F16 / BF16 tensors) outside a
// workspace: a call that converts allocates and frees them on the calling thread, like a
// kernel's task.
void* scratch_allocate(size_t bytes) { return heap_allocate(bytes); }

void scratch_release(void* p) { heap_release(p); }

void release_thread_scratch() {
#if !defined(__SANITIZE_ADDRESS__)
  block_cache::release_all();
  block_cache::release_reserve();
#endif
}

ActiveContext::ActiveContext(CallContext* ctx) : index_(-1) {
  for (int i = 0; i < kMaxActive; ++i) {
    void* expected = nullptr;
    if (g_active[i].compare_exchange_strong(expected, ctx)) {
      index_ = i;
      int end = g_active_end.load();
      while (end < i + 1 && !g_active_end.compare_exchange_weak(end, i + 1)) {
      }
      g_active_count.fetch_add(1);
      return;
    }
  }
}

ActiveContext::~ActiveContext() {
  if (index_ < 0) return;
  g_active_count.fetch_sub(1);
  g_active[index_].store(nullptr);
}

int run_with_memory(const attngen_kernel_info& kernel, const attngen_kernel_args& args,
                    CallContext& ctx) {
  const ActiveContext active(&ctx);
  if (!active.registered()) {
    ctx.halide_error = "more than 1024 kernel runs in workspaces or size queries at once";
    return -1;
  }
  const KernelMemory* previous = t_running;
  t_running = ctx.memory;
  int result;
  {
    const KernelRunScope running;
    result = kernel.run(&ctx, &args);
  }
  t_running = previous;
  return result;
}

bool KernelKey::operator<(const KernelKey& o) const {
  return std::memcmp(words, o.words, sizeof words) < 0;
}

KernelKey kernel_key(const attngen_kernel_info& kernel, const attngen_kernel_args& a) {
  KernelKey key;
  std::memset(key.words, 0, sizeof key.words);
  int n = 0;
  const auto put = [&](int64_t w) {
    if (n < KernelKey::kWords) key.words[n++] = w;
  };
  const auto put_float = [&](float f) {
    uint32_t bits;
    std::memcpy(&bits, &f, sizeof bits);
    put(bits);
  };
  put(static_cast<int64_t>(reinterpret_cast<uintptr_t>(&kernel)));
  const bool decode = kernel.op == ATTNGEN_OP_DECODE;
  for (const halide_buffer_t* b :
       {a.q, a.k, a.v, a.kv_len, a.mask, a.layout, a.x, a.w, a.bias, a.w2, a.bias2, a.out,
        a.weights, a.lse, a.q_len, a.bool_mask, a.add_mask, a.kv_scales}) {
    if (b == nullptr) {
      put(-1);
      continue;
    }
    put(static_cast<int64_t>(b->type.code) << 16 | static_cast<int64_t>(b->type.bits) << 8 |
        b->dimensions);
    // A decode's cache views ([D, slots, Hkv, B]) count as the whole capacity: their measured
    // runs cover every slot count up to it (decode.cpp).
    const bool slots = decode && (b == a.k || b == a.v || b == a.kv_scales);
    for (int d = 0; d < b->dimensions; ++d) {
      put(b->dim[d].min);
      put(slots && d == 1 ? a.capacity : b->dim[d].extent);
      put(b->dim[d].stride);
    }
  }
  put_float(a.scale);
  put_float(a.softcap);
  for (int64_t w :
       {int64_t{a.capacity}, int64_t{a.window}, int64_t{a.causal}, int64_t{a.mask_kind},
        int64_t{a.pattern.kind}, int64_t{a.pattern.window_left}, int64_t{a.pattern.window_right},
        int64_t{a.pattern.stride}, int64_t{a.pattern.block}, int64_t{a.pattern.local},
        int64_t{a.pattern.global_tokens}, int64_t{a.num_heads}}) {
    put(w);
  }
  return key;
}

bool find_need(const KernelKey& key, KernelNeed* need) {
  std::lock_guard<Mutex> lock(needs_mutex());
  const auto it = needs().find(key);
  if (it == needs().end()) return false;
  *need = it->second;
  return true;
}

KernelNeed record_need(const KernelKey& key, const KernelNeed& need) {
  std::lock_guard<Mutex> lock(needs_mutex());
  KernelNeed& n = needs()[key];
  n.outer = std::max(n.outer, need.outer);
  n.task = std::max(n.task, need.task);
  return n;
}

namespace {

// Bytes a buffer spans (elements from its first to its last, sizes >= 1, strides >= 0).
size_t span_bytes(const halide_buffer_t& b) {
  int64_t last = 0;
  for (int d = 0; d < b.dimensions; ++d) last += (b.dim[d].extent - 1) * b.dim[d].stride;
  return static_cast<size_t>(last + 1) * static_cast<size_t>((b.type.bits + 7) / 8);
}

// A copy of a buffer's description over fresh memory (freed with the Redirect).
struct Redirect {
  halide_buffer_t buf;
  halide_dimension_t dims[ATTNGEN_MAX_RANK];
  void* memory = nullptr;
  ~Redirect() { std::free(memory); }
  bool make(const halide_buffer_t* from, int fill) {
    buf = *from;
    std::memcpy(dims, from->dim, sizeof(halide_dimension_t) * from->dimensions);
    buf.dim = dims;
    const size_t bytes = span_bytes(*from);
    memory = std::malloc(bytes);
    if (memory == nullptr) return false;
    std::memset(memory, fill, bytes);
    buf.host = static_cast<uint8_t*>(memory);
    buf.device = 0;
    buf.device_interface = nullptr;
    buf.flags = 0;
    return true;
  }
};

}  // namespace

bool measure_kernel(Check& c, const attngen_kernel_info& kernel, const attngen_kernel_args& args,
                    KernelNeed* need) {
  attngen_kernel_args a = args;
  // The outputs go to scratch of the same layout; a block-sparse layout attends every block (a
  // kernel's memory does not depend on the other inputs' values, and the runtime gives full key
  // lengths: the most any tile visits).
  Redirect out, weights, lse, layout;
  const struct {
    halide_buffer_t** field;
    Redirect* to;
    int fill;
  } redirects[] = {
      {&a.out, &out, 0}, {&a.weights, &weights, 0}, {&a.lse, &lse, 0}, {&a.layout, &layout, 1}};
  for (const auto& r : redirects) {
    if (*r.field == nullptr) continue;
    if (!r.to->make(*r.field, r.fill)) {
      return c.fail(ATTNGEN_ERROR_OUT_OF_MEMORY,
                    "cannot allocate the size query's scratch outputs");
    }
    *r.field = &r.to->buf;
  }
  // The flags that follow the data, at each value (decode.cpp gives decode's split per run).
  const bool layer = kernel.op == ATTNGEN_OP_ATTENTION || kernel.op == ATTNGEN_OP_MHA;
  const bool decode = kernel.op == ATTNGEN_OP_DECODE;
  *need = KernelNeed{};
  for (int variant = 0; variant < 2; ++variant) {
    if (variant == 1 && !layer && !decode) break;
    if (layer) a.bottom_right = variant;
    if (decode) a.v_finite = variant;
    CallContext ctx;
    KernelMemory memory{KernelMemory::kMeasure};
    memory.outer_bytes = SIZE_MAX;
    ctx.memory = &memory;
    const int result = run_with_memory(kernel, a, ctx);
    if (result != 0) {
      std::string msg = "kernel '" + std::string(kernel.name) +
                        "' failed in the workspace size query (Halide error " +
                        std::to_string(result) + ")";
      if (!ctx.halide_error.empty()) msg += ": " + ctx.halide_error;
      while (!msg.empty() && msg.back() == '\n') msg.pop_back();
      return c.fail(ATTNGEN_ERROR_KERNEL, msg);
    }
    const char* why = memory.leak.load() ? "keeps scratch memory past the task that allocated it"
                      : !memory.outer.empty()  ? "keeps scratch memory past its run"
                      : memory.overflow.load() ? "allocates more blocks at once than a workspace "
                                                 "region tracks, or outside its tasks on another "
                                                 "thread"
                                               : nullptr;
    if (why != nullptr) {
      return c.fail(ATTNGEN_ERROR_WORKSPACE, "kernel '" + std::string(kernel.name) + "' " + why +
                                                 ": its memory cannot be bounded, so it cannot run "
                                                 "in a workspace");
    }
    need->outer = std::max(need->outer, memory.outer.peak);
    need->task = std::max(need->task, memory.task_peak.load());
  }
  return true;
}

CallScratch::CallScratch(CallMode mode) : mode_(mode), previous_(t_scratch) {
  t_scratch = this;
  if (mode_ == CallMode::kSize || t_workspace == nullptr) return;
  const uintptr_t p = reinterpret_cast<uintptr_t>(t_workspace);
  const uintptr_t aligned =
      (p + kWorkspaceAlignment - 1) / kWorkspaceAlignment * kWorkspaceAlignment;
  base_ = reinterpret_cast<char*>(aligned);
  capacity_ = t_workspace_bytes > aligned - p ? t_workspace_bytes - (aligned - p) : 0;
}

CallScratch::~CallScratch() {
  for (int i = 0; i < heap_count_; ++i) scratch_release(heap_[i]);
  t_scratch = previous_;
}

CallScratch* CallScratch::current() { return t_scratch; }

void* CallScratch::take(Check& c, size_t bytes, const char* what, const char* what_suffix) {
  const size_t b = workspace_round(bytes == 0 ? 1 : bytes);
  if (in_workspace()) {
    if (used_ + b + kWorkspaceGuard > capacity_) {
      c.fail(ATTNGEN_ERROR_WORKSPACE,
             "the workspace holds " + std::to_string(capacity_) +
                 " bytes from its first 64-byte boundary, too few for " + what + what_suffix +
                 " (" + std::to_string(b) + " bytes after " + std::to_string(used_) +
                 "); ask the call's attngen_*_workspace_size() for the size it needs");
      return nullptr;
    }
    void* p = base_ + used_;
    used_ += b;
    return p;
  }
  if (inline_used_ + b <= kInlineBytes) {
    void* p = inline_ + inline_used_;
    inline_used_ += b;
    used_ += b;
    if (sizing()) std::memset(p, 0, b);
    return p;
  }
  // The block cache's, as the kernels' blocks: a call's rotated copies, tens of MiB at a long
  // prefill, are not mapped and faulted in again on every call.
  void* p = heap_count_ < kMaxHeap ? scratch_allocate(b) : nullptr;
  if (p == nullptr) {
    c.fail(ATTNGEN_ERROR_OUT_OF_MEMORY,
           "cannot allocate " + std::to_string(b) + " bytes for " + what + what_suffix);
    return nullptr;
  }
  heap_[heap_count_++] = p;
  used_ += b;
  if (sizing()) std::memset(p, 0, b);  // a size query's kernels may read what none wrote
  return p;
}

bool CallScratch::check_kernel(Check& c, const attngen_kernel_info& kernel, const KernelNeed& need,
                               int threads) {
  const size_t area = kernel_area_bytes(need, threads);
  if (used_ + area <= capacity_) return true;
  return c.fail(ATTNGEN_ERROR_WORKSPACE,
                "the workspace holds " + std::to_string(capacity_) +
                    " bytes from its first 64-byte boundary; this call needs " +
                    std::to_string(used_ + area + kWorkspaceAlignment - 1) + " (kernel '" +
                    kernel.name + "' at " + std::to_string(threads) +
                    " threads: " + std::to_string(need.outer) + " bytes outside its tasks and " +
                    std::to_string(need.task) + " per task slot)");
}

void CallScratch::area_for(const KernelNeed& need, int threads, KernelMemory& memory) {
  memory.kind = KernelMemory::kWorkspace;
  memory.outer_base = base_ + used_;
  memory.outer_bytes = need.outer;
  memory.slots_base = memory.outer_base + need.outer;
  memory.slot_bytes = need.task;
  memory.slots = threads;
}

void CallScratch::add_kernel(const KernelNeed& need, int threads) {
  kernel_max_ = std::max(kernel_max_, kernel_area_bytes(need, threads));
  measured_need_.outer = std::max(measured_need_.outer, need.outer);
  measured_need_.task = std::max(measured_need_.task, need.task);
}

size_t CallScratch::bytes() const {
  return kWorkspaceAlignment - 1 + used_ + std::max(kernel_max_, kWorkspaceGuard);
}

void* bound_workspace(size_t* bytes) {
  *bytes = t_workspace_bytes;
  return t_workspace;
}

}  // namespace attngen::rt

using namespace attngen::rt;

extern "C" {

#if ATTNGEN_SINGLE_THREADED
// Halide's noos runtime has no halide_set_custom_malloc: its kernels call these.
void* halide_malloc(void* user_context, size_t bytes) { return kernel_malloc(user_context, bytes); }
void halide_free(void* user_context, void* p) { kernel_free(user_context, p); }
#endif

attngen_status attngen_set_workspace(void* memory, size_t bytes) {
  Check c;
  if (memory == nullptr && bytes != 0) {
    c.fail(ATTNGEN_ERROR_NULL_POINTER, "memory is NULL with bytes = " + std::to_string(bytes) +
                                           " (NULL, 0 unbinds the workspace)");
  } else {
    t_workspace = bytes == 0 ? nullptr : memory;
    t_workspace_bytes = t_workspace == nullptr ? 0 : bytes;
  }
  return finish(c, nullptr);
}

}  // extern "C"
