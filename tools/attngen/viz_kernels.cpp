// The kernels `attngen viz` draws with (viz_kernels.h): plain attention with a weights output.
#include "tools/attngen/viz_kernels.h"

#include <set>

#include "tools/attngen/args.h"

namespace attngen::cli::viz {

namespace {

bool kernel_is_pattern(const attngen_kernel_info& k, PatternId id) {
  const attngen_pattern& p = k.pattern;
  switch (id) {
    case PatternId::kDense:
      return p.kind == ATTNGEN_PATTERN_NONE;
    case PatternId::kLocal:
      return p.kind == ATTNGEN_PATTERN_WINDOW && p.window_left >= 0 &&
             p.window_left == p.window_right;
    case PatternId::kStrided:
      return p.kind == ATTNGEN_PATTERN_STRIDED;
    case PatternId::kBlockSparse:
      return p.kind == ATTNGEN_PATTERN_BLOCK_SPARSE;
    case PatternId::kGlobalLocal:
      return p.kind == ATTNGEN_PATTERN_GLOBAL_LOCAL;
  }
  return false;
}

bool plain_attention_with_weights(const attngen_kernel_info& k) {
  return k.op == ATTNGEN_OP_ATTENTION && k.weights != 0 &&
         k.mask_tensor == ATTNGEN_MASK_TENSOR_NONE && k.softcap == 0;
}

attngen_pattern_kind kind_of(PatternId id) {
  switch (id) {
    case PatternId::kLocal:
      return ATTNGEN_PATTERN_WINDOW;
    case PatternId::kStrided:
      return ATTNGEN_PATTERN_STRIDED;
    case PatternId::kBlockSparse:
      return ATTNGEN_PATTERN_BLOCK_SPARSE;
    case PatternId::kGlobalLocal:
      return ATTNGEN_PATTERN_GLOBAL_LOCAL;
    case PatternId::kDense:
      break;
  }
  return ATTNGEN_PATTERN_NONE;
}

}  // namespace

std::string variant_name(const attngen_kernel_info& k) {
  return k.tuning_class != nullptr && k.tuning_class[0] != '\0' ? k.tuning_class : k.name;
}

std::string describe_kernel(const attngen_kernel_info& k) {
  const attngen_pattern& p = k.pattern;
  std::string s;
  switch (p.kind) {
    case ATTNGEN_PATTERN_NONE:
      s = "dense";
      break;
    case ATTNGEN_PATTERN_WINDOW:
      s = p.window_left >= 0 && p.window_left == p.window_right
              ? "local --window " + std::to_string(p.window_left + 1)
              : "window [-" + std::to_string(p.window_left) + ", +" +
                    std::to_string(p.window_right) + "]";
      break;
    case ATTNGEN_PATTERN_STRIDED:
      s = "strided --stride " + std::to_string(p.stride);
      break;
    case ATTNGEN_PATTERN_BLOCK_SPARSE:
      s = "block-sparse --block " + std::to_string(p.block);
      break;
    case ATTNGEN_PATTERN_GLOBAL_LOCAL:
      s = "global-local --global " + std::to_string(p.global_tokens) + " --local " +
          std::to_string(p.local);
      break;
    default:
      s = "?";
  }
  if (k.mask == ATTNGEN_MASK_CAUSAL) s += " --causal";
  return s;
}

bool kernel_matches_params(const attngen_kernel_info& k, PatternId id, const PatternParams& p) {
  const attngen_pattern& kp = k.pattern;
  switch (id) {
    case PatternId::kLocal:
      return kp.window_left + 1 == p.window;
    case PatternId::kStrided:
      return kp.stride == p.stride;
    case PatternId::kBlockSparse:
      return kp.block == p.block;
    case PatternId::kGlobalLocal:
      return kp.global_tokens == p.global && kp.local == p.local;
    default:
      return true;
  }
}

void take_kernel_params(const attngen_kernel_info& k, PatternId id, PatternParams& p) {
  const attngen_pattern& kp = k.pattern;
  if (id == PatternId::kLocal) p.window = kp.window_left + 1;
  if (id == PatternId::kStrided) p.stride = kp.stride;
  if (id == PatternId::kBlockSparse) p.block = kp.block;
  if (id == PatternId::kGlobalLocal) {
    p.global = kp.global_tokens;
    p.local = kp.local;
  }
}

const attngen_kernel_info* find_weights_kernel(PatternId id, bool causal, bool generic) {
  const attngen_kernel_info* found = nullptr;
  for (size_t i = 0; i < attngen_kernel_count(); ++i) {
    const attngen_kernel_info* k = attngen_kernel_at(i);
    if (!plain_attention_with_weights(*k) || (k->generic != 0) != generic) continue;
    if (generic ? k->pattern.kind != kind_of(id) : !kernel_is_pattern(*k, id)) continue;
    if (!generic && (k->mask == ATTNGEN_MASK_CAUSAL) != causal) continue;
    if (std::string(k->isa) == "cuda") continue;  // chosen only when asked for
    if (found == nullptr || (attngen_kernel_supported(k) && !attngen_kernel_supported(found))) {
      found = k;
    }
  }
  return found;
}

void list_weights_kernels(FILE* f) {
  std::set<std::string> seen;
  for (size_t i = 0; i < attngen_kernel_count(); ++i) {
    const attngen_kernel_info* k = attngen_kernel_at(i);
    if (!plain_attention_with_weights(*k) || !seen.insert(variant_name(*k)).second) continue;
    // A generic kernel takes its pattern's parameters and the causal mask at run time.
    std::string what = describe_kernel(*k);
    if (k->generic != 0) {
      what = what.substr(0, what.find(' ')) +
             " (any parameters, D <= " + std::to_string(k->head_dim_qk) + ")";
    }
    std::fprintf(f, "  --pattern %-40s (%s)\n", what.c_str(), variant_name(*k).c_str());
  }
  if (seen.empty()) std::fprintf(f, "  (none)\n");
}

std::string weights_head_dims() {
  std::set<std::string> dims;
  for (size_t i = 0; i < attngen_kernel_count(); ++i) {
    const attngen_kernel_info* k = attngen_kernel_at(i);
    if (!plain_attention_with_weights(*k) || k->pattern.kind != ATTNGEN_PATTERN_NONE) continue;
    dims.insert(k->generic != 0 ? "any up to " + std::to_string(k->head_dim_qk)
                                : std::to_string(k->head_dim_qk));
  }
  std::string s;
  for (const std::string& d : dims) s += (s.empty() ? "" : ", ") + d;
  return s.empty() ? "none" : s;
}

PatternId parse_pattern(const std::string& command, const std::string& s) {
  if (s == "dense" || s == "none") return PatternId::kDense;
  if (s == "local" || s == "window") return PatternId::kLocal;
  if (s == "strided") return PatternId::kStrided;
  if (s == "block-sparse" || s == "block_sparse") return PatternId::kBlockSparse;
  if (s == "global-local" || s == "global_local" || s == "global+local") {
    return PatternId::kGlobalLocal;
  }
  throw UsageError(command + ": --pattern: expected dense, local, strided, block-sparse or " +
                   "global-local, got '" + s + "'");
}

}  // namespace attngen::cli::viz
