// attngen_generator: Halide's generator driver (GenGen) for the four generators, plus the
// variant model's modes (generator/variant_cli.h) and two that need the schedules:
//   --describe [--isa ISA] (--class CLASS | -- WORDS...)
//       JSON for tools (bench/autotune, docs): the variant's name, class, canonical string, its
//       tunables and search space, and what the schedule resolves them to on the ISA
//   --descriptor OUT.cpp ISA HALIDE_TARGET TUNING -- WORDS...
//       the kernel's descriptor as C++ source, written next to its object by attngen_add_kernel
#include <algorithm>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "Halide.h"
#include "generator/modifier.h"
#include "generator/plan.h"
#include "generator/variant_cli.h"
#include "schedules/target_info.h"

namespace attngen {

namespace {

int fail(const std::string& message) {
  std::cerr << "attngen: " << message << "\n";
  return 2;
}

std::string words_after_dashes(int argc, char** argv, int from) {
  std::string words;
  for (int i = from; i < argc; ++i) {
    if (std::string(argv[i]) == "--") {
      for (++i; i < argc; ++i) words += std::string(words.empty() ? "" : " ") + argv[i];
    }
  }
  return words;
}

std::string joined(const std::vector<Tunable>& ts) {
  std::string s;
  for (const Tunable& t : ts) s += (s.empty() ? "" : " ") + t.name + "=" + std::to_string(t.value);
  return s;
}

std::string c_enum_name(DType d) { return std::string("ATTNGEN_") + dtype_row(d).c_name; }

std::string c_string(const std::string& s) {
  std::string q = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') q += '\\';
    q += c;
  }
  return q + "\"";
}

const TargetRow* target_or_host(const std::string& isa) {
  return isa.empty() || isa == "host" ? &host_target("") : find_target(isa.c_str());
}

// The search space bench/autotune explores for a variant on a target: candidate values of each
// tunable (the defaults are what resolve_variant() gives without tunables).
nlohmann::json search_space(const KernelVariant& v, const TargetRow& t) {
  nlohmann::json s = nlohmann::json::object();
  const int lanes = lanes_of(t, dtype_bytes(v.dtype));
  const auto has = [&](const char* n) {
    const std::vector<std::string> names = tunable_names(v);
    return std::find(names.begin(), names.end(), n) != names.end();
  };
  if (v.op == Op::kLinear || v.op == Op::kMha) {  // mha: its projections
    s["n_vectors"] = {1, 2, 3, 4, 5, 6};
    s["rows"] = {1, 2, 3, 4, 6, 8, 12};
    s["row_block"] = {8, 16, 32, 64, 128, 256};
    s["e_chunk"] = {32, 64, 128, 256, 512};
  } else if (v.op == Op::kAttention) {
    if (has("query_tile")) {
      nlohmann::json q = nlohmann::json::array();
      for (int m : {1, 2, 3, 4, 5, 6, 8}) q.push_back(lanes * m);
      s["query_tile"] = q;
    }
    s["key_tile"] = {1, 2, 3, 4, 5, 6, 8, 10, 12, 16};
    s["pv_rows"] = {1, 2, 3, 4, 6, 8};
    // Parts of Dv's vectors (the divisors of their number: the default, all of them, included).
    const int dv_vectors =
        vectors_covering(v.head_dim_v, target_info(Halide::Target(t.halide_target)));
    nlohmann::json parts = nlohmann::json::array();
    for (int n = 1; n <= dv_vectors; ++n) {
      if (dv_vectors % n == 0) parts.push_back(n);
    }
    s["pv_vectors"] = parts;
    s["parallel_grain"] = {1, 2, 4};
    if (has("key_block")) {
      s["key_block"] = v.mask == MaskKind::kCausal ? nlohmann::json({0, 16, 32, 64, 128, 256})
                                                   : nlohmann::json({0, 32, 64, 128, 256});
      s["pv_chunk"] = {32, 64, 128, 256, 512};
    }
    s["stage_kv"] = {0, 1, 2};
  }
  return s;
}

int describe(int argc, char** argv) {
  std::string isa, cls;
  for (int i = 2; i + 1 < argc && std::string(argv[i]) != "--"; ++i) {
    if (std::string(argv[i]) == "--isa") isa = argv[++i];
    if (std::string(argv[i]) == "--class") cls = argv[++i];
  }
  KernelVariant v;
  std::string error;
  const bool ok = cls.empty() ? parse_variant(words_after_dashes(argc, argv, 2), &v, &error)
                              : variant_of_class(cls, &v, &error);
  if (!ok) return fail(error);
  if (!isa.empty()) v.isa = isa;
  const TargetRow* t = target_or_host(v.isa);
  if (t == nullptr) return fail("unknown ISA " + v.isa);
  const ResolvedVariant r = resolve_variant(v, Halide::Target(t->halide_target));
  KernelVariant bare = v;
  bare.tunables.clear();
  const ResolvedVariant defaults = resolve_variant(bare, Halide::Target(t->halide_target));
  nlohmann::json j;
  j["name"] = kernel_name(v, *t);
  j["variant"] = canonical(v);
  j["class"] = tuning_class(v);
  j["description"] = description(v);
  j["op"] = op_name(v.op);
  j["dtype"] = dtype_name(v.dtype);
  j["kv_dtype"] = dtype_name(v.kv_dtype);
  j["isa"] = t->name;
  j["arch"] = t->arch;
  j["target"] = std::string(t->arch) + "_" + t->name;
  j["halide_target"] = t->halide_target;
  j["head_dim_qk"] = v.head_dim_qk;
  j["head_dim_v"] = v.head_dim_v;
  j["causal"] = v.mask == MaskKind::kCausal;
  j["requested_key_block"] = v.key_block;
  j["requested_query_tile"] = v.query_tile;
  j["key_block"] = r.key_block;
  j["query_tile"] = r.query_tile;
  j["key_chunk"] = r.key_chunk;
  j["weight_panel"] = r.weight_panel;
  j["tunables"] = tunable_names(v);
  nlohmann::json given = nlohmann::json::object(), resolved = nlohmann::json::object(),
                 def = nlohmann::json::object();
  for (const Tunable& x : v.tunables) given[x.name] = x.value;
  for (const Tunable& x : r.schedule) resolved[x.name] = x.value;
  for (const Tunable& x : defaults.schedule) def[x.name] = x.value;
  j["given"] = given;
  j["resolved"] = resolved;
  j["defaults"] = def;
  j["space"] = search_space(v, *t);
  j["vector_lanes"] = lanes_of(*t, dtype_bytes(v.dtype));
  j["vector_registers"] = t->vector_registers;
  j["accumulators"] = t->accumulators;
  // Dispatch: the key-block form serves longer key sequences (a causal kernel's threshold).
  j["long_keys"] = long_keys(v.mask == MaskKind::kCausal);
  std::cout << j.dump(2) << "\n";
  return 0;
}

int descriptor(int argc, char** argv) {
  if (argc < 7) return fail("--descriptor OUT.cpp ISA HALIDE_TARGET TUNING -- WORDS...");
  const std::string out = argv[2], isa = argv[3], halide_target = argv[4];
  const std::string tuning = std::string(argv[5]) == "-" ? "" : argv[5];
  KernelVariant v;
  std::string error;
  if (!parse_variant(words_after_dashes(argc, argv, 6), &v, &error)) return fail(error);
  const TargetRow* t = find_target(isa.c_str());
  if (t == nullptr) return fail("unknown ISA " + isa);
  const ResolvedVariant r = resolve_variant(v, Halide::Target(halide_target));
  const std::string name = kernel_name(v, *t);
  // The function's name is the kernel's unless attngen_add_kernel was given one: the caller
  // names it in the file name (OUT is <function>.descriptor.cpp).
  std::string fn = out.substr(out.find_last_of('/') + 1);
  fn = fn.substr(0, fn.find('.'));
  static const char* const kOps[] = {"ATTNGEN_OP_ATTENTION", "ATTNGEN_OP_LINEAR", "ATTNGEN_OP_MHA",
                                     "ATTNGEN_OP_DECODE"};
  static const char* const kPatterns[] = {"NONE", "WINDOW", "STRIDED", "BLOCK_SPARSE",
                                          "GLOBAL_LOCAL"};
  static const char* const kMaskTensors[] = {"NONE", "BOOL", "ADDITIVE"};
  std::string features;
  const auto feature = [&](bool on, const char* f) {
    if (on) features += (features.empty() ? "" : " | ") + std::string("attngen::glue::") + f;
  };
  feature(v.mask_tensor != MaskTensor::kNone, "kMaskTensor");
  feature(v.pattern.kind == Pattern::kBlockSparse, "kLayout");
  feature(v.weights, "kWeights");
  feature(v.lse, "kLse");
  feature(t->isa == Isa::kCuda, "kGpu");
  feature(v.generic, "kGeneric");
  feature(v.generic && v.pattern.kind != Pattern::kNone, "kPatternValues");
  feature(v.op == Op::kDecode && v.kv_dtype == DType::kI8, "kKvScales");
  const Modifier* modifier = v.modifier.empty() ? nullptr : find_modifier(v.modifier);
  if (!v.modifier.empty() && modifier == nullptr) {
    return fail("no modifier " + v.modifier + " (the generator has: " + modifier_names() + ")");
  }
  const ModifierLayout no_modifier;
  const ModifierLayout& ml = modifier != nullptr ? modifier->layout : no_modifier;
  if (modifier != nullptr) {
    features += (features.empty() ? "" : " | ") + std::string("attngen::glue::modifier_features(") +
                std::to_string(ml.tensors) + ", " + std::to_string(ml.scalars) + ")";
  }
  if (features.empty()) features = "0";
  const PatternSpec& p = v.pattern;
  const char* op = kOps[static_cast<int>(v.op)];
  std::ofstream f(out);
  f << "// Generated by attngen_generator --descriptor (generator/main.cpp); do not edit.\n"
    << "// Describes kernel " << name << " to the attngen runtime and adapts its call.\n"
    << "#include \"" << fn << ".h\"\n"
    << "#include \"attngen/kernel_glue.h\"\n\n"
    << "extern \"C\" const attngen_kernel_info attngen_kernel_" << fn << " = {\n"
    << "    sizeof(attngen_kernel_info),\n"
    << "    ATTNGEN_KERNEL_ABI_VERSION,\n"
    << "    " << c_string(fn) << ",\n"
    << "    " << c_string(canonical(v)) << ",\n"
    << "    " << c_string(description(v)) << ",\n"
    << "    " << op << ",\n"
    << "    " << c_string(t->name) << ",\n"
    << "    " << c_string(halide_target) << ",\n"
    << "    {" << c_enum_name(v.dtype) << ", " << c_enum_name(v.kv_dtype) << ", "
    << c_enum_name(v.kv_dtype) << ", " << c_enum_name(v.out_dtype) << ", "
    << (v.mask_tensor == MaskTensor::kBool ? "ATTNGEN_BOOL" : "ATTNGEN_F32") << ", "
    << c_enum_name(v.kv_dtype) << "},\n"
    << "    " << v.head_dim_qk << ",\n"
    << "    " << v.head_dim_v << ",\n"
    << "    " << (v.mask == MaskKind::kCausal ? "ATTNGEN_MASK_CAUSAL" : "ATTNGEN_MASK_NONE")
    << ",\n"
    << "    ATTNGEN_MASK_TENSOR_" << kMaskTensors[static_cast<int>(v.mask_tensor)] << ",\n"
    << "    " << (v.softcap ? 1 : 0) << ",\n"
    << "    {ATTNGEN_PATTERN_" << kPatterns[static_cast<int>(p.kind)] << ", " << p.left << ", "
    << p.right << ", " << p.stride << ", " << p.block << ", nullptr, " << p.local << ", "
    << p.global_tokens << "},\n"
    << "    " << (v.weights ? 1 : 0) << ",\n"
    << "    " << (v.lse ? 1 : 0) << ",\n"
    << "    " << (v.generic ? 1 : 0) << ",\n"
    << "    " << v.key_block << ",\n"
    << "    " << r.key_block << ",\n"
    << "    " << r.query_tile << ",\n"
    << "    " << r.key_chunk << ",\n"
    << "    " << r.weight_panel << ",\n"
    << "    " << c_string(joined(v.tunables)) << ",\n"
    << "    " << c_string(tuning) << ",\n"
    << "    " << c_string(tuning_class(v)) << ",\n"
    << "    " << c_string(joined(r.schedule)) << ",\n"
    << "    &attngen::glue::run<" << op << ", " << features << ", &" << fn << ">,\n"
    << "    " << c_string(v.modifier) << ",\n"
    << "    " << (ml.score ? 1 : 0) << ",\n"
    << "    " << (ml.mask ? 1 : 0) << ",\n"
    << "    " << ml.tensors << ",\n"
    << "    {";
  for (int t = 0; t < ml.tensors; ++t) {
    const ModifierTensor& mt = ml.tensor[t];
    f << (t ? ", " : "") << "{" << c_string(mt.name) << ", " << c_enum_name(mt.dtype) << ", "
      << mt.rank << ", {";
    for (int d = 0; d < kMaxModifierRank; ++d) {
      f << (d ? ", " : "") << (d < mt.rank ? static_cast<int>(mt.dims[d]) : 0);
    }
    f << "}}";
  }
  f << "},\n"
    << "    " << ml.scalars << ",\n"
    << "    {";
  for (int c = 0; c < ml.scalars; ++c) f << (c ? ", " : "") << c_string(ml.scalar[c]);
  f << "},\n"
    << "};\n";
  f.close();
  if (!f) return fail("cannot write " + out);
  return 0;
}

}  // namespace

}  // namespace attngen

int main(int argc, char** argv) {
  try {
    if (argc >= 2 && std::string(argv[1]) == "--describe") return attngen::describe(argc, argv);
    if (argc >= 2 && std::string(argv[1]) == "--descriptor") {
      return attngen::descriptor(argc, argv);
    }
  } catch (const Halide::CompileError& e) {
    std::cerr << e.what() << "\n";
    return 2;
  }
  const int status = attngen::variant_cli(argc, argv);
  if (status >= 0) return status;
  // Halide's driver takes one '=' per param: a variant's TUNABLES (name=value) are passed on as
  // name:value, which the variant parser reads alike.
  std::vector<std::string> args(argv, argv + argc);
  std::vector<char*> pointers;
  for (std::string& a : args) {
    if (a.rfind("variant=", 0) == 0) std::replace(a.begin() + 8, a.end(), '=', ':');
    pointers.push_back(a.data());
  }
  pointers.push_back(nullptr);
  return Halide::Internal::generate_filter_main(argc, pointers.data(), std::cerr);
}
