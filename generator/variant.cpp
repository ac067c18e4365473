#include "generator/variant.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>

#include "core/cpu_features.h"
#include "core/modifier.h"
#include "core/tunables.h"

namespace attngen {

namespace {

template <typename E>
struct Names {
  std::vector<std::pair<const char*, E>> list;
  bool find(const std::string& s, E* out) const {
    for (const auto& [name, value] : list) {
      if (s == name) {
        *out = value;
        return true;
      }
    }
    return false;
  }
  const char* name(E e) const {
    for (const auto& [name, value] : list) {
      if (value == e) return name;
    }
    return "?";
  }
  std::string all() const {
    std::string s;
    for (const auto& p : list) s += (s.empty() ? "" : ", ") + std::string(p.first);
    return s;
  }
};

const Names<Op> kOps{{{"attention", Op::kAttention},
                      {"linear", Op::kLinear},
                      {"mha", Op::kMha},
                      {"decode", Op::kDecode}}};
// The kernel element types of the dtype rows (core/dtype.h), by their variant names.
Names<DType> kernel_dtype_names() {
  Names<DType> names;
  for (const DTypeRow& r : kDTypes) {
    if (r.kernel_element) names.list.push_back({r.name, r.dtype});
  }
  return names;
}
const Names<DType> kDTypeNames = kernel_dtype_names();
const Names<MaskKind> kMasks{{{"none", MaskKind::kNone}, {"causal", MaskKind::kCausal}}};
const Names<MaskTensor> kMaskTensors{{{"none", MaskTensor::kNone},
                                      {"bool", MaskTensor::kBool},
                                      {"additive", MaskTensor::kAdditive}}};
const Names<Pattern> kPatterns{{{"none", Pattern::kNone},
                                {"window", Pattern::kWindow},
                                {"strided", Pattern::kStrided},
                                {"block_sparse", Pattern::kBlockSparse},
                                {"global_local", Pattern::kGlobalLocal}}};

// The element types each op's generator and schedules support today.
bool dtype_supported(Op op, DType dtype, DType kv_dtype) {
  const bool floating = dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16;
  if (op == Op::kDecode) return floating;  // any cache: f32, f16, bf16 or i8
  return floating && kv_dtype == dtype;
}

std::vector<std::string> split_words(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

bool parse_int(const std::string& s, int lo, int* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  const long value = std::strtol(s.c_str(), &end, 10);
  if (*end != '\0' || value < lo || value > (1 << 30)) return false;
  *out = static_cast<int>(value);
  return true;
}

std::string window_side(int n) { return n < 0 ? "inf" : std::to_string(n); }

// The words of a name or class that follow the head dims: mask tensor, cap, pattern, forms,
// extra outputs, with the spellings `weights` / `dense` differing between the two.
std::vector<std::string> shape_words(const KernelVariant& v) {
  std::vector<std::string> w;
  if (v.mask_tensor == MaskTensor::kBool) w.push_back("bmask");
  if (v.mask_tensor == MaskTensor::kAdditive) w.push_back("amask");
  if (v.softcap) w.push_back("cap");
  const PatternSpec& p = v.pattern;
  if (v.generic && p.kind != Pattern::kNone) {  // the parameters are run-time inputs
    static const char* const kKinds[] = {"", "win", "str", "bs", "glob"};
    w.push_back(kKinds[static_cast<int>(p.kind)]);
  }
  switch (v.generic ? Pattern::kNone : p.kind) {
    case Pattern::kWindow:
      w.push_back("win" + window_side(p.left) + "_" + window_side(p.right));
      break;
    case Pattern::kStrided:
      w.push_back("str" + std::to_string(p.stride));
      break;
    case Pattern::kBlockSparse:
      w.push_back("bs" + std::to_string(p.block));
      break;
    case Pattern::kGlobalLocal:
      w.push_back("glob" + std::to_string(p.global_tokens) + "_loc" + std::to_string(p.local));
      break;
    case Pattern::kNone:
      break;
  }
  if (v.key_block > 0) w.push_back("kb" + std::to_string(v.key_block));
  if (v.query_tile > 0) w.push_back("qt" + std::to_string(v.query_tile));
  return w;
}

std::string head_dims(const KernelVariant& v) {
  std::string s = "d" + std::to_string(v.head_dim_qk);
  if (v.head_dim_v != v.head_dim_qk) s += "v" + std::to_string(v.head_dim_v);
  return s;
}

bool check_variant(KernelVariant* v, const std::map<std::string, bool>& given, std::string* error) {
  const auto fail = [&](const std::string& m) {
    *error = m;
    return false;
  };
  const auto has = [&](const char* key) { return given.count(key) != 0; };
  // The words an op takes besides OP, DTYPE, ISA, TUNABLES and ONLY_ISAS.
  const auto only = [&](std::initializer_list<const char*> allowed) -> bool {
    for (const auto& [key, _] : given) {
      const bool common =
          key == "OP" || key == "DTYPE" || key == "ISA" || key == "TUNABLES" || key == "ONLY_ISAS";
      if (!common && std::find_if(allowed.begin(), allowed.end(),
                                  [&](const char* a) { return key == a; }) == allowed.end()) {
        return fail(key + " does not apply to OP " + op_name(v->op));
      }
    }
    return true;
  };
  switch (v->op) {
    case Op::kLinear:
      if (!only({})) return false;
      break;
    case Op::kMha:
      if (!only({"HEAD_DIM", "MASK", "GENERIC"})) {
        return false;
      }
      if (v->generic && has("MASK")) {
        return fail("MASK does not apply to a GENERIC kernel (run-time options)");
      }
      break;
    case Op::kDecode:
      if (!only(
              {"HEAD_DIM", "HEAD_DIM_V", "MASK", "KEY_BLOCK", "KV_DTYPE", "GENERIC", "MODIFIER"})) {
        return false;
      }
      // Queries of a KV cache attend the cached positions up to their own (bottom-right).
      if (has("MASK") && v->mask != MaskKind::kCausal) {
        return fail("decode kernels are causal (MASK causal)");
      }
      v->mask = MaskKind::kCausal;
      break;
    case Op::kAttention:
      if (has("KV_DTYPE")) return fail("KV_DTYPE is for OP decode (the cache's element type)");
      if (has("OUT_DTYPE") && v->out_dtype != DType::kF32) {
        return fail("OUT_DTYPE takes f32 (an output in the inputs' dtype is the default)");
      }
      // A generic kernel takes the masks, the soft cap and the form at run time.
      // (A generic pattern kernel takes the pattern's kind, its parameters at run time.)
      for (const char* w : {"MASK", "MASK_TENSOR", "SOFTCAP", "WINDOW_LEFT", "WINDOW_RIGHT",
                            "STRIDE", "BLOCK", "LOCAL", "GLOBAL_TOKENS"}) {
        if (v->generic && has(w)) {
          return fail(std::string(w) + " does not apply to a GENERIC kernel (run-time options)");
        }
      }
      break;
  }
  if (has("MODIFIER") && !valid_modifier_name(v->modifier.c_str())) {
    return fail("MODIFIER " + v->modifier +
                ": a name is letters, digits and _, starting with a letter, at most 31");
  }
  if (v->op != Op::kDecode) v->kv_dtype = v->dtype;
  if (!has("OUT_DTYPE")) v->out_dtype = v->dtype;
  if (v->op != Op::kLinear && v->head_dim_qk <= 0) {
    return fail(std::string("HEAD_DIM is required for OP ") + op_name(v->op));
  }
  if (v->head_dim_v == 0) v->head_dim_v = v->head_dim_qk;
  if (!dtype_supported(v->op, v->dtype, v->kv_dtype)) {
    return fail(std::string(op_name(v->op)) + " kernels take f32, f16 or bf16 tensors" +
                (v->op == Op::kDecode ? " and an f32, f16, bf16 or i8 cache" : "") + ", not " +
                dtype_name(v->dtype) +
                (v->kv_dtype != v->dtype
                     ? std::string(" with a ") + dtype_name(v->kv_dtype) + " cache"
                     : std::string()));
  }
  PatternSpec& p = v->pattern;
  const auto param_needs = [&](const char* key, Pattern kind) {
    if (has(key) && p.kind != kind) {
      return fail(std::string(key) + " needs PATTERN " + kPatterns.name(kind));
    }
    return true;
  };
  if (!param_needs("WINDOW_LEFT", Pattern::kWindow) ||
      !param_needs("WINDOW_RIGHT", Pattern::kWindow) || !param_needs("STRIDE", Pattern::kStrided) ||
      !param_needs("BLOCK", Pattern::kBlockSparse) ||
      !param_needs("LOCAL", Pattern::kGlobalLocal) ||
      !param_needs("GLOBAL_TOKENS", Pattern::kGlobalLocal)) {
    return false;
  }
  switch (v->generic ? Pattern::kNone : p.kind) {
    case Pattern::kWindow:
      if (p.left < 0 && p.right < 0) {
        return fail("PATTERN window needs WINDOW_LEFT and/or WINDOW_RIGHT >= 0");
      }
      break;
    case Pattern::kStrided:
      if (p.stride <= 0) return fail("PATTERN strided needs STRIDE > 0");
      break;
    case Pattern::kBlockSparse:
      if (p.block <= 0) return fail("PATTERN block_sparse needs BLOCK > 0");
      break;
    case Pattern::kGlobalLocal:
    case Pattern::kNone:
      break;
  }
  if (v->isa != "host" && find_target(v->isa.c_str()) == nullptr) {
    std::string known = "host";
    for (const TargetRow& t : kTargets) known += std::string(", ") + t.name;
    return fail("unknown ISA '" + v->isa + "' (" + known + ")");
  }
  for (const std::string& isa : v->only_isas) {
    if (find_target(isa.c_str()) == nullptr) return fail("ONLY_ISAS: unknown ISA '" + isa + "'");
  }
  std::vector<Tunable> merged;
  return merge_tunables(*v, {}, &merged, error);
}

}  // namespace

const char* op_name(Op op) { return kOps.name(op); }
const char* dtype_name(DType dtype) { return dtype_row(dtype).name; }

int dtype_bytes(DType dtype) { return dtype_row(dtype).bytes; }

bool parse_variant(const std::string& text, KernelVariant* v, std::string* error) {
  *v = KernelVariant();
  const std::vector<std::string> words = split_words(text);
  std::map<std::string, bool> given;
  const auto fail = [&](const std::string& m) {
    *error = "variant '" + text + "': " + m;
    return false;
  };
  for (size_t at = 0; at < words.size();) {
    const std::string key = words[at++];
    if (given.count(key) != 0) return fail(key + " given twice");
    given[key] = true;
    if (key == "SOFTCAP" || key == "WEIGHTS" || key == "LSE" || key == "GENERIC") {
      (key == "SOFTCAP"   ? v->softcap
       : key == "WEIGHTS" ? v->weights
       : key == "LSE"     ? v->lse
                          : v->generic) = true;
      continue;
    }
    if (key == "TUNABLES" || key == "ONLY_ISAS") {
      // Lists run to the next upper-case keyword.
      for (; at < words.size() && !std::isupper(static_cast<unsigned char>(words[at][0])); ++at) {
        if (key == "ONLY_ISAS") {
          v->only_isas.push_back(words[at]);
          continue;
        }
        // name=value, or name:value (how the generator's driver passes it on: main.cpp).
        const size_t eq = words[at].find_first_of("=:");
        Tunable t;
        if (eq == std::string::npos) return fail("TUNABLES takes name=value, not " + words[at]);
        t.name = words[at].substr(0, eq);
        if (!parse_int(words[at].substr(eq + 1), -1, &t.value)) {
          return fail("tunable " + t.name + " needs an integer, not " + words[at].substr(eq + 1));
        }
        v->tunables.push_back(t);
      }
      continue;
    }
    if (at >= words.size()) return fail(key + " needs a value");
    const std::string value = words[at++];
    bool ok = true;
    if (key == "OP") {
      ok = kOps.find(value, &v->op);
      if (!ok) return fail("OP must be one of " + kOps.all() + ", not " + value);
    } else if (key == "DTYPE" || key == "KV_DTYPE" || key == "OUT_DTYPE") {
      ok = kDTypeNames.find(value, key == "DTYPE"      ? &v->dtype
                                   : key == "KV_DTYPE" ? &v->kv_dtype
                                                       : &v->out_dtype);
      if (!ok) return fail(key + " must be one of " + kDTypeNames.all() + ", not " + value);
    } else if (key == "HEAD_DIM") {
      ok = parse_int(value, 1, &v->head_dim_qk);
    } else if (key == "HEAD_DIM_V") {
      ok = parse_int(value, 1, &v->head_dim_v);
    } else if (key == "MASK") {
      ok = kMasks.find(value, &v->mask);
      if (!ok) return fail("MASK must be one of " + kMasks.all() + ", not " + value);
    } else if (key == "MASK_TENSOR") {
      ok = kMaskTensors.find(value, &v->mask_tensor);
      if (!ok) return fail("MASK_TENSOR must be one of " + kMaskTensors.all() + ", not " + value);
    } else if (key == "PATTERN") {
      ok = kPatterns.find(value, &v->pattern.kind);
      if (!ok) return fail("PATTERN must be one of " + kPatterns.all() + ", not " + value);
    } else if (key == "WINDOW_LEFT") {
      ok = parse_int(value, -1, &v->pattern.left);
    } else if (key == "WINDOW_RIGHT") {
      ok = parse_int(value, -1, &v->pattern.right);
    } else if (key == "STRIDE") {
      ok = parse_int(value, 0, &v->pattern.stride);
    } else if (key == "BLOCK") {
      ok = parse_int(value, 0, &v->pattern.block);
    } else if (key == "LOCAL") {
      ok = parse_int(value, 0, &v->pattern.local);
    } else if (key == "GLOBAL_TOKENS") {
      ok = parse_int(value, 0, &v->pattern.global_tokens);
    } else if (key == "KEY_BLOCK") {
      ok = parse_int(value, 0, &v->key_block);
    } else if (key == "QUERY_TILE") {
      ok = parse_int(value, 0, &v->query_tile);
      if (ok && v->op != Op::kAttention && given.count("OP")) {
        return fail("QUERY_TILE is for OP attention");
      }
    } else if (key == "MODIFIER") {
      v->modifier = value;
    } else if (key == "ISA") {
      v->isa = value;
    } else {
      return fail(
          "unknown word " + key +
          " (OP DTYPE KV_DTYPE OUT_DTYPE HEAD_DIM HEAD_DIM_V MASK MASK_TENSOR SOFTCAP MODIFIER "
          "PATTERN WINDOW_LEFT WINDOW_RIGHT STRIDE BLOCK LOCAL GLOBAL_TOKENS WEIGHTS LSE "
          "GENERIC KEY_BLOCK QUERY_TILE ISA TUNABLES ONLY_ISAS)");
    }
    if (!ok) return fail(key + " " + value + " is not a valid number");
  }
  if (given.count("QUERY_TILE") && v->op != Op::kAttention) {
    return fail("QUERY_TILE is for OP attention");
  }
  std::string why;
  if (!check_variant(v, given, &why)) return fail(why);
  return true;
}

std::string canonical(const KernelVariant& v) {
  std::string s = std::string("OP ") + op_name(v.op);
  if (v.dtype != DType::kF32) s += std::string(" DTYPE ") + dtype_name(v.dtype);
  if (v.op == Op::kDecode && v.kv_dtype != v.dtype) {
    s += std::string(" KV_DTYPE ") + dtype_name(v.kv_dtype);
  }
  if (v.out_dtype != v.dtype) s += std::string(" OUT_DTYPE ") + dtype_name(v.out_dtype);
  if (v.op == Op::kLinear) return s;
  s += " HEAD_DIM " + std::to_string(v.head_dim_qk);
  if (v.head_dim_v != v.head_dim_qk) s += " HEAD_DIM_V " + std::to_string(v.head_dim_v);
  if (v.mask != MaskKind::kNone && v.op != Op::kDecode) s += " MASK causal";
  if (v.mask_tensor != MaskTensor::kNone) {
    s += std::string(" MASK_TENSOR ") + kMaskTensors.name(v.mask_tensor);
  }
  if (v.softcap) s += " SOFTCAP";
  if (!v.modifier.empty()) s += " MODIFIER " + v.modifier;
  const PatternSpec& p = v.pattern;
  if (p.kind != Pattern::kNone) s += std::string(" PATTERN ") + kPatterns.name(p.kind);
  switch (v.generic ? Pattern::kNone : p.kind) {
    case Pattern::kWindow:
      s += " WINDOW_LEFT " + std::to_string(p.left) + " WINDOW_RIGHT " + std::to_string(p.right);
      break;
    case Pattern::kStrided:
      s += " STRIDE " + std::to_string(p.stride);
      break;
    case Pattern::kBlockSparse:
      s += " BLOCK " + std::to_string(p.block);
      break;
    case Pattern::kGlobalLocal:
      s +=
          " GLOBAL_TOKENS " + std::to_string(p.global_tokens) + " LOCAL " + std::to_string(p.local);
      break;
    case Pattern::kNone:
      break;
  }
  if (v.weights) s += " WEIGHTS";
  if (v.lse) s += " LSE";
  if (v.generic) s += " GENERIC";
  if (v.key_block > 0) s += " KEY_BLOCK " + std::to_string(v.key_block);
  if (v.query_tile > 0) s += " QUERY_TILE " + std::to_string(v.query_tile);
  return s;
}

std::string kernel_name(const KernelVariant& v, const TargetRow& target) {
  static const char* const kShort[] = {"attn", "linear", "mha", "decode"};
  std::string s = std::string(kShort[static_cast<int>(v.op)]) + "_" + dtype_name(v.dtype);
  if (v.op == Op::kDecode && v.kv_dtype != v.dtype) s += std::string("kv") + dtype_name(v.kv_dtype);
  if (v.out_dtype != v.dtype) s += std::string("out") + dtype_name(v.out_dtype);
  if (v.op != Op::kLinear) {
    s += "_" + head_dims(v) + "_" + (v.generic ? "generic" : kMasks.name(v.mask));
    for (const std::string& w : shape_words(v)) s += "_" + w;
    if (!v.modifier.empty()) s += "_mod_" + v.modifier;
    if (v.weights) s += "_p";
    if (v.lse) s += "_lse";
  }
  return s + "__" + target.arch + "_" + target.name;
}

std::string tuning_class(const KernelVariant& v) {
  if (v.op == Op::kLinear) {
    return v.dtype == DType::kF32 ? "linear" : std::string("linear ") + dtype_name(v.dtype);
  }
  if (v.op != Op::kAttention) return "";
  std::string s = "attention";
  if (v.dtype != DType::kF32) s += std::string(" ") + dtype_name(v.dtype);
  if (v.out_dtype != v.dtype) s += std::string(" out") + dtype_name(v.out_dtype);
  s += " " + head_dims(v) +
       (v.generic                     ? " generic"
        : v.mask == MaskKind::kCausal ? " causal"
                                      : " dense");
  for (const std::string& w : shape_words(v)) s += " " + w;
  if (v.weights) s += " weights";
  if (v.lse) s += " lse";
  return s;
}

bool variant_of_class(const std::string& cls, KernelVariant* v, std::string* error) {
  // A class is the kernel name's words with spaces: rebuild the variant string from them.
  const std::vector<std::string> words = split_words(cls);
  const auto fail = [&](const std::string& m) {
    *error = "shape class '" + cls + "': " + m;
    return false;
  };
  std::string spaced;
  for (const std::string& w : words) spaced += (spaced.empty() ? "" : " ") + w;
  const bool lower = std::none_of(cls.begin(), cls.end(), [](char c) { return std::isupper(c); });
  if (words.empty() || spaced != cls || !lower) {
    return fail("a shape class is lower-case words separated by single spaces");
  }
  Op op;
  if (!kOps.find(words[0], &op)) {
    return fail("a shape class starts with its op (" + kOps.all() + ")");
  }
  std::string text = "OP " + words[0];
  size_t at = 1;
  if (at < words.size() && kDTypeNames.find(words[at], &v->dtype)) text += " DTYPE " + words[at++];
  if (at < words.size() && words[at].rfind("out", 0) == 0 &&
      kDTypeNames.find(words[at].substr(3), &v->out_dtype)) {
    text += " OUT_DTYPE " + words[at++].substr(3);
  }
  if (words[0] == "attention") {
    int d = 0, dv = 0;
    if (at >= words.size() || std::sscanf(words[at].c_str(), "d%dv%d", &d, &dv) < 1) {
      return fail("expected d<D>[v<Dv>] after the op");
    }
    text += " HEAD_DIM " + std::to_string(d) + (dv > 0 ? " HEAD_DIM_V " + std::to_string(dv) : "");
    if (++at >= words.size() ||
        (words[at] != "dense" && words[at] != "causal" && words[at] != "generic")) {
      return fail("expected dense, causal or generic after the head dims");
    }
    if (words[at] == "causal") text += " MASK causal";
    if (words[at++] == "generic") text += " GENERIC";
  }
  for (; at < words.size(); ++at) {
    const std::string& w = words[at];
    int a = 0, b = 0;
    char l[16] = {0}, r[16] = {0};
    if (w == "bmask" || w == "amask") {
      text += w == "bmask" ? " MASK_TENSOR bool" : " MASK_TENSOR additive";
    } else if (w == "cap") {
      text += " SOFTCAP";

    } else if (w == "weights") {
      text += " WEIGHTS";
    } else if (w == "lse") {
      text += " LSE";
    } else if (w == "win" || w == "str" || w == "bs" || w == "glob") {
      text += std::string(" PATTERN ") + (w == "win"   ? "window"
                                          : w == "str" ? "strided"
                                          : w == "bs"  ? "block_sparse"
                                                       : "global_local");
    } else if (std::sscanf(w.c_str(), "win%15[0-9inf]_%15[0-9inf]", l, r) == 2) {
      const auto side = [](const std::string& s) { return s == "inf" ? std::string("-1") : s; };
      text += " PATTERN window WINDOW_LEFT " + side(l) + " WINDOW_RIGHT " + side(r);
    } else if (std::sscanf(w.c_str(), "glob%d_loc%d", &a, &b) == 2) {
      text += " PATTERN global_local GLOBAL_TOKENS " + std::to_string(a) + " LOCAL " +
              std::to_string(b);
    } else if (std::sscanf(w.c_str(), "str%d", &a) == 1) {
      text += " PATTERN strided STRIDE " + std::to_string(a);
    } else if (std::sscanf(w.c_str(), "bs%d", &a) == 1) {
      text += " PATTERN block_sparse BLOCK " + std::to_string(a);
    } else if (std::sscanf(w.c_str(), "kb%d", &a) == 1) {
      text += " KEY_BLOCK " + std::to_string(a);
    } else if (std::sscanf(w.c_str(), "qt%d", &a) == 1) {
      text += " QUERY_TILE " + std::to_string(a);
    } else {
      return fail("unknown word '" + w + "'");
    }
  }
  std::string why;
  if (!parse_variant(text, v, &why)) return fail(why);
  if (tuning_class(*v) != cls) {
    return fail("not in canonical form (it would be '" + tuning_class(*v) + "')");
  }
  return true;
}

std::string description(const KernelVariant& v) {
  std::string s = std::string(op_name(v.op)) + ", " + dtype_name(v.dtype);
  if (v.op == Op::kDecode && v.kv_dtype != v.dtype) {
    s += std::string(" with a ") + dtype_name(v.kv_dtype) + " cache";
  }
  if (v.out_dtype != v.dtype) s += std::string(", ") + dtype_name(v.out_dtype) + " output";
  if (v.op == Op::kLinear) return s;
  if (v.generic && v.op != Op::kAttention) {
    return s + ", generic: head dims up to " + std::to_string(v.head_dim_qk) + "/" +
           std::to_string(v.head_dim_v);
  }
  if (v.generic) {
    return s + ", generic: head dims up to " + std::to_string(v.head_dim_qk) + "/" +
           std::to_string(v.head_dim_v) +
           (v.pattern.kind != Pattern::kNone
                ? std::string(", ") + kPatterns.name(v.pattern.kind) + " pattern,"
                : std::string(",")) +
           " masks and soft cap at run time" +
           (v.modifier.empty() ? std::string() : ", modifier " + v.modifier);
  }
  s += ", head dim " + std::to_string(v.head_dim_qk);
  if (v.head_dim_v != v.head_dim_qk) s += "/" + std::to_string(v.head_dim_v);
  s += v.mask == MaskKind::kCausal ? ", causal" : ", no causal mask";
  if (v.mask_tensor == MaskTensor::kBool) s += ", bool mask tensor";
  if (v.mask_tensor == MaskTensor::kAdditive) s += ", additive mask tensor";
  if (v.softcap) s += ", soft cap";
  if (!v.modifier.empty()) s += ", modifier " + v.modifier;
  const PatternSpec& p = v.pattern;
  switch (p.kind) {
    case Pattern::kWindow:
      s += ", window [-" + window_side(p.left) + ", +" + window_side(p.right) + "]";
      break;
    case Pattern::kStrided:
      s += ", strided " + std::to_string(p.stride);
      break;
    case Pattern::kBlockSparse:
      s += ", block-sparse " + std::to_string(p.block);
      break;
    case Pattern::kGlobalLocal:
      s += ", global " + std::to_string(p.global_tokens) + " + local " + std::to_string(p.local);
      break;
    case Pattern::kNone:
      break;
  }
  if (v.weights) s += ", weights output";
  if (v.lse) s += ", log-sum-exp output";
  if (v.key_block > 0) s += ", key blocks of " + std::to_string(v.key_block);
  if (v.query_tile > 0) s += ", query tile " + std::to_string(v.query_tile);
  return s;
}

std::vector<std::string> tunable_names(const KernelVariant& v) {
  std::vector<std::string> names;
  const auto add = [&](const auto& table) {
    for (const auto& t : table) names.push_back(t.name);
  };
  switch (v.op) {
    case Op::kAttention:
      add(kAttentionTunables);
      names.push_back("key_block");
      break;
    case Op::kLinear:
      add(kLinearTunables);
      break;
    case Op::kDecode:
      add(kDecodeTunables);
      names.push_back("key_block");
      break;
    case Op::kMha:  // its projections' (the attention between them takes the defaults)
      add(kLinearTunables);
      break;
  }
  // The variant's own form and tile are its identity, not tunables.
  const auto fixed = [&](const std::string& n) {
    return (n == "key_block" && v.key_block > 0) || (n == "query_tile" && v.query_tile > 0);
  };
  names.erase(std::remove_if(names.begin(), names.end(), fixed), names.end());
  return names;
}

bool merge_tunables(const KernelVariant& v, const std::vector<Tunable>& more,
                    std::vector<Tunable>* out, std::string* error) {
  *out = v.tunables;
  out->insert(out->end(), more.begin(), more.end());
  const std::vector<std::string> known = tunable_names(v);
  for (size_t i = 0; i < out->size(); ++i) {
    const Tunable& t = (*out)[i];
    for (size_t j = 0; j < i; ++j) {
      if ((*out)[j].name == t.name) {
        *error = "tunable " + t.name + " given twice";
        return false;
      }
    }
    if (std::find(known.begin(), known.end(), t.name) == known.end()) {
      if ((t.name == "key_block" && v.key_block > 0) ||
          (t.name == "query_tile" && v.query_tile > 0)) {
        *error = t.name + "=" + std::to_string(t.value) + " contradicts the variant's " +
                 (t.name == "key_block" ? "KEY_BLOCK " + std::to_string(v.key_block)
                                        : "QUERY_TILE " + std::to_string(v.query_tile)) +
                 " (part of its identity, not a tunable)";
        return false;
      }
      std::string all;
      for (const std::string& n : known) all += (all.empty() ? "" : ", ") + n;
      *error = "unknown tunable " + t.name + " (" + op_name(v.op) + " takes " +
               (all.empty() ? std::string("none") : all) + ")";
      return false;
    }
    if (t.value < (t.name == "stage_kv" ? -1 : 0)) {
      *error = "tunable " + t.name + " must be >= 0, not " + std::to_string(t.value);
      return false;
    }
  }
  return true;
}

bool int8_dot_decode(const KernelVariant& v) {
  return v.op == Op::kDecode && v.kv_dtype == DType::kI8 && v.dtype == DType::kF32 &&
         v.head_dim_qk % 64 == 0;
}

bool extension_applies(const KernelVariant& v, const TargetRow& t) {
  if (row_int8_dots(t) != nullptr && int8_dot_decode(v)) return true;
  if (!row_builds(t, dtype_name(v.dtype))) return false;
  if (t.isa != Isa::kAvx512Bf16 && t.isa != Isa::kAmx) return true;
  const bool row_form = v.op == Op::kAttention && !v.generic && !v.weights && !v.lse &&
                        v.key_block == 0 && v.pattern.kind == Pattern::kNone;
  // AMX: whole tiles along q.k's head dim (bf16) and p.v's (f32 columns).
  if (t.isa == Isa::kAmx) {
    return row_form && v.head_dim_qk % kAmxPairs == 0 && v.head_dim_v % kAmxColumns == 0;
  }
  return row_form && v.head_dim_qk % 2 == 0;
}

namespace {

// The baseline ISA of a cross build's CMAKE_SYSTEM_PROCESSOR, as toolchain files spell it:
// NEON on aarch64 and on 32-bit ARM (armhf, ARMv7-A), SSE4.1 on x86-64; the generic row for any
// other processor.
Isa cross_baseline(const std::string& processor) {
  if (processor == "aarch64" || processor == "arm64") return Isa::kNeon;
  if (processor == "arm" || processor == "armv7" || processor == "armv7l" ||
      processor == "armv7-a" || processor == "armhf") {
    return Isa::kNeon32;
  }
  if (processor == "x86_64" || processor == "AMD64") return Isa::kSse41;
  return Isa::kGeneric;
}

}  // namespace

const TargetRow& host_target(const std::string& cross_processor) {
  if (!cross_processor.empty()) return target_row(cross_baseline(cross_processor));
  const TargetRow* best = &target_row(Isa::kGeneric);
  for (const TargetRow& t : kTargets) {
    // Extension rows build some dtypes only: `host` is always a base ISA.
    if (t.preference <= best->preference || *t.extends != '\0') continue;
    if (machine_runs(t, [] { return false; })) best = &t;
  }
  return *best;
}

}  // namespace attngen
