#include "generator/variant_cli.h"

#include <sys/stat.h>
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "generator/tuning_file.h"
#include "generator/variant.h"

namespace attngen {

namespace {

std::string cmake_quote(const std::string& s) {
  std::string q = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\' || c == '$') q += '\\';
    q += c;
  }
  return q + "\"";
}

void cmake_set(const char* var, const std::string& value) {
  std::cout << "set(" << var << " " << cmake_quote(value) << ")\n";
}

bool file_exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

std::string join(const std::vector<Tunable>& ts, const char* sep) {
  std::string s;
  for (const Tunable& t : ts) s += (s.empty() ? "" : sep) + t.name + "=" + std::to_string(t.value);
  return s;
}

int fail(const std::string& message) {
  std::cerr << "attngen: " << message << "\n";
  return 2;
}

// Options before `--`: --cross <processor>, --tuning-dir <dir>, --cuda-runtime, --gpu-api <api>.
struct Options {
  std::string cross, tuning_dir;
  bool cuda_runtime = false;
  // "opencl": the cuda row's kernels through Halide's OpenCL backend (ATTNGEN_GPU_API, a check
  // of the GPU schedules on PoCL); "cuda" otherwise.
  std::string gpu_api = "cuda";
  std::string words;  // after --
};

bool parse_options(int argc, char** argv, Options* o, std::string* error) {
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") {
      for (++i; i < argc; ++i) o->words += std::string(o->words.empty() ? "" : " ") + argv[i];
      return true;
    }
    if (a == "--cuda-runtime") {
      o->cuda_runtime = true;
    } else if ((a == "--cross" || a == "--tuning-dir") && i + 1 < argc) {
      (a == "--cross" ? o->cross : o->tuning_dir) = argv[++i];
    } else if (a == "--gpu-api" && i + 1 < argc) {
      o->gpu_api = argv[++i];
      if (o->gpu_api != "cuda" && o->gpu_api != "opencl") {
        *error = "--gpu-api takes cuda or opencl, not " + o->gpu_api;
        return false;
      }
    } else {
      *error = "unknown option " + a + "\n" + variant_cli_usage();
      return false;
    }
  }
  return true;
}

// A Halide target of the cuda row with its GPU API replaced by OpenCL's (--gpu-api opencl):
// "x86-64-linux-cuda-cuda_capability_80" becomes "x86-64-linux-opencl".
std::string opencl_target(const std::string& cuda_target) {
  const size_t at = cuda_target.find("-cuda");
  return cuda_target.substr(0, at) + "-opencl";
}

// The Halide runtime a kernel of `t` links: one per architecture, with CUDA's on x86-64 when the
// build makes CUDA kernels (it loads libcuda only when one runs), or OpenCL's (--gpu-api opencl).
bool runtime_of(const TargetRow& t, const Options& o, std::string* name, std::string* target,
                std::string* error) {
  if (t.isa == Isa::kCuda && !o.cuda_runtime) {
    *error = "ISA cuda needs ATTNGEN_CUDA=ON (a Halide runtime with CUDA)";
    return false;
  }
  const bool x86 = std::string(t.arch) == "x86_64";
  *name = std::string("attngen_halide_runtime_") + t.arch;
  *target = x86 && o.cuda_runtime ? target_row(Isa::kCuda).runtime_target : t.runtime_target;
  if (x86 && o.cuda_runtime && o.gpu_api == "opencl") *target = opencl_target(*target);
  return true;
}

int variant_cmake(const Options& o) {
  KernelVariant v;
  std::string error;
  if (!parse_variant(o.words, &v, &error)) return fail(error);
  const bool host = v.isa == "host";
  const TargetRow& t = host ? host_target(o.cross) : *find_target(v.isa.c_str());
  bool skip = false;
  if (!v.only_isas.empty()) {
    skip = true;
    for (const std::string& isa : v.only_isas) skip = skip && isa != t.name;
  }
  // An extension row (core/targets.h) builds only what its instructions serve.
  if (!extension_applies(v, t)) skip = true;
  // A generic-only row (core/targets.h) skips the specialised variants but those naming it.
  if (row_generic_only(t) && !v.generic && v.op != Op::kLinear && v.only_isas.empty()) {
    skip = true;
  }
  std::string runtime, runtime_target;
  if (!runtime_of(t, o, &runtime, &runtime_target, &error)) return fail(error);
  // The OpenCL check of the GPU schedules runs on PoCL's CPU device, which has no 16-bit floats
  // (Halide's OpenCL code for f16 and bf16 needs cl_khr_fp16): f32 kernels only.
  const bool opencl = t.isa == Isa::kCuda && o.gpu_api == "opencl";
  const auto is_16_bit = [](DType d) { return d == DType::kF16 || d == DType::kBF16; };
  if (opencl && (is_16_bit(v.dtype) || is_16_bit(v.kv_dtype) || is_16_bit(v.out_dtype))) {
    skip = true;
  }

  // Tunables: the variant's own (TUNABLES), else the tuning file's entry for its class.
  std::vector<Tunable> from_file;
  std::string tuning = v.tunables.empty() ? "" : "TUNABLES";
  const std::string cls = tuning_class(v);
  const std::string arch_isa = std::string(t.arch) + "_" + t.name;
  const std::string file = o.tuning_dir + "/" + arch_isa + ".json";
  const bool read_file = v.tunables.empty() && !o.tuning_dir.empty() && !cls.empty();
  if (read_file && file_exists(file)) {
    std::vector<TuningEntry> entries;
    if (!read_tuning_file(file, arch_isa, &entries, &error)) return fail(error);
    for (const TuningEntry& e : entries) {
      if (e.cls == cls) {
        from_file = e.tunables;
        tuning = arch_isa + ".json#" + cls;
      }
    }
  }
  std::vector<Tunable> tunables;
  if (!merge_tunables(v, from_file, &tunables, &error)) return fail(error);
  KernelVariant resolved = v;
  resolved.tunables = tunables;
  std::string param = canonical(v);
  // Rows that share a Halide target (avx512bf16 and amx) are told apart by their name.
  for (const TargetRow& other : kTargets) {
    if (!host && &other != &t && !std::strcmp(other.halide_target, t.halide_target)) {
      param += std::string(" ISA ") + t.name;
      break;
    }
  }
  if (!tunables.empty()) param += " TUNABLES " + join(tunables, " ");

  cmake_set("ATTNGEN_V_SKIP", skip ? "1" : "0");
  cmake_set("ATTNGEN_V_NAME", kernel_name(v, t));
  cmake_set("ATTNGEN_V_GENERATOR", op_name(v.op));
  cmake_set("ATTNGEN_V_ISA", t.name);
  // `host` is the row it resolves to, Halide target included: Halide's own "host" target names
  // every feature the build machine has, which its LLVM CPU may use beyond the row's CPU check
  // (on AVX512-BF16 CPUs without AVX512-FP16, such as Zen 4, LLVM's sapphirerapids emits vmovw:
  // kernels named for avx512 died of SIGILL there).
  cmake_set("ATTNGEN_V_HALIDE_TARGET",
            opencl ? opencl_target(t.halide_target) : std::string(t.halide_target));
  cmake_set("ATTNGEN_V_RUNTIME", runtime);
  cmake_set("ATTNGEN_V_RUNTIME_TARGET", runtime_target);
  cmake_set("ATTNGEN_V_VARIANT", param);
  cmake_set("ATTNGEN_V_CLASS", cls);
  cmake_set("ATTNGEN_V_TUNING", tuning);
  // The assembly test's patterns, a CMake list: the row's signature and what the variant adds.
  // Never an empty element (sse41 has no signature of its own): check_asm.cmake fails on one.
  // A row's i8-cache decode kernels with integer dot products show those instead.
  const char* int8_dots = row_int8_dots(t);
  std::string signature = int8_dots != nullptr && int8_dot_decode(v) ? int8_dots : t.asm_signature;
  const auto also_require = [&signature](const char* pattern) {
    if (!signature.empty()) signature += ';';
    signature += pattern;
  };
  // A kernel that reads f16 on a row that widens it natively (row_widens_f16): the assembly
  // must show that instruction too.
  const bool reads_f16 = v.dtype == DType::kF16 || v.kv_dtype == DType::kF16;
  if (const char* widen = row_widens_f16(t); reads_f16 && widen != nullptr) {
    also_require(widen);
  }
  // A softmax kernel on a row with the native exp (row_scales_exp): its power of two too.
  if (const char* scale = row_scales_exp(t); v.op != Op::kLinear && scale != nullptr) {
    also_require(scale);
  }
  // A decode kernel on a row that prefetches the cache (row_prefetches_slots), unless its
  // tunables turn that off: the prefetch too.
  const bool no_prefetch = std::any_of(tunables.begin(), tunables.end(), [](const Tunable& x) {
    return x.name == "prefetch_slots" && x.value == 0;
  });
  if (const char* prefetch = row_prefetches_slots(t);
      v.op == Op::kDecode && !no_prefetch && prefetch != nullptr) {
    also_require(prefetch);
  }
  cmake_set("ATTNGEN_V_ASM_SIGNATURE", signature);
  cmake_set("ATTNGEN_V_ASM_FORBIDDEN", t.asm_forbidden);
  cmake_set("ATTNGEN_V_TUNING_FILE", read_file && file_exists(file) ? file : "");
  return 0;
}

// The ISAs a build makes every variant for: the architecture's CPU ISAs, best first, and CUDA
// where the build has a CUDA runtime.
int variant_isas(const Options& o) {
  const TargetRow& host = host_target(o.cross);
  std::string isas;
  for (int p = 100; p >= -1; --p) {
    for (const TargetRow& t : kTargets) {
      const bool cpu = t.preference == p && p > 0 && std::string(t.arch) == host.arch;
      const bool gpu =
          p == -1 && t.isa == Isa::kCuda && o.cuda_runtime && std::string(host.arch) == "x86_64";
      if (cpu || gpu) isas += std::string(isas.empty() ? "" : ";") + t.name;
    }
  }
  cmake_set("ATTNGEN_V_ISAS", isas.empty() ? "host" : isas);
  return 0;
}

int tuning_lookup(int argc, char** argv) {
  if (argc != 5)
    return fail(std::string("--tuning-lookup FILE TARGET CLASS\n") + variant_cli_usage());
  std::vector<TuningEntry> entries;
  std::string error;
  if (!read_tuning_file(argv[2], argv[3], &entries, &error)) return fail(error);
  for (const TuningEntry& e : entries) {
    if (e.cls == argv[4]) {
      std::cout << "found=1\ntunables=" << join(e.tunables, ";") << "\n";
      return 0;
    }
  }
  std::cout << "found=0\ntunables=\n";
  return 0;
}

}  // namespace

const char* variant_cli_usage() {
  return "variant modes:\n"
         "  --variant-cmake [--cross PROCESSOR] [--tuning-dir DIR] [--cuda-runtime]\n"
         "                [--gpu-api cuda|opencl] -- WORDS...\n"
         "      CMake code describing the kernel of a variant (cmake/AttngenKernels.cmake)\n"
         "  --variant-isas [--cross PROCESSOR] [--cuda-runtime] [--gpu-api cuda|opencl]\n"
         "      the ISAs a build makes every variant for\n"
         "  --variant-class CLASS      the canonical variant of a tuning shape class\n"
         "  --tuning-lookup FILE TARGET CLASS\n"
         "      checks a tuning file and prints the class's entry (found=, tunables=)\n";
}

int variant_cli(int argc, char** argv) {
  if (argc < 2) return -1;
  const std::string mode = argv[1];
  Options o;
  std::string error;
  if (mode == "--variant-cmake" || mode == "--variant-isas") {
    if (!parse_options(argc, argv, &o, &error)) return fail(error);
    return mode == "--variant-cmake" ? variant_cmake(o) : variant_isas(o);
  }
  if (mode == "--variant-class") {
    KernelVariant v;
    if (argc != 3) return fail(variant_cli_usage());
    if (!variant_of_class(argv[2], &v, &error)) return fail(error);
    std::cout << canonical(v) << "\n";
    return 0;
  }
  if (mode == "--tuning-lookup") return tuning_lookup(argc, argv);
  if (mode == "--help-variant") {
    std::cout << variant_cli_usage();
    return 0;
  }
  return -1;
}

}  // namespace attngen
