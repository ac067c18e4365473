// The C API: validate every argument, pick a kernel, run it with Halide's errors captured.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <string>
#include <vector>

#include "core/modifier.h"
#include "runtime/src/internal.h"
#include "runtime/src/rope.h"
#include "runtime/src/weights.h"
#include "runtime/src/workspace.h"

namespace attngen::rt {

namespace {

ATTNGEN_THREAD_LOCAL std::string t_last_error;
// The name of the last kernel run (descriptors outlive their use): a call records it without
// allocating.
ATTNGEN_THREAD_LOCAL const char* t_last_kernel = "";

void capture_error(void* user_context, const char* message) {
  if (user_context != nullptr && message != nullptr) {
    static_cast<CallContext*>(user_context)->halide_error += message;
  }
}

void install_halide_hooks() {
  static const bool installed = [] {
#if !ATTNGEN_SINGLE_THREADED  // Halide's noos runtime calls halide_error() itself (below)
    halide_set_error_handler(capture_error);
#endif
    install_allocator();
    return true;
  }();
  (void)installed;
}

const char* const kQDims[] = {"B", "Sq", "Hq", "Dqk"};
const char* const kKDims[] = {"B", "Skv", "Hkv", "Dqk"};
const char* const kVDims[] = {"B", "Skv", "Hkv", "Dv"};
const char* const kODims[] = {"B", "Sq", "Hq", "Dv"};
const char* const kKvLenDims[] = {"B"};
const char* const kWeightsDims[] = {"B", "Hq", "Sq", "Skv"};
const char* const kLseDims[] = {"B", "Hq", "Sq"};
const char* const kRowsDims[] = {"B", "S", "E"};
const char* const kLinearWDims[] = {"N", "E"};
const char* const kLinearOutDims[] = {"B", "S", "N"};
const char* const kBiasDims[] = {"N"};

// kv_len: given (I32 [B], values in [0, Skv]) or all Skv, in *values (from the call's scratch). A
// size query checks the values given and then measures with all Skv, the most any tile visits.
bool prepare_kv_len(Check& c, CallScratch& scratch, const attngen_tensor* kv_len, int64_t batch,
                    int64_t seq_kv, int32_t** out) {
  int32_t* values = *out = scratch.array<int32_t>(c, static_cast<size_t>(batch), "kv_len");
  if (values == nullptr) return false;
  std::fill(values, values + batch, static_cast<int32_t>(seq_kv));
  if (kv_len == nullptr) return true;
  const TensorSpec spec{"kv_len", ATTNGEN_I32, 1, kKvLenDims};
  if (!check_tensor(c, kv_len, spec)) return false;
  if (!check_dim(c, *kv_len, spec, 0, batch, "B of q")) return false;
  const auto* data = static_cast<const uint8_t*>(kv_len->data);
  for (int64_t b = 0; b < batch; ++b) {
    int32_t n;  // the caller's data need not be 4-byte aligned
    std::memcpy(&n, data + b * kv_len->strides[0] * 4, sizeof n);
    if (n < 0 || n > seq_kv) {
      return c.fail(ATTNGEN_ERROR_INVALID_ARGUMENT,
                    "kv_len[" + std::to_string(b) + "] is " + std::to_string(n) +
                        ", expected 0 <= kv_len <= Skv = " + std::to_string(seq_kv));
    }
    if (!scratch.sizing()) values[b] = n;
  }
  return true;
}

// Bottom-right alignment places query i at kv_len - Sq + i; where kv_len == Sq in every batch
// that is top-left alignment, which the kernels run faster (no per-batch offset in their key
// ranges; generator/attention_algorithm.cpp).
bool needs_bottom_right(attngen_alignment alignment, int64_t seq_q, const int32_t* kv_len,
                        int64_t batch) {
  if (alignment != ATTNGEN_ALIGN_BOTTOM_RIGHT) return false;
  for (int64_t b = 0; b < batch; ++b) {
    if (kv_len[b] != seq_q) return true;
  }
  return false;
}

// The caller's enum fields, read as the ints they hold (enum_value).
bool check_enums(Check& c, const attngen_mask_kind& mask_field,
                 const attngen_alignment& alignment_field) {
  const int32_t mask = enum_value(mask_field), alignment = enum_value(alignment_field);
  if (mask != ATTNGEN_MASK_NONE && mask != ATTNGEN_MASK_CAUSAL) {
    return c.fail(
        ATTNGEN_ERROR_INVALID_ARGUMENT,
        "mask is " + std::to_string(mask) + ", expected ATTNGEN_MASK_NONE or ATTNGEN_MASK_CAUSAL");
  }
  if (alignment != ATTNGEN_ALIGN_BOTTOM_RIGHT && alignment != ATTNGEN_ALIGN_TOP_LEFT) {
    return c.fail(ATTNGEN_ERROR_INVALID_ARGUMENT,
                  "alignment is " + std::to_string(alignment) +
                      ", expected ATTNGEN_ALIGN_BOTTOM_RIGHT or ATTNGEN_ALIGN_TOP_LEFT");
  }
  return true;
}

// The mask tensor, broadcast to (Skv, Sq, Hq, B) innermost-first with stride 0 where it has
// size 1 or no dimension.
bool prepare_mask(Check& c, const attngen_tensor* m, const int64_t full[4], HalideView& view) {
  if (m == nullptr) return true;
  if (m->data == nullptr) return c.fail(ATTNGEN_ERROR_NULL_POINTER, "mask_tensor.data is NULL");
  const int32_t dtype = enum_value(m->dtype);
  if (dtype != ATTNGEN_BOOL && dtype != ATTNGEN_F32) {
    return c.fail(ATTNGEN_ERROR_MASK, std::string("mask_tensor has dtype ") + dtype_name(dtype) +
                                          ", expected BOOL or F32");
  }
  if (m->rank < 1 || m->rank > 4) {
    return c.fail(ATTNGEN_ERROR_MASK, "mask_tensor has rank " + std::to_string(m->rank) +
                                          ", expected 1 to 4 (broadcast to [B, Hq, Sq, Skv])");
  }
  static const char* const names[] = {"B", "Hq", "Sq", "Skv"};
  attngen_tensor full_view{};
  full_view.data = m->data;
  full_view.dtype = m->dtype;
  full_view.rank = 4;
  int64_t last = 0;
  for (int d = 0; d < 4; ++d) {
    const int md = d - (4 - m->rank);  // mask dimension aligned to the right
    full_view.shape[d] = full[d];
    full_view.strides[d] = 0;
    if (md < 0) continue;
    const int64_t n = m->shape[md], s = m->strides[md];
    if (n != full[d] && n != 1) {
      return c.fail(ATTNGEN_ERROR_MASK, "mask_tensor.shape[" + std::to_string(md) + "] is " +
                                            std::to_string(n) + ", expected " +
                                            std::to_string(full[d]) + " (" + names[d] + ") or 1");
    }
    if (s < 0 || s > std::numeric_limits<int32_t>::max()) {
      return c.fail(ATTNGEN_ERROR_STRIDE, "mask_tensor.strides[" + std::to_string(md) + "] is " +
                                              std::to_string(s) + ", expected 0 <= stride < 2^31");
    }
    if (n > 1) {
      full_view.strides[d] = s;
      last += (n - 1) * s;  // each term < 2^62, so four of them cannot overflow unchecked...
    }
  }
  int64_t bytes = 0;  // ...but their sum times 4 can
  if (!checked_add(last, 1, &bytes) ||
      !checked_mul(bytes, static_cast<int64_t>(dtype_size(dtype)), &bytes) ||
      bytes > std::numeric_limits<int32_t>::max()) {
    return c.fail(ATTNGEN_ERROR_TOO_LARGE, "mask_tensor spans more than 2^31 - 1 bytes");
  }
  make_view(view, full_view);
  return true;
}

// The pattern's kind and parameters; for block-sparse its layout, BOOL
// [ceil(Sq / block), ceil(Skv / block)], as a Halide view.
bool prepare_pattern(Check& c, const attngen_pattern& p, int64_t seq_q, int64_t seq_kv,
                     HalideView& layout) {
  const auto bad = [&](const std::string& what) {
    return c.fail(ATTNGEN_ERROR_INVALID_ARGUMENT, "pattern: " + what);
  };
  const int32_t kind = enum_value(p.kind);  // any int a caller stored
  switch (kind) {
    case ATTNGEN_PATTERN_NONE:
      return true;
    case ATTNGEN_PATTERN_WINDOW:
      if (p.window_left < -1 || p.window_right < -1 || (p.window_left < 0 && p.window_right < 0)) {
        return bad("window_left " + std::to_string(p.window_left) + " and window_right " +
                   std::to_string(p.window_right) +
                   ": expected each >= 0 or -1 (unbounded), not both -1");
      }
      return true;
    case ATTNGEN_PATTERN_STRIDED:
      if (p.stride <= 0) return bad("stride is " + std::to_string(p.stride) + ", expected > 0");
      return true;
    case ATTNGEN_PATTERN_GLOBAL_LOCAL:
      if (p.local < 0 || p.global_tokens < 0) {
        return bad("local " + std::to_string(p.local) + " and global_tokens " +
                   std::to_string(p.global_tokens) + ": expected >= 0");
      }
      return true;
    case ATTNGEN_PATTERN_BLOCK_SPARSE: {
      if (p.block <= 0) return bad("block is " + std::to_string(p.block) + ", expected > 0");
      const char* const dims[] = {"Sq / block", "Skv / block"};
      const TensorSpec spec{"pattern.layout", ATTNGEN_BOOL, 2, dims};
      if (p.layout == nullptr) {
        return c.fail(ATTNGEN_ERROR_NULL_POINTER, "pattern.layout is NULL (block-sparse)");
      }
      if (!check_tensor(c, p.layout, spec) ||
          !check_dim(c, *p.layout, spec, 0, (seq_q + p.block - 1) / p.block, "ceil(Sq / block)") ||
          !check_dim(c, *p.layout, spec, 1, (seq_kv + p.block - 1) / p.block,
                     "ceil(Skv / block)")) {
        return false;
      }
      make_view(layout, *p.layout);
      return true;
    }
    default:
      return bad("kind is " + std::to_string(kind) + ", expected an ATTNGEN_PATTERN_* value");
  }
}

}  // namespace

bool may_fit_natively(const KernelQuery& q) {
  const KernelList kernels = kernel_list();
  for (size_t i = 0; i < kernels.size(); ++i) {
    const attngen_kernel_info* k = kernels[i];
    if (k->op != q.op || k->dtypes.q != q.dtypes.q) continue;
    if (q.op == ATTNGEN_OP_DECODE) {
      if (k->dtypes.out != q.dtypes.out || k->dtypes.cache != q.dtypes.cache) continue;
      return true;
    }
    if (q.op == ATTNGEN_OP_ATTENTION &&
        (enum_value(k->pattern.kind) != enum_value(q.pattern.kind) || (q.weights && !k->weights) ||
         (q.lse && !k->lse))) {
      continue;
    }
    if (q.op != ATTNGEN_OP_LINEAR &&
        (k->generic ? q.head_dim_qk > k->head_dim_qk || q.head_dim_v > k->head_dim_v
                    : q.head_dim_qk != k->head_dim_qk || q.head_dim_v != k->head_dim_v)) {
      continue;
    }
    return true;
  }
  return false;
}

namespace {

// The need measured for the kernel's configuration (a size query's), or ATTNGEN_ERROR_WORKSPACE.
bool workspace_need(Check& c, const attngen_kernel_info& kernel, const attngen_kernel_args& args,
                    KernelNeed* need) {
  const CallScratch* scratch = CallScratch::current();
  if (scratch != nullptr && scratch->planned_need() != nullptr) {
    *need = *scratch->planned_need();
    return true;
  }
  if (find_need(kernel_key(kernel, args), need)) return true;
  return c.fail(ATTNGEN_ERROR_WORKSPACE,
                "a workspace is bound, but no workspace size query of this process measured "
                "kernel '" +
                    std::string(kernel.name) +
                    "' for this call's configuration (shapes, strides, options): ask the call's "
                    "attngen_*_workspace_size() with its arguments first");
}

// Runs the kernel in the call's workspace (the area its need takes there), into *result and
// *overflow (its scratch outgrew the area); false (c says why) where it cannot run there. The
// memory's bookkeeping (some KiB to clear) is made only for such runs.
bool run_in_workspace(Check& c, CallScratch& scratch, const attngen_kernel_info& kernel,
                      const attngen_kernel_args& args, CallContext& ctx, int* result,
                      bool* overflow) {
  KernelMemory memory{KernelMemory::kWorkspace};
  KernelNeed need;
  const int threads = thread_count();
  if (!workspace_need(c, kernel, args, &need) || !scratch.check_kernel(c, kernel, need, threads)) {
    return false;
  }
  scratch.area_for(need, threads, memory);
  ctx.memory = &memory;
  *result = run_with_memory(kernel, args, ctx);
  ctx.memory = nullptr;
  *overflow = memory.overflow.load();
  return true;
}

}  // namespace

bool precheck_kernel(Check& c, const attngen_kernel_info* kernel, const attngen_kernel_args& args) {
  CallScratch* scratch = CallScratch::current();
  if (scratch == nullptr || !scratch->in_workspace()) return true;
  KernelNeed need;
  return workspace_need(c, *kernel, args, &need) &&
         scratch->check_kernel(c, *kernel, need, thread_count());
}

attngen_status run_kernel(Check& c, const attngen_kernel_info* kernel,
                          const attngen_kernel_args& args) {
  install_halide_hooks();
  CallScratch* scratch = CallScratch::current();
  if (scratch != nullptr && scratch->sizing()) {
    KernelNeed need;
    if (measure_kernel(c, *kernel, args, &need)) {
      scratch->add_kernel(record_need(kernel_key(*kernel, args), need), thread_count());
    }
    return c.status();
  }
  if (scratch != nullptr && scratch->checking()) {  // the checks of a run in its workspace only
    precheck_kernel(c, kernel, args);
    return c.status();
  }
  CallContext ctx;
  int result;
  bool overflow = false;
  if (scratch != nullptr && scratch->in_workspace()) {
    if (!run_in_workspace(c, *scratch, *kernel, args, ctx, &result, &overflow)) return c.status();
  } else {
    const KernelRunScope running;  // Halide's thread pool stays as it is meanwhile
    result = kernel->run(&ctx, &args);
  }
  if (result != 0) {
    std::string msg = "kernel '" + std::string(kernel->name) + "' failed (Halide error " +
                      std::to_string(result) + ")";
    if (!ctx.halide_error.empty()) msg += ": " + ctx.halide_error;
    if (overflow) {
      msg +=
          " (its scratch outgrew the workspace area measured for it; nothing came from the "
          "heap)";
    }
    while (!msg.empty() && msg.back() == '\n') msg.pop_back();
    c.fail(ATTNGEN_ERROR_KERNEL, msg);
  }
  return c.status();
}

attngen_status run_linear(Check& c, const attngen_kernel_info* kernel, const attngen_tensor& x,
                          const attngen_tensor& w, const attngen_tensor& bias, attngen_tensor& y) {
  HalideView hx, hw, hb, hy;
  make_view(hx, x);
  make_view(hw, w);
  make_view(hb, bias);
  make_view(hy, y);
  attngen_kernel_args args{};
  args.x = &hx.buf;
  args.w = &hw.buf;
  args.bias = &hb.buf;
  args.out = &hy.buf;
  return run_kernel(c, kernel, args);
}

attngen_status finish(const Check& c, const attngen_kernel_info* kernel) {
  t_last_error = c.message();
  t_last_kernel = c.ok() && kernel != nullptr ? kernel->name : "";
  return c.status();
}

}  // namespace attngen::rt

using namespace attngen::rt;

#if ATTNGEN_SINGLE_THREADED
// Halide's noos runtime leaves its error and print hooks to the application: errors go to the
// call's context as in the threaded build, and the library prints nothing.
extern "C" void halide_error(void* user_context, const char* message) {
  capture_error(user_context, message);
}
extern "C" void halide_print(void*, const char*) {}
#endif

extern "C" {

attngen_tensor attngen_tensor_contiguous(void* data, attngen_dtype dtype, int32_t rank,
                                         const int64_t* shape) {
  attngen_tensor t{};
  t.data = data;
  std::memcpy(&t.dtype, &dtype, sizeof dtype);  // whatever int a C caller passed, unread
  t.rank = rank < 0 ? 0 : (rank > ATTNGEN_MAX_RANK ? ATTNGEN_MAX_RANK : rank);
  // Strides past int64 saturate at INT64_MAX (attngen.h), which every call rejects.
  int64_t stride = 1;
  for (int d = t.rank - 1; d >= 0; --d) {
    t.shape[d] = shape != nullptr ? shape[d] : 0;
    t.strides[d] = stride;
    if (stride != std::numeric_limits<int64_t>::max() &&
        !checked_mul(stride, t.shape[d], &stride)) {
      stride = std::numeric_limits<int64_t>::max();
    }
  }
  return t;
}

attngen_attention_options attngen_attention_options_default(void) {
  attngen_attention_options o{};
  o.struct_size = sizeof o;
  o.mask = ATTNGEN_MASK_NONE;
  o.alignment = ATTNGEN_ALIGN_BOTTOM_RIGHT;
  return o;
}

attngen_mha_options attngen_mha_options_default(void) {
  attngen_mha_options o{};
  o.struct_size = sizeof o;
  o.mask = ATTNGEN_MASK_NONE;
  o.alignment = ATTNGEN_ALIGN_BOTTOM_RIGHT;
  return o;
}

int32_t attngen_version(void) { return ATTNGEN_VERSION; }

const char* attngen_version_string(void) {
#define ATTNGEN_STR_(x) #x
#define ATTNGEN_STR(x) ATTNGEN_STR_(x)
  return ATTNGEN_STR(ATTNGEN_VERSION_MAJOR) "." ATTNGEN_STR(ATTNGEN_VERSION_MINOR) "." ATTNGEN_STR(
      ATTNGEN_VERSION_PATCH);
#undef ATTNGEN_STR
#undef ATTNGEN_STR_
}

}  // extern "C"

namespace attngen::rt {
namespace {

// One attention call, validated: its sizes and the prepared inputs that are not plain views.
struct AttentionCall {
  const attngen_tensor *q, *k, *v;
  attngen_tensor* out;
  attngen_attention_options opt;
  int64_t batch, seq_q, heads_q, dqk, seq_kv, heads_kv, dv;
  int32_t* kv_len;  // [batch], from the call's scratch
  RopeView rope;    // options.rope checked, its frequencies in the call's scratch (dim 0: none)
  HalideView mask, layout;
  HalideView modifier[ATTNGEN_MAX_MODIFIER_TENSORS];  // the modifier's tensors (prepare_modifier)
};

// The options that are values: the enums, scale, soft cap, the modifier's name.
bool check_scalar_options(Check& c, const attngen_attention_options& opt) {
  if (!check_enums(c, opt.mask, opt.alignment)) return false;
  if (!std::isfinite(opt.scale))
    return c.fail(ATTNGEN_ERROR_INVALID_ARGUMENT, "scale is not finite");
  if (!(opt.softcap >= 0.0f) || !std::isfinite(opt.softcap)) {
    return c.fail(ATTNGEN_ERROR_INVALID_ARGUMENT, "softcap must be 0 (none) or a finite c > 0");
  }
  if (opt.modifier != nullptr && opt.modifier->name == nullptr) {
    return c.fail(ATTNGEN_ERROR_NULL_POINTER, "modifier.name is NULL");
  }
  return true;
}

const char* const kQPositionDims[] = {"B", "Sq"};
const char* const kKPositionDims[] = {"B", "Skv"};

// The call's rope (options.rope, q_positions, k_positions): checked, and its frequencies copied
// into the call's scratch (call.rope). Positions without a rope are refused.
bool prepare_rope(Check& c, CallScratch& scratch, AttentionCall& call) {
  const attngen_attention_options& opt = call.opt;
  call.rope = RopeView{};
  if (opt.rope == nullptr) {
    if (opt.q_positions != nullptr || opt.k_positions != nullptr) {
      return c.fail(ATTNGEN_ERROR_INVALID_ARGUMENT,
                    std::string("options.") +
                        (opt.q_positions != nullptr ? "q_positions" : "k_positions") +
                        " is set without options.rope");
    }
    return true;
  }
  attngen_rope r;
  if (!check_rope(c, opt.rope, call.dqk, "options.rope", &r)) return false;
  const TensorSpec qs{"q_positions", ATTNGEN_I32, 2, kQPositionDims};
  const TensorSpec ks{"k_positions", ATTNGEN_I32, 2, kKPositionDims};
  if ((opt.q_positions != nullptr &&
       (!check_tensor(c, opt.q_positions, qs) ||
        !check_dim(c, *opt.q_positions, qs, 0, call.batch, "B of q") ||
        !check_dim(c, *opt.q_positions, qs, 1, call.seq_q, "Sq of q"))) ||
      (opt.k_positions != nullptr &&
       (!check_tensor(c, opt.k_positions, ks) ||
        !check_dim(c, *opt.k_positions, ks, 0, call.batch, "B of q") ||
        !check_dim(c, *opt.k_positions, ks, 1, call.seq_kv, "Skv of k")))) {
    return false;
  }
  float* freq =
      scratch.array<float>(c, static_cast<size_t>(r.rotary_dim / 2), "the rope's frequencies");
  if (freq == nullptr) return false;
  copy_inv_freq(r, freq);
  call.rope = RopeView{r.rotary_dim, r.pairs, freq};
  return true;
}

// Position (b, s) of an optional I32 [B, S] positions tensor, else `fallback`.
int64_t position_at(const attngen_tensor* positions, int64_t b, int64_t s, int64_t fallback) {
  if (positions == nullptr) return fallback;
  int32_t p;  // the caller's data need not be 4-byte aligned
  std::memcpy(&p,
              static_cast<const uint8_t*>(positions->data) +
                  (b * positions->strides[0] + s * positions->strides[1]) * 4,
              sizeof p);
  return p;
}

// Checks every tensor and option of a call; nothing is written. q, k and v share one dtype
// (F32, F16 or BF16); out has theirs or F32.
bool validate_attention(Check& c, CallScratch& scratch, AttentionCall& call) {
  const attngen_tensor *q = call.q, *k = call.k, *v = call.v;
  attngen_tensor* out = call.out;
  const attngen_attention_options& opt = call.opt;
  const TensorSpec qs{"q", ATTNGEN_F32, 4, kQDims, false, /*floating=*/true};
  if (!check_tensor(c, q, qs)) return false;
  const attngen_dtype dt = q->dtype;
  const TensorSpec ks{"k", dt, 4, kKDims, false, false, "q"};
  const TensorSpec vs{"v", dt, 4, kVDims, false, false, "q"};
  const TensorSpec os{"out", dt, 4, kODims, /*output=*/true, false, "q", /*or_f32=*/true};
  if (!check_tensor(c, k, ks) || !check_tensor(c, v, vs) || !check_tensor(c, out, os)) {
    return false;
  }
  const int64_t batch = call.batch = q->shape[0], seq_q = call.seq_q = q->shape[1];
  const int64_t heads_q = call.heads_q = q->shape[2];
  const int64_t dqk = call.dqk = q->shape[3], seq_kv = call.seq_kv = k->shape[1];
  const int64_t heads_kv = call.heads_kv = k->shape[2];
  const int64_t dv = call.dv = v->shape[3];
  if (!check_dim(c, *k, ks, 0, batch, "B of q") || !check_dim(c, *k, ks, 3, dqk, "Dqk of q") ||
      !check_dim(c, *v, vs, 0, batch, "B of q") || !check_dim(c, *v, vs, 1, seq_kv, "Skv of k") ||
      !check_dim(c, *v, vs, 2, heads_kv, "Hkv of k") ||
      !check_dim(c, *out, os, 0, batch, "B of q") || !check_dim(c, *out, os, 1, seq_q, "Sq of q") ||
      !check_dim(c, *out, os, 2, heads_q, "Hq of q") || !check_dim(c, *out, os, 3, dv, "Dv of v")) {
    return false;
  }
  if (heads_q % heads_kv != 0) {
    return c.fail(ATTNGEN_ERROR_HEADS,
                  "q has " + std::to_string(heads_q) + " heads and k has " +
                      std::to_string(heads_kv) +
                      "; Hq must be a multiple of Hkv (grouped-query attention)");
  }
  if (!check_scalar_options(c, opt)) return false;
  if (!prepare_kv_len(c, scratch, opt.kv_len, batch, seq_kv, &call.kv_len) ||
      !prepare_rope(c, scratch, call)) {
    return false;
  }
  const int64_t full[4] = {batch, heads_q, seq_q, seq_kv};
  if (!prepare_mask(c, opt.mask_tensor, full, call.mask)) return false;
  if (!prepare_pattern(c, opt.pattern, seq_q, seq_kv, call.layout)) return false;
  const TensorSpec ws{"weights", ATTNGEN_F32, 4, kWeightsDims, /*output=*/true};
  const TensorSpec ls{"lse", ATTNGEN_F32, 3, kLseDims, /*output=*/true};
  if (opt.weights != nullptr &&
      (!check_tensor(c, opt.weights, ws) || !check_dim(c, *opt.weights, ws, 0, batch, "B of q") ||
       !check_dim(c, *opt.weights, ws, 1, heads_q, "Hq of q") ||
       !check_dim(c, *opt.weights, ws, 2, seq_q, "Sq of q") ||
       !check_dim(c, *opt.weights, ws, 3, seq_kv, "Skv of k"))) {
    return false;
  }
  if (opt.lse != nullptr &&
      (!check_tensor(c, opt.lse, ls) || !check_dim(c, *opt.lse, ls, 0, batch, "B of q") ||
       !check_dim(c, *opt.lse, ls, 1, heads_q, "Hq of q") ||
       !check_dim(c, *opt.lse, ls, 2, seq_q, "Sq of q"))) {
    return false;
  }
  // Every output must be clear of every input and of the other outputs.
  const std::pair<const attngen_tensor*, const char*> outputs[] = {
      {out, "out"}, {opt.weights, "weights"}, {opt.lse, "lse"}};
  const std::pair<const attngen_tensor*, const char*> others[] = {{q, "q"},
                                                                  {k, "k"},
                                                                  {v, "v"},
                                                                  {opt.mask_tensor, "mask"},
                                                                  {opt.pattern.layout, "layout"},
                                                                  {opt.q_positions, "q_positions"},
                                                                  {opt.k_positions, "k_positions"},
                                                                  {out, "out"},
                                                                  {opt.weights, "weights"},
                                                                  {opt.lse, "lse"}};
  for (const auto& [o, oname] : outputs) {
    if (o == nullptr) continue;
    for (const auto& [t, tname] : others) {
      if (t == nullptr || t == o) continue;
      if (t == opt.pattern.layout && opt.pattern.kind != ATTNGEN_PATTERN_BLOCK_SPARSE) continue;
      if (!check_no_alias(c, *o, oname, *t, tname)) return false;
    }
  }
  return true;
}

// The call's modifier's parameters against its kernel's layout (internal.h), in the call's dims;
// their views in call.modifier.
bool prepare_modifier(Check& c, AttentionCall& call, const attngen_kernel_info& kernel) {
  const int64_t extent[] = {call.batch, call.heads_q, call.heads_kv, call.seq_q, call.seq_kv};
  return prepare_modifier(
      c, call.opt.modifier, kernel, extent,
      {{call.out, "out"}, {call.opt.weights, "an output"}, {call.opt.lse, "an output"}},
      call.modifier);
}

// The kernel for a call: the one named, or the best that takes the call's own dtypes; where
// none does (F16 / BF16 tensors with a pattern, an extra output or head dims no kernel of that
// dtype was built for), the best F32 kernel, and *convert says the call's tensors must be
// staged in F32 (F32Staging).
const attngen_kernel_info* select_or_convert(Check& c, KernelQuery query, const char* name,
                                             bool* convert) {
  *convert = false;
  if (name != nullptr || query.dtypes.q == ATTNGEN_F32) return select_kernel(c, query, name);
  if (may_fit_natively(query)) {
    Check native;
    if (const attngen_kernel_info* k = select_kernel(native, query, nullptr)) return k;
  }
  query.dtypes.q = query.dtypes.k = query.dtypes.v = query.dtypes.out = ATTNGEN_F32;
  *convert = true;
  return select_kernel(c, query, nullptr);
}

// What the call asks a kernel for (registry.cpp matches it against the descriptors).
KernelQuery attention_query(const AttentionCall& call) {
  const attngen_attention_options& opt = call.opt;
  KernelQuery query{ATTNGEN_OP_ATTENTION};
  query.head_dim_qk = static_cast<int>(call.dqk);
  query.head_dim_v = static_cast<int>(call.dv);
  query.mask = opt.mask;
  query.pattern = opt.pattern;
  query.weights = opt.weights != nullptr;
  query.lse = opt.lse != nullptr;
  query.seq_q = call.seq_q;
  query.seq_kv = call.seq_kv;
  query.mask_tensor = opt.mask_tensor == nullptr               ? ATTNGEN_MASK_TENSOR_NONE
                      : opt.mask_tensor->dtype == ATTNGEN_BOOL ? ATTNGEN_MASK_TENSOR_BOOL
                                                               : ATTNGEN_MASK_TENSOR_ADDITIVE;
  query.softcap = opt.softcap > 0.0f;
  query.modifier = opt.modifier != nullptr ? opt.modifier->name : "";
  query.dtypes.q = call.q->dtype;
  query.dtypes.k = call.k->dtype;
  query.dtypes.v = call.v->dtype;
  query.dtypes.out = call.out->dtype;
  return query;
}

// The kernel's arguments: Halide views of the call's tensors (kept in `views`), and scratch for
// a log-sum-exp output the kernel writes but the call did not ask for.
struct AttentionViews {
  HalideView q, k, v, out, kv_len, weights, lse, bool_mask, add_mask;
};

// False (c says why) if the call's scratch cannot hold the lse scratch.
bool attention_args(Check& c, CallScratch& scratch, AttentionCall& call,
                    const attngen_kernel_info& kernel, AttentionViews& views,
                    attngen_kernel_args& args) {
  const attngen_attention_options& opt = call.opt;
  make_view(views.q, *call.q);
  make_view(views.k, *call.k);
  make_view(views.v, *call.v);
  make_view(views.out, *call.out);
  const int64_t batch_shape[1] = {call.batch};
  make_view(views.kv_len, attngen_tensor_contiguous(call.kv_len, ATTNGEN_I32, 1, batch_shape));
  args = attngen_kernel_args{};
  args.q = &views.q.buf;
  args.k = &views.k.buf;
  args.v = &views.v.buf;
  args.kv_len = &views.kv_len.buf;
  args.mask = opt.mask_tensor != nullptr ? &call.mask.buf : nullptr;
  args.layout = opt.pattern.kind == ATTNGEN_PATTERN_BLOCK_SPARSE ? &call.layout.buf : nullptr;
  args.out = &views.out.buf;
  if (opt.weights != nullptr) {
    make_view(views.weights, *opt.weights);
    args.weights = &views.weights.buf;
  }
  if (opt.lse != nullptr) {
    make_view(views.lse, *opt.lse);
    args.lse = &views.lse.buf;
  } else if (kernel.lse) {
    float* lse =
        scratch.array<float>(c, static_cast<size_t>(call.batch * call.heads_q * call.seq_q),
                             "the lse the kernel writes");
    if (lse == nullptr) return false;
    const int64_t shape[3] = {call.batch, call.heads_q, call.seq_q};
    make_view(views.lse, attngen_tensor_contiguous(lse, ATTNGEN_F32, 3, shape));
    args.lse = &views.lse.buf;
  }
  if (kernel.generic) {
    // The run-time options, and the mask the call does not have as a stand-in that masks
    // nothing: one element (attend / add 0) broadcast to (Skv, Sq, Hq, B).
    static const uint8_t kAttend = 1;
    static const float kAddNothing = 0.0f;
    const int64_t full[4] = {call.batch, call.heads_q, call.seq_q, call.seq_kv};
    const auto stand_in = [&](HalideView& view, const void* value, attngen_dtype dtype) {
      attngen_tensor t = attngen_tensor_contiguous(const_cast<void*>(value), dtype, 4, full);
      for (int64_t& stride : t.strides) stride = 0;
      make_view(view, t);
    };
    args.causal = opt.mask == ATTNGEN_MASK_CAUSAL;
    args.pattern = opt.pattern;
    // A query's position p lies in [-Sq, Skv + Sq) and keys in [0, Skv): a window side, stride or
    // local width of Skv + Sq or more reaches as far as any larger one. Clamped to that, so that
    // the kernels' int32 position arithmetic (p + window_right, say) cannot overflow (found by the
    // fuzzer: window_right = INT32_MAX attended nothing).
    const int64_t reach = call.seq_q + call.seq_kv;
    for (int32_t* side : {&args.pattern.window_left, &args.pattern.window_right,
                          &args.pattern.stride, &args.pattern.local}) {
      if (*side > reach) *side = static_cast<int32_t>(reach);
    }
    args.mask_kind = attention_query(call).mask_tensor;
    if (args.mask_kind != ATTNGEN_MASK_TENSOR_BOOL)
      stand_in(views.bool_mask, &kAttend, ATTNGEN_BOOL);
    if (args.mask_kind != ATTNGEN_MASK_TENSOR_ADDITIVE) {
      stand_in(views.add_mask, &kAddNothing, ATTNGEN_F32);
    }
    args.bool_mask =
        args.mask_kind == ATTNGEN_MASK_TENSOR_BOOL ? &call.mask.buf : &views.bool_mask.buf;
    args.add_mask =
        args.mask_kind == ATTNGEN_MASK_TENSOR_ADDITIVE ? &call.mask.buf : &views.add_mask.buf;
  }
  pass_modifier(opt.modifier, kernel, call.modifier, args);
  args.scale = opt.scale != 0.0f ? opt.scale : 1.0f / std::sqrt(static_cast<float>(call.dqk));
  args.softcap = opt.softcap;
  args.bottom_right = needs_bottom_right(opt.alignment, call.seq_q, call.kv_len, call.batch);
  return true;
}

}  // namespace
}  // namespace attngen::rt

namespace attngen::rt {
namespace {

// The size queries' common start: *bytes must be given.
bool check_bytes(Check& c, const size_t* bytes) {
  return bytes != nullptr || c.fail(ATTNGEN_ERROR_NULL_POINTER, "bytes is NULL");
}

// Ends a size query: *bytes is the workspace the call needs, attngen_last_kernel() the kernel
// it measured.
attngen_status finish_size(const Check& c, const CallScratch& scratch, size_t* bytes,
                           const attngen_kernel_info* kernel) {
  if (c.ok()) *bytes = scratch.bytes();
  return finish(c, kernel);
}

// What validation and kernel selection decided for an attention, linear or MHA call: its kernel,
// and whether the call's F16 / BF16 tensors are staged in F32 for it. A plan keeps one.
struct KernelChoice {
  const attngen_kernel_info* kernel = nullptr;
  bool convert = false;
};

// Validates a call (options read by the ABI rule) and chooses its kernel; false, c saying why,
// on bad input or no kernel.
bool prepare_attention(Check& c, CallScratch& scratch, AttentionCall& call,
                       const attngen_attention_options* options, KernelChoice* choice) {
  if (!read_options(c, options, "options", &call.opt, offsetof(attngen_attention_options, rope)) ||
      !validate_attention(c, scratch, call)) {
    return false;
  }
  choice->kernel = select_or_convert(c, attention_query(call), call.opt.kernel, &choice->convert);
  return choice->kernel != nullptr && prepare_modifier(c, call, *choice->kernel);
}

// Runs a validated call (q and k rotated already, where it has a rope) on its chosen kernel (in
// kSize: measures it, writing nothing).
void run_attention(Check& c, CallScratch& scratch, AttentionCall& call,
                   const KernelChoice& choice) {
  F32Staging staging;
  attngen_tensor q32, k32, v32, out32;
  if (choice.convert) {
    if (!staging.input(c, *call.q, "q", &q32) || !staging.input(c, *call.k, "k", &k32) ||
        !staging.input(c, *call.v, "v", &v32) || !staging.output(c, *call.out, "out", &out32)) {
      return;
    }
    call.q = &q32;
    call.k = &k32;
    call.v = &v32;
    call.out = &out32;
  }
  AttentionViews views;
  attngen_kernel_args args;
  if (attention_args(c, scratch, call, *choice.kernel, views, args) &&
      run_kernel(c, choice.kernel, args) == ATTNGEN_OK) {
    staging.commit();
  }
}

// Runs a validated call on its chosen kernel (in kSize: measures it, writing nothing); with a
// rope, q and k rotated into scratch of their dtype first (then staged like the call's own), in
// one pass over the whole of each, split among the threads (bench/RESULTS.md, "RoPE", has its
// cost).
void execute_attention(Check& c, CallScratch& scratch, AttentionCall& call,
                       const KernelChoice& choice) {
  if (!call.rope) {
    run_attention(c, scratch, call, choice);
    return;
  }
  RopedTensor q_roped, k_roped;
  if (!q_roped.take(c, scratch, call.rope, *call.q, "the rotated q") ||
      !k_roped.take(c, scratch, call.rope, *call.k, "the rotated k")) {
    return;
  }
  if (!scratch.sizing() && !scratch.checking()) {  // the rotation only where the kernel runs
    const attngen_attention_options& opt = call.opt;
    const bool top_left = opt.alignment == ATTNGEN_ALIGN_TOP_LEFT;
    const int64_t seq_q = call.seq_q;
    const int32_t* kv_len = call.kv_len;
    q_roped.fill(*call.q, [&](int64_t b, int64_t i) {
      return position_at(opt.q_positions, b, i, top_left ? i : kv_len[b] - seq_q + i);
    });
    k_roped.fill(*call.k,
                 [&](int64_t b, int64_t j) { return position_at(opt.k_positions, b, j, j); });
  }
  AttentionCall rotated = call;
  rotated.q = &q_roped.tensor();
  rotated.k = &k_roped.tensor();
  run_attention(c, scratch, rotated, choice);
}

// attngen_attention() and its size query (mode kSize: nothing written, *bytes the workspace).
attngen_status attention(CallMode mode, const attngen_tensor* q, const attngen_tensor* k,
                         const attngen_tensor* v, attngen_tensor* out,
                         const attngen_attention_options* options, size_t* bytes) {
  Check c;
  CallScratch scratch(mode);
  if (mode == CallMode::kSize && !check_bytes(c, bytes)) return finish(c, nullptr);
  AttentionCall call{q, k, v, out, attngen_attention_options_default()};
  KernelChoice choice;
  if (!prepare_attention(c, scratch, call, options, &choice)) return finish(c, nullptr);
  execute_attention(c, scratch, call, choice);
  if (mode == CallMode::kSize) return finish_size(c, scratch, bytes, choice.kernel);
  return finish(c, choice.kernel);
}

const char* const kPackedQDims[] = {"Tq", "Hq", "Dqk"};
const char* const kPackedKDims[] = {"Tk", "Hkv", "Dqk"};
const char* const kPackedVDims[] = {"Tk", "Hkv", "Dv"};
const char* const kPackedODims[] = {"Tq", "Hq", "Dv"};
const char* const kCuSeqlensDims[] = {"n + 1"};

// Entry i of a checked I32 rank-1 tensor (the caller's data need not be 4-byte aligned).
int32_t i32_at(const attngen_tensor& t, int64_t i) {
  int32_t x;
  std::memcpy(&x, static_cast<const uint8_t*>(t.data) + i * t.strides[0] * 4, sizeof x);
  return x;
}

// A cu_seqlens tensor (`name`): I32 [n + 1] (n = sequences, from the first one checked when
// *sequences >= 0), 0 at the front, non-decreasing, `total` at the back.
bool check_cu_seqlens(Check& c, const attngen_tensor* cu, const char* name, int64_t total,
                      int64_t* sequences) {
  const TensorSpec spec{name, ATTNGEN_I32, 1, kCuSeqlensDims};
  if (!check_tensor(c, cu, spec)) return false;
  if (*sequences >= 0 && !check_dim(c, *cu, spec, 0, *sequences + 1, "n + 1 of cu_seqlens_q")) {
    return false;
  }
  const int64_t n = *sequences = cu->shape[0] - 1;
  if (n < 1) {
    return c.fail(ATTNGEN_ERROR_EMPTY,
                  std::string(name) + " has 1 entry: no sequence (expected n + 1 >= 2)");
  }
  for (int64_t i = 0; i <= n; ++i) {
    const int32_t x = i32_at(*cu, i), before = i > 0 ? i32_at(*cu, i - 1) : 0;
    if ((i == 0 && x != 0) || x < before || x > total || (i == n && x != total)) {
      return c.fail(ATTNGEN_ERROR_INVALID_ARGUMENT,
                    std::string(name) + "[" + std::to_string(i) + "] is " + std::to_string(x) +
                        ", expected 0 = " + name + "[0] <= ... <= " + name +
                        "[n] = " + std::to_string(total) + " (the packed rows)");
    }
  }
  return true;
}

// Rows [first, first + n) of a packed [T, H, D] tensor as a batch of one, [1, n, H, D].
attngen_tensor packed_rows(const attngen_tensor& t, int64_t first, int64_t n) {
  attngen_tensor s{};
  s.data = static_cast<uint8_t*>(t.data) + first * t.strides[0] * dtype_size(t.dtype);
  s.dtype = t.dtype;
  s.rank = 4;
  const int64_t shape[4] = {1, n, t.shape[1], t.shape[2]};
  const int64_t strides[4] = {n * t.strides[0], t.strides[0], t.strides[1], t.strides[2]};
  for (int d = 0; d < 4; ++d) {
    s.shape[d] = shape[d];
    s.strides[d] = strides[d];
  }
  return s;
}

// attngen_attention_varlen() and its size query: each sequence one attention() call, every one
// validated (and its kernel chosen) before the first runs.
attngen_status attention_varlen(CallMode mode, const attngen_tensor* q, const attngen_tensor* k,
                                const attngen_tensor* v, attngen_tensor* out,
                                const attngen_tensor* cu_q, const attngen_tensor* cu_k,
                                const attngen_attention_options* options, size_t* bytes) {
  Check c;
  if (mode == CallMode::kSize && !check_bytes(c, bytes)) return finish(c, nullptr);
  attngen_attention_options opt = attngen_attention_options_default();
  if (!read_options(c, options, "options", &opt, offsetof(attngen_attention_options, rope))) {
    return finish(c, nullptr);
  }
  const struct {
    bool set;
    const char* name;
  } per_batch[] = {
      {opt.kv_len != nullptr, "kv_len"},
      {opt.mask_tensor != nullptr, "mask_tensor"},
      {opt.weights != nullptr, "weights"},
      {opt.lse != nullptr, "lse"},
      {opt.q_positions != nullptr, "q_positions"},
      {opt.k_positions != nullptr, "k_positions"},
      {opt.modifier != nullptr, "modifier"},
      {enum_value(opt.pattern.kind) == ATTNGEN_PATTERN_BLOCK_SPARSE, "pattern (block-sparse)"}};
  for (const auto& o : per_batch) {
    if (o.set) {
      c.fail(ATTNGEN_ERROR_INVALID_ARGUMENT,
             std::string("options.") + o.name +
                 " is set: a packed call takes no option shaped by the batch (a call per "
                 "sequence does)");
      return finish(c, nullptr);
    }
  }
  const TensorSpec qs{"q", ATTNGEN_F32, 3, kPackedQDims, false, /*floating=*/true};
  if (!check_tensor(c, q, qs)) return finish(c, nullptr);
  // The options themselves, once: a call whose sequences all lack keys (or queries) validates no
  // sequence's call.
  attngen_rope rope;
  HalideView no_layout;
  if (!check_scalar_options(c, opt) || !prepare_pattern(c, opt.pattern, 1, 1, no_layout) ||
      !check_rope(c, opt.rope, q->shape[2], "options.rope", &rope)) {
    return finish(c, nullptr);
  }
  const TensorSpec ks{"k", q->dtype, 3, kPackedKDims, false, false, "q"};
  const TensorSpec vs{"v", q->dtype, 3, kPackedVDims, false, false, "q"};
  const TensorSpec os{"out", q->dtype, 3, kPackedODims, /*output=*/true, false, "q", true};
  if (!check_tensor(c, k, ks) || !check_tensor(c, v, vs) || !check_tensor(c, out, os) ||
      !check_dim(c, *k, ks, 2, q->shape[2], "Dqk of q") ||
      !check_dim(c, *v, vs, 0, k->shape[0], "Tk of k") ||
      !check_dim(c, *v, vs, 1, k->shape[1], "Hkv of k") ||
      !check_dim(c, *out, os, 0, q->shape[0], "Tq of q") ||
      !check_dim(c, *out, os, 1, q->shape[1], "Hq of q") ||
      !check_dim(c, *out, os, 2, v->shape[2], "Dv of v")) {
    return finish(c, nullptr);
  }
  if (q->shape[1] % k->shape[1] != 0) {  // (here too: no sequence's call may check it)
    c.fail(ATTNGEN_ERROR_HEADS, "q has " + std::to_string(q->shape[1]) + " heads and k has " +
                                    std::to_string(k->shape[1]) +
                                    "; Hq must be a multiple of Hkv (grouped-query attention)");
    return finish(c, nullptr);
  }
  int64_t n = -1;
  if (cu_q == nullptr) {
    c.fail(ATTNGEN_ERROR_NULL_POINTER, "cu_seqlens_q is NULL");
    return finish(c, nullptr);
  }
  if (!check_cu_seqlens(c, cu_q, "cu_seqlens_q", q->shape[0], &n) ||
      (cu_k != nullptr && !check_cu_seqlens(c, cu_k, "cu_seqlens_k", k->shape[0], &n))) {
    return finish(c, nullptr);
  }
  if (cu_k == nullptr && k->shape[0] != q->shape[0]) {
    c.fail(ATTNGEN_ERROR_SHAPE,
           "k.shape[0] (Tk) is " + std::to_string(k->shape[0]) +
               ", expected Tq = " + std::to_string(q->shape[0]) +
               " (no cu_seqlens_k: the sequences' keys are their queries' rows)");
    return finish(c, nullptr);
  }
  const attngen_tensor& cuk = cu_k != nullptr ? *cu_k : *cu_q;
  const std::pair<const attngen_tensor*, const char*> inputs[] = {
      {q, "q"}, {k, "k"}, {v, "v"}, {cu_q, "cu_seqlens_q"}, {cu_k, "cu_seqlens_k"}};
  for (const auto& [t, name] : inputs) {
    if (t != nullptr && !check_no_alias(c, *out, "out", *t, name)) return finish(c, nullptr);
  }
  // Every sequence validated, and its kernel chosen, before any runs.
  const auto sequence = [&](int64_t i, attngen_tensor* sq, attngen_tensor* sk, attngen_tensor* sv,
                            attngen_tensor* so) {
    const int64_t q0 = i32_at(*cu_q, i), k0 = i32_at(cuk, i);
    *sq = packed_rows(*q, q0, i32_at(*cu_q, i + 1) - q0);
    *sk = packed_rows(*k, k0, i32_at(cuk, i + 1) - k0);
    *sv = packed_rows(*v, k0, sk->shape[1]);
    *so = packed_rows(*out, q0, sq->shape[1]);
  };
  const attngen_kernel_info* kernel = nullptr;  // the last sequence's
  // In a workspace, each sequence's run is checked there too (CallMode::kCheck: nothing run or
  // written): a size query of other cu_seqlens may not have measured this call's configurations.
  size_t bound_bytes = 0;
  const bool in_workspace = mode == CallMode::kRun && bound_workspace(&bound_bytes) != nullptr;
  for (int64_t i = 0; i < n; ++i) {
    attngen_tensor sq, sk, sv, so;
    sequence(i, &sq, &sk, &sv, &so);
    if (sq.shape[1] == 0 || sk.shape[1] == 0) continue;
    Check one;
    CallScratch scratch(in_workspace ? CallMode::kCheck : CallMode::kSize);
    AttentionCall call{&sq, &sk, &sv, &so, attngen_attention_options_default()};
    KernelChoice choice;
    if (prepare_attention(one, scratch, call, &opt, &choice) && in_workspace) {
      execute_attention(one, scratch, call, choice);
    }
    if (!one.ok()) {
      c.fail(one.status(), "sequence " + std::to_string(i) + ": " + one.message());
      return finish(c, nullptr);
    }
    kernel = choice.kernel;
  }
  size_t most = 0;
  for (int64_t i = 0; i < n; ++i) {
    attngen_tensor sq, sk, sv, so;
    sequence(i, &sq, &sk, &sv, &so);
    if (sq.shape[1] == 0) continue;
    if (sk.shape[1] == 0) {  // no keys: every query row attends nothing
      if (mode == CallMode::kRun) {
        const size_t row = static_cast<size_t>(so.shape[3]) * dtype_size(so.dtype);
        for (int64_t r = 0; r < so.shape[1]; ++r) {
          for (int64_t h = 0; h < so.shape[2]; ++h) {
            std::memset(static_cast<uint8_t*>(so.data) +
                            (r * so.strides[1] + h * so.strides[2]) * dtype_size(so.dtype),
                        0, row);
          }
        }
      }
      continue;
    }
    size_t need = 0;
    const attngen_status st = attention(mode, &sq, &sk, &sv, &so, &opt, &need);
    if (st != ATTNGEN_OK) {
      c.fail(st, "sequence " + std::to_string(i) + ": " + attngen_last_error());
      return finish(c, nullptr);
    }
    most = std::max(most, need);
  }
  if (mode == CallMode::kSize) *bytes = most;
  return finish(c, kernel);
}

// One linear call: x [B, S, E], w [N, E], bias [N] or NULL, y [B, S, N].
struct LinearCall {
  const attngen_tensor *x, *w, *bias;
  attngen_tensor* y;
};

// Checks every tensor of a call; nothing is written. All of x's dtype (F32, F16 or BF16).
bool validate_linear(Check& c, const LinearCall& call) {
  const attngen_tensor *x = call.x, *w = call.w, *bias = call.bias, *y = call.y;
  const TensorSpec xs{"x", ATTNGEN_F32, 3, kRowsDims, false, /*floating=*/true};
  if (!check_tensor(c, x, xs)) return false;
  const attngen_dtype dt = x->dtype;  // of every tensor of the call
  const TensorSpec ws{"w", dt, 2, kLinearWDims, false, false, "x"};
  const TensorSpec bs{"bias", dt, 1, kBiasDims, false, false, "x"};
  const TensorSpec ys{"y", dt, 3, kLinearOutDims, /*output=*/true, false, "x"};
  if (!check_tensor(c, w, ws) || (bias != nullptr && !check_tensor(c, bias, bs)) ||
      !check_tensor(c, y, ys)) {
    return false;
  }
  const int64_t n = w->shape[0];
  return check_dim(c, *w, ws, 1, x->shape[2], "E of x") &&
         (bias == nullptr || check_dim(c, *bias, bs, 0, n, "N of w")) &&
         check_dim(c, *y, ys, 0, x->shape[0], "B of x") &&
         check_dim(c, *y, ys, 1, x->shape[1], "S of x") && check_dim(c, *y, ys, 2, n, "N of w") &&
         check_no_alias(c, *y, "y", *x, "x") && check_no_alias(c, *y, "y", *w, "w") &&
         (bias == nullptr || check_no_alias(c, *y, "y", *bias, "bias"));
}

// Validates a call and chooses its kernel; false, c saying why, on bad input or no kernel.
bool prepare_linear(Check& c, const LinearCall& call, KernelChoice* choice) {
  if (!validate_linear(c, call)) return false;
  choice->kernel = select_or_convert(c, layer_query(ATTNGEN_OP_LINEAR, call.x->dtype), nullptr,
                                     &choice->convert);
  return choice->kernel != nullptr;
}

// Runs a validated call on its chosen kernel, packing its weights into the call's scratch (in
// kSize: measures it, writing nothing).
void execute_linear(Check& c, CallScratch& scratch, const LinearCall& call,
                    const KernelChoice& choice, LayerWeights& weights) {
  const attngen_kernel_info* kernel = choice.kernel;
  attngen_tensor x32 = *call.x, w32{}, b32{}, y32 = *call.y;
  F32Staging staging;
  if ((choice.convert &&
       (!staging.input(c, *call.x, "x", &x32) || !staging.output(c, *call.y, "y", &y32))) ||
      !weights.packed(c, scratch, 0, kernel->weight_panel, &w32) ||
      !weights.bias(c, scratch, 0, choice.convert ? ATTNGEN_F32 : call.x->dtype, &b32)) {
    return;
  }
  if (run_linear(c, kernel, x32, w32, b32, y32) == ATTNGEN_OK) staging.commit();
}

// attngen_linear() and its size query (mode kSize: nothing written, *bytes the workspace).
attngen_status linear(CallMode mode, const attngen_tensor* x, const attngen_tensor* w,
                      const attngen_tensor* bias, attngen_tensor* y, size_t* bytes) {
  Check c;
  CallScratch scratch(mode);
  if (mode == CallMode::kSize && !check_bytes(c, bytes)) return finish(c, nullptr);
  const LinearCall call{x, w, bias, y};
  KernelChoice choice;
  if (!prepare_linear(c, call, &choice)) return finish(c, nullptr);
  CallerWeights weights(call.w, call.bias, "bias");
  execute_linear(c, scratch, call, choice, weights);
  if (mode == CallMode::kSize) return finish_size(c, scratch, bytes, choice.kernel);
  return finish(c, choice.kernel);
}

// attngen_linear_layer_forward() and its size query: x [B, S, E] and y [B, S, N] of the layer's
// dtype, y clear of x; the layer's packed weights.
attngen_status linear_layer(CallMode mode, attngen_linear_layer* layer, const attngen_tensor* x,
                            attngen_tensor* y, size_t* bytes) {
  Check c;
  CallScratch scratch(mode);
  if (mode == CallMode::kSize && !check_bytes(c, bytes)) return finish(c, nullptr);
  if (layer == nullptr) {
    c.fail(ATTNGEN_ERROR_NULL_POINTER, "layer is NULL");
    return finish(c, nullptr);
  }
  PackedLayer& l = layer->layer;
  const TensorSpec xs{"x", l.dtype, 3, kRowsDims, false, false, "the layer"};
  const TensorSpec ys{"y", l.dtype, 3, kLinearOutDims, /*output=*/true, false, "the layer"};
  if (!check_tensor(c, x, xs) || !check_dim(c, *x, xs, 2, l.embed, "E of the layer") ||
      !check_tensor(c, y, ys) || !check_dim(c, *y, ys, 0, x->shape[0], "B of x") ||
      !check_dim(c, *y, ys, 1, x->shape[1], "S of x") ||
      !check_dim(c, *y, ys, 2, l.rows(0), "N of the layer") ||
      !check_no_alias(c, *y, "y", *x, "x")) {
    return finish(c, nullptr);
  }
  KernelChoice choice;
  choice.kernel =
      select_or_convert(c, layer_query(ATTNGEN_OP_LINEAR, l.dtype), nullptr, &choice.convert);
  if (choice.kernel == nullptr) return finish(c, nullptr);
  LayerSource weights(l);
  execute_linear(c, scratch, LinearCall{x, nullptr, nullptr, y}, choice, weights);
  if (mode == CallMode::kSize) return finish_size(c, scratch, bytes, choice.kernel);
  return finish(c, choice.kernel);
}

// One MHA forward of a call's or a layer's weights: x and y [B, S, E] of the weights' dtype
// (validated by check_mha_layer() or check_layer_call()), its options, and its key padding.
struct MhaCall {
  const attngen_tensor* x;
  attngen_tensor* y;
  attngen_mha_options opt;
  int32_t* kv_len = nullptr;  // [B], from the call's scratch
};

// Checks the options' enums and key padding (into call.kv_len); nothing is written.
bool validate_mha_options(Check& c, CallScratch& scratch, MhaCall& call) {
  return check_enums(c, call.opt.mask, call.opt.alignment) &&
         prepare_kv_len(c, scratch, call.opt.kv_len, call.x->shape[0], call.x->shape[1],
                        &call.kv_len);
}

// Validates a call's options and chooses its kernel; false, c saying why, on bad input or no
// kernel.
bool prepare_mha(Check& c, CallScratch& scratch, MhaCall& call, KernelChoice* choice) {
  if (!validate_mha_options(c, scratch, call)) return false;
  KernelQuery query = layer_query(ATTNGEN_OP_MHA, call.x->dtype);
  query.head_dim_qk = query.head_dim_v = static_cast<int>(call.x->shape[2] / call.opt.num_heads);
  query.mask = call.opt.mask;
  choice->kernel = select_or_convert(c, query, call.opt.kernel, &choice->convert);
  return choice->kernel != nullptr;
}

// attngen_mha()'s arguments (weights and options given, options read by the ABI rule, every
// tensor checked) and its kernel; false, c saying why, on bad input or no kernel.
bool prepare_caller_mha(Check& c, CallScratch& scratch, const attngen_mha_weights* weights,
                        const attngen_mha_options* options, MhaCall& call, KernelChoice* choice) {
  if (weights == nullptr) c.fail(ATTNGEN_ERROR_NULL_POINTER, "weights is NULL");
  if (options == nullptr) c.fail(ATTNGEN_ERROR_NULL_POINTER, "options is NULL (num_heads)");
  return c.ok() && read_options(c, options, "options", &call.opt) &&
         check_mha_layer(c, call.x, *weights, call.y, call.opt.num_heads, "S",
                         /*floating=*/true) &&
         prepare_mha(c, scratch, call, choice);
}

// Runs a validated call on its chosen kernel with the weights packed for it (in kSize: measures
// it, writing nothing).
void execute_mha(Check& c, CallScratch& scratch, const MhaCall& call, LayerWeights& weights,
                 const KernelChoice& choice) {
  const attngen_kernel_info* kernel = choice.kernel;
  const attngen_tensor *x = call.x, *y = call.y;
  const int64_t batch = x->shape[0], seq = x->shape[1];
  // The biases in the kernel's dtype (zeros where absent), the weights packed for it.
  const attngen_dtype dt = choice.convert ? ATTNGEN_F32 : x->dtype;
  attngen_tensor x32 = *x, iw{}, ow{}, ib{}, ob{}, y32 = *y;
  F32Staging staging;
  if ((choice.convert && (!staging.input(c, *x, "x", &x32) || !staging.output(c, *y, "y", &y32))) ||
      !weights.packed(c, scratch, 0, kernel->weight_panel, &iw) ||
      !weights.packed(c, scratch, 1, kernel->weight_panel, &ow) ||
      !weights.bias(c, scratch, 0, dt, &ib) || !weights.bias(c, scratch, 1, dt, &ob)) {
    return;
  }
  HalideView hx, hiw, hib, how, hob, hl, hy;
  make_view(hx, x32);
  make_view(hiw, iw);
  make_view(hib, ib);
  make_view(how, ow);
  make_view(hob, ob);
  make_view(hy, y32);
  make_view(hl, attngen_tensor_contiguous(call.kv_len, ATTNGEN_I32, 1, &batch));
  attngen_kernel_args args{};
  args.x = &hx.buf;
  args.w = &hiw.buf;
  args.bias = &hib.buf;
  args.w2 = &how.buf;
  args.bias2 = &hob.buf;
  args.kv_len = &hl.buf;
  args.bottom_right = needs_bottom_right(call.opt.alignment, seq, call.kv_len, batch);
  args.causal = call.opt.mask == ATTNGEN_MASK_CAUSAL;  // generic kernels
  args.num_heads = static_cast<int32_t>(call.opt.num_heads);
  args.out = &hy.buf;
  if (run_kernel(c, kernel, args) == ATTNGEN_OK) staging.commit();
}

// The caller's weights of an attngen_mha() call, packed into its scratch.
CallerWeights caller_weights(const attngen_mha_weights& w) {
  return CallerWeights(w.in_proj_weight, w.in_proj_bias, "in_proj_bias", w.out_proj_weight,
                       w.out_proj_bias);
}

// attngen_mha() and its size query.
attngen_status mha(CallMode mode, const attngen_tensor* x, const attngen_mha_weights* weights,
                   attngen_tensor* y, const attngen_mha_options* options, size_t* bytes) {
  Check c;
  CallScratch scratch(mode);
  if (mode == CallMode::kSize && !check_bytes(c, bytes)) return finish(c, nullptr);
  MhaCall call{x, y, attngen_mha_options_default()};
  KernelChoice choice;
  if (!prepare_caller_mha(c, scratch, weights, options, call, &choice)) {
    return finish(c, nullptr);
  }
  CallerWeights caller = caller_weights(*weights);
  execute_mha(c, scratch, call, caller, choice);
  if (mode == CallMode::kSize) return finish_size(c, scratch, bytes, choice.kernel);
  return finish(c, choice.kernel);
}

// attngen_mha_layer_forward() and its size query.
attngen_status layer_forward(CallMode mode, attngen_mha_layer* layer, const attngen_tensor* x,
                             attngen_tensor* y, const attngen_mha_options* options, size_t* bytes) {
  Check c;
  CallScratch scratch(mode);
  if (mode == CallMode::kSize && !check_bytes(c, bytes)) return finish(c, nullptr);
  MhaCall call{x, y, attngen_mha_options_default()};
  KernelChoice choice;
  if (!read_options(c, options, "options", &call.opt) ||
      !check_layer_call(c, layer, x, y, "S", &call.opt.num_heads) ||
      !prepare_mha(c, scratch, call, &choice)) {
    return finish(c, nullptr);
  }
  LayerSource source(layer->layer);
  execute_mha(c, scratch, call, source, choice);
  if (mode == CallMode::kSize) return finish_size(c, scratch, bytes, choice.kernel);
  return finish(c, choice.kernel);
}

// The descriptions an attention plan keeps: copies of the call's tensors (data pointers
// cleared) and options, whose tensor pointers point at the copies.
struct AttentionDescriptions {
  attngen_tensor q{}, k{}, v{}, out{}, kv_len{}, mask_tensor{}, layout{}, weights{}, lse{};
  attngen_attention_options opt{};
  // The modifier (its name resolved into the plan's kernel's, which outlives the plan) and its
  // tensors' descriptions.
  KeptModifier modifier;
  // The rope over the plan's copy of its frequencies, and the positions' descriptions.
  attngen_rope rope{};
  attngen_tensor rope_freq{}, q_positions{}, k_positions{};

  void keep(const AttentionCall& call, const char* kernel_modifier, const KeptRope& kept_rope) {
    q = *call.q;
    k = *call.k;
    v = *call.v;
    out = *call.out;
    opt = call.opt;
    opt.kernel = nullptr;  // resolved into the plan's choice
    const auto copy = [](const attngen_tensor* from, attngen_tensor& to) -> attngen_tensor* {
      if (from == nullptr) return nullptr;
      to = *from;
      return &to;
    };
    opt.kv_len = copy(call.opt.kv_len, kv_len);
    opt.mask_tensor = copy(call.opt.mask_tensor, mask_tensor);
    opt.pattern.layout = copy(call.opt.pattern.layout, layout);
    opt.weights = copy(call.opt.weights, weights);
    opt.lse = copy(call.opt.lse, lse);
    opt.q_positions = copy(call.opt.q_positions, q_positions);
    opt.k_positions = copy(call.opt.k_positions, k_positions);
    for (attngen_tensor* t : {&q, &k, &v, &out, &kv_len, &mask_tensor, &layout, &weights, &lse,
                              &q_positions, &k_positions}) {
      t->data = nullptr;
    }
    if (kept_rope.dim > 0) {
      rope = kept_rope.described(&rope_freq);
      opt.rope = &rope;
    }
    modifier.keep(call.opt.modifier, kernel_modifier);
    opt.modifier = modifier.get();
  }

  // The descriptions over one run's data, into `to` (whose option pointers point into it);
  // false (c says why) where the data gives a pointer for a tensor the plan does not have.
  bool over(Check& c, const attngen_attention_data& d, AttentionDescriptions& to) const {
    to = *this;
    if (opt.rope != nullptr) {
      to.rope.inv_freq = &to.rope_freq;
      to.opt.rope = &to.rope;
    }
    if (!modifier.over(c, d.modifier_tensors, to.modifier)) return false;
    to.opt.modifier = to.modifier.get();
    to.q.data = const_cast<void*>(d.q);
    to.k.data = const_cast<void*>(d.k);
    to.v.data = const_cast<void*>(d.v);
    to.out.data = d.out;
    const struct {
      const attngen_tensor* planned;
      attngen_tensor* run;
      const attngen_tensor** option;
      const void* data;
      const char* name;
    } optional[] = {
        {opt.kv_len, &to.kv_len, &to.opt.kv_len, d.kv_len, "kv_len"},
        {opt.mask_tensor, &to.mask_tensor, &to.opt.mask_tensor, d.mask_tensor, "mask_tensor"},
        {opt.pattern.layout, &to.layout, &to.opt.pattern.layout, d.layout, "layout"},
        {opt.q_positions, &to.q_positions, &to.opt.q_positions, d.q_positions, "q_positions"},
        {opt.k_positions, &to.k_positions, &to.opt.k_positions, d.k_positions, "k_positions"},
    };
    for (const auto& o : optional) {
      if (o.planned == nullptr && o.data != nullptr) {
        return c.fail(
            ATTNGEN_ERROR_INVALID_ARGUMENT,
            std::string("data.") + o.name + " is set, but the plan's call has no " + o.name);
      }
      if (o.planned != nullptr) {
        o.run->data = const_cast<void*>(o.data);
        *o.option = o.run;
      }
    }
    const struct {
      const attngen_tensor* planned;
      attngen_tensor* run;
      attngen_tensor** option;
      void* data;
      const char* name;
    } outputs[] = {{opt.weights, &to.weights, &to.opt.weights, d.weights, "weights"},
                   {opt.lse, &to.lse, &to.opt.lse, d.lse, "lse"}};
    for (const auto& o : outputs) {
      if (o.planned == nullptr && o.data != nullptr) {
        return c.fail(ATTNGEN_ERROR_INVALID_ARGUMENT, std::string("data.") + o.name +
                                                          " is set, but the plan's call has no " +
                                                          o.name + " output");
      }
      if (o.planned != nullptr) {
        o.run->data = o.data;
        *o.option = o.run;
      }
    }
    return true;
  }
};

// A plan's copy of a call's tensor description (data pointer cleared), or an empty one for NULL.
attngen_tensor described(const attngen_tensor* t) {
  attngen_tensor d{};
  if (t != nullptr) d = *t;
  d.data = nullptr;
  return d;
}

// A plan's description over one run's data pointer.
attngen_tensor over(const attngen_tensor& described, const void* data) {
  attngen_tensor t = described;
  t.data = const_cast<void*>(data);
  return t;
}

// An optional input of a plan's call over one run's data: where the call had it, *run is its
// description over `data` (which check_tensor() then checks) and *use points at it; where it had
// none, *use is NULL, and `data` must be too (false, c naming data.<name>, otherwise).
bool optional_over(Check& c, bool planned, const attngen_tensor& described, const void* data,
                   const char* name, attngen_tensor* run, const attngen_tensor** use) {
  *use = nullptr;
  if (!planned) {
    return data == nullptr ||
           c.fail(ATTNGEN_ERROR_INVALID_ARGUMENT,
                  std::string("data.") + name + " is set, but the plan's call has no " + name);
  }
  *run = over(described, data);
  *use = run;
  return true;
}

}  // namespace
}  // namespace attngen::rt

extern "C" {

attngen_status attngen_attention(const attngen_tensor* q, const attngen_tensor* k,
                                 const attngen_tensor* v, attngen_tensor* out,
                                 const attngen_attention_options* options) {
  return attention(CallMode::kRun, q, k, v, out, options, nullptr);
}

attngen_status attngen_attention_workspace_size(const attngen_tensor* q, const attngen_tensor* k,
                                                const attngen_tensor* v, const attngen_tensor* out,
                                                const attngen_attention_options* options,
                                                size_t* bytes) {
  return attention(CallMode::kSize, q, k, v, const_cast<attngen_tensor*>(out), options, bytes);
}

attngen_status attngen_attention_varlen(const attngen_tensor* q, const attngen_tensor* k,
                                        const attngen_tensor* v, attngen_tensor* out,
                                        const attngen_tensor* cu_seqlens_q,
                                        const attngen_tensor* cu_seqlens_k,
                                        const attngen_attention_options* options) {
  return attention_varlen(CallMode::kRun, q, k, v, out, cu_seqlens_q, cu_seqlens_k, options,
                          nullptr);
}

attngen_status attngen_attention_varlen_workspace_size(
    const attngen_tensor* q, const attngen_tensor* k, const attngen_tensor* v,
    const attngen_tensor* out, const attngen_tensor* cu_seqlens_q,
    const attngen_tensor* cu_seqlens_k, const attngen_attention_options* options, size_t* bytes) {
  return attention_varlen(CallMode::kSize, q, k, v, const_cast<attngen_tensor*>(out), cu_seqlens_q,
                          cu_seqlens_k, options, bytes);
}

attngen_attention_data attngen_attention_data_default(void) {
  attngen_attention_data d{};
  d.struct_size = sizeof d;
  return d;
}

}  // extern "C"

struct attngen_attention_plan {
  KeptRope rope;  // the call's rope, copied (the descriptions' rope points at its frequencies)
  AttentionDescriptions described;
  KernelChoice choice;
  KernelNeed need;   // of the kernel's runs, measured when the plan was made
  size_t bytes = 0;  // the workspace a run needs
};

extern "C" {

attngen_status attngen_attention_plan_create(const attngen_tensor* q, const attngen_tensor* k,
                                             const attngen_tensor* v, const attngen_tensor* out,
                                             const attngen_attention_options* options,
                                             attngen_attention_plan** plan) {
  Check c;
  if (plan == nullptr) {
    c.fail(ATTNGEN_ERROR_NULL_POINTER, "plan is NULL");
    return finish(c, nullptr);
  }
  *plan = nullptr;
  CallScratch scratch(CallMode::kSize);
  AttentionCall call{q, k, v, const_cast<attngen_tensor*>(out),
                     attngen_attention_options_default()};
  KernelChoice choice;
  if (!prepare_attention(c, scratch, call, options, &choice)) return finish(c, nullptr);
  AttentionCall measured = call;  // execute_attention() points it at its F32 staging
  execute_attention(c, scratch, measured, choice);
  if (!c.ok()) return finish(c, nullptr);
  attngen_attention_plan* p = new (std::nothrow) attngen_attention_plan;
  if (p == nullptr) {
    c.fail(ATTNGEN_ERROR_OUT_OF_MEMORY, "cannot allocate the plan");
    return finish(c, nullptr);
  }
  if (!p->rope.keep(c, call.opt.rope, call.dqk, "options.rope")) {
    delete p;
    return finish(c, nullptr);
  }
  p->described.keep(call, choice.kernel->modifier, p->rope);
  p->choice = choice;
  p->need = scratch.measured_need();
  p->bytes = scratch.bytes();
  *plan = p;
  return finish(c, choice.kernel);
}

attngen_status attngen_attention_plan_workspace_size(const attngen_attention_plan* plan,
                                                     size_t* bytes) {
  Check c;
  if (plan == nullptr) c.fail(ATTNGEN_ERROR_NULL_POINTER, "plan is NULL");
  if (bytes == nullptr) c.fail(ATTNGEN_ERROR_NULL_POINTER, "bytes is NULL");
  if (c.ok()) *bytes = plan->bytes;
  return finish(c, c.ok() ? plan->choice.kernel : nullptr);
}

const char* attngen_attention_plan_kernel(const attngen_attention_plan* plan) {
  return plan != nullptr ? plan->choice.kernel->name : "";
}

attngen_status attngen_attention_plan_run(const attngen_attention_plan* plan,
                                          const attngen_attention_data* data) {
  Check c;
  if (plan == nullptr) c.fail(ATTNGEN_ERROR_NULL_POINTER, "plan is NULL");
  if (data == nullptr) c.fail(ATTNGEN_ERROR_NULL_POINTER, "data is NULL");
  attngen_attention_data d = attngen_attention_data_default();
  AttentionDescriptions run;
  if (!c.ok() ||
      !read_options(c, data, "data", &d, offsetof(attngen_attention_data, q_positions)) ||
      !plan->described.over(c, d, run)) {
    return finish(c, nullptr);
  }
  CallScratch scratch(CallMode::kRun);
  scratch.set_planned_need(&plan->need);
  AttentionCall call{&run.q, &run.k, &run.v, &run.out, run.opt};
  if (!validate_attention(c, scratch, call) || !prepare_modifier(c, call, *plan->choice.kernel)) {
    return finish(c, nullptr);
  }
  execute_attention(c, scratch, call, plan->choice);
  return finish(c, plan->choice.kernel);
}

void attngen_attention_plan_destroy(attngen_attention_plan* plan) { delete plan; }

attngen_linear_data attngen_linear_data_default(void) {
  attngen_linear_data d{};
  d.struct_size = sizeof d;
  return d;
}

attngen_mha_data attngen_mha_data_default(void) {
  attngen_mha_data d{};
  d.struct_size = sizeof d;
  return d;
}

}  // extern "C"

struct attngen_linear_plan {
  attngen_tensor x{}, w{}, bias{}, y{};  // descriptions, data pointers cleared
  bool has_bias = false;
  KernelChoice choice;
  KernelNeed need;   // of the kernel's runs, measured when the plan was made
  size_t bytes = 0;  // the workspace a run needs
};

// The weights' descriptions are kept, not their data: a run packs the weights it is given, as
// attngen_mha() does (they may change between runs; attngen_mha_layer keeps them packed).
struct attngen_mha_plan {
  attngen_tensor x{}, y{}, in_w{}, in_b{}, out_w{}, out_b{}, kv_len{};  // data pointers cleared
  bool has_in_b = false, has_out_b = false, has_kv_len = false;         // whether the call had them
  attngen_mha_options opt{};  // kernel and kv_len cleared (a run's kv_len is over its data)
  KernelChoice choice;
  KernelNeed need;   // of the kernel's runs, measured when the plan was made
  size_t bytes = 0;  // the workspace a run needs
};

extern "C" {

attngen_status attngen_linear_plan_create(const attngen_tensor* x, const attngen_tensor* w,
                                          const attngen_tensor* bias, const attngen_tensor* y,
                                          attngen_linear_plan** plan) {
  Check c;
  if (plan == nullptr) {
    c.fail(ATTNGEN_ERROR_NULL_POINTER, "plan is NULL");
    return finish(c, nullptr);
  }
  *plan = nullptr;
  CallScratch scratch(CallMode::kSize);
  const LinearCall call{x, w, bias, const_cast<attngen_tensor*>(y)};
  KernelChoice choice;
  if (!prepare_linear(c, call, &choice)) return finish(c, nullptr);
  CallerWeights weights(call.w, call.bias, "bias");
  execute_linear(c, scratch, call, choice, weights);
  if (!c.ok()) return finish(c, nullptr);
  attngen_linear_plan* p = new (std::nothrow) attngen_linear_plan;
  if (p == nullptr) {
    c.fail(ATTNGEN_ERROR_OUT_OF_MEMORY, "cannot allocate the plan");
    return finish(c, nullptr);
  }
  p->x = described(x);
  p->w = described(w);
  p->bias = described(bias);
  p->has_bias = bias != nullptr;
  p->y = described(y);
  p->choice = choice;
  p->need = scratch.measured_need();
  p->bytes = scratch.bytes();
  *plan = p;
  return finish(c, choice.kernel);
}

attngen_status attngen_linear_plan_workspace_size(const attngen_linear_plan* plan, size_t* bytes) {
  Check c;
  if (plan == nullptr) c.fail(ATTNGEN_ERROR_NULL_POINTER, "plan is NULL");
  if (bytes == nullptr) c.fail(ATTNGEN_ERROR_NULL_POINTER, "bytes is NULL");
  if (c.ok()) *bytes = plan->bytes;
  return finish(c, c.ok() ? plan->choice.kernel : nullptr);
}

const char* attngen_linear_plan_kernel(const attngen_linear_plan* plan) {
  return plan != nullptr ? plan->choice.kernel->name : "";
}

attngen_status attngen_linear_plan_run(const attngen_linear_plan* plan,
                                       const attngen_linear_data* data) {
  Check c;
  if (plan == nullptr) c.fail(ATTNGEN_ERROR_NULL_POINTER, "plan is NULL");
  if (data == nullptr) c.fail(ATTNGEN_ERROR_NULL_POINTER, "data is NULL");
  attngen_linear_data d = attngen_linear_data_default();
  if (!c.ok() || !read_options(c, data, "data", &d)) return finish(c, nullptr);
  const attngen_tensor x = over(plan->x, d.x), w = over(plan->w, d.w);
  attngen_tensor y = over(plan->y, d.y), bias;
  const attngen_tensor* b = nullptr;
  if (!optional_over(c, plan->has_bias, plan->bias, d.bias, "bias", &bias, &b)) {
    return finish(c, nullptr);
  }
  CallScratch scratch(CallMode::kRun);
  scratch.set_planned_need(&plan->need);
  const LinearCall call{&x, &w, b, &y};
  if (!validate_linear(c, call)) return finish(c, nullptr);
  CallerWeights weights(call.w, call.bias, "bias");
  execute_linear(c, scratch, call, plan->choice, weights);
  return finish(c, plan->choice.kernel);
}

void attngen_linear_plan_destroy(attngen_linear_plan* plan) { delete plan; }

attngen_status attngen_mha_plan_create(const attngen_tensor* x, const attngen_mha_weights* weights,
                                       const attngen_tensor* y, const attngen_mha_options* options,
                                       attngen_mha_plan** plan) {
  Check c;
  if (plan == nullptr) {
    c.fail(ATTNGEN_ERROR_NULL_POINTER, "plan is NULL");
    return finish(c, nullptr);
  }
  *plan = nullptr;
  CallScratch scratch(CallMode::kSize);
  MhaCall call{x, const_cast<attngen_tensor*>(y), attngen_mha_options_default()};
  KernelChoice choice;
  if (!prepare_caller_mha(c, scratch, weights, options, call, &choice)) return finish(c, nullptr);
  CallerWeights caller = caller_weights(*weights);
  execute_mha(c, scratch, call, caller, choice);
  if (!c.ok()) return finish(c, nullptr);
  attngen_mha_plan* p = new (std::nothrow) attngen_mha_plan;
  if (p == nullptr) {
    c.fail(ATTNGEN_ERROR_OUT_OF_MEMORY, "cannot allocate the plan");
    return finish(c, nullptr);
  }
  p->x = described(x);
  p->y = described(y);
  p->in_w = described(weights->in_proj_weight);
  p->in_b = described(weights->in_proj_bias);
  p->has_in_b = weights->in_proj_bias != nullptr;
  p->out_w = described(weights->out_proj_weight);
  p->out_b = described(weights->out_proj_bias);
  p->has_out_b = weights->out_proj_bias != nullptr;
  p->opt = call.opt;
  p->opt.kernel = nullptr;  // resolved into the plan's choice
  p->opt.kv_len = nullptr;  // a run's, over its data
  p->kv_len = described(call.opt.kv_len);
  p->has_kv_len = call.opt.kv_len != nullptr;
  p->choice = choice;
  p->need = scratch.measured_need();
  p->bytes = scratch.bytes();
  *plan = p;
  return finish(c, choice.kernel);
}

attngen_status attngen_mha_plan_workspace_size(const attngen_mha_plan* plan, size_t* bytes) {
  Check c;
  if (plan == nullptr) c.fail(ATTNGEN_ERROR_NULL_POINTER, "plan is NULL");
  if (bytes == nullptr) c.fail(ATTNGEN_ERROR_NULL_POINTER, "bytes is NULL");
  if (c.ok()) *bytes = plan->bytes;
  return finish(c, c.ok() ? plan->choice.kernel : nullptr);
}

const char* attngen_mha_plan_kernel(const attngen_mha_plan* plan) {
  return plan != nullptr ? plan->choice.kernel->name : "";
}

attngen_status attngen_mha_plan_run(const attngen_mha_plan* plan, const attngen_mha_data* data) {
  Check c;
  if (plan == nullptr) c.fail(ATTNGEN_ERROR_NULL_POINTER, "plan is NULL");
  if (data == nullptr) c.fail(ATTNGEN_ERROR_NULL_POINTER, "data is NULL");
  attngen_mha_data d = attngen_mha_data_default();
  if (!c.ok() || !read_options(c, data, "data", &d)) return finish(c, nullptr);
  const attngen_tensor x = over(plan->x, d.x), in_w = over(plan->in_w, d.in_proj_weight),
                       out_w = over(plan->out_w, d.out_proj_weight);
  attngen_tensor y = over(plan->y, d.y), in_b, out_b, kv_len;
  attngen_mha_weights weights{&in_w, nullptr, &out_w, nullptr};
  MhaCall call{&x, &y, plan->opt};
  if (!optional_over(c, plan->has_in_b, plan->in_b, d.in_proj_bias, "in_proj_bias", &in_b,
                     &weights.in_proj_bias) ||
      !optional_over(c, plan->has_out_b, plan->out_b, d.out_proj_bias, "out_proj_bias", &out_b,
                     &weights.out_proj_bias) ||
      !optional_over(c, plan->has_kv_len, plan->kv_len, d.kv_len, "kv_len", &kv_len,
                     &call.opt.kv_len)) {
    return finish(c, nullptr);
  }
  CallScratch scratch(CallMode::kRun);
  scratch.set_planned_need(&plan->need);
  if (!check_mha_layer(c, &x, weights, &y, call.opt.num_heads, "S", /*floating=*/true) ||
      !validate_mha_options(c, scratch, call)) {
    return finish(c, nullptr);
  }
  CallerWeights caller = caller_weights(weights);
  execute_mha(c, scratch, call, caller, plan->choice);
  return finish(c, plan->choice.kernel);
}

void attngen_mha_plan_destroy(attngen_mha_plan* plan) { delete plan; }

attngen_status attngen_linear(const attngen_tensor* x, const attngen_tensor* w,
                              const attngen_tensor* bias, attngen_tensor* y) {
  return linear(CallMode::kRun, x, w, bias, y, nullptr);
}

attngen_status attngen_linear_workspace_size(const attngen_tensor* x, const attngen_tensor* w,
                                             const attngen_tensor* bias, const attngen_tensor* y,
                                             size_t* bytes) {
  return linear(CallMode::kSize, x, w, bias, const_cast<attngen_tensor*>(y), bytes);
}

attngen_status attngen_linear_layer_create(const attngen_tensor* w, const attngen_tensor* bias,
                                           attngen_linear_layer** layer) {
  Check c;
  if (layer == nullptr) {
    c.fail(ATTNGEN_ERROR_NULL_POINTER, "layer is NULL");
    return finish(c, nullptr);
  }
  *layer = nullptr;
  const TensorSpec ws{"w", ATTNGEN_F32, 2, kLinearWDims, false, /*floating=*/true};
  if (!check_tensor(c, w, ws)) return finish(c, nullptr);
  const TensorSpec bs{"bias", w->dtype, 1, kBiasDims, false, false, "w"};
  if (bias != nullptr &&
      (!check_tensor(c, bias, bs) || !check_dim(c, *bias, bs, 0, w->shape[0], "N of w"))) {
    return finish(c, nullptr);
  }
  make_linear_layer(c, *w, bias, layer);
  return finish(c, nullptr);
}

attngen_status attngen_linear_layer_forward(attngen_linear_layer* layer, const attngen_tensor* x,
                                            attngen_tensor* y) {
  return linear_layer(CallMode::kRun, layer, x, y, nullptr);
}

attngen_status attngen_linear_layer_forward_workspace_size(attngen_linear_layer* layer,
                                                           const attngen_tensor* x,
                                                           const attngen_tensor* y, size_t* bytes) {
  return linear_layer(CallMode::kSize, layer, x, const_cast<attngen_tensor*>(y), bytes);
}

attngen_status attngen_mha(const attngen_tensor* x, const attngen_mha_weights* weights,
                           attngen_tensor* y, const attngen_mha_options* options) {
  return mha(CallMode::kRun, x, weights, y, options, nullptr);
}

attngen_status attngen_mha_workspace_size(const attngen_tensor* x,
                                          const attngen_mha_weights* weights,
                                          const attngen_tensor* y,
                                          const attngen_mha_options* options, size_t* bytes) {
  return mha(CallMode::kSize, x, weights, const_cast<attngen_tensor*>(y), options, bytes);
}

attngen_status attngen_mha_layer_forward(attngen_mha_layer* layer, const attngen_tensor* x,
                                         attngen_tensor* y, const attngen_mha_options* options) {
  return layer_forward(CallMode::kRun, layer, x, y, options, nullptr);
}

attngen_status attngen_mha_layer_forward_workspace_size(attngen_mha_layer* layer,
                                                        const attngen_tensor* x,
                                                        const attngen_tensor* y,
                                                        const attngen_mha_options* options,
                                                        size_t* bytes) {
  return layer_forward(CallMode::kSize, layer, x, const_cast<attngen_tensor*>(y), options, bytes);
}

const char* attngen_last_error(void) { return t_last_error.c_str(); }

const char* attngen_last_kernel(void) { return t_last_kernel; }

const char* attngen_status_name(attngen_status status_enum) {
  const int32_t status = enum_value(status_enum);  // a C caller may pass any int
  switch (status) {
#define ATTNGEN_NAME(s) \
  case s:               \
    return #s;
    ATTNGEN_NAME(ATTNGEN_OK)
    ATTNGEN_NAME(ATTNGEN_ERROR_NULL_POINTER)
    ATTNGEN_NAME(ATTNGEN_ERROR_DTYPE)
    ATTNGEN_NAME(ATTNGEN_ERROR_RANK)
    ATTNGEN_NAME(ATTNGEN_ERROR_SHAPE)
    ATTNGEN_NAME(ATTNGEN_ERROR_HEADS)
    ATTNGEN_NAME(ATTNGEN_ERROR_EMPTY)
    ATTNGEN_NAME(ATTNGEN_ERROR_TOO_LARGE)
    ATTNGEN_NAME(ATTNGEN_ERROR_STRIDE)
    ATTNGEN_NAME(ATTNGEN_ERROR_ALIAS)
    ATTNGEN_NAME(ATTNGEN_ERROR_MASK)
    ATTNGEN_NAME(ATTNGEN_ERROR_INVALID_ARGUMENT)
    ATTNGEN_NAME(ATTNGEN_ERROR_NO_KERNEL)
    ATTNGEN_NAME(ATTNGEN_ERROR_UNSUPPORTED_TARGET)
    ATTNGEN_NAME(ATTNGEN_ERROR_KERNEL)
    ATTNGEN_NAME(ATTNGEN_ERROR_CAPACITY)
    ATTNGEN_NAME(ATTNGEN_ERROR_OUT_OF_MEMORY)
    ATTNGEN_NAME(ATTNGEN_ERROR_ABI)
    ATTNGEN_NAME(ATTNGEN_ERROR_WORKSPACE)
#undef ATTNGEN_NAME
    default:
      break;
  }
  return "ATTNGEN_ERROR_UNKNOWN";
}

}  // extern "C"
