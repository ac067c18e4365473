// Timing harness of bench/autotune: loads candidate kernels (shared objects made from the
// generator's object files, each with its own Halide runtime) with dlopen, checks each against a
// float64 reference on a small odd shape, and times them on the given shapes, interleaved: in
// every round each shape runs once per kernel, the kernels' order rotating from round to round,
// so that a change of machine load hits every kernel alike. Prints one JSON object on stdout.
//
//   autotune_harness --op attention [--causal] [--cap] --shape B,H,S,D[,Dv] ...
//       --lib cand.so:function [--lib ...] [--rounds N] [--warmup N] [--max-seconds S]
//       [--check] [--check-timed] [--allocator cached|system] [--nested runtime|halide]
//   autotune_harness --op linear --shape B,S,E,N ... --lib ...
//
// One harness serves every candidate (no per-candidate compile), and running several kernels in
// one process gives paired measurements (bench/README.md, "Autotuning"). It needs only
// HalideRuntime.h, the runtime's header-only block cache and nested-loop policy, the project's
// float64 reference (tests/reference.cpp, compiled with it: plain C++ and the public header) and
// libdl, so it cross-compiles (e.g. aarch64-linux-gnu-g++, run under qemu).
// Threads: the Halide runtime's HL_NUM_THREADS (default: one per core).
#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "../runtime/src/block_cache.h"
#include "../runtime/src/nested_loops.h"
#include "../tests/reference.h"
#include "HalideRuntime.h"
#include "flops.h"

namespace {

using ArgvFn = int (*)(void**);
using MetadataFn = const halide_filter_metadata_t* (*)();
using ErrorHandler = void (*)(void*, const char*);
using SetErrorHandlerFn = ErrorHandler (*)(ErrorHandler);

std::string g_last_error;  // from the kernels' Halide runtimes, instead of their abort()

void record_error(void*, const char* message) { g_last_error = message; }

// The kernels' halide_malloc/halide_free (--allocator cached, the default): the attngen
// runtime's own per-thread block cache (runtime/src/block_cache.h: power-of-two size classes,
// last freed first). Schedules that allocate per parallel task otherwise time glibc: its
// per-thread arenas shrink and grow again around every task, and how much that costs depends
// on the process's heap history. Measured (2-core Ice Lake VM, B1 H12 S1024 D64 causal,
// default schedule): 45-63 ms with glibc's defaults, 21-25 ms with one arena, and a candidate
// with smaller per-task blocks (query_tile 32) won 0.83-0.91x by allocating less, not by
// computing faster (0.98-0.99x with one arena). The cache keeps that out of the search, as it
// does for users of the runtime (bench/README.md).
using attngen::block_cache::allocate;
using attngen::block_cache::release;

[[noreturn]] void fail(const std::string& message) {
  std::fprintf(stderr, "autotune_harness: %s\n", message.c_str());
  std::exit(2);
}

// The kernels' nested parallel loops (--nested runtime, the default): run as the attngen runtime
// runs them (runtime/src/nested_loops.h: in order where the enclosing loops spread evenly over
// the threads), not as Halide's pool would. A schedule's loops then cost what they cost users:
// with Halide's pool a head's query tiles ran on both threads, and the candidates that win there
// (a coarser parallel_grain, ViT 0.85x) did not win through the runtime. Each shared object has
// its own Halide runtime, so each gets its own hook: slot n calls object n's default do_par_for.
constexpr int kMaxKernels = 32;
struct RuntimeHooks {
  attngen::nested_loops::ParFor par_for = nullptr;
  attngen::nested_loops::DoTask do_task = nullptr;
};
std::array<RuntimeHooks, kMaxKernels> g_hooks;
int g_threads = 1;

template <int N>
int nested_par_for(void* user_context, halide_task_t fn, int min, int size, uint8_t* closure) {
  return attngen::nested_loops::run(user_context, fn, min, size, closure, g_threads,
                                    g_hooks[N].par_for, g_hooks[N].do_task);
}

template <int... N>
constexpr std::array<attngen::nested_loops::ParFor, sizeof...(N)> par_for_hooks(
    std::integer_sequence<int, N...>) {
  return {&nested_par_for<N>...};
}
constexpr auto kParForHooks = par_for_hooks(std::make_integer_sequence<int, kMaxKernels>());

struct Options {
  std::string op = "attention";
  bool causal = false, cap = false, check = false, check_timed = false;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<std::string> libs;
  std::string allocator = "cached";
  std::string nested = "runtime";
  int rounds = 5, warmup = 1;
  double max_seconds = 1e9;
};

// A dense tensor as a Halide buffer, dims innermost first.
struct Tensor {
  std::vector<halide_dimension_t> dims;
  std::vector<uint8_t> data;
  halide_buffer_t buf{};

  Tensor(halide_type_t type, std::vector<int32_t> extents) {
    int32_t stride = 1;
    for (int32_t e : extents) {
      dims.push_back(halide_dimension_t{0, e, stride, 0});
      stride *= e;
    }
    data.assign(static_cast<size_t>(stride) * type.bytes(), 0);
    buf.host = data.data();
    buf.type = type;
    buf.dimensions = static_cast<int32_t>(dims.size());
    buf.dim = dims.data();
  }
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;
  float* f32() { return reinterpret_cast<float*>(data.data()); }
  size_t size() const { return data.size() / buf.type.bytes(); }
  void random(uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    for (size_t i = 0; i < size(); ++i) f32()[i] = d(rng);
  }
};

// One call's arguments, by name, for one shape: attention q k v kv_len scale softcap_value
// bottom_right -> out; linear x w bias -> y.
struct Problem {
  Options opt;
  std::vector<int64_t> shape;
  std::vector<Tensor*> tensors;
  std::vector<std::pair<std::string, Tensor*>> by_name;
  float scale = 1.0f, softcap = 30.0f;
  // Top-left, as the runtime passes it whenever kv_len == Sq in every batch (Sq = Skv here, every
  // key valid: the two alignments agree); kernels specialise on it.
  bool bottom_right = false;
  Tensor* out = nullptr;
  double flops = 0;

  Problem(const Options& o, const std::vector<int64_t>& s) : opt(o), shape(s) {
    const halide_type_t f32{halide_type_float, 32, 1}, i32{halide_type_int, 32, 1};
    if (opt.op == "attention") {
      if (s.size() < 4 || s.size() > 5) fail("attention shapes are B,H,S,D[,Dv]");
      const int32_t B = s[0], H = s[1], S = s[2], D = s[3], Dv = s.size() > 4 ? s[4] : s[3];
      add("q", f32, {D, H, S, B}).random(1);
      add("k", f32, {D, H, S, B}).random(2);
      add("v", f32, {Dv, H, S, B}).random(3);
      Tensor& kv_len = add("kv_len", i32, {B});
      for (int32_t b = 0; b < B; ++b) reinterpret_cast<int32_t*>(kv_len.data.data())[b] = S;
      out = &add("out", f32, {Dv, H, S, B});
      scale = 1.0f / std::sqrt(static_cast<float>(D));
      flops = attngen::bench::attention_flops(
          B, H, attngen::bench::self_attention_pairs(S, opt.causal), D, Dv);
    } else if (opt.op == "linear") {
      if (s.size() != 4) fail("linear shapes are B,S,E,N");
      const int32_t B = s[0], S = s[1], E = s[2], N = s[3];
      add("x", f32, {E, S, B}).random(1);
      add("w", f32, {E, N}).random(2);
      add("bias", f32, {N}).random(3);
      out = &add("y", f32, {N, S, B});
      flops = attngen::bench::linear_flops(B, S, E, N);
    } else {
      fail("--op must be attention or linear");
    }
  }
  ~Problem() {
    for (Tensor* t : tensors) delete t;
  }
  Tensor& add(const std::string& name, halide_type_t type, std::vector<int32_t> extents) {
    tensors.push_back(new Tensor(type, std::move(extents)));
    by_name.emplace_back(name, tensors.back());
    return *tensors.back();
  }
  std::string describe() const {
    std::ostringstream o;
    for (size_t i = 0; i < shape.size(); ++i) o << (i ? "," : "") << shape[i];
    return o.str();
  }

  // The float64 reference of the output (tests/reference.h). Attention: Sq = Skv, so causal
  // top-left is bottom-right.
  std::vector<double> reference() {
    if (opt.op == "linear") {
      const int64_t B = shape[0], S = shape[1], E = shape[2], N = shape[3];
      return attngen::test::reference_linear(wide("x"), B * S, E, wide("w"), N, wide("bias"));
    }
    const int64_t B = shape[0], H = shape[1], S = shape[2], D = shape[3];
    const int64_t Dv = shape.size() > 4 ? shape[4] : D;
    // [B, S, H, d] dense: the tensors' dims innermost first are {d, H, S, B}.
    const auto view = [&](const std::string& name, int64_t d) {
      return attngen::test::View{find(name)->f32(), {B, S, H, d}, {S * H * d, H * d, d, 1}};
    };
    attngen::test::RefAttention r;
    r.scale = scale;
    r.softcap = opt.cap ? softcap : 0.0;
    r.causal = opt.causal;
    return attngen::test::reference_attention(view("q", D), view("k", D), view("v", Dv), r);
  }

  // A float32 tensor's values as doubles.
  std::vector<double> wide(const std::string& name) {
    Tensor* t = find(name);
    return std::vector<double>(t->f32(), t->f32() + t->size());
  }

  Tensor* find(const std::string& name) {
    for (auto& [n, t] : by_name) {
      if (n == name) return t;
    }
    return nullptr;
  }

  // linear: w [N, E] packed as the runtime packs it for a kernel whose panels hold `panel`
  // output features (docs/semantics.md, "Packed weights"): (pi, e, po) = w[po * panel + pi][e],
  // rows past N zero. One tensor per panel width, made on first use.
  Tensor* packed_w(int32_t panel) {
    const std::string name = "w/panel" + std::to_string(panel);
    if (Tensor* t = find(name)) return t;
    const int32_t E = shape[2], N = shape[3], panels = (N + panel - 1) / panel;
    const float* w = find("w")->f32();
    Tensor& t = add(name, halide_type_t{halide_type_float, 32, 1}, {panel, E, panels});
    for (int32_t po = 0; po < panels; ++po)
      for (int32_t e = 0; e < E; ++e)
        for (int32_t pi = 0; pi < panel; ++pi) {
          const int32_t n = po * panel + pi;
          t.f32()[(int64_t(po) * E + e) * panel + pi] = n < N ? w[int64_t(n) * E + e] : 0.0f;
        }
    return &t;
  }
};

struct Kernel {
  std::string lib, function;
  ArgvFn argv = nullptr;
  const halide_filter_metadata_t* md = nullptr;

  int32_t panel = 0;  // linear: output features per weight panel (bounds query, first call)

  // The argv of one call on `p`, in the order of the function's metadata. `query`, where given,
  // stands for the packed weights (a bounds query).
  std::vector<void*> args(Problem& p, halide_buffer_t* query = nullptr) {
    static void* user_context = nullptr;
    std::vector<void*> a;
    for (int i = 0; i < md->num_arguments; ++i) {
      const halide_filter_argument_t& arg = md->arguments[i];
      const std::string name = arg.name;
      if (arg.kind == halide_argument_kind_input_scalar) {
        if (name == "__user_context") {
          a.push_back(&user_context);
        } else if (name == "scale") {
          a.push_back(&p.scale);
        } else if (name == "softcap_value") {
          a.push_back(&p.softcap);
        } else if (name == "bottom_right") {
          a.push_back(&p.bottom_right);
        } else {
          fail(function + ": unknown scalar argument " + name);
        }
      } else if (name == "w" && arg.dimensions == 3) {
        a.push_back(query != nullptr ? query : &p.packed_w(weight_panel(p))->buf);
      } else {
        Tensor* t = p.find(name);
        if (t == nullptr) fail(function + ": no tensor for argument " + name);
        if (arg.dimensions != t->buf.dimensions) {
          fail(function + ": argument " + name + " has " + std::to_string(arg.dimensions) +
               " dimensions, expected " + std::to_string(t->buf.dimensions));
        }
        a.push_back(&t->buf);
      }
    }
    return a;
  }
  // The panel width the kernel requires of its packed weights: the extent of w's first
  // dimension that a bounds query (w without memory) reports.
  int32_t weight_panel(Problem& p) {
    if (panel > 0) return panel;
    halide_dimension_t dims[3] = {};
    halide_buffer_t query{};
    query.type = halide_type_t{halide_type_float, 32, 1};
    query.dimensions = 3;
    query.dim = dims;
    std::vector<void*> a = args(p, &query);
    const int rc = argv(a.data());
    if (rc != 0 || dims[0].extent <= 0)
      fail(function + ": bounds query of w failed " + g_last_error);
    return panel = dims[0].extent;
  }
  double call(Problem& p) {
    std::vector<void*> a = args(p);
    const auto start = std::chrono::steady_clock::now();
    const int rc = argv(a.data());
    const auto end = std::chrono::steady_clock::now();
    if (rc != 0) {
      fail(function + " returned " + std::to_string(rc) + " on " + p.describe() + ": " +
           g_last_error);
    }
    return std::chrono::duration<double, std::milli>(end - start).count();
  }
};

Kernel load(const std::string& spec, bool cached_allocator, bool runtime_nested, int slot) {
  const size_t colon = spec.rfind(':');
  if (colon == std::string::npos) fail("--lib takes path.so:function_name");
  Kernel k;
  k.lib = spec.substr(0, colon);
  k.function = spec.substr(colon + 1);
  void* handle = dlopen(k.lib.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) fail(std::string("dlopen: ") + dlerror());
  k.argv = reinterpret_cast<ArgvFn>(dlsym(handle, (k.function + "_argv").c_str()));
  auto metadata = reinterpret_cast<MetadataFn>(dlsym(handle, (k.function + "_metadata").c_str()));
  if (k.argv == nullptr || metadata == nullptr) fail(k.lib + ": no " + k.function + "_argv");
  k.md = metadata();
  // Each shared object carries its own runtime: report its errors rather than abort.
  auto set_handler = reinterpret_cast<SetErrorHandlerFn>(dlsym(handle, "halide_set_error_handler"));
  if (set_handler != nullptr) set_handler(&record_error);
  if (cached_allocator) {
    auto set_malloc = reinterpret_cast<halide_malloc_t (*)(halide_malloc_t)>(
        dlsym(handle, "halide_set_custom_malloc"));
    auto set_free =
        reinterpret_cast<halide_free_t (*)(halide_free_t)>(dlsym(handle, "halide_set_custom_free"));
    if (set_malloc == nullptr || set_free == nullptr) fail(k.lib + ": no halide_set_custom_malloc");
    set_malloc(&allocate);
    set_free(&release);
  }
  if (runtime_nested) {
    using SetParFor = halide_do_par_for_t (*)(halide_do_par_for_t);
    auto set_par_for = reinterpret_cast<SetParFor>(dlsym(handle, "halide_set_custom_do_par_for"));
    g_hooks[slot].par_for =
        reinterpret_cast<attngen::nested_loops::ParFor>(dlsym(handle, "halide_default_do_par_for"));
    g_hooks[slot].do_task =
        reinterpret_cast<attngen::nested_loops::DoTask>(dlsym(handle, "halide_do_task"));
    if (set_par_for == nullptr || g_hooks[slot].par_for == nullptr ||
        g_hooks[slot].do_task == nullptr) {
      fail(k.lib + ": no halide_set_custom_do_par_for (--nested halide runs without it)");
    }
    set_par_for(kParForHooks[slot]);
  }
  return k;
}

std::vector<int64_t> parse_shape(const std::string& s) {
  std::vector<int64_t> v;
  std::stringstream in(s);
  std::string part;
  while (std::getline(in, part, ',')) {
    char* end = nullptr;
    const long long x = std::strtoll(part.c_str(), &end, 10);
    if (part.empty() || *end != '\0' || x <= 0) fail("bad shape '" + s + "'");
    v.push_back(x);
  }
  return v;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) fail(a + " needs a value");
      return argv[++i];
    };
    if (a == "--op") {
      o.op = value();
    } else if (a == "--causal") {
      o.causal = true;
    } else if (a == "--cap") {
      o.cap = true;
    } else if (a == "--check") {
      o.check = true;
    } else if (a == "--allocator") {
      o.allocator = value();
      if (o.allocator != "cached" && o.allocator != "system") {
        fail("--allocator is cached or system");
      }
    } else if (a == "--nested") {
      o.nested = value();
      if (o.nested != "runtime" && o.nested != "halide") fail("--nested is runtime or halide");
    } else if (a == "--check-timed") {
      o.check_timed = true;
    } else if (a == "--shape") {
      o.shapes.push_back(parse_shape(value()));
    } else if (a == "--lib") {
      o.libs.push_back(value());
    } else if (a == "--rounds") {
      o.rounds = std::max(1, std::atoi(value().c_str()));
    } else if (a == "--warmup") {
      o.warmup = std::max(0, std::atoi(value().c_str()));
    } else if (a == "--max-seconds") {
      o.max_seconds = std::atof(value().c_str());
    } else {
      fail("unknown argument " + a);
    }
  }
  if (o.libs.empty()) fail("no --lib");
  if (o.libs.size() > kMaxKernels) fail("at most " + std::to_string(kMaxKernels) + " --lib");
  return o;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

int main(int argc, char** argv) {
  const Options opt = parse(argc, argv);
  // The thread count the kernels' Halide runtimes start with (HL_NUM_THREADS, else one per
  // core), which the nested-loop policy weighs the enclosing loops' tasks against.
  const char* env_threads = std::getenv("HL_NUM_THREADS");
  g_threads = env_threads != nullptr && std::atoi(env_threads) > 0
                  ? std::atoi(env_threads)
                  : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  std::vector<Kernel> kernels;
  for (const std::string& spec : opt.libs) {
    kernels.push_back(load(spec, opt.allocator == "cached", opt.nested == "runtime",
                           static_cast<int>(kernels.size())));
  }

  // Correctness first (a wrong candidate must never win): on a small odd shape, or with
  // --check-timed on every timed shape (for pipelines that only run at sizes near their
  // estimates, such as some autoschedulers').
  std::vector<double> errors(kernels.size(), 0.0);
  std::vector<std::vector<int64_t>> checks;
  if (opt.check) {
    if (opt.op == "attention") {
      const std::vector<int64_t>& s =
          opt.shapes.empty() ? std::vector<int64_t>{1, 1, 1, 64} : opt.shapes.front();
      checks.push_back({2, 3, 67, s[3]});
      if (s.size() > 4) checks.back().push_back(s[4]);
    } else {
      checks.push_back({2, 37, 40, 53});
    }
  }
  if (opt.check_timed) checks.insert(checks.end(), opt.shapes.begin(), opt.shapes.end());
  for (const std::vector<int64_t>& shape : checks) {
    Problem p(opt, shape);
    const std::vector<double> ref = p.reference();
    double scale = 1e-30;
    for (double r : ref) scale = std::max(scale, std::fabs(r));
    for (size_t k = 0; k < kernels.size(); ++k) {
      std::fill(p.out->data.begin(), p.out->data.end(), 0);
      kernels[k].call(p);
      for (size_t i = 0; i < ref.size(); ++i) {
        const double e = std::fabs(p.out->f32()[i] - ref[i]) / scale;
        errors[k] = std::isnan(e) ? INFINITY : std::max(errors[k], e);
      }
    }
  }

  std::vector<Problem*> problems;
  for (const auto& s : opt.shapes) problems.push_back(new Problem(opt, s));
  // times[kernel][shape]
  std::vector<std::vector<std::vector<double>>> times(
      kernels.size(), std::vector<std::vector<double>>(problems.size()));
  for (Problem* p : problems) {
    for (Kernel& k : kernels) {
      for (int w = 0; w < opt.warmup; ++w) k.call(*p);
    }
  }
  const auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < opt.rounds; ++r) {
    for (size_t s = 0; s < problems.size(); ++s) {
      for (size_t n = 0; n < kernels.size(); ++n) {
        const size_t k = (n + r) % kernels.size();
        times[k][s].push_back(kernels[k].call(*problems[s]));
      }
    }
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (elapsed > opt.max_seconds) break;
  }

  std::printf("{\"kernels\": [");
  for (size_t k = 0; k < kernels.size(); ++k) {
    std::printf("%s\n  {\"lib\": \"%s\", \"function\": \"%s\", \"target\": \"%s\"", k ? "," : "",
                kernels[k].lib.c_str(), kernels[k].function.c_str(), kernels[k].md->target);
    if (opt.check || opt.check_timed) {
      std::printf(", \"max_rel_error\": %.3g", std::isfinite(errors[k]) ? errors[k] : 1e30);
    }
    std::printf(", \"shapes\": [");
    for (size_t s = 0; s < problems.size(); ++s) {
      const double med = median(times[k][s]);
      std::printf("%s{\"shape\": \"%s\", \"median_ms\": %.4f, \"gflops\": %.2f, \"times_ms\": [",
                  s ? ", " : "", problems[s]->describe().c_str(), med,
                  problems[s]->flops / med * 1e-6);
      for (size_t i = 0; i < times[k][s].size(); ++i) {
        std::printf("%s%.4f", i ? ", " : "", times[k][s][i]);
      }
      std::printf("]}");
    }
    std::printf("]}");
  }
  std::printf("\n]}\n");
  for (Problem* p : problems) delete p;
  return 0;
}
