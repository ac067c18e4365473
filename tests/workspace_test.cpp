// Caller-provided workspaces (attngen_set_workspace(), the *_workspace_size() queries): a call
// with a workspace of the size its query reported makes no heap allocation on any thread, and
// writes bitwise what the same call without one writes (and what the float64 reference says); a
// workspace one byte too small, or of a configuration never queried, is ATTNGEN_ERROR_WORKSPACE
// with the outputs untouched; misaligned workspaces are aligned inside; two threads run at once,
// each in its own workspace.
//
// Allocations are counted on every thread while a flag is set: this binary interposes malloc,
// calloc, realloc, the aligned allocators (operator new comes through malloc) and mmap (the block
// cache maps large blocks), forwarding to glibc; under AddressSanitizer, whose allocator those
// symbols belong to, through its malloc hook instead.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "attngen/attngen.h"
#include "attngen/kernel.h"
#include "tests/reference.h"
#include "tests/tensor.h"

#include <sys/syscall.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
// sanitizer/allocator_interface.h's (not every toolchain installs the header).
extern "C" int __sanitizer_install_malloc_and_free_hooks(void (*)(const volatile void*, size_t),
                                                         void (*)(const volatile void*));
extern "C" void __sanitizer_print_stack_trace();
#else
#include <sys/mman.h>
#endif

namespace {

std::atomic<bool> g_counting{false};
std::atomic<int64_t> g_allocations{0};

// ATTNGEN_WORKSPACE_TRAP=1: trap at the first allocation counted where none is expected (run
// under gdb for the stack that allocated).
// ATTNGEN_WORKSPACE_STACKS=1 (AddressSanitizer build): print the stack of that allocation instead.
const bool g_trap_env = std::getenv("ATTNGEN_WORKSPACE_TRAP") != nullptr;
const bool g_stacks_env = std::getenv("ATTNGEN_WORKSPACE_STACKS") != nullptr;
std::atomic<bool> g_expect_none{false};
// The first counted allocations: their sizes and threads, printed with a failure.
struct Seen {
  std::atomic<size_t> bytes;
  std::atomic<long> thread;
};
Seen g_seen[8];

inline void note_allocation(size_t bytes) {
  if (g_counting.load(std::memory_order_relaxed)) {
    const int64_t n = g_allocations.fetch_add(1, std::memory_order_relaxed);
    if (n < 8) {
      g_seen[n].bytes.store(bytes);
      g_seen[n].thread.store(static_cast<long>(syscall(SYS_gettid)));
    }
    if (g_expect_none.load() && g_trap_env) __builtin_trap();
#if defined(__SANITIZE_ADDRESS__)
    if (g_expect_none.load() && g_stacks_env && n == 0) __sanitizer_print_stack_trace();
#endif
  }
}

#if defined(__SANITIZE_ADDRESS__)
void on_malloc(const volatile void*, size_t n) { note_allocation(n); }
void on_free(const volatile void*) {}
const int g_hooks_installed = __sanitizer_install_malloc_and_free_hooks(on_malloc, on_free);
#endif

}  // namespace

#if !defined(__SANITIZE_ADDRESS__)
extern "C" {
void* __libc_malloc(size_t);
void __libc_free(void*);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void* __libc_memalign(size_t, size_t);

void* malloc(size_t n) {
  note_allocation(n);
  return __libc_malloc(n);
}
void free(void* p) { __libc_free(p); }
void* calloc(size_t n, size_t size) {
  note_allocation(n * size);
  return __libc_calloc(n, size);
}
void* realloc(void* p, size_t n) {
  note_allocation(n);
  return __libc_realloc(p, n);
}
void* memalign(size_t alignment, size_t n) {
  note_allocation(n);
  return __libc_memalign(alignment, n);
}
void* aligned_alloc(size_t alignment, size_t n) {
  note_allocation(n);
  return __libc_memalign(alignment, n);
}
int posix_memalign(void** out, size_t alignment, size_t n) {
  note_allocation(n);
  void* p = __libc_memalign(alignment, n);
  if (p == nullptr) return ENOMEM;
  *out = p;
  return 0;
}
void* valloc(size_t n) {
  note_allocation(n);
  return __libc_memalign(4096, n);
}
void* pvalloc(size_t n) {
  note_allocation(n);
  return __libc_memalign(4096, (n + 4095) & ~size_t{4095});
}
void* mmap(void* addr, size_t length, int prot, int flags, int fd, off_t offset) {
  note_allocation(length);
#if defined(SYS_mmap)
  return reinterpret_cast<void*>(syscall(SYS_mmap, addr, length, prot, flags, fd, offset));
#else  // 32-bit ARM: mmap2 takes the offset in 4096-byte units
  return reinterpret_cast<void*>(syscall(SYS_mmap2, addr, length, prot, flags, fd, offset / 4096));
#endif
}
}  // extern "C"
#endif

namespace attngen::test {
namespace {

// Heap allocations made by f(), on every thread.
template <typename F>
int64_t allocations_in(F&& f, bool expect_none = true) {
  g_expect_none.store(expect_none);
  g_allocations.store(0);
  g_counting.store(true);
  f();
  g_counting.store(false);
  g_expect_none.store(false);
  return g_allocations.load();
}

// The first allocations counted, for a failure's message.
std::string seen(int64_t n) {
  std::string s = " (caller thread " + std::to_string(syscall(SYS_gettid)) + ";";
  for (int64_t i = 0; i < std::min<int64_t>(n, 8); ++i) {
    s += " " + std::to_string(g_seen[i].bytes.load()) + " bytes on thread " +
         std::to_string(g_seen[i].thread.load()) + ";";
  }
  return s + ")";
}

// `bytes` of memory starting `misalign` bytes past a 64-byte boundary.
struct Memory {
  void* raw;
  char* p;
  Memory(size_t bytes, size_t misalign) {
    raw = std::malloc(bytes + 128);
    p = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(raw) + 63) / 64 * 64) + misalign;
  }
  ~Memory() { std::free(raw); }
};

// Binds a workspace on this thread for the scope.
struct Bound {
  Bound(void* p, size_t bytes) { EXPECT_EQ(attngen_set_workspace(p, bytes), ATTNGEN_OK); }
  ~Bound() { attngen_set_workspace(nullptr, 0); }
};

// Sets the thread count for the scope, and warms the pool up: a count the pool has not run at
// spawns its threads at the next call, and a thread's own start (under AddressSanitizer) allocates
// on that thread, maybe after the call that spawned it has returned. The pool is started here and
// given time to settle, so that the counts below see only the calls.
void warm_pool() {
  std::vector<float> q(2 * 64 * 4 * 64, 0.5f), o(q.size());
  const int64_t shape[4] = {2, 64, 4, 64};
  const attngen_tensor t = attngen_tensor_contiguous(q.data(), ATTNGEN_F32, 4, shape);
  attngen_tensor out = attngen_tensor_contiguous(o.data(), ATTNGEN_F32, 4, shape);
  EXPECT_EQ(attngen_attention(&t, &t, &t, &out, nullptr), ATTNGEN_OK);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
}

// The most threads this build's runtime runs (ATTNGEN_SINGLE_THREADED: one).
#if ATTNGEN_SINGLE_THREADED
constexpr int kMaxThreads = 1;
#else
constexpr int kMaxThreads = 3;
#endif

struct Threads {
  explicit Threads(int n) {
    EXPECT_EQ(attngen_set_num_threads(n), ATTNGEN_OK);
    warm_pool();
  }
  ~Threads() { attngen_set_num_threads(0); }
};

std::vector<uint8_t> bytes_of(const AnyTensor& t) {
  const std::vector<double> d = t.dense();
  std::vector<uint8_t> out(d.size() * sizeof(double));
  std::memcpy(out.data(), d.data(), out.size());
  return out;
}

// Runs `call` (returning a status, writing `out`) with a workspace of `bytes` (the size its
// query reported): at exactly that size 64-byte aligned + 1 (the most alignment slack) and
// 64-byte aligned with 63 fewer, no allocation and the output of `plain`; one byte fewer at either
// address is ATTNGEN_ERROR_WORKSPACE with the output untouched.
template <typename Call, typename Poison>
void expect_workspace_runs(size_t bytes, Call call, Poison poison, const AnyTensor& out,
                           const std::vector<uint8_t>& plain) {
  ASSERT_GT(bytes, size_t{64});
  const struct {
    size_t bytes, misalign;
    bool fits;
  } cases[] = {
      {bytes, 1, true}, {bytes - 1, 1, false}, {bytes - 63, 0, true}, {bytes - 64, 0, false}};
  for (const auto& c : cases) {
    SCOPED_TRACE("workspace of " + std::to_string(c.bytes) + " bytes at 64k + " +
                 std::to_string(c.misalign));
    Memory m(c.bytes, c.misalign);
    poison();
    attngen_status st = ATTNGEN_OK;
    int64_t n = 0;
    std::string error;
    {
      Bound bound(m.p, c.bytes);
      n = allocations_in([&] { st = call(); }, c.fits);
      error = attngen_last_error();
    }
    if (c.fits) {
      ASSERT_EQ(st, ATTNGEN_OK) << attngen_last_error();
      EXPECT_EQ(n, 0) << "heap allocations inside the call" << seen(n);
      EXPECT_EQ(bytes_of(out), plain) << "output differs from the call without a workspace";
    } else {
      EXPECT_EQ(st, ATTNGEN_ERROR_WORKSPACE) << attngen_status_name(st);
      EXPECT_NE(error.find("workspace"), std::string::npos) << error;
      EXPECT_TRUE(out.all_poison()) << "a refused call wrote its output";
    }
  }
}

struct AttentionCase {
  const char* name;
  attngen_dtype dtype = ATTNGEN_F32;
  int64_t batch = 2, seq_q = 37, seq_kv = 53, heads_q = 4, heads_kv = 2, head_dim = 64;
  bool causal = false, padding = false, mask = false, window = false;
};

void run_attention_case(const AttentionCase& a, int threads) {
  SCOPED_TRACE(std::string(a.name) + " at " + std::to_string(threads) + " threads");
  const Threads set(threads);
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  AnyTensor q(a.dtype, {a.batch, a.seq_q, a.heads_q, a.head_dim}, 0);
  AnyTensor k(a.dtype, {a.batch, a.seq_kv, a.heads_kv, a.head_dim}, 0);
  AnyTensor v(a.dtype, {a.batch, a.seq_kv, a.heads_kv, a.head_dim}, 0);
  AnyTensor out(a.dtype, {a.batch, a.seq_q, a.heads_q, a.head_dim}, 0);
  q.fill_random(rng, -1, 1);
  k.fill_random(rng, -1, 1);
  v.fill_random(rng, -1, 1);
  attngen_attention_options opt = attngen_attention_options_default();
  RefAttention ref;
  if (a.causal) {
    opt.mask = ATTNGEN_MASK_CAUSAL;
    ref.causal = true;
  }
  std::vector<int32_t> kv_len(static_cast<size_t>(a.batch));
  attngen_tensor kv_len_t{};
  if (a.padding) {
    std::uniform_int_distribution<int32_t> len(static_cast<int32_t>(a.seq_q),
                                               static_cast<int32_t>(a.seq_kv));
    for (auto& n : kv_len) n = len(rng);
    kv_len_t = attngen_tensor_contiguous(kv_len.data(), ATTNGEN_I32, 1, &a.batch);
    opt.kv_len = &kv_len_t;
    ref.kv_len = kv_len;
  }
  std::vector<uint8_t> mask(static_cast<size_t>(a.batch * a.seq_q * a.seq_kv));
  attngen_tensor mask_t{};
  if (a.mask) {
    std::bernoulli_distribution attend(0.8);
    for (auto& m : mask) m = attend(rng);
    const int64_t shape[4] = {a.batch, 1, a.seq_q, a.seq_kv};
    mask_t = attngen_tensor_contiguous(mask.data(), ATTNGEN_BOOL, 4, shape);
    opt.mask_tensor = &mask_t;
    ref.keep = [&](int64_t b, int64_t, int64_t i, int64_t j) {
      return mask[static_cast<size_t>((b * a.seq_q + i) * a.seq_kv + j)] != 0;
    };
  }
  if (a.window) {
    opt.pattern.kind = ATTNGEN_PATTERN_WINDOW;
    opt.pattern.window_left = 9;
    opt.pattern.window_right = 2;
    ref.pattern = [](int64_t p, int64_t, int64_t j) { return p - 9 <= j && j <= p + 2; };
  }
  const auto call = [&] { return attngen_attention(&q.t(), &k.t(), &v.t(), &out.t(), &opt); };

  ASSERT_EQ(call(), ATTNGEN_OK) << attngen_last_error();
  const std::vector<uint8_t> plain = bytes_of(out);
  const std::vector<float> qw = q.widened(), kw = k.widened(), vw = v.widened();
  const std::vector<double> want =
      reference_attention(q.view_in(q.t(), qw), k.view_in(k.t(), kw), v.view_in(v.t(), vw), ref);
  expect_close(out.dense(), want, max_abs(v.view_in(v.t(), vw)), a.dtype);

  size_t bytes = 0;
  ASSERT_EQ(attngen_attention_workspace_size(&q.t(), &k.t(), &v.t(), &out.t(), &opt, &bytes),
            ATTNGEN_OK)
      << attngen_last_error();
  std::printf("[ workspace ] attention %s, %d threads: %zu bytes (%s)\n", a.name, threads, bytes,
              attngen_last_kernel());
  expect_workspace_runs(
      bytes, call,
      [&] {
        out.init(a.dtype, {a.batch, a.seq_q, a.heads_q, a.head_dim}, 0);
      },
      out, plain);
}

TEST(Workspace, CountsAllocationsOfACallWithoutOne) {
  // The positive control: the hook sees the kernels' scratch (a fresh block cache, one thread).
  const Threads set(1);
  std::mt19937_64 rng(fresh_seed());
  AnyTensor q(ATTNGEN_F32, {1, 256, 2, 64}, 0), k(ATTNGEN_F32, {1, 256, 2, 64}, 0);
  AnyTensor v(ATTNGEN_F32, {1, 256, 2, 64}, 0), out(ATTNGEN_F32, {1, 256, 2, 64}, 0);
  q.fill_random(rng, -1, 1);
  k.fill_random(rng, -1, 1);
  v.fill_random(rng, -1, 1);
  ASSERT_EQ(attngen_attention(&q.t(), &k.t(), &v.t(), &out.t(), nullptr), ATTNGEN_OK);
  attngen_release_memory();
  attngen_status st = ATTNGEN_OK;
  const int64_t n =
      allocations_in([&] { st = attngen_attention(&q.t(), &k.t(), &v.t(), &out.t(), nullptr); });
  ASSERT_EQ(st, ATTNGEN_OK) << attngen_last_error();
  EXPECT_GT(n, 0) << "the allocation hook saw nothing";
  std::printf("[ workspace ] without a workspace: %lld allocations\n", static_cast<long long>(n));
}

TEST(Workspace, Attention) {
  const AttentionCase cases[] = {
      {"dense"},
      {"causal", ATTNGEN_F32, 1, 64, 64, 2, 2, 64, /*causal=*/true},
      {"causal GQA padding", ATTNGEN_F32, 3, 19, 45, 4, 1, 64, true, /*padding=*/true},
      {"mask tensor", ATTNGEN_F32, 2, 33, 47, 2, 2, 64, false, false, /*mask=*/true},
      {"f16 window (F32 staging)", ATTNGEN_F16, 2, 29, 41, 2, 1, 64, true, false, false,
       /*window=*/true},
      {"bf16 generic", ATTNGEN_BF16, 1, 23, 31, 2, 2, 96},
  };
  for (const AttentionCase& a : cases) {
    for (int threads : {1, 2, 3}) {
      if (threads <= kMaxThreads) run_attention_case(a, threads);
    }
  }
}

// Kernels registered at run time (an app's own, examples/embedded) are scanned with the built-in
// ones at every selection: a call in a workspace still allocates nothing. The registered one is a
// copy of a built-in linear kernel under another name, so that later tests of this process get
// what they would without it.
TEST(Workspace, AfterAKernelIsRegistered) {
  const attngen_kernel_info* real = nullptr;
  for (size_t i = 0; i < attngen_kernel_count() && real == nullptr; ++i) {
    const attngen_kernel_info* k = attngen_kernel_at(i);
    if (k->op == ATTNGEN_OP_LINEAR && attngen_kernel_supported(k)) real = k;
  }
  if (real == nullptr) GTEST_SKIP() << "no linear kernel this machine runs";
  static attngen_kernel_info copy;
  copy = *real;
  copy.name = "test_registered_linear_copy";
  if (attngen_find_kernel(copy.name) == nullptr) {
    ASSERT_EQ(attngen_register_kernel(&copy), ATTNGEN_OK) << attngen_last_error();
  }
  run_attention_case({"dense"}, 1);
  run_attention_case({"bf16 generic", ATTNGEN_BF16, 1, 23, 31, 2, 2, 96}, 1);
}

TEST(Workspace, RefusesConfigurationsNotQueried) {
  std::mt19937_64 rng(fresh_seed());
  AnyTensor q(ATTNGEN_F32, {1, 11, 2, 64}, 0), k(ATTNGEN_F32, {1, 13, 2, 64}, 0);
  AnyTensor v(ATTNGEN_F32, {1, 13, 2, 64}, 0), out(ATTNGEN_F32, {1, 11, 2, 64}, 0);
  q.fill_random(rng, -1, 1);
  k.fill_random(rng, -1, 1);
  v.fill_random(rng, -1, 1);
  Memory m(64 << 20, 0);
  const Bound bound(m.p, 64 << 20);
  EXPECT_EQ(attngen_attention(&q.t(), &k.t(), &v.t(), &out.t(), nullptr), ATTNGEN_ERROR_WORKSPACE);
  EXPECT_NE(std::string(attngen_last_error()).find("no workspace size query"), std::string::npos)
      << attngen_last_error();
  EXPECT_TRUE(out.all_poison());
  EXPECT_STREQ(attngen_status_name(ATTNGEN_ERROR_WORKSPACE), "ATTNGEN_ERROR_WORKSPACE");
}

TEST(Workspace, RefusesMoreThreadsThanQueried) {
  if (kMaxThreads < 2) GTEST_SKIP() << "a single-threaded build runs one thread";
  std::mt19937_64 rng(fresh_seed());
  AnyTensor q(ATTNGEN_F32, {1, 128, 2, 64}, 0), k(ATTNGEN_F32, {1, 128, 2, 64}, 0);
  AnyTensor v(ATTNGEN_F32, {1, 128, 2, 64}, 0), out(ATTNGEN_F32, {1, 128, 2, 64}, 0);
  q.fill_random(rng, -1, 1);
  k.fill_random(rng, -1, 1);
  v.fill_random(rng, -1, 1);
  size_t bytes = 0;
  {
    const Threads one(1);
    ASSERT_EQ(attngen_attention_workspace_size(&q.t(), &k.t(), &v.t(), &out.t(), nullptr, &bytes),
              ATTNGEN_OK);
  }
  const Threads two(2);
  size_t bytes2 = 0;
  Memory m(bytes, 0);
  const Bound bound(m.p, bytes);
  EXPECT_EQ(attngen_attention(&q.t(), &k.t(), &v.t(), &out.t(), nullptr), ATTNGEN_ERROR_WORKSPACE)
      << "a workspace sized for 1 thread ran at 2";
  EXPECT_TRUE(out.all_poison());
  ASSERT_EQ(attngen_attention_workspace_size(&q.t(), &k.t(), &v.t(), &out.t(), nullptr, &bytes2),
            ATTNGEN_OK);
  EXPECT_GT(bytes2, bytes) << "a second task slot costs nothing?";
}

TEST(Workspace, Linear) {
  for (attngen_dtype dtype : {ATTNGEN_F32, ATTNGEN_BF16}) {
    for (bool bias : {false, true}) {
      for (int threads : {1, 2}) {
        if (threads > kMaxThreads) continue;
        SCOPED_TRACE(std::string(dtype == ATTNGEN_F32 ? "f32" : "bf16") +
                     (bias ? " bias" : " no bias") + " at " + std::to_string(threads));
        const Threads set(threads);
        std::mt19937_64 rng(fresh_seed());
        AnyTensor x(dtype, {2, 7, 96}, 0), w(dtype, {40, 96}, 0), b(dtype, {40}, 0);
        AnyTensor y(dtype, {2, 7, 40}, 0);
        x.fill_random(rng, -1, 1);
        w.fill_random(rng, -1, 1);
        b.fill_random(rng, -1, 1);
        const attngen_tensor* bt = bias ? &b.t() : nullptr;
        const auto call = [&] { return attngen_linear(&x.t(), &w.t(), bt, &y.t()); };
        ASSERT_EQ(call(), ATTNGEN_OK) << attngen_last_error();
        const std::vector<uint8_t> plain = bytes_of(y);
        const std::vector<double> want = reference_linear(x.dense(), 14, 96, w.dense(), 40,
                                                          bias ? b.dense() : std::vector<double>{});
        expect_close(y.dense(), want, 1.0, dtype);
        size_t bytes = 0;
        ASSERT_EQ(attngen_linear_workspace_size(&x.t(), &w.t(), bt, &y.t(), &bytes), ATTNGEN_OK)
            << attngen_last_error();
        std::printf("[ workspace ] linear %s: %zu bytes\n", bias ? "bias" : "no bias", bytes);
        expect_workspace_runs(
            bytes, call,
            [&] {
              y.init(dtype, {2, 7, 40}, 0);
            },
            y, plain);
      }
    }
  }
}

struct MhaLayer {
  AnyTensor in_w, in_b, out_w, out_b;
  attngen_mha_weights weights{};
  MhaLayer(attngen_dtype dtype, int64_t e, std::mt19937_64& rng)
      : in_w(dtype, {3 * e, e}, 0),
        in_b(dtype, {3 * e}, 0),
        out_w(dtype, {e, e}, 0),
        out_b(dtype, {e}, 0) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(e));
    in_w.fill_random(rng, -bound, bound);
    in_b.fill_random(rng, -0.1, 0.1);
    out_w.fill_random(rng, -bound, bound);
    out_b.fill_random(rng, -0.1, 0.1);
    weights = {&in_w.t(), &in_b.t(), &out_w.t(), &out_b.t()};
  }
};

TEST(Workspace, Mha) {
  const struct {
    attngen_dtype dtype;
    int64_t embed, heads;
    bool causal;
  } cases[] = {
      {ATTNGEN_F32, 128, 2, true}, {ATTNGEN_F32, 128, 2, false}, {ATTNGEN_F16, 128, 1, true}};
  for (const auto& m : cases) {
    for (int threads : {1, 2}) {
      if (threads > kMaxThreads) continue;
      SCOPED_TRACE("E " + std::to_string(m.embed) + " H " + std::to_string(m.heads) + " at " +
                   std::to_string(threads));
      const Threads set(threads);
      std::mt19937_64 rng(fresh_seed());
      const int64_t batch = 2, seq = 21;
      MhaLayer layer(m.dtype, m.embed, rng);
      AnyTensor x(m.dtype, {batch, seq, m.embed}, 0), y(m.dtype, {batch, seq, m.embed}, 0);
      x.fill_random(rng, -1, 1);
      std::vector<int32_t> kv_len = {21, 17};
      const attngen_tensor kv_len_t =
          attngen_tensor_contiguous(kv_len.data(), ATTNGEN_I32, 1, &batch);
      attngen_mha_options opt = attngen_mha_options_default();
      opt.num_heads = m.heads;
      opt.mask = m.causal ? ATTNGEN_MASK_CAUSAL : ATTNGEN_MASK_NONE;
      opt.kv_len = &kv_len_t;
      const auto call = [&] { return attngen_mha(&x.t(), &layer.weights, &y.t(), &opt); };
      ASSERT_EQ(call(), ATTNGEN_OK) << attngen_last_error();
      const std::vector<uint8_t> plain = bytes_of(y);
      const std::vector<double> want = reference_mha(
          x.dense(), batch, seq, m.embed, m.heads, layer.in_w.dense(), layer.in_b.dense(),
          layer.out_w.dense(), layer.out_b.dense(), m.causal, kv_len);
      expect_close(y.dense(), want, 1.0, m.dtype);
      size_t bytes = 0;
      ASSERT_EQ(attngen_mha_workspace_size(&x.t(), &layer.weights, &y.t(), &opt, &bytes),
                ATTNGEN_OK)
          << attngen_last_error();
      std::printf("[ workspace ] mha E%lld H%lld: %zu bytes (%s)\n",
                  static_cast<long long>(m.embed), static_cast<long long>(m.heads), bytes,
                  attngen_last_kernel());
      expect_workspace_runs(
          bytes, call,
          [&] {
            y.init(m.dtype, {batch, seq, m.embed}, 0);
          },
          y, plain);
      // The persistent layer of the same weights: its own size query, no allocation in the
      // workspace, and bitwise attngen_mha()'s output.
      attngen_mha_layer* packed = nullptr;
      ASSERT_EQ(attngen_mha_layer_create(&layer.weights, m.heads, &packed), ATTNGEN_OK)
          << attngen_last_error();
      const std::unique_ptr<attngen_mha_layer, void (*)(attngen_mha_layer*)> owned(
          packed, attngen_mha_layer_destroy);
      size_t layer_bytes = 0;
      ASSERT_EQ(
          attngen_mha_layer_forward_workspace_size(packed, &x.t(), &y.t(), &opt, &layer_bytes),
          ATTNGEN_OK)
          << attngen_last_error();
      EXPECT_LT(layer_bytes, bytes) << "the layer's calls pack nothing";
      expect_workspace_runs(
          layer_bytes, [&] { return attngen_mha_layer_forward(packed, &x.t(), &y.t(), &opt); },
          [&] {
            y.init(m.dtype, {batch, seq, m.embed}, 0);
          },
          y, plain);
    }
  }
}

struct OwnedCache {
  attngen_kv_cache* cache = nullptr;
  ~OwnedCache() { attngen_kv_cache_destroy(cache); }
};

// Decoding step by step into two caches, one in a workspace: appends and decodes there make no
// allocation at every length, and write what the other cache's calls write; the outputs match
// one causal pass of the reference over everything appended.
TEST(Workspace, Decode) {
  for (int threads : {1, 2}) {
    if (threads > kMaxThreads) continue;
    SCOPED_TRACE(std::to_string(threads) + " threads");
    const Threads set(threads);
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    const int64_t batch = 2, heads_q = 4, heads_kv = 2, d = 64, capacity = 48;
    attngen_kv_cache_options co = attngen_kv_cache_options_default();
    co.layers = 2;
    co.batch = batch;
    co.heads_kv = heads_kv;
    co.head_dim_qk = d;
    co.capacity = capacity;
    OwnedCache ws_cache, plain_cache;
    ASSERT_EQ(attngen_kv_cache_create(&co, &ws_cache.cache), ATTNGEN_OK);
    ASSERT_EQ(attngen_kv_cache_create(&co, &plain_cache.cache), ATTNGEN_OK);
    // Every token's K and V, for the reference.
    Storage k_all({batch, capacity, heads_kv, d}, 0), v_all({batch, capacity, heads_kv, d}, 0);
    const int64_t steps[] = {5, 1, 1, 3, 1, 1, 1, 1, 4, 1, 1, 1, 1, 1, 1, 1, 1,
                             1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    const int64_t layer = 1;
    // One workspace for every step: the largest size of the shapes used (t = 5, 3, 4, 1).
    size_t bytes = 0, bytes_t1 = 0;
    for (int64_t t : {1, 3, 4, 5}) {
      Storage q({batch, t, heads_q, d}, 0), out({batch, t, heads_q, d}, 0);
      Storage k({batch, t, heads_kv, d}, 0), v({batch, t, heads_kv, d}, 0);
      size_t n = 0;
      ASSERT_EQ(attngen_decode_workspace_size(&q.t, ws_cache.cache, layer, &out.t, nullptr, &n),
                ATTNGEN_OK)
          << attngen_last_error();
      bytes = std::max(bytes, n);
      if (t == 1) bytes_t1 = n;
      std::printf("[ workspace ] decode t=%lld: %zu bytes\n", static_cast<long long>(t), n);
      ASSERT_EQ(
          attngen_kv_cache_append_workspace_size(ws_cache.cache, layer, &k.t, &v.t, nullptr, &n),
          ATTNGEN_OK)
          << attngen_last_error();
      bytes = std::max(bytes, n);
    }
    Memory m(bytes, 17);
    int64_t pos = 0, allocations = 0;
    for (size_t s = 0; s < std::size(steps); ++s) {
      const int64_t t = steps[s];
      Storage q({batch, t, heads_q, d}, 0), k({batch, t, heads_kv, d}, 0),
          v({batch, t, heads_kv, d}, 0);
      q.fill_random(rng, -1, 1);
      k.fill_random(rng, -1, 1);
      v.fill_random(rng, -1, 1);
      for (int64_t b = 0; b < batch; ++b) {
        for (int64_t i = 0; i < t; ++i) {
          for (int64_t h = 0; h < heads_kv; ++h) {
            for (int64_t e = 0; e < d; ++e) {
              k_all.set(k_all.offset({b, pos + i, h, e}), k.get(k.offset({b, i, h, e})));
              v_all.set(v_all.offset({b, pos + i, h, e}), v.get(v.offset({b, i, h, e})));
            }
          }
        }
      }
      Storage out({batch, t, heads_q, d}, 0), plain({batch, t, heads_q, d}, 0);
      ASSERT_EQ(attngen_kv_cache_append(plain_cache.cache, layer, &k.t, &v.t, nullptr), ATTNGEN_OK);
      ASSERT_EQ(attngen_decode(&q.t, plain_cache.cache, layer, &plain.t, nullptr), ATTNGEN_OK)
          << attngen_last_error();
      attngen_status st_append = ATTNGEN_OK, st_decode = ATTNGEN_OK;
      const auto step = [&] {
        Bound bound(m.p, bytes);
        st_append = attngen_kv_cache_append(ws_cache.cache, layer, &k.t, &v.t, nullptr);
        st_decode = attngen_decode(&q.t, ws_cache.cache, layer, &out.t, nullptr);
      };
      if (s == 0) {
        step();  // a layer's first append allocates its lengths (a warm-up, attngen.h)
      } else {
        allocations += allocations_in(step);
      }
      ASSERT_EQ(st_append, ATTNGEN_OK) << attngen_last_error();
      ASSERT_EQ(st_decode, ATTNGEN_OK) << attngen_last_error();
      pos += t;
      EXPECT_EQ(out.buf, plain.buf)
          << "step " << s << ": differs from the call without a workspace";
      // The reference: these t queries at positions pos - t .. pos - 1 over keys 0 .. pos - 1.
      View kv = view_of(k_all.t), vv = view_of(v_all.t);
      kv.shape[1] = vv.shape[1] = pos;
      RefAttention ref;
      ref.causal = true;
      expect_close_f32(out.dense(), reference_attention(view_of(q.t), kv, vv, ref), max_abs(vv));
    }
    EXPECT_EQ(allocations, 0) << "heap allocations in the appends and decodes" << seen(allocations);
    // Too small: refused, nothing written.
    {
      Storage q({batch, 1, heads_q, d}, 0), out({batch, 1, heads_q, d}, 0);
      q.fill_random(rng, -1, 1);
      Memory small(bytes_t1 - 1, 1);
      Bound bound(small.p, bytes_t1 - 1);
      EXPECT_EQ(attngen_decode(&q.t, ws_cache.cache, layer, &out.t, nullptr),
                ATTNGEN_ERROR_WORKSPACE);
      EXPECT_TRUE(out.all_poison());
    }
  }
}

TEST(Workspace, MhaDecode) {
  for (int threads : {1, 2}) {
    if (threads > kMaxThreads) continue;
    SCOPED_TRACE(std::to_string(threads) + " threads");
    const Threads set(threads);
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    const int64_t batch = 1, embed = 128, heads = 2, capacity = 24;
    MhaLayer layer(ATTNGEN_F32, embed, rng);
    attngen_kv_cache_options co = attngen_kv_cache_options_default();
    co.layers = 1;
    co.batch = batch;
    co.heads_kv = heads;
    co.head_dim_qk = embed / heads;
    co.capacity = capacity;
    OwnedCache ws_cache, plain_cache, layer_cache;
    ASSERT_EQ(attngen_kv_cache_create(&co, &ws_cache.cache), ATTNGEN_OK);
    ASSERT_EQ(attngen_kv_cache_create(&co, &plain_cache.cache), ATTNGEN_OK);
    ASSERT_EQ(attngen_kv_cache_create(&co, &layer_cache.cache), ATTNGEN_OK);
    attngen_mha_layer* packed = nullptr;
    ASSERT_EQ(attngen_mha_layer_create(&layer.weights, heads, &packed), ATTNGEN_OK)
        << attngen_last_error();
    const std::unique_ptr<attngen_mha_layer, void (*)(attngen_mha_layer*)> owned(
        packed, attngen_mha_layer_destroy);
    attngen_mha_decode_options opt = attngen_mha_decode_options_default();
    opt.num_heads = heads;
    size_t bytes = 0, bytes_t1 = 0, layer_bytes = 0;
    for (int64_t t : {1, 4}) {
      Storage x({batch, t, embed}, 0), y({batch, t, embed}, 0);
      size_t n = 0, nl = 0;
      ASSERT_EQ(attngen_mha_decode_workspace_size(&x.t, &layer.weights, ws_cache.cache, 0, &y.t,
                                                  &opt, &n),
                ATTNGEN_OK)
          << attngen_last_error();
      ASSERT_EQ(attngen_mha_layer_decode_workspace_size(packed, &x.t, layer_cache.cache, 0, &y.t,
                                                        nullptr, &nl),
                ATTNGEN_OK)
          << attngen_last_error();
      std::printf("[ workspace ] mha_decode t=%lld: %zu bytes, %zu with the layer\n",
                  static_cast<long long>(t), n, nl);
      EXPECT_LT(nl, n) << "the layer's steps pack nothing";
      bytes = std::max(bytes, n);
      layer_bytes = std::max(layer_bytes, nl);
      if (t == 1) bytes_t1 = n;
    }
    Memory m(bytes, 5), ml(layer_bytes, 3);
    std::vector<double> x_all;  // [S, E] so far
    const int64_t steps[] = {4, 1, 1, 1, 1, 1, 1, 4, 1, 1, 1, 1, 1};
    int64_t pos = 0, allocations = 0;
    for (size_t s = 0; s < std::size(steps); ++s) {
      const int64_t t = steps[s];
      Storage x({batch, t, embed}, 0), y({batch, t, embed}, 0), plain({batch, t, embed}, 0);
      x.fill_random(rng, -1, 1);
      const std::vector<double> xd = x.dense();
      x_all.insert(x_all.end(), xd.begin(), xd.end());
      ASSERT_EQ(attngen_mha_decode(&x.t, &layer.weights, plain_cache.cache, 0, &plain.t, &opt),
                ATTNGEN_OK)
          << attngen_last_error();
      attngen_status st = ATTNGEN_OK;
      const auto step = [&] {
        Bound bound(m.p, bytes);
        st = attngen_mha_decode(&x.t, &layer.weights, ws_cache.cache, 0, &y.t, &opt);
      };
      Storage yl({batch, t, embed}, 0);
      attngen_status stl = ATTNGEN_OK;
      const auto layer_step = [&] {
        Bound bound(ml.p, layer_bytes);
        stl = attngen_mha_layer_decode(packed, &x.t, layer_cache.cache, 0, &yl.t, nullptr);
      };
      if (s == 0) {
        step();  // the layer's first append allocates its lengths
        layer_step();
      } else {
        allocations += allocations_in(step);
        allocations += allocations_in(layer_step);
      }
      ASSERT_EQ(st, ATTNGEN_OK) << attngen_last_error();
      ASSERT_EQ(stl, ATTNGEN_OK) << attngen_last_error();
      pos += t;
      EXPECT_EQ(y.buf, plain.buf) << "step " << s;
      EXPECT_EQ(yl.buf, plain.buf) << "step " << s << " of the persistent layer";
      const std::vector<double> full =
          reference_mha(x_all, batch, pos, embed, heads, layer.in_w.dense(), layer.in_b.dense(),
                        layer.out_w.dense(), layer.out_b.dense(), true, {});
      expect_close_f32(y.dense(), std::vector<double>(full.end() - t * embed, full.end()), 1.0);
    }
    EXPECT_EQ(allocations, 0) << "heap allocations in the MHA decode steps" << seen(allocations);
    // Too small: refused before the append.
    Storage x({batch, 1, embed}, 0), y({batch, 1, embed}, 0);
    x.fill_random(rng, -1, 1);
    int64_t before = 0, after = 0;
    ASSERT_EQ(attngen_kv_cache_length(ws_cache.cache, 0, 0, &before), ATTNGEN_OK);
    {
      Memory small(bytes_t1 - 1, 1);
      Bound bound(small.p, bytes_t1 - 1);
      EXPECT_EQ(attngen_mha_decode(&x.t, &layer.weights, ws_cache.cache, 0, &y.t, &opt),
                ATTNGEN_ERROR_WORKSPACE);
    }
    ASSERT_EQ(attngen_kv_cache_length(ws_cache.cache, 0, 0, &after), ATTNGEN_OK);
    EXPECT_EQ(after, before) << "a refused step appended";
    EXPECT_TRUE(y.all_poison());
  }
}

// Two threads, each with its own workspace, calling at once (each caller may run the other's
// tasks while it waits for its own): no allocation, and each output that of the call alone.
TEST(Workspace, TwoThreadsEachWithItsOwn) {
  if (kMaxThreads < 2) GTEST_SKIP() << "a single-threaded build runs one thread";
  const Threads set(2);
  struct Job {
    AnyTensor q, k, v, out;
    attngen_attention_options opt = attngen_attention_options_default();
    std::vector<uint8_t> plain;
    size_t bytes = 0;
    attngen_status status = ATTNGEN_OK;
  };
  std::mt19937_64 rng(fresh_seed());
  Job jobs[2];
  const int64_t seqs[2][2] = {{96, 96}, {41, 77}};
  for (int j = 0; j < 2; ++j) {
    Job& job = jobs[j];
    job.q.init(ATTNGEN_F32, {2, seqs[j][0], 2, 64}, 0);
    job.k.init(ATTNGEN_F32, {2, seqs[j][1], 2, 64}, 0);
    job.v.init(ATTNGEN_F32, {2, seqs[j][1], 2, 64}, 0);
    job.out.init(ATTNGEN_F32, {2, seqs[j][0], 2, 64}, 0);
    job.q.fill_random(rng, -1, 1);
    job.k.fill_random(rng, -1, 1);
    job.v.fill_random(rng, -1, 1);
    job.opt.mask = j == 0 ? ATTNGEN_MASK_CAUSAL : ATTNGEN_MASK_NONE;
    ASSERT_EQ(attngen_attention(&job.q.t(), &job.k.t(), &job.v.t(), &job.out.t(), &job.opt),
              ATTNGEN_OK);
    job.plain = bytes_of(job.out);
    ASSERT_EQ(attngen_attention_workspace_size(&job.q.t(), &job.k.t(), &job.v.t(), &job.out.t(),
                                               &job.opt, &job.bytes),
              ATTNGEN_OK);
  }
  Memory m0(jobs[0].bytes, 0), m1(jobs[1].bytes, 3);
  Memory* memory[2] = {&m0, &m1};
  std::atomic<int> ready{0}, done{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (int j = 0; j < 2; ++j) {
    threads.emplace_back([&, j] {
      Job& job = jobs[j];
      attngen_set_workspace(memory[j]->p, job.bytes);
      ready.fetch_add(1);
      while (!go.load()) {
      }
      for (int r = 0; r < 6 && job.status == ATTNGEN_OK; ++r) {
        job.status = attngen_attention(&job.q.t(), &job.k.t(), &job.v.t(), &job.out.t(), &job.opt);
      }
      done.fetch_add(1);
      while (go.load()) {
      }
      attngen_set_workspace(nullptr, 0);
    });
  }
  while (ready.load() < 2) {
  }
  const int64_t n = allocations_in([&] {
    go.store(true);
    while (done.load() < 2) {
    }
  });
  go.store(false);
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(n, 0) << "heap allocations during the concurrent calls" << seen(n);
  for (int j = 0; j < 2; ++j) {
    EXPECT_EQ(jobs[j].status, ATTNGEN_OK) << j;
    EXPECT_EQ(bytes_of(jobs[j].out), jobs[j].plain) << j;
  }
}

}  // namespace
}  // namespace attngen::test

namespace attngen::test {
namespace {

// Not run by default (--gtest_also_run_disabled_tests): the time of a call with and without a
// workspace, medians of 15, for the docs' note on the query tiles of a head running on one thread.
TEST(Workspace, DISABLED_Timing) {
  const Threads set(2);
  std::mt19937_64 rng(fresh_seed());
  for (const int64_t heads : {1, 2, 8}) {
    const int64_t seq = 1024;
    AnyTensor q(ATTNGEN_F32, {1, seq, heads, 64}, 0), k(ATTNGEN_F32, {1, seq, heads, 64}, 0);
    AnyTensor v(ATTNGEN_F32, {1, seq, heads, 64}, 0), out(ATTNGEN_F32, {1, seq, heads, 64}, 0);
    q.fill_random(rng, -1, 1);
    k.fill_random(rng, -1, 1);
    v.fill_random(rng, -1, 1);
    attngen_attention_options opt = attngen_attention_options_default();
    opt.mask = ATTNGEN_MASK_CAUSAL;
    size_t bytes = 0;
    ASSERT_EQ(attngen_attention_workspace_size(&q.t(), &k.t(), &v.t(), &out.t(), &opt, &bytes),
              ATTNGEN_OK);
    Memory m(bytes, 0);
    const auto median_ms = [&](bool workspace) {
      std::vector<double> ms;
      for (int r = 0; r < 15; ++r) {
        if (workspace) attngen_set_workspace(m.p, bytes);
        const auto t0 = std::chrono::steady_clock::now();
        EXPECT_EQ(attngen_attention(&q.t(), &k.t(), &v.t(), &out.t(), &opt), ATTNGEN_OK);
        const auto t1 = std::chrono::steady_clock::now();
        attngen_set_workspace(nullptr, 0);
        ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
      }
      std::sort(ms.begin(), ms.end());
      return ms[ms.size() / 2];
    };
    const double plain = median_ms(false), in_ws = median_ms(true);
    std::printf(
        "[ workspace ] causal B1 S%lld H%lld D64, 2 threads: %.2f ms without, %.2f ms with "
        "a workspace (%zu bytes)\n",
        static_cast<long long>(seq), static_cast<long long>(heads), plain, in_ws, bytes);
  }
}

}  // namespace
}  // namespace attngen::test
