// The dispatch table: kernels registered at run time, then the built-in ones generated from
// generated/variants.cmake; selection by configuration and by what this CPU can run.
#include <atomic>
#if defined(__linux__)
#include <dlfcn.h>
#endif
#include <cstdint>
#include <cstring>
#include <new>
#include <string>

#include "core/cpu_features.h"
#include "core/targets.h"
#include "runtime/src/internal.h"

extern "C" const attngen_kernel_info* const attngen_builtin_kernels[];

namespace attngen::rt {

namespace {

Mutex& registry_mutex() {
  static Mutex m;
  return m;
}

// The kernels registered at run time, append-only in chunks that never move: a kernel list is
// their count, read under the registry's lock, and the entries below it are read without the lock
// and without a copy, so that selecting a kernel allocates nothing (a call in a workspace may
// not) also in a process that registered kernels.
constexpr size_t kRegisteredChunk = 64;
constexpr size_t kRegisteredChunks = 1024;  // at most 65536 registered kernels
struct Registered {
  const attngen_kernel_info** chunks[kRegisteredChunks] = {};
  size_t count = 0;  // written under the lock
  const attngen_kernel_info* at(size_t i) const {
    return chunks[i / kRegisteredChunk][i % kRegisteredChunk];
  }
};

Registered& registered() {
  static Registered r;
  return r;
}

// The built-in kernels (a null-terminated array fixed at link time), counted once: every call's
// kernel selection reads each of them, and counting them at every read made it O(n^2) a call
// (with the 368 kernels of CI's x86 build a decode call over 16 cached positions took 73 us, 34
// us once counted; bench/RESULTS.md, "An I8 cache's scales by group").
size_t builtin_count() {
  static const size_t count = [] {
    size_t n = 0;
    while (attngen_builtin_kernels[n] != nullptr) ++n;
    return n;
  }();
  return count;
}

// A CUDA driver with at least one device, probed once through dlopen: the runtime has no link
// dependency on CUDA, and Halide's CUDA runtime loads the same library when a kernel runs.
// A build whose cuda row's kernels are OpenCL ones (ATTNGEN_GPU_API=opencl, a check of the GPU
// schedules on PoCL) asks for an OpenCL device instead; the library stays loaded, and global,
// for Halide's OpenCL runtime (which looks only for the unversioned libOpenCL.so by itself).
bool cuda_device_present() {
  static const bool present = [] {
#if defined(__linux__) && defined(ATTNGEN_GPU_OPENCL)
    void* lib = dlopen("libOpenCL.so.1", RTLD_LAZY | RTLD_GLOBAL);
    if (lib == nullptr) return false;
    using PlatformsFn = int32_t (*)(uint32_t, void**, uint32_t*);
    using DevicesFn = int32_t (*)(void*, uint64_t, uint32_t, void**, uint32_t*);
    auto platforms = reinterpret_cast<PlatformsFn>(dlsym(lib, "clGetPlatformIDs"));
    auto devices = reinterpret_cast<DevicesFn>(dlsym(lib, "clGetDeviceIDs"));
    void* platform[8] = {};
    uint32_t n_platforms = 0;
    if (platforms == nullptr || devices == nullptr || platforms(8, platform, &n_platforms) != 0) {
      return false;
    }
    for (uint32_t p = 0; p < n_platforms && p < 8; ++p) {
      uint32_t n_devices = 0;
      constexpr uint64_t kAllDevices = 0xFFFFFFFF;  // CL_DEVICE_TYPE_ALL
      if (devices(platform[p], kAllDevices, 0, nullptr, &n_devices) == 0 && n_devices > 0) {
        return true;
      }
    }
    return false;
#elif defined(__linux__)
    void* lib = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (lib == nullptr) return false;
    using InitFn = int (*)(unsigned);
    using CountFn = int (*)(int*);
    auto init = reinterpret_cast<InitFn>(dlsym(lib, "cuInit"));
    auto count = reinterpret_cast<CountFn>(dlsym(lib, "cuDeviceGetCount"));
    int devices = 0;
    return init != nullptr && count != nullptr && init(0) == 0 && count(&devices) == 0 &&
           devices > 0;
#else
    return false;
#endif
  }();
  return present;
}

const attngen::TargetRow* row_of(const char* isa) { return attngen::find_target(isa); }

bool cpu_has(const char* isa) {
  const attngen::TargetRow* t = row_of(isa);
  return t != nullptr && attngen::machine_runs(*t, cuda_device_present);
}

// The ISA set by attngen_set_isa(), or nullptr.
std::atomic<const char*> g_forced_isa{nullptr};

// Changed by every attngen_register_kernel(): the choices remembered before it are stale.
std::atomic<uint64_t> g_registry_generation{0};

// A descriptor this runtime can read: the same ABI version, and at least our struct's size.
bool abi_compatible(const attngen_kernel_info& k) {
  return k.abi_version == ATTNGEN_KERNEL_ABI_VERSION &&
         k.struct_size >= sizeof(attngen_kernel_info);
}

// "generic, sse41, ...": the ISAs attngen_set_isa() knows.
std::string isa_names() {
  std::string s;
  for (const attngen::TargetRow& t : attngen::kTargets)
    s += (s.empty() ? "" : ", ") + std::string(t.name);
  return s;
}

// Among kernels of the same ISA: 1 for the form that suits the call's key length.
int form_rank(const attngen_kernel_info& k, const KernelQuery& q) {
  if (q.op == ATTNGEN_OP_DECODE) {
    return (k.requested_key_block > 0) == (q.seq_kv >= attngen::kDecodeLongKeys) ? 1 : 0;
  }
  if (q.op != ATTNGEN_OP_ATTENTION) return 0;
  const int no_extra_output = (k.lse != 0) == q.lse ? 2 : 0;
  const bool long_sequence = q.seq_kv > long_keys(q.mask == ATTNGEN_MASK_CAUSAL);
  return no_extra_output + ((k.requested_key_block > 0) == long_sequence ? 1 : 0);
}

// Whether attngen_set_isa(forced) admits kernels of `isa`: its own, and those of the base ISA an
// extension row (avx512bf16, neonfp16) extends.
bool admitted(const char* isa, const char* forced) {
  if (!std::strcmp(isa, forced)) return true;
  const attngen::TargetRow* row = row_of(forced);
  return row != nullptr && !std::strcmp(row->extends, isa);
}

// Higher is preferred when several kernels fit (the target table's preference of the kernel's
// ISA); an extension row's kernel whose instructions do not pay on this CPU (extension_pays)
// ranks just below its base's, unless attngen_set_isa() asked for it.
int isa_rank(const attngen_kernel_info& k) {
  const attngen::TargetRow* t = row_of(k.isa);
  if (t == nullptr || t->preference < 0) return -1;
  const attngen::TargetRow* base = *t->extends != '\0' ? row_of(t->extends) : nullptr;
  if (base != nullptr && g_forced_isa.load() == nullptr && !extension_pays(k)) {
    return 2 * base->preference - 1;
  }
  return 2 * t->preference;
}

// Query rows a kernel computes for the call: the last tile is computed whole.
int64_t padded_rows(const attngen_kernel_info& k, const KernelQuery& q) {
  const int64_t tile = k.query_tile;
  return tile > 0 ? (q.seq_q + tile - 1) / tile * tile : q.seq_q;
}

// Between kernels of equal ISA and form: a smaller query tile only where it pads at least a tenth
// fewer rows, else the larger tile (fewer per-tile costs). Measured on AVX-512 (bench/RESULTS.md,
// "Measurements behind the code's choices").
bool better_tile(const attngen_kernel_info& k, const attngen_kernel_info& best,
                 const KernelQuery& q) {
  if (q.op != ATTNGEN_OP_ATTENTION) return false;
  const int64_t rows = padded_rows(k, q), best_rows = padded_rows(best, q);
  if (10 * rows <= 9 * best_rows) return true;
  if (10 * best_rows <= 9 * rows) return false;
  return k.query_tile > best.query_tile;
}

// Whether k is preferred to best, both fitting the call, their ISAs of those ranks (isa_rank).
bool better(const attngen_kernel_info& k, int k_rank, const attngen_kernel_info& best,
            int best_rank, const KernelQuery& q) {
  if (k_rank != best_rank) return k_rank > best_rank;
  // A specialised kernel before a generic one; among generic ones the least padding, then the
  // one without an extra output the call does not ask for.
  if (k.generic != best.generic) return !k.generic;
  if (k.generic && k.head_dim_qk + k.head_dim_v != best.head_dim_qk + best.head_dim_v) {
    return k.head_dim_qk + k.head_dim_v < best.head_dim_qk + best.head_dim_v;
  }
  if (form_rank(k, q) != form_rank(best, q)) return form_rank(k, q) > form_rank(best, q);
  return better_tile(k, best, q);
}

const char* op_name(attngen_op op) {
  switch (op) {
    case ATTNGEN_OP_ATTENTION:
      return "attention";
    case ATTNGEN_OP_LINEAR:
      return "linear";
    case ATTNGEN_OP_MHA:
      return "mha";
    case ATTNGEN_OP_DECODE:
      return "decode";
  }
  return "?";
}

std::string describe(const KernelQuery& q) {
  std::string s = std::string("op ") + op_name(q.op);
  if (q.op == ATTNGEN_OP_LINEAR) return s;
  s += ", head dim " + std::to_string(q.head_dim_qk);
  if (q.op == ATTNGEN_OP_ATTENTION) s += "/" + std::to_string(q.head_dim_v);
  s += q.mask == ATTNGEN_MASK_CAUSAL ? ", causal" : ", no causal mask";
  if (q.mask_tensor == ATTNGEN_MASK_TENSOR_BOOL) s += ", bool mask tensor";
  if (q.mask_tensor == ATTNGEN_MASK_TENSOR_ADDITIVE) s += ", additive mask tensor";
  if (q.softcap) s += ", soft cap";
  const attngen_pattern& p = q.pattern;
  switch (p.kind) {
    case ATTNGEN_PATTERN_WINDOW:
      s += ", window [-" + std::to_string(p.window_left) + ", +" + std::to_string(p.window_right) +
           "]";
      break;
    case ATTNGEN_PATTERN_STRIDED:
      s += ", strided " + std::to_string(p.stride);
      break;
    case ATTNGEN_PATTERN_BLOCK_SPARSE:
      s += ", block-sparse " + std::to_string(p.block);
      break;
    case ATTNGEN_PATTERN_GLOBAL_LOCAL:
      s += ", global " + std::to_string(p.global_tokens) + " + local " + std::to_string(p.local);
      break;
    default:
      break;
  }
  if (q.weights) s += ", weights output";
  if (q.lse) s += ", log-sum-exp output";
  if (*q.modifier != '\0') s += std::string(", modifier ") + q.modifier;
  return s;
}

// The first of the call's tensors whose dtype the kernel does not take ("" when all match);
// `want` receives the kernel's.
const char* dtype_mismatch(const attngen_kernel_info& k, const KernelQuery& q,
                           attngen_dtype* want) {
  const std::pair<const char*, attngen_dtype attngen_kernel_dtypes::*> tensors[] = {
      {"q", &attngen_kernel_dtypes::q},
      {"k", &attngen_kernel_dtypes::k},
      {"v", &attngen_kernel_dtypes::v},
      {"out", &attngen_kernel_dtypes::out},
      {"cache", &attngen_kernel_dtypes::cache}};
  for (const auto& [name, field] : tensors) {
    if (q.op == ATTNGEN_OP_DECODE ? name[0] == 'k' || name[0] == 'v' : name[0] == 'c') continue;
    if (k.dtypes.*field != q.dtypes.*field) {
      *want = k.dtypes.*field;
      return name;
    }
  }
  return "";
}

// A generic attention kernel serves any call within its head dims, of its pattern kind (any
// parameters) and with its extra outputs (the masks, the soft cap and the pattern's parameters
// are its run-time inputs); a generic decode kernel any cache, a generic mha kernel any layer
// (causal or not) within its head dims.
bool generic_fits(const attngen_kernel_info& k, const KernelQuery& q) {
  if (q.op == ATTNGEN_OP_DECODE || q.op == ATTNGEN_OP_MHA) {
    return q.head_dim_qk <= k.head_dim_qk && q.head_dim_v <= k.head_dim_v;
  }
  return q.op == ATTNGEN_OP_ATTENTION && q.head_dim_qk <= k.head_dim_qk &&
         q.head_dim_v <= k.head_dim_v && q.pattern.kind == k.pattern.kind &&
         (k.weights != 0) == q.weights && (k.lse != 0 || !q.lse);
}

// Everything but the dtypes.
bool fits_shape(const attngen_kernel_info& k, const KernelQuery& q) {
  if (k.op != q.op) return false;
  // A modifier kernel serves the calls with its modifier, and only those (it needs its
  // parameters).
  // (Most kernels and calls have none: no string comparison then, on every kernel of a scan.)
  const char* km = k.modifier != nullptr ? k.modifier : "";
  if (km[0] != q.modifier[0] || (km[0] != '\0' && std::strcmp(km, q.modifier) != 0)) {
    return false;
  }
  if (q.op == ATTNGEN_OP_LINEAR) return true;
  if (k.generic) return generic_fits(k, q);
  if (k.head_dim_qk != q.head_dim_qk || k.mask != q.mask) return false;
  if (q.op == ATTNGEN_OP_MHA) return true;
  const attngen_pattern &kp = k.pattern, &qp = q.pattern;
  const bool same_pattern =
      kp.kind == qp.kind &&
      (kp.kind != ATTNGEN_PATTERN_WINDOW ||
       (kp.window_left == qp.window_left && kp.window_right == qp.window_right)) &&
      (kp.kind != ATTNGEN_PATTERN_STRIDED || kp.stride == qp.stride) &&
      (kp.kind != ATTNGEN_PATTERN_BLOCK_SPARSE || kp.block == qp.block) &&
      (kp.kind != ATTNGEN_PATTERN_GLOBAL_LOCAL ||
       (kp.local == qp.local && kp.global_tokens == qp.global_tokens));
  // A kernel with a log-sum-exp output serves calls without one (the runtime gives it scratch).
  return k.head_dim_v == q.head_dim_v && k.mask_tensor == q.mask_tensor &&
         (k.softcap != 0) == q.softcap && same_pattern && (k.weights != 0) == q.weights &&
         (k.lse != 0 || !q.lse);
}

bool fits(const attngen_kernel_info& k, const KernelQuery& q) {
  attngen_dtype want;
  return fits_shape(k, q) && *dtype_mismatch(k, q, &want) == '\0';
}

// The call's dtype error against a kernel that fits all but its dtypes.
std::string dtype_error(const attngen_kernel_info& k, const KernelQuery& q) {
  attngen_dtype want = ATTNGEN_F32;
  const char* tensor = dtype_mismatch(k, q, &want);
  const attngen_kernel_dtypes& d = q.dtypes;
  const attngen_dtype got = !std::strcmp(tensor, "q")     ? d.q
                            : !std::strcmp(tensor, "k")   ? d.k
                            : !std::strcmp(tensor, "v")   ? d.v
                            : !std::strcmp(tensor, "out") ? d.out
                                                          : d.cache;
  return std::string(tensor) + " has dtype " + dtype_name(got) + ", expected " + dtype_name(want) +
         " (no kernel for " + describe(q) + " takes " + dtype_name(got) + " " + tensor + ")";
}

// The last choices of select_kernel() on this thread. A call that asks for what an earlier one
// did gets its kernel without a scan of every descriptor (~1.4 us a call with CI's ~400 kernels:
// the fits, the ISAs' ranks by name; bench/RESULTS.md, "Short decode calls on one thread"). The
// key is everything the choice reads of the call (the whole query), the registry's generation and
// the forced ISA; the CPU's features and the bf16 rate are fixed for the process. Trivially
// destructible, so that a thread's first call registers no destructor (an allocation, which a
// call in a workspace must not make: Workspace.TwoThreadsEachWithItsOwn).
struct Choice {
  KernelQuery query{ATTNGEN_OP_ATTENTION};
  char modifier[32] = {};  // the query's, copied (a longer name is not remembered)
  uint64_t generation = 0;
  const char* forced = nullptr;
  const attngen_kernel_info* kernel = nullptr;
};
constexpr int kChoices = 8;
struct Choices {
  Choice entries[kChoices];
  int next = 0;
};

bool same_query(const KernelQuery& a, const KernelQuery& b, const char* b_modifier) {
  return a.op == b.op && a.head_dim_qk == b.head_dim_qk && a.head_dim_v == b.head_dim_v &&
         a.mask == b.mask && a.mask_tensor == b.mask_tensor && a.softcap == b.softcap &&
         std::memcmp(&a.pattern, &b.pattern, sizeof a.pattern) == 0 && a.weights == b.weights &&
         a.lse == b.lse && std::strcmp(b_modifier, a.modifier) == 0 &&
         std::memcmp(&a.dtypes, &b.dtypes, sizeof a.dtypes) == 0 && a.seq_q == b.seq_q &&
         a.seq_kv == b.seq_kv;
}

Choices& choices() {
  static ATTNGEN_THREAD_LOCAL Choices c;
  return c;
}

}  // namespace

const attngen_kernel_info* KernelList::operator[](size_t i) const {
  return i < added ? registered().at(i) : attngen_builtin_kernels[i - added];
}

KernelList kernel_list() {
  std::lock_guard<Mutex> lock(registry_mutex());
  return KernelList{registered().count, builtin_count()};
}

const attngen_kernel_info* select_kernel(Check& c, const KernelQuery& query, const char* name) {
  if (name != nullptr) {
    const attngen_kernel_info* k = attngen_find_kernel(name);
    if (k == nullptr) {
      c.fail(ATTNGEN_ERROR_NO_KERNEL, std::string("no kernel named '") + name + "'");
      return nullptr;
    }
    if (!fits_shape(*k, query)) {
      c.fail(ATTNGEN_ERROR_NO_KERNEL, std::string("kernel '") + name +
                                          "' does not fit this call, which needs " +
                                          describe(query));
      return nullptr;
    }
    if (!fits(*k, query)) {
      c.fail(ATTNGEN_ERROR_DTYPE, dtype_error(*k, query));
      return nullptr;
    }
    if (!attngen_kernel_supported(k)) {
      c.fail(ATTNGEN_ERROR_UNSUPPORTED_TARGET,
             std::string("kernel '") + name + "' needs " + k->isa + ", which this machine lacks");
      return nullptr;
    }
    return k;
  }
  const char* forced = g_forced_isa.load();
  const uint64_t generation = g_registry_generation.load(std::memory_order_acquire);
  Choices& remembered = choices();
  for (const Choice& e : remembered.entries) {
    if (e.kernel != nullptr && e.generation == generation && e.forced == forced &&
        same_query(query, e.query, e.modifier)) {
      return e.kernel;
    }
  }
  const attngen_kernel_info* best = nullptr;
  bool unsupported_fit = false;
  const KernelList kernels = kernel_list();
  const attngen_kernel_info* other_dtypes = nullptr;  // fits all but the call's dtypes
  int best_rank = -1;
  for (size_t i = 0; i < kernels.size(); ++i) {
    const attngen_kernel_info* k = kernels[i];
    if (!fits_shape(*k, query)) continue;
    // (The dtypes before the ISA's rank, a look-up by name: one kernel of other dtypes is
    // enough for the error below.)
    const bool dtypes_fit = fits(*k, query);
    if (!dtypes_fit && other_dtypes != nullptr) continue;
    const int rank = isa_rank(*k);
    if (forced != nullptr ? !admitted(k->isa, forced) : rank < 0) {
      continue;  // a GPU kernel copies host buffers each call: used only when asked for
    }
    // (Only kernels of an admitted ISA make a dtype error: a call whose ISA has no kernel at all
    // is NO_KERNEL, even where another ISA has one of other dtypes.)
    if (!dtypes_fit) {
      other_dtypes = k;
      continue;
    }
    if (!attngen_kernel_supported(k)) {
      unsupported_fit = true;
      continue;
    }
    if (best == nullptr || better(*k, rank, *best, best_rank, query)) {
      best = k;
      best_rank = rank;
    }
  }
  if (best != nullptr && std::strlen(query.modifier) < sizeof remembered.entries[0].modifier) {
    Choice& e = remembered.entries[remembered.next];
    remembered.next = (remembered.next + 1) % kChoices;
    e.query = query;
    std::strcpy(e.modifier, query.modifier);
    e.query.modifier = "";
    e.generation = generation;
    e.forced = forced;
    e.kernel = best;
  }
  if (best == nullptr) {
    if (other_dtypes != nullptr && !unsupported_fit) {
      c.fail(ATTNGEN_ERROR_DTYPE, dtype_error(*other_dtypes, query));
    } else if (unsupported_fit) {
      c.fail(ATTNGEN_ERROR_UNSUPPORTED_TARGET,
             "the kernels generated for " + describe(query) + " need ISAs this machine lacks");
    } else if (forced != nullptr) {
      c.fail(ATTNGEN_ERROR_NO_KERNEL, std::string("no ") + forced + " kernel was generated for " +
                                          describe(query) + " (attngen_set_isa(\"" + forced +
                                          "\") is in effect)");
    } else {
      c.fail(ATTNGEN_ERROR_NO_KERNEL, "no kernel was generated for " + describe(query) +
                                          " (add one with attngen_add_kernel)");
    }
  }
  return best;
}

}  // namespace attngen::rt

extern "C" {

size_t attngen_kernel_count(void) { return attngen::rt::kernel_list().size(); }

const attngen_kernel_info* attngen_kernel_at(size_t index) {
  const attngen::rt::KernelList kernels = attngen::rt::kernel_list();
  return index < kernels.size() ? kernels[index] : nullptr;
}

const attngen_kernel_info* attngen_find_kernel(const char* name) {
  if (name == nullptr) return nullptr;
  const attngen::rt::KernelList kernels = attngen::rt::kernel_list();
  for (size_t i = 0; i < kernels.size(); ++i) {
    if (!std::strcmp(kernels[i]->name, name)) return kernels[i];
  }
  return nullptr;
}

int attngen_kernel_supported(const attngen_kernel_info* kernel) {
  return kernel != nullptr && attngen::rt::cpu_has(kernel->isa) ? 1 : 0;
}

attngen_status attngen_set_isa(const char* isa) {
  attngen::rt::Check c;
  if (isa == nullptr || isa[0] == '\0') {
    attngen::rt::g_forced_isa.store(nullptr);
    return attngen::rt::finish(c, nullptr);
  }
  const attngen::TargetRow* row = attngen::rt::row_of(isa);
  const char* known = row != nullptr ? row->name : nullptr;
  if (known == nullptr) {
    c.fail(ATTNGEN_ERROR_INVALID_ARGUMENT,
           std::string("unknown ISA '") + isa + "', expected " + attngen::rt::isa_names());
  } else if (!attngen::rt::cpu_has(known)) {
    c.fail(ATTNGEN_ERROR_UNSUPPORTED_TARGET,
           std::string("this machine cannot run ") + known + " kernels");
  } else {
    attngen::rt::g_forced_isa.store(known);
  }
  return attngen::rt::finish(c, nullptr);
}

namespace {

// Whether the build has (or a caller registered) a kernel of the ISA: a build made for some ISAs
// only (ATTNGEN_KERNEL_ISAS) must not name a better one the CPU runs but no kernel uses.
bool has_kernels_of(const char* isa) {
  const attngen::rt::KernelList kernels = attngen::rt::kernel_list();
  for (size_t i = 0; i < kernels.size(); ++i) {
    if (std::strcmp(kernels[i]->isa, isa) == 0) return true;
  }
  return false;
}

}  // namespace

const char* attngen_isa(void) {
  const char* forced = attngen::rt::g_forced_isa.load();
  if (forced != nullptr) return forced;
  const attngen::TargetRow* best = nullptr;
  for (const attngen::TargetRow& t : attngen::kTargets) {
    // Extension rows add kernels of some dtypes to their base ISA, which this names.
    if (t.preference >= 0 && *t.extends == '\0' &&
        (best == nullptr || t.preference > best->preference) && attngen::rt::cpu_has(t.name) &&
        has_kernels_of(t.name)) {
      best = &t;
    }
  }
  return best != nullptr ? best->name : "generic";
}

attngen_status attngen_register_kernel(const attngen_kernel_info* kernel) {
  attngen::rt::Check c;
  if (kernel == nullptr) {
    c.fail(ATTNGEN_ERROR_NULL_POINTER, "kernel descriptor is NULL");
    return attngen::rt::finish(c, nullptr);
  }
  if (!attngen::rt::abi_compatible(*kernel)) {
    c.fail(ATTNGEN_ERROR_ABI,
           "kernel descriptor of ABI version " + std::to_string(kernel->abi_version) + " (" +
               std::to_string(kernel->struct_size) + " bytes); this runtime reads version " +
               std::to_string(ATTNGEN_KERNEL_ABI_VERSION) + " (" +
               std::to_string(sizeof(attngen_kernel_info)) +
               " bytes): regenerate the kernel with this attngen");
    return attngen::rt::finish(c, nullptr);
  }
  if (kernel->name == nullptr || kernel->run == nullptr || kernel->isa == nullptr) {
    c.fail(ATTNGEN_ERROR_NULL_POINTER, "kernel descriptor's name, isa or run is NULL");
    return attngen::rt::finish(c, nullptr);
  }
  // Its enum fields, read as the ints they hold (attngen::rt::enum_value): dispatch compares
  // them as enums, which values outside their ranges must never reach.
  {
    using attngen::rt::enum_value;
    using attngen::rt::is_dtype;
    const attngen_kernel_info& k = *kernel;
    const attngen_kernel_dtypes& d = k.dtypes;
    const struct {
      int32_t value, max;
      const char* name;
    } fields[] = {{enum_value(k.op), ATTNGEN_OP_DECODE, "op"},
                  {enum_value(k.mask), ATTNGEN_MASK_CAUSAL, "mask"},
                  {enum_value(k.mask_tensor), ATTNGEN_MASK_TENSOR_ADDITIVE, "mask_tensor"},
                  {enum_value(k.pattern.kind), ATTNGEN_PATTERN_GLOBAL_LOCAL, "pattern.kind"}};
    for (const auto& f : fields) {
      if (f.value < 0 || f.value > f.max) {
        c.fail(ATTNGEN_ERROR_INVALID_ARGUMENT, std::string("kernel descriptor's ") + f.name +
                                                   " is " + std::to_string(f.value) +
                                                   ", expected 0 to " + std::to_string(f.max));
        return attngen::rt::finish(c, nullptr);
      }
    }
    // The packed weights of a linear or MHA kernel have panels of at least one row.
    if ((k.op == ATTNGEN_OP_LINEAR || k.op == ATTNGEN_OP_MHA) && k.weight_panel < 1) {
      c.fail(ATTNGEN_ERROR_INVALID_ARGUMENT, "kernel descriptor's weight_panel is " +
                                                 std::to_string(k.weight_panel) +
                                                 ", expected at least 1 for a linear or mha "
                                                 "kernel");
      return attngen::rt::finish(c, nullptr);
    }
    for (const attngen_dtype* t : {&d.q, &d.k, &d.v, &d.out, &d.mask, &d.cache}) {
      if (!is_dtype(enum_value(*t))) {
        c.fail(ATTNGEN_ERROR_INVALID_ARGUMENT, "kernel descriptor's dtypes hold " +
                                                   std::to_string(enum_value(*t)) +
                                                   ", expected an ATTNGEN_* dtype");
        return attngen::rt::finish(c, nullptr);
      }
    }
  }
  {
    // The name's check and the append under one lock: two threads registering one name cannot
    // both succeed.
    std::lock_guard<attngen::rt::Mutex> lock(attngen::rt::registry_mutex());
    attngen::rt::Registered& r = attngen::rt::registered();
    const attngen::rt::KernelList kernels{r.count, attngen::rt::builtin_count()};
    for (size_t i = 0; i < kernels.size(); ++i) {
      if (!std::strcmp(kernels[i]->name, kernel->name)) {
        c.fail(ATTNGEN_ERROR_INVALID_ARGUMENT,
               std::string("a kernel named '") + kernel->name + "' is already registered");
        return attngen::rt::finish(c, nullptr);
      }
    }
    const size_t chunk = r.count / attngen::rt::kRegisteredChunk;
    if (chunk >= attngen::rt::kRegisteredChunks) {
      c.fail(ATTNGEN_ERROR_TOO_LARGE,
             "the registry holds " + std::to_string(r.count) + " kernels, the most it can");
      return attngen::rt::finish(c, nullptr);
    }
    if (r.chunks[chunk] == nullptr) {
      r.chunks[chunk] =
          new (std::nothrow) const attngen_kernel_info*[attngen::rt::kRegisteredChunk];
      if (r.chunks[chunk] == nullptr) {
        c.fail(ATTNGEN_ERROR_OUT_OF_MEMORY, "no memory for the registry's next entries");
        return attngen::rt::finish(c, nullptr);
      }
    }
    r.chunks[chunk][r.count % attngen::rt::kRegisteredChunk] = kernel;
    ++r.count;
    attngen::rt::g_registry_generation.fetch_add(1, std::memory_order_acq_rel);
  }
  return attngen::rt::finish(c, nullptr);
}

}  // extern "C"
