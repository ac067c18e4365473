// Decoding over a KV cache: attngen_decode() (attention of new queries over one layer of the
// cache) and attngen_mha_decode() (one decode step of the multi-head layer: projections, append,
// attention, output projection). Everything is validated before the cache or an output is
// written.
#include <algorithm>
#include <cmath>
#include <limits>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "runtime/src/kv_cache.h"

namespace attngen::rt {

namespace {

const char* const kQDims[] = {"B", "t", "Hq", "Dqk"};
const char* const kODims[] = {"B", "t", "Hq", "Dv"};
const char* const kRowsDims[] = {"B", "t", "E"};

// Split-KV policy. A decode task is one (split, sequence, kv head): about four tasks per thread
// keep every thread busy to the end, and a split shorter than a few key blocks costs more in its
// partial and merge than it gains. Chosen, not tuned (a 2-core machine cannot tell the
// constants apart); bench/RESULTS.md has the split cases of bench/attention_bench.cpp.
constexpr int64_t kTasksPerThread = 4;
constexpr int64_t kMinSplitKeys = 256;

// Keys per split for `slots` cached slots, `groups` = B * Hkv (sequence, kv head) pairs.
int64_t split_keys(int64_t slots, int64_t groups, int32_t kv_splits) {
  int64_t splits = kv_splits;
  if (splits <= 0) {
    const int64_t tasks = kTasksPerThread * thread_count();
    splits = groups >= tasks ? 1 : (tasks + groups - 1) / groups;
    splits = std::min(splits, std::max<int64_t>(1, slots / kMinSplitKeys));
  }
  splits = std::clamp<int64_t>(splits, 1, slots);
  return (slots + splits - 1) / splits;
}

bool check_decode_options(Check& c, float scale, int32_t kv_splits) {
  if (!std::isfinite(scale)) return c.fail(ATTNGEN_ERROR_INVALID_ARGUMENT, "scale is not finite");
  if (kv_splits < 0) {
    return c.fail(ATTNGEN_ERROR_INVALID_ARGUMENT,
                  "kv_splits is " + std::to_string(kv_splits) + ", expected 0 (automatic) or >= 1");
  }
  return true;
}

// Runs a validated decode: q [B, t, Hq, Dqk] over the layer's cached positions into out; false
// if the kernel failed (c says why).
bool run_decode(Check& c, const attngen_kernel_info* kernel, const attngen_kv_cache& cache,
                int64_t layer, const attngen_tensor& q, const attngen_tensor& out, float scale,
                const std::vector<int32_t>& counts, int32_t kv_splits) {
  const attngen_kv_cache_options& o = cache.options;
  std::vector<int32_t> kv_len(static_cast<size_t>(o.batch));
  int64_t longest = 0;
  for (int64_t b = 0; b < o.batch; ++b) {
    const int64_t n = cache_length(cache, layer, b);
    kv_len[static_cast<size_t>(b)] = static_cast<int32_t>(n);
    longest = std::max(longest, n);
  }
  // Only the slots some sequence fills are given to the kernel (at least one: extents > 0).
  const int64_t slots = std::clamp<int64_t>(longest, 1, o.capacity);
  HalideView hq, hk, hv, ho, hl, hn, hs;
  make_view(hq, q);
  make_view(hk, cache_layer(cache, layer, false, slots));
  make_view(hv, cache_layer(cache, layer, true, slots));
  if (cache.scales != nullptr) make_view(hs, cache_scales(cache, layer, slots));
  make_view(ho, out);
  const int64_t batch = o.batch;
  make_view(hl, attngen_tensor_contiguous(kv_len.data(), ATTNGEN_I32, 1, &batch));
  make_view(hn,
            attngen_tensor_contiguous(const_cast<int32_t*>(counts.data()), ATTNGEN_I32, 1, &batch));
  attngen_kernel_args args{};
  args.q = &hq.buf;
  args.k = &hk.buf;
  args.v = &hv.buf;
  args.kv_scales = cache.scales != nullptr ? &hs.buf : nullptr;
  args.v_finite = cache.v_nonfinite ? 0 : 1;
  args.kv_len = &hl.buf;
  args.q_len = &hn.buf;
  args.out = &ho.buf;
  args.scale = scale != 0.0f ? scale : 1.0f / std::sqrt(static_cast<float>(o.head_dim_qk));
  args.capacity = static_cast<int32_t>(o.capacity);
  args.window = static_cast<int32_t>(o.window);
  args.split_keys = static_cast<int32_t>(split_keys(slots, o.batch * o.heads_kv, kv_splits));
  return run_kernel(c, kernel, args) == ATTNGEN_OK;
}

// The decode kernel for the cache's head dims and dtype and the queries' and output's dtypes (a
// cache dtype no kernel takes: ATTNGEN_ERROR_DTYPE naming the cache).
const attngen_kernel_info* select_decode(Check& c, const attngen_kv_cache& cache, attngen_dtype q,
                                         attngen_dtype out, const char* name) {
  KernelQuery query{ATTNGEN_OP_DECODE};
  query.head_dim_qk = static_cast<int>(cache.options.head_dim_qk);
  query.head_dim_v = static_cast<int>(cache.options.head_dim_v);
  query.mask = ATTNGEN_MASK_CAUSAL;
  query.dtypes.q = q;
  query.dtypes.out = out;
  query.dtypes.cache = cache.options.dtype;
  return select_kernel(c, query, name);
}

}  // namespace

}  // namespace attngen::rt

using namespace attngen::rt;

extern "C" {

attngen_decode_options attngen_decode_options_default(void) { return attngen_decode_options{}; }

attngen_status attngen_decode(const attngen_tensor* q, const attngen_kv_cache* cache, int64_t layer,
                              attngen_tensor* out, const attngen_decode_options* options) {
  Check c;
  const attngen_decode_options opt =
      options != nullptr ? *options : attngen_decode_options_default();
  if (!check_cache_layer(c, cache, layer)) return finish(c, nullptr);
  const attngen_kv_cache_options& o = cache->options;
  // q and out of any floating-point dtype here; dispatch finds a kernel that takes them.
  const TensorSpec qs{"q", ATTNGEN_F32, 4, kQDims, false, /*kernel_dtype=*/true};
  const TensorSpec os{"out", ATTNGEN_F32, 4, kODims, /*output=*/true, /*kernel_dtype=*/true};
  if (!check_tensor(c, q, qs) || !check_tensor(c, out, os)) return finish(c, nullptr);
  const int64_t t = q->shape[1], heads_q = q->shape[2];
  if (!check_dim(c, *q, qs, 0, o.batch, "B of the cache") ||
      !check_dim(c, *q, qs, 3, o.head_dim_qk, "Dqk of the cache") ||
      !check_dim(c, *out, os, 0, o.batch, "B of the cache") ||
      !check_dim(c, *out, os, 1, t, "t of q") || !check_dim(c, *out, os, 2, heads_q, "Hq of q") ||
      !check_dim(c, *out, os, 3, o.head_dim_v, "Dv of the cache")) {
    return finish(c, nullptr);
  }
  if (heads_q % o.heads_kv != 0) {
    c.fail(ATTNGEN_ERROR_HEADS, "q has " + std::to_string(heads_q) + " heads and the cache " +
                                    std::to_string(o.heads_kv) +
                                    "; Hq must be a multiple of Hkv (grouped-query attention)");
    return finish(c, nullptr);
  }
  std::vector<int32_t> counts;
  if (!check_decode_options(c, opt.scale, opt.kv_splits) ||
      !prepare_counts(c, opt.counts, o.batch, t, counts) ||
      !check_decode_fits(c, *cache, layer, counts)) {
    return finish(c, nullptr);
  }
  if (!check_no_alias(c, *out, "out", *q, "q") ||
      (opt.counts != nullptr && !check_no_alias(c, *out, "out", *opt.counts, "counts")) ||
      !check_clear_of_cache(c, *cache, layer, *out, "out", true)) {
    return finish(c, nullptr);
  }
  // A kernel for the call's dtypes; else (F16 / BF16 q or out that no kernel takes over this
  // cache) an F32-query kernel with q and out staged in F32, as attngen_attention() does.
  Check native;
  const attngen_kernel_info* kernel =
      select_decode(native, *cache, q->dtype, out->dtype, opt.kernel);
  F32Staging staging;
  attngen_tensor q32 = *q, out32 = *out;
  if (kernel == nullptr) {
    const bool stage =
        opt.kernel == nullptr && (q->dtype != ATTNGEN_F32 || out->dtype != ATTNGEN_F32);
    kernel = stage ? select_decode(c, *cache, ATTNGEN_F32, ATTNGEN_F32, nullptr)
                   : select_decode(c, *cache, q->dtype, out->dtype, opt.kernel);
    if (kernel == nullptr) return finish(c, nullptr);
    if (!staging.input(c, *q, "q", &q32) || !staging.output(c, *out, "out", &out32)) {
      return finish(c, nullptr);
    }
  }
  if (run_decode(c, kernel, *cache, layer, q32, out32, opt.scale, counts, opt.kv_splits)) {
    staging.commit();
  }
  return finish(c, kernel);
}

attngen_status attngen_mha_decode(const attngen_tensor* x, const attngen_mha_weights* weights,
                                  attngen_kv_cache* cache, int64_t layer, attngen_tensor* y,
                                  const attngen_mha_decode_options* options) {
  Check c;
  if (weights == nullptr) c.fail(ATTNGEN_ERROR_NULL_POINTER, "weights is NULL");
  if (options == nullptr) c.fail(ATTNGEN_ERROR_NULL_POINTER, "options is NULL (num_heads)");
  if (!c.ok() || !check_cache_layer(c, cache, layer)) return finish(c, nullptr);
  const attngen_kv_cache_options& o = cache->options;
  const int64_t heads = options->num_heads;
  if (!check_mha_layer(c, x, *weights, y, heads, "t")) return finish(c, nullptr);
  const TensorSpec xs{"x", ATTNGEN_F32, 3, kRowsDims};
  if (!check_dim(c, *x, xs, 0, o.batch, "B of the cache")) return finish(c, nullptr);
  const int64_t batch = x->shape[0], t = x->shape[1], embed = x->shape[2];
  const attngen_tensor* in_b = weights->in_proj_bias;
  const attngen_tensor* out_b = weights->out_proj_bias;
  const attngen_tensor& iw = *weights->in_proj_weight;
  const attngen_tensor& ow = *weights->out_proj_weight;
  const int64_t dh = embed / heads;
  if (o.heads_kv != heads || o.head_dim_qk != dh || o.head_dim_v != dh) {
    c.fail(ATTNGEN_ERROR_SHAPE, "the cache holds Hkv " + std::to_string(o.heads_kv) +
                                    " heads of Dqk " + std::to_string(o.head_dim_qk) + " / Dv " +
                                    std::to_string(o.head_dim_v) +
                                    ", expected num_heads = " + std::to_string(heads) +
                                    " heads of E / num_heads = " + std::to_string(dh));
    return finish(c, nullptr);
  }
  // The step's projection qkv [B, t, 3E] in F32 is a tensor the linear kernel writes, so at most
  // 2^31 - 1 bytes like every tensor a kernel addresses (y, hence x, may be up to a third of
  // that). Checked before anything is allocated: on a 32-bit target the host buffer alone may
  // not fit the address space.
  int64_t qkv_bytes = 0;
  if (!checked_mul(batch * t, 3 * embed, &qkv_bytes) || !checked_mul(qkv_bytes, 4, &qkv_bytes) ||
      qkv_bytes > std::numeric_limits<int32_t>::max()) {
    c.fail(ATTNGEN_ERROR_TOO_LARGE,
           "the step's projections, B * t * 3E = " + std::to_string(batch) + " * " +
               std::to_string(t) + " * " + std::to_string(3 * embed) +
               " floats, would span more than 2^31 - 1 bytes, the most "
               "a kernel can address");
    return finish(c, nullptr);
  }
  std::vector<int32_t> counts;
  if (!check_decode_options(c, 0.0f, options->kv_splits) ||
      !prepare_counts(c, options->counts, batch, t, counts) ||
      !check_append_fits(c, *cache, layer, counts)) {
    return finish(c, nullptr);
  }
  // Nothing the call reads may lie where it writes: the append writes the layer's storage
  // before out_proj reads its weights, and y is written last (check_mha_layer checked y
  // against x and the weights).
  const std::pair<const attngen_tensor*, const char*> inputs[] = {{x, "x"},
                                                                  {&iw, "in_proj_weight"},
                                                                  {in_b, "in_proj_bias"},
                                                                  {&ow, "out_proj_weight"},
                                                                  {out_b, "out_proj_bias"},
                                                                  {options->counts, "counts"}};
  for (const auto& [in, name] : inputs) {
    if (in != nullptr && !check_clear_of_cache(c, *cache, layer, *in, name, false)) {
      return finish(c, nullptr);
    }
  }
  if ((options->counts != nullptr && !check_no_alias(c, *y, "y", *options->counts, "counts")) ||
      !check_clear_of_cache(c, *cache, layer, *y, "y", true) ||
      !reserve_lengths(c, *cache, layer)) {
    return finish(c, nullptr);
  }
  const attngen_kernel_info* linear = select_kernel(c, KernelQuery{ATTNGEN_OP_LINEAR}, nullptr);
  const attngen_kernel_info* decode =
      linear != nullptr ? select_decode(c, *cache, ATTNGEN_F32, ATTNGEN_F32, nullptr) : nullptr;
  if (decode == nullptr) return finish(c, nullptr);

  // in_proj: qkv [B, t, 3E]; q, k and v are views of it, [B, t, H, Dh] each.
  const int64_t n_in = 3 * embed;
  std::vector<float> zeros((in_b == nullptr || out_b == nullptr) ? n_in : 0, 0.0f);
  const attngen_tensor zero_in = attngen_tensor_contiguous(zeros.data(), ATTNGEN_F32, 1, &n_in);
  const attngen_tensor zero_out = attngen_tensor_contiguous(zeros.data(), ATTNGEN_F32, 1, &embed);
  std::vector<float> qkv, attn;
  try {
    qkv.resize(static_cast<size_t>(batch * t * n_in));
    attn.resize(static_cast<size_t>(batch * t * embed));
  } catch (const std::bad_alloc&) {
    c.fail(ATTNGEN_ERROR_OUT_OF_MEMORY,
           "cannot allocate " + std::to_string(qkv_bytes) + " bytes for the step's projections");
    return finish(c, nullptr);
  }
  const int64_t qkv_shape[3] = {batch, t, n_in};
  const attngen_tensor t_qkv = attngen_tensor_contiguous(qkv.data(), ATTNGEN_F32, 3, qkv_shape);
  attngen_tensor qkv_out = t_qkv;
  if (run_linear(c, linear, *x, iw, in_b != nullptr ? *in_b : zero_in, qkv_out) != ATTNGEN_OK) {
    return finish(c, nullptr);
  }
  const auto head_view = [&](int part) {
    const int64_t shape[4] = {batch, t, heads, dh};
    attngen_tensor v = attngen_tensor_contiguous(qkv.data() + part * embed, ATTNGEN_F32, 4, shape);
    v.strides[0] = t * n_in;
    v.strides[1] = n_in;
    return v;
  };
  append_rows(*cache, layer, head_view(1), head_view(2), counts);
  const int64_t attn_shape[4] = {batch, t, heads, dh};
  const attngen_tensor t_attn = attngen_tensor_contiguous(attn.data(), ATTNGEN_F32, 4, attn_shape);
  run_decode(c, decode, *cache, layer, head_view(0), t_attn, 0.0f, counts, options->kv_splits);
  if (!c.ok()) return finish(c, nullptr);
  const int64_t rows_shape[3] = {batch, t, embed};
  run_linear(c, linear, attngen_tensor_contiguous(attn.data(), ATTNGEN_F32, 3, rows_shape), ow,
             out_b != nullptr ? *out_b : zero_out, *y);
  return finish(c, decode);
}

}  // extern "C"
