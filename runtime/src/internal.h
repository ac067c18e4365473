// Internals of the attngen runtime: argument checking and Halide buffer views.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <mutex>  // std::lock_guard, and std::mutex where there are threads
#include <string>
#include <vector>

#include "HalideRuntime.h"
#include "attngen/attngen.h"
#include "attngen/kernel.h"

// ATTNGEN_SINGLE_THREADED (CMake option of the same name): a runtime for one thread, with no
// thread pool, no locks and no thread-local storage, for MCUs and RTOSes without pthreads. Its
// kernels' parallel loops run serially in Halide's "noos" runtime; calls must come from one
// thread at a time (docs/semantics.md, "Resources").
#if ATTNGEN_SINGLE_THREADED
#define ATTNGEN_THREAD_LOCAL
#else
#define ATTNGEN_THREAD_LOCAL thread_local
#endif

namespace attngen::rt {

#if ATTNGEN_SINGLE_THREADED
struct Mutex {  // nothing to exclude
  void lock() {}
  void unlock() {}
};
#else
using Mutex = std::mutex;
#endif

// The first failure of a call: its status and a message naming the argument.
class Check {
 public:
  bool ok() const { return status_ == ATTNGEN_OK; }
  attngen_status status() const { return status_; }
  const std::string& message() const { return message_; }
  // Records the failure (if it is the first) and returns false.
  bool fail(attngen_status status, std::string message);

 private:
  attngen_status status_ = ATTNGEN_OK;
  std::string message_;
};

// The ABI rule of the options structs (attngen.h, "Versions and the ABI rule"): reads `in` into
// *out, which holds the defaults (`in` NULL: they stay): the fields within in->struct_size, or
// fails with ATTNGEN_ERROR_INVALID_ARGUMENT naming `name`.struct_size. first_size: the struct's
// size when it was first published (every field up to its last in version 0.2); fields appended
// later keep their defaults for a caller whose struct_size stops before them.
bool read_options_bytes(Check& c, const void* in, size_t struct_size, size_t first_size,
                        size_t known_size, const char* name, void* out);

template <typename T>
bool read_options(Check& c, const T* in, const char* name, T* out, size_t first_size = sizeof(T)) {
  if (in == nullptr) return true;
  if (!read_options_bytes(c, in, in->struct_size, first_size, sizeof(T), name, out)) return false;
  out->struct_size = sizeof(T);
  return true;
}

// What a tensor argument must look like. dims names each dimension, outermost first, and so
// fixes the rank ("B", "S", "H", "D" -> "q.shape[1] (Sq)").
struct TensorSpec {
  const char* name;
  attngen_dtype dtype;
  int rank;
  const char* const* dims;
  bool output = false;
  // The first floating-point tensor of a call: F32, F16 or BF16 (`dtype` unused). The call's
  // other tensors then expect its dtype, which `dtype_of` names in messages ("q"), and an output
  // that may also be F32 sets `or_f32`.
  bool floating = false;
  const char* dtype_of = nullptr;
  bool or_f32 = false;
};

// The integer a caller's enum field holds, read from its object representation: a C caller may
// store any int there (-1, 1000), and loading a value outside an enum's range as the C++ enum is
// undefined behaviour. Every enum field that comes from a caller is read through this and range-
// checked before it is used as the enum.
template <typename E>
int32_t enum_value(const E& e) {
  static_assert(sizeof(E) == sizeof(int32_t), "attngen's enums are int-sized");
  int32_t v;
  std::memcpy(&v, &e, sizeof v);
  return v;
}

// Whether v is one of the dtypes (the enumerators of attngen_dtype but FORCE_32BIT).
bool is_dtype(int32_t v);

// Overflow-checked int64 arithmetic: false (and *r unspecified) where the result overflows.
inline bool checked_add(int64_t a, int64_t b, int64_t* r) {
  return !__builtin_add_overflow(a, b, r);
}
inline bool checked_mul(int64_t a, int64_t b, int64_t* r) {
  return !__builtin_mul_overflow(a, b, r);
}

// The name and element size of a dtype given as the integer of a caller's field ("unknown dtype"
// and 0 for a value that is no dtype).
const char* dtype_name(int32_t dtype);
size_t dtype_size(int32_t dtype);

// Whether some element of a tensor is reached by two different indices (its elements overlap),
// for sizes >= 1 and strides >= 0 (elements, not bytes) whose offsets fit in int64. Exact: a
// search over index differences with pruning, bounded in work; kUnknown where a tensor defeats
// that bound (docs/semantics.md, "Output overlap").
enum class Overlap { kNone, kOverlap, kUnknown };
Overlap self_overlap(int rank, const int64_t* shape, const int64_t* strides);

// Whether some byte of tensor a is also a byte of tensor b (both validated: sizes >= 1, strides
// >= 0, spans below 2^31 bytes); exact, like self_overlap().
Overlap bytes_overlap(const attngen_tensor& a, const attngen_tensor& b);

// Null, dtype, rank, sizes, strides, addressable extent; for outputs also self-overlap.
bool check_tensor(Check& c, const attngen_tensor* t, const TensorSpec& spec);

// t.shape[dim] must equal `expected`, which `what` names (e.g. "Dqk of q").
bool check_dim(Check& c, const attngen_tensor& t, const TensorSpec& spec, int dim, int64_t expected,
               const char* what);

// The output's bytes must not overlap the input's (exactly: interleaved views that share no
// byte pass; docs/semantics.md, "Output overlap").
bool check_no_alias(Check& c, const attngen_tensor& out, const char* out_name,
                    const attngen_tensor& in, const char* in_name);

// The tensors of an nn.MultiheadAttention layer call: x and y [B, S, E] (S named `seq` in
// messages: "S" for a forward, "t" for a decode step), in_proj [3E, E] and out_proj [E, E]
// weights, optional biases [3E] and [E], num_heads dividing E, and y clear of x and every
// weight. All F32, or with `floating` all of x's dtype (F32, F16 or BF16).
bool check_mha_layer(Check& c, const attngen_tensor* x, const attngen_mha_weights& weights,
                     const attngen_tensor* y, int64_t num_heads, const char* seq,
                     bool floating = false);
// Its parts: the four weights of E input features (dtype, or with dtype_of the dtype of the
// tensor it names; "E of <embed_of>" in messages); y [B, seq, E] of x's dtype and clear of x
// (xs: x's spec); num_heads positive and dividing E.
bool check_mha_weights(Check& c, const attngen_mha_weights& weights, int64_t embed,
                       attngen_dtype dtype, const char* dtype_of, const char* embed_of);
bool check_mha_rows(Check& c, const attngen_tensor* x, const attngen_tensor* y, int64_t embed,
                    const char* seq, const TensorSpec& xs);
bool check_heads(Check& c, int64_t num_heads, int64_t embed);

// A Halide view of an attngen tensor: dimensions reversed (innermost first).
struct HalideView {
  halide_buffer_t buf{};
  halide_dimension_t dims[ATTNGEN_MAX_RANK]{};
};
void make_view(HalideView& view, const attngen_tensor& t);

// A call's modifier's parameters (attngen.h, "Modifiers") against the kernel's layout of them
// (attngen_kernel_info, core/modifier.h): each tensor of its dtype and shape in the call's dims
// (`extent`: B, Hq, Hkv, Sq, Skv), clear of the call's outputs (`outputs`, each with its name in
// messages), none past the layout's; finite scalars, none past the layout's. Their views into
// `views`; nothing is written. True without a modifier.
struct NamedOutput {
  const attngen_tensor* tensor;
  const char* name;
};
bool prepare_modifier(Check& c, const attngen_modifier* m, const attngen_kernel_info& kernel,
                      const int64_t (&extent)[5], std::initializer_list<NamedOutput> outputs,
                      HalideView (&views)[ATTNGEN_MAX_MODIFIER_TENSORS]);
// Puts a prepared modifier's views and scalars into a kernel's arguments.
void pass_modifier(const attngen_modifier* m, const attngen_kernel_info& kernel,
                   HalideView (&views)[ATTNGEN_MAX_MODIFIER_TENSORS], attngen_kernel_args& args);

// A plan's copy of a call's modifier: its name (the plan's kernel's, which outlives the plan), its
// scalars and its tensors' descriptions, data cleared.
struct KeptModifier {
  attngen_modifier modifier{};
  attngen_tensor tensors[ATTNGEN_MAX_MODIFIER_TENSORS]{};
  bool present = false;
  void keep(const attngen_modifier* m, const char* kernel_modifier);
  // The kept modifier over one run's tensor data, into `to`; false (c says why) where the data
  // gives a tensor the plan's modifier does not have (or any tensor without a modifier).
  bool over(Check& c, const void* const (&data)[ATTNGEN_MAX_MODIFIER_TENSORS],
            KeptModifier& to) const;
  const attngen_modifier* get() const { return present ? &modifier : nullptr; }
};

// Kernel selection: the registered or built-in kernel that fits, best ISA first. With `name`
// set, exactly that kernel, which must fit and be supported.
struct KernelQuery {
  attngen_op op;
  int head_dim_qk = 0, head_dim_v = 0;
  attngen_mask_kind mask = ATTNGEN_MASK_NONE;
  attngen_mask_tensor_kind mask_tensor = ATTNGEN_MASK_TENSOR_NONE;
  bool softcap = false;
  attngen_pattern pattern{};
  bool weights = false, lse = false;
  const char* modifier = "";  // the call's modifier's name (attngen_modifier), "" for none
  // The call's tensors' element types, matched against each kernel's descriptor (a call that
  // only a kernel of other dtypes fits fails with ATTNGEN_ERROR_DTYPE, naming the tensor).
  attngen_kernel_dtypes dtypes{ATTNGEN_F32, ATTNGEN_F32, ATTNGEN_F32,
                               ATTNGEN_F32, ATTNGEN_F32, ATTNGEN_F32};
  int64_t seq_q = 0;   // for the choice of query tile
  int64_t seq_kv = 0;  // for the choice between the row and key-block forms
};
const attngen_kernel_info* select_kernel(Check& c, const KernelQuery& query, const char* name);

// The dispatch table as it is now: the kernels added by attngen_register_kernel (usually none),
// then the built-in ones, their count read under the registry's lock once and nothing copied (a
// call in a workspace allocates nothing; registry.cpp). The runtime's scans of the kernels
// go through it (a scan through attngen_kernel_at locks once per kernel: 368 times a call with
// CI's x86 build, a decode call over 16 cached positions 34 -> 31 us: bench/RESULTS.md, "An I8
// cache's scales by group").
struct KernelList {
  size_t added = 0;
  size_t builtins = 0;
  size_t size() const { return added + builtins; }
  const attngen_kernel_info* operator[](size_t i) const;
};
KernelList kernel_list();

// A linear or mha call's query: every tensor of x's dtype (the descriptors' q, k, v and out).
inline KernelQuery layer_query(attngen_op op, attngen_dtype dtype) {
  KernelQuery query{op};
  query.dtypes.q = query.dtypes.k = query.dtypes.v = query.dtypes.out = dtype;
  return query;
}

// Multiply-adds per second of AVX512-BF16 dot products (vdpbf16ps) over those of 512-bit f32
// FMAs on this CPU, measured once per process (cpu_rates.cpp); 0 where it has no AVX512-BF16.
// The avx512bf16 kernels halve the FMA kernels' product instructions and add the rounding of
// P to bf16: they are faster only where the dot products do more multiply-adds a second. Seen:
// 0.52 on a Sapphire-Rapids-class Xeon VM (108 against 211 GFLOP/s on one core; the kernels
// 1.45x slower than avx512's bf16 kernels, which convert to f32); 2.02 on a Zen 4 EPYC VM (the
// kernels 1.79x faster than f32 there); not measured on the Zen 5 EPYC VM where they ran 1.55x
// faster than f32.
double bf16_dot_rate();
constexpr double kBf16DotRateThatPays = 1.25;
// Whether an extension ISA's kernels (attngen::TargetRow::extends) are preferred to its base's
// on this CPU, where both fit a call: avx512bf16 where bf16_dot_rate() >= kBf16DotRateThatPays,
// the others always. attngen_set_isa() of an extension runs its kernels regardless.
bool extension_pays(const char* isa);
// The same for one kernel: the avx512bf16 row's i8-cache decode kernels (q.k as VNNI integer dot
// products, 64 products an instruction against 16 FMAs after 16 conversions) always pay; its
// bf16 kernels as extension_pays(isa).
bool extension_pays(const attngen_kernel_info& kernel);
// Whether a decode kernel quantises q per row and takes q.k as integer dot products: one over an
// i8 cache on a row with them (attngen::row_int8_dots, core/targets.h).
bool int8_dot_kernel(const attngen_kernel_info& kernel);

// Whether some kernel of the query's dtypes might fit it (a conservative filter: op, dtypes, the
// pattern kind and extra outputs, head dims): a call of F16 / BF16 tensors that none fits is
// converted without a failed selection first, whose message would allocate.
bool may_fit_natively(const KernelQuery& query);

// Runs the kernel, capturing Halide's error messages; records which kernel ran. In a call with a
// workspace its scratch comes from the workspace (or the call fails with ATTNGEN_ERROR_WORKSPACE
// before the kernel runs); in a size query the kernel runs on scratch outputs, measured
// (workspace.h).
attngen_status run_kernel(Check& c, const attngen_kernel_info* kernel,
                          const attngen_kernel_args& args);

// Whether a kernel run with these arguments fits the call's workspace (true outside one): the
// check run_kernel() makes, for calls that must know before they write anything (a decode step
// appends to its cache before its decode kernel runs).
bool precheck_kernel(Check& c, const attngen_kernel_info* kernel, const attngen_kernel_args& args);

// Runs a linear kernel: y = x w^T + bias (tensors already checked).
attngen_status run_linear(Check& c, const attngen_kernel_info* kernel, const attngen_tensor& x,
                          const attngen_tensor& w, const attngen_tensor& bias, attngen_tensor& y);

// Publishes a call's outcome to attngen_last_error() / attngen_last_kernel().
attngen_status finish(const Check& c, const attngen_kernel_info* kernel);

// Makes the kernels' scratch memory come from a per-thread cache (allocator.cpp); idempotent.
void install_allocator();

// Asks Linux to back the whole 2 MiB pages inside [p, p + bytes) with huge pages (where
// transparent huge pages are "madvise", the default of Debian's kernels), before the memory is
// first written: for long-lived buffers that kernels stream (KV caches, a persistent layer's
// packed weights). Best effort: no huge pages, no harm; elsewhere nothing (kv_cache.cpp).
void advise_huge_pages(void* p, size_t bytes);

// The runtime's own scratch memory outside a workspace, from the kernels' block cache
// (allocator.cpp); nullptr when out of memory.
void* scratch_allocate(size_t bytes);
void scratch_release(void* p);

// F32 stand-ins for a call's F16 / BF16 tensors, so that an F32 kernel runs a call no kernel of
// its own dtypes takes (convert.cpp). Inputs are converted into dense scratch copies; outputs
// get dense F32 scratch that commit() converts into the caller's tensor once the kernel has
// succeeded (not in a size query). F32 tensors pass through as they are. Scratch comes from the
// call's workspace if it has one (workspace.h), else from the block cache, and is freed with
// the staging.
class F32Staging {
 public:
  F32Staging() = default;
  F32Staging(const F32Staging&) = delete;
  F32Staging& operator=(const F32Staging&) = delete;
  ~F32Staging();
  // The F32 tensor a kernel reads for input `t` (named `name` in messages) or writes for
  // output `t`, in *f32. ATTNGEN_ERROR_OUT_OF_MEMORY or ATTNGEN_ERROR_TOO_LARGE (an F32 copy
  // past what a kernel can address) otherwise.
  bool input(Check& c, const attngen_tensor& t, const char* name, attngen_tensor* f32);
  bool output(Check& c, const attngen_tensor& t, const char* name, attngen_tensor* f32);
  // Writes the staged outputs into the caller's tensors, converting to their dtypes.
  void commit();

 private:
  bool stage(Check& c, const attngen_tensor& t, const char* name, attngen_tensor* f32);
  struct Staged {
    void* scratch;
    attngen_tensor caller;  // the caller's tensor, for an output
    bool output;
    bool owned;  // from scratch_allocate(), released with the staging
  };
  static constexpr int kMaxStaged = 8;  // an MHA layer's six tensors at most
  Staged staged_[kMaxStaged];
  int count_ = 0;
};

// Threads the kernels run on (attngen_set_num_threads(), or Halide's default; threads.cpp).
int thread_count();

// While one is held with `serial` true, the kernels this thread runs take their parallel loops'
// tasks in order on this thread (allocator.cpp, do_par_for): for a call whose work is less than
// what waking the pool's threads costs (decode.cpp, kSerialKeyRows).
class SerialRuns {
 public:
  explicit SerialRuns(bool serial);
  ~SerialRuns();
  SerialRuns(const SerialRuns&) = delete;
  SerialRuns& operator=(const SerialRuns&) = delete;

 private:
  bool serial_;
};

// Held while a kernel runs (run_kernel()): attngen_set_num_threads() and attngen_release_memory()
// resize or stop Halide's thread pool only while no kernel holds one (threads.cpp).
class KernelRunScope {
 public:
  KernelRunScope();
  ~KernelRunScope();
  KernelRunScope(const KernelRunScope&) = delete;
  KernelRunScope& operator=(const KernelRunScope&) = delete;
};

// Frees the calling thread's cached scratch blocks, and the process's reserve of blocks above
// a thread's budget (allocator.cpp).
void release_thread_scratch();

}  // namespace attngen::rt
