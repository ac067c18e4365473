// Decoding over a KV cache: attngen_decode() (attention of new queries over one layer of the
// cache) and attngen_mha_decode() (one decode step of the multi-head layer: projections, append,
// attention, output projection). Everything is validated before the cache or an output is
// written.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "core/kv_layout.h"
#include "core/modifier.h"
#include "core/targets.h"
#include "runtime/src/kv_cache.h"
#include "runtime/src/rope.h"
#include "runtime/src/weights.h"
#include "runtime/src/workspace.h"

namespace attngen::rt {

namespace {

const char* const kQDims[] = {"B", "t", "Hq", "Dqk"};
const char* const kODims[] = {"B", "t", "Hq", "Dv"};
const char* const kRowsDims[] = {"B", "t", "E"};

// Split-KV policy. A decode task is one (split, sequence, kv head): about four tasks per thread
// keep every thread busy to the end, and a split shorter than a few key blocks costs more in its
// partial and merge than it gains. With more than one thread, every (sequence, kv head) is split
// at least in two: on the 2-core Sapphire-Rapids-class VM, 2 threads ran B1 Hkv8 Skv8192 (8
// groups), B2 Skv4096 (16) and B8 Skv1024 (64) 3-18% faster with two splits per group than with
// one, for f32 and i8 caches alike, although one split already gave every thread 4 to 32 tasks
// (one thread: no difference). The constants are chosen, not tuned; bench/RESULTS.md has the
// split cases of bench/attention_bench.cpp.
constexpr int64_t kTasksPerThread = 4;
constexpr int64_t kMinSplitKeys = 256;

// A call of at most this many (cached slot, query row) pairs runs its kernel's parallel loops in
// order on the calling thread (SerialRuns): its arithmetic is then a few microseconds on one
// core, about what waking another thread costs (measured: bench/RESULTS.md, "Short decode calls
// on one thread").
constexpr int64_t kSerialKeyRows = 1024;

// Keys per split for `slots` cached slots, `groups` = B * Hkv (sequence, kv head) pairs.
int64_t split_keys(int64_t slots, int64_t groups, int32_t kv_splits) {
  int64_t splits = kv_splits;
  if (splits <= 0) {
    const int64_t threads = thread_count(), tasks = kTasksPerThread * threads;
    splits = groups >= tasks ? 1 : (tasks + groups - 1) / groups;
    if (threads > 1) splits = std::max<int64_t>(splits, 2);  // see above
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

// attngen_decode_options by the ABI rule (published without its modifier).
bool read_options_decode(Check& c, const attngen_decode_options* in, attngen_decode_options* out) {
  return read_options(c, in, "options", out, offsetof(attngen_decode_options, modifier));
}

// A decode kernel of each form (registry.cpp's form_rank): the default one for calls whose longest
// sequence fills fewer than kDecodeLongKeys slots (core/targets.h), a KEY_BLOCK one from
// there; the same kernel for both where only one fits the call, one is named, or the call needs
// only one form.
struct DecodeKernels {
  const attngen_kernel_info* short_keys = nullptr;
  const attngen_kernel_info* long_keys = nullptr;
  const attngen_kernel_info* serving(int64_t keys) const {
    return keys >= kDecodeLongKeys ? long_keys : short_keys;
  }
};

// What a decode kernel reads of one layer of a cache: its storage's K and V (and an I8 cache's
// scales), the block table, and the options that shape them; or (as_f32) the layer copied into
// an F32 contiguous cache's layout (kv_cache.h, copy_layer_f32) with its one-page table.
struct DecodeSource {
  attngen_kv_cache_options options;
  attngen_tensor k, v, table;
  attngen_tensor scales{};
  bool has_scales = false;
  int32_t page_shift = 0;
  bool v_nonfinite = false;

  static DecodeSource of(const attngen_kv_cache& cache, int64_t layer) {
    DecodeSource s{cache.options, cache_layer(cache, layer, false), cache_layer(cache, layer, true),
                   cache_table(cache)};
    s.has_scales = cache.scales != nullptr;
    if (s.has_scales) s.scales = cache_scales(cache, layer);
    s.page_shift = cache.page_shift;
    s.v_nonfinite = cache.v_nonfinite;
    return s;
  }
  // Over `copy` (B * Hkv * capacity * (Dqk + Dv) floats) and `table` (B entries, written here).
  static DecodeSource as_f32(const attngen_kv_cache& cache, float* copy, int32_t* table) {
    attngen_kv_cache_options o = cache.options;
    o.dtype = ATTNGEN_F32;
    o.page_slots = 0;
    o.pages = o.batch;
    const int64_t shape[4] = {o.batch, o.heads_kv, o.capacity, o.head_dim_qk + o.head_dim_v};
    DecodeSource s{o, attngen_tensor_contiguous(copy, ATTNGEN_F32, 4, shape),
                   attngen_tensor_contiguous(copy + o.head_dim_qk, ATTNGEN_F32, 4, shape),
                   attngen_tensor{}};
    s.k.shape[3] = o.head_dim_qk;  // the strides stay those of the copy's slots
    s.v.shape[3] = o.head_dim_v;
    const int64_t table_shape[2] = {o.batch, 1};
    for (int64_t b = 0; b < o.batch; ++b) table[b] = static_cast<int32_t>(b);
    s.table = attngen_tensor_contiguous(table, ATTNGEN_I32, 2, table_shape);
    while ((int64_t{1} << s.page_shift) < o.capacity) ++s.page_shift;
    s.v_nonfinite = cache.v_nonfinite;
    return s;
  }
};

// A decode kernel's arguments over `slots` of the layer's slots (Halide views kept here):
// q [B, t, Hq, Dqk] over the layer's cached positions (kv_len[b] of each sequence, q_len[b] of
// its query rows) into out.
struct DecodeRun {
  HalideView hq, hk, hv, ho, hl, hn, hs, ht;
  attngen_kernel_args args{};
  void make(const DecodeSource& source, const attngen_tensor& q, const attngen_tensor& out,
            float scale, int32_t* kv_len, int32_t* q_len, int64_t slots, int32_t kv_splits) {
    const attngen_kv_cache_options& o = source.options;
    make_view(hq, q);
    make_view(hk, source.k);
    make_view(hv, source.v);
    if (source.has_scales) make_view(hs, source.scales);
    make_view(ht, source.table);
    make_view(ho, out);
    const int64_t batch = o.batch;
    make_view(hl, attngen_tensor_contiguous(kv_len, ATTNGEN_I32, 1, &batch));
    make_view(hn, attngen_tensor_contiguous(q_len, ATTNGEN_I32, 1, &batch));
    args = attngen_kernel_args{};
    args.q = &hq.buf;
    args.k = &hk.buf;
    args.v = &hv.buf;
    args.kv_scales = source.has_scales ? &hs.buf : nullptr;
    args.v_finite = source.v_nonfinite ? 0 : 1;
    args.kv_len = &hl.buf;
    args.q_len = &hn.buf;
    args.out = &ho.buf;
    args.scale = scale != 0.0f ? scale : 1.0f / std::sqrt(static_cast<float>(o.head_dim_qk));
    args.capacity = static_cast<int32_t>(o.capacity);
    args.window = static_cast<int32_t>(o.window);
    args.split_keys = static_cast<int32_t>(split_keys(slots, o.batch * o.heads_kv, kv_splits));
    args.units = static_cast<int32_t>(
        o.dtype == ATTNGEN_F32 ? slots : (slots + kSlotGroup - 1) / kSlotGroup);
    args.page_shift = source.page_shift;
    args.block_table = &ht.buf;
  }
};

// The slots a decode kernel reads when the layer's longest sequence holds `longest` positions: at
// least one (extents > 0), at most the capacity (a ring's).
int64_t slots_read(const attngen_kv_cache& cache, int64_t longest) {
  return std::clamp<int64_t>(longest, 1, cache.options.capacity);
}

// Positions of the layer's longest sequence.
int64_t longest_length(const attngen_kv_cache& cache, int64_t layer) {
  int64_t longest = 0;
  for (int64_t b = 0; b < cache.options.batch; ++b) {
    longest = std::max(longest, cache_length(cache, layer, b));
  }
  return longest;
}

// Caches up to this capacity are measured at every length; longer ones at the longest length of
// each run of lengths with the same key blocks and split (what the kernels' scratch follows).
constexpr int64_t kMeasureEveryLength = 256;

// A decode's queries as the kernels take them: over a cache with a rope, rotated into scratch
// taken (by take()) before anything of the call is written.
struct DecodeQueries {
  RopedTensor roped;
  bool rotated = false;
  bool take(Check& c, CallScratch& scratch, const attngen_kv_cache& cache,
            const attngen_tensor& q) {
    rotated = cache.rope.dim > 0;
    return !rotated || roped.take(c, scratch, cache.rope.view(), q, "the rotated queries");
  }
  // q, rotated where the cache has a rope: query i of sequence b at its position kv_len[b] -
  // counts[b] + i (a size query: zeros, the data not being read).
  attngen_tensor of(const attngen_tensor& q, const int32_t* counts, const int32_t* kv_len,
                    bool sizing) {
    if (!rotated) return q;
    const attngen_tensor& t = roped.tensor();
    if (sizing) {
      std::memset(t.data, 0,
                  static_cast<size_t>(t.shape[0] * t.shape[1] * t.shape[2] * t.shape[3]) *
                      dtype_size(t.dtype));
    } else {
      roped.fill(q, [&](int64_t b, int64_t i) { return kv_len[b] - counts[b] + i; });
    }
    return t;
  }
};

// What a call adds to the layer its kernel reads: its modifier (the views of its tensors:
// prepare_modifier), and where its kernels read F32 caches only (a modifier's kernels over a
// cache of another dtype), the scratch the layer is copied into (DecodeSource::as_f32).
struct DecodeExtras {
  const attngen_modifier* modifier = nullptr;
  HalideView modifier_views[ATTNGEN_MAX_MODIFIER_TENSORS];
  float* f32_copy = nullptr;
  int32_t* f32_table = nullptr;

  DecodeSource source(const attngen_kv_cache& cache, int64_t layer) const {
    return f32_copy != nullptr ? DecodeSource::as_f32(cache, f32_copy, f32_table)
                               : DecodeSource::of(cache, layer);
  }
  void pass(const attngen_kernel_info& kernel, attngen_kernel_args& args) {
    pass_modifier(modifier, kernel, modifier_views, args);
  }
};

// Runs a validated decode: q [B, t, Hq, Dqk] (F32) over the layer's cached positions into out,
// with the kernel of the form that serves the slots the longest sequence fills; returns the
// kernel run, nullptr if it failed (c says why). kv_len (B values) is the call's scratch, queries
// the scratch for q rotated by the cache's rope (taken). In a size query each form's kernel is
// measured over every length it serves that the layer may hold, with every query row real.
const attngen_kernel_info* run_decode(Check& c, const DecodeKernels& kernels,
                                      const attngen_kv_cache& cache, int64_t layer,
                                      const attngen_tensor& q_given, DecodeQueries& queries,
                                      const attngen_tensor& out, float scale, int32_t* counts,
                                      int32_t* kv_len, int32_t kv_splits,
                                      DecodeExtras* extras = nullptr) {
  const attngen_kv_cache_options& o = cache.options;
  DecodeExtras none;
  DecodeExtras& extra = extras != nullptr ? *extras : none;
  const DecodeSource source = extra.source(cache, layer);
  DecodeRun run;
  CallScratch* scratch = CallScratch::current();
  if (scratch != nullptr && scratch->sizing()) {
    const attngen_tensor q = queries.of(q_given, counts, kv_len, true);
    std::fill(counts, counts + o.batch, static_cast<int32_t>(q.shape[1]));
    const int64_t groups = o.batch * o.heads_kv;
    for (int64_t s = 1; s <= o.capacity; ++s) {
      const attngen_kernel_info* kernel = kernels.serving(s);
      const int64_t block = std::max<int32_t>(kernel->key_block, 1);
      if (s < o.capacity && o.capacity > kMeasureEveryLength && kernels.serving(s + 1) == kernel &&
          (s + block - 1) / block == (s + block) / block &&
          split_keys(s, groups, kv_splits) == split_keys(s + 1, groups, kv_splits)) {
        continue;  // s + 1 has the same kernel, key blocks and split
      }
      std::fill(kv_len, kv_len + o.batch, static_cast<int32_t>(s));
      run.make(source, q, out, scale, kv_len, counts, s, kv_splits);
      extra.pass(*kernel, run.args);
      if (run_kernel(c, kernel, run.args) != ATTNGEN_OK) return nullptr;
    }
    return kernels.serving(o.capacity);
  }
  int64_t longest = 0;
  for (int64_t b = 0; b < o.batch; ++b) {
    const int64_t n = cache_length(cache, layer, b);
    kv_len[b] = static_cast<int32_t>(n);
    longest = std::max(longest, n);
  }
  const attngen_tensor q = queries.of(q_given, counts, kv_len, false);
  // Only the slots some sequence fills are given to the kernel.
  const int64_t slots = slots_read(cache, longest);
  if (extra.f32_copy != nullptr) copy_layer_f32(cache, layer, slots, extra.f32_copy);
  run.make(source, q, out, scale, kv_len, counts, slots, kv_splits);
  const attngen_kernel_info* kernel = kernels.serving(slots);
  extra.pass(*kernel, run.args);
  const SerialRuns serial(o.batch * q.shape[1] * q.shape[2] * slots <= kSerialKeyRows);
  return run_kernel(c, kernel, run.args) == ATTNGEN_OK ? kernel : nullptr;
}

// The decode kernel for the cache's head dims and dtype and the queries' and output's dtypes (a
// cache dtype no kernel takes: ATTNGEN_ERROR_DTYPE naming the cache), of the form that suits
// seq_kv cached keys, generated with the call's modifier (its name; "" none).
KernelQuery decode_query(const attngen_kv_cache& cache, attngen_dtype q, attngen_dtype out,
                         const char* modifier, int64_t seq_kv = 0, bool f32_cache = false) {
  KernelQuery query{ATTNGEN_OP_DECODE};
  query.modifier = modifier;
  query.seq_kv = seq_kv;
  query.head_dim_qk = static_cast<int>(cache.options.head_dim_qk);
  query.head_dim_v = static_cast<int>(cache.options.head_dim_v);
  query.mask = ATTNGEN_MASK_CAUSAL;
  query.dtypes.q = q;
  query.dtypes.out = out;
  query.dtypes.cache = f32_cache ? ATTNGEN_F32 : cache.options.dtype;
  return query;
}

// The kernels of the forms that serve a call reading `lo` to `hi` slots (a size query: every
// length the layer may hold): a selection per form the call needs, not one on every call for each.
DecodeKernels select_decode(Check& c, const attngen_kv_cache& cache, attngen_dtype q,
                            attngen_dtype out, const char* name, int64_t lo, int64_t hi,
                            const char* modifier = "", bool f32_cache = false) {
  DecodeKernels k;
  if (lo < kDecodeLongKeys) {
    k.short_keys = select_kernel(c, decode_query(cache, q, out, modifier, 0, f32_cache), name);
  }
  if (hi >= kDecodeLongKeys && (lo >= kDecodeLongKeys || k.short_keys != nullptr)) {
    k.long_keys =
        select_kernel(c, decode_query(cache, q, out, modifier, kDecodeLongKeys, f32_cache), name);
  }
  if (k.short_keys == nullptr) k.short_keys = k.long_keys;
  if (k.long_keys == nullptr) k.long_keys = k.short_keys;
  return k;
}

// What validation and kernel selection decided for a decode call: the kernel of each form, and
// whether q and out are staged in F32 for them. A decode plan keeps one.
struct DecodeChoice {
  DecodeKernels kernels;
  bool stage = false;
  // The kernels read F32 caches only, the cache is of another dtype: each run reads the layer
  // copied into F32 (DecodeExtras). A modifier's kernels built for F32 caches only serve every
  // cache dtype this way.
  bool f32_cache = false;
};

// One decode call's validated state: the counts and lengths (the call's scratch).
struct DecodeCall {
  const attngen_tensor* q;
  const attngen_kv_cache* cache;
  int64_t layer;
  attngen_tensor* out;
  attngen_decode_options opt;
  int32_t* counts = nullptr;
  int32_t* kv_len = nullptr;
};

// Validates a decode call (kSize: for every length the layer may hold, the cache need not hold
// the queries yet) and, where `choice` is not nullptr, chooses its kernels.
bool prepare_decode(Check& c, CallScratch& scratch, CallMode mode, DecodeCall& call,
                    DecodeChoice* choice) {
  const attngen_tensor *q = call.q, *out = call.out;
  const attngen_kv_cache* cache = call.cache;
  const attngen_decode_options& opt = call.opt;
  if (!check_cache_layer(c, cache, call.layer)) return false;
  const attngen_kv_cache_options& o = cache->options;
  // q and out of any floating-point dtype here; dispatch finds a kernel that takes them.
  const TensorSpec qs{"q", ATTNGEN_F32, 4, kQDims, false, /*kernel_dtype=*/true};
  const TensorSpec os{"out", ATTNGEN_F32, 4, kODims, /*output=*/true, /*kernel_dtype=*/true};
  if (!check_tensor(c, q, qs) || !check_tensor(c, out, os)) return false;
  const int64_t t = q->shape[1], heads_q = q->shape[2];
  if (!check_dim(c, *q, qs, 0, o.batch, "B of the cache") ||
      !check_dim(c, *q, qs, 3, o.head_dim_qk, "Dqk of the cache") ||
      !check_dim(c, *out, os, 0, o.batch, "B of the cache") ||
      !check_dim(c, *out, os, 1, t, "t of q") || !check_dim(c, *out, os, 2, heads_q, "Hq of q") ||
      !check_dim(c, *out, os, 3, o.head_dim_v, "Dv of the cache")) {
    return false;
  }
  if (heads_q % o.heads_kv != 0) {
    return c.fail(ATTNGEN_ERROR_HEADS,
                  "q has " + std::to_string(heads_q) + " heads and the cache " +
                      std::to_string(o.heads_kv) +
                      "; Hq must be a multiple of Hkv (grouped-query attention)");
  }
  call.counts = scratch.array<int32_t>(c, static_cast<size_t>(o.batch), "the counts");
  call.kv_len = call.counts != nullptr
                    ? scratch.array<int32_t>(c, static_cast<size_t>(o.batch), "the lengths")
                    : nullptr;
  if (opt.modifier != nullptr && opt.modifier->name == nullptr) {
    return c.fail(ATTNGEN_ERROR_NULL_POINTER, "modifier.name is NULL");
  }
  if (call.kv_len == nullptr || !check_decode_options(c, opt.scale, opt.kv_splits) ||
      !prepare_counts(c, opt.counts, o.batch, t, call.counts) ||
      (mode == CallMode::kRun && !check_decode_fits(c, *cache, call.layer, call.counts))) {
    return false;
  }
  if (!check_no_alias(c, *out, "out", *q, "q") ||
      (opt.counts != nullptr && !check_no_alias(c, *out, "out", *opt.counts, "counts")) ||
      !check_clear_of_cache(c, *cache, call.layer, *out, "out", true)) {
    return false;
  }
  if (choice == nullptr) return true;
  // The slots the kernel reads: a size query covers every length.
  const int64_t lo =
      mode == CallMode::kSize ? 1 : slots_read(*cache, longest_length(*cache, call.layer));
  const int64_t hi = mode == CallMode::kSize ? o.capacity : lo;
  // A kernel for the call's dtypes; else (F16 / BF16 q or out that no kernel takes over this
  // cache) an F32-query kernel with q and out staged in F32, as attngen_attention() does.
  // (Without a kernel of those dtypes at all, straight to F32: a failed selection's message would
  // allocate.)
  Check native;
  DecodeKernels& kernels = choice->kernels;
  kernels = DecodeKernels{};
  choice->stage = false;
  choice->f32_cache = false;
  const char* modifier = opt.modifier != nullptr ? opt.modifier->name : "";
  if (opt.kernel != nullptr || (q->dtype == ATTNGEN_F32 && out->dtype == ATTNGEN_F32) ||
      may_fit_natively(decode_query(*cache, q->dtype, out->dtype, modifier))) {
    kernels = select_decode(native, *cache, q->dtype, out->dtype, opt.kernel, lo, hi, modifier);
  }
  if (kernels.short_keys == nullptr) {
    choice->stage = opt.kernel == nullptr && (q->dtype != ATTNGEN_F32 || out->dtype != ATTNGEN_F32);
    Check staged;
    kernels =
        choice->stage
            ? select_decode(staged, *cache, ATTNGEN_F32, ATTNGEN_F32, nullptr, lo, hi, modifier)
            : select_decode(staged, *cache, q->dtype, out->dtype, opt.kernel, lo, hi, modifier);
    // A modifier without kernels over this cache's dtype: its F32-cache kernels, over the layer
    // copied into F32 (DecodeChoice::f32_cache).
    if (kernels.short_keys == nullptr && *modifier != '\0' && opt.kernel == nullptr &&
        o.dtype != ATTNGEN_F32) {
      Check f32;
      kernels = select_decode(f32, *cache, ATTNGEN_F32, ATTNGEN_F32, nullptr, lo, hi, modifier,
                              /*f32_cache=*/true);
      choice->f32_cache = kernels.short_keys != nullptr;
      if (choice->f32_cache) choice->stage = q->dtype != ATTNGEN_F32 || out->dtype != ATTNGEN_F32;
    }
    if (kernels.short_keys == nullptr) return c.fail(staged.status(), staged.message());
  }
  return kernels.short_keys != nullptr;
}

// The call's modifier's parameters against its kernels' layout (both forms' kernels are
// generated with it), in the decode's dims (attngen_decode_options::modifier): their views.
bool prepare_decode_modifier(Check& c, const DecodeCall& call, const DecodeKernels& kernels,
                             DecodeExtras& extras) {
  const attngen_modifier* m = call.opt.modifier;
  if (m == nullptr) return true;
  const attngen_kv_cache_options& o = call.cache->options;
  const int64_t extent[] = {o.batch, call.q->shape[2], o.heads_kv, call.q->shape[1], o.capacity};
  for (const attngen_kernel_info* k : {kernels.short_keys, kernels.long_keys}) {
    // (A paged cache with a window masks, and holds positions below its capacity.)
    for (int t = 0; t < k->modifier_tensors && o.window >= 0 && o.page_slots == 0; ++t) {
      const attngen_modifier_tensor_info& info = k->modifier_tensor[t];
      for (int d = 0; d < info.rank; ++d) {
        if (info.dims[d] == static_cast<int32_t>(ModifierDim::kSkv)) {
          return c.fail(ATTNGEN_ERROR_INVALID_ARGUMENT,
                        std::string("modifier ") + m->name + "'s " + info.name +
                            " is indexed by key position, and the cache is a ring (a window): its "
                            "positions pass its capacity (Skv)");
        }
      }
    }
    if (!prepare_modifier(c, m, *k, extent, {{call.out, "out"}}, extras.modifier_views)) {
      return false;
    }
  }
  extras.modifier = m;
  return true;
}

// Runs a validated call on its kernels (kSize: measures them); returns the kernel that ran.
const attngen_kernel_info* execute_decode(Check& c, CallScratch& scratch, const DecodeCall& call,
                                          const DecodeChoice& choice) {
  DecodeExtras extras;
  if (!prepare_decode_modifier(c, call, choice.kernels, extras)) return nullptr;
  if (choice.f32_cache) {
    const attngen_kv_cache_options& o = call.cache->options;
    extras.f32_copy = scratch.array<float>(
        c, static_cast<size_t>(o.batch * o.heads_kv * o.capacity * (o.head_dim_qk + o.head_dim_v)),
        "the cache's layer in F32");
    extras.f32_table = scratch.array<int32_t>(c, static_cast<size_t>(o.batch), "its block table");
    if (extras.f32_copy == nullptr || extras.f32_table == nullptr) return nullptr;
  }
  F32Staging staging;
  attngen_tensor q32 = *call.q, out32 = *call.out;
  DecodeQueries queries;
  if ((choice.stage &&
       (!staging.input(c, *call.q, "q", &q32) || !staging.output(c, *call.out, "out", &out32))) ||
      !queries.take(c, scratch, *call.cache, q32)) {
    return nullptr;
  }
  const attngen_kernel_info* ran =
      run_decode(c, choice.kernels, *call.cache, call.layer, q32, queries, out32, call.opt.scale,
                 call.counts, call.kv_len, call.opt.kv_splits, &extras);
  if (ran != nullptr) staging.commit();
  return ran;
}

// attngen_decode() and its size query (kSize: nothing written, *bytes the workspace).
attngen_status decode(CallMode mode, const attngen_tensor* q, const attngen_kv_cache* cache,
                      int64_t layer, attngen_tensor* out, const attngen_decode_options* options,
                      size_t* bytes) {
  Check c;
  CallScratch scratch(mode);
  if (mode == CallMode::kSize && bytes == nullptr)
    c.fail(ATTNGEN_ERROR_NULL_POINTER, "bytes is NULL");
  DecodeCall call{q, cache, layer, out, attngen_decode_options_default()};
  DecodeChoice choice;
  if (!c.ok() || !read_options_decode(c, options, &call.opt) ||
      !prepare_decode(c, scratch, mode, call, &choice)) {
    return finish(c, nullptr);
  }
  const attngen_kernel_info* ran = execute_decode(c, scratch, call, choice);
  if (mode == CallMode::kSize && c.ok()) *bytes = scratch.bytes();
  return finish(c, ran != nullptr ? ran : choice.kernels.short_keys);
}

// A linear kernel's arguments (Halide views kept here).
struct LinearRun {
  HalideView hx, hw, hb, hy;
  attngen_kernel_args args{};
  void make(const attngen_tensor& x, const attngen_tensor& w, const attngen_tensor& bias,
            const attngen_tensor& y) {
    make_view(hx, x);
    make_view(hw, w);
    make_view(hb, bias);
    make_view(hy, y);
    args = attngen_kernel_args{};
    args.x = &hx.buf;
    args.w = &hw.buf;
    args.bias = &hb.buf;
    args.out = &hy.buf;
  }
};

// A decode step of a call's or a layer's weights (x and y validated against them; `caller`:
// the call's own weights, checked clear of the cache) and its size query (kSize: nothing
// appended or written).
attngen_status run_mha_decode(Check& c, CallScratch& scratch, CallMode mode,
                              const attngen_tensor* x, LayerWeights& weights,
                              const attngen_mha_weights* caller, attngen_kv_cache* cache,
                              int64_t layer, attngen_tensor* y, int64_t heads,
                              const attngen_tensor* counts_tensor, int32_t kv_splits,
                              size_t* bytes) {
  const attngen_kv_cache_options& o = cache->options;
  const TensorSpec xs{"x", ATTNGEN_F32, 3, kRowsDims};
  if (!check_dim(c, *x, xs, 0, o.batch, "B of the cache")) return finish(c, nullptr);
  const int64_t batch = x->shape[0], t = x->shape[1], embed = x->shape[2];
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
  int32_t* counts = scratch.array<int32_t>(c, static_cast<size_t>(batch), "the counts");
  int32_t* kv_len = counts != nullptr
                        ? scratch.array<int32_t>(c, static_cast<size_t>(batch), "the lengths")
                        : nullptr;
  float* row =
      kv_len != nullptr ? scratch.array<float>(c, append_scratch_floats(*cache), "a row") : nullptr;
  if (row == nullptr || !check_decode_options(c, 0.0f, kv_splits) ||
      !prepare_counts(c, counts_tensor, batch, t, counts) ||
      (mode == CallMode::kRun && (!check_append_fits(c, *cache, layer, counts) ||
                                  !check_pages_free(c, *cache, layer, counts)))) {
    return finish(c, nullptr);
  }
  // Nothing the call reads may lie where it writes: the append writes the layer's storage
  // before out_proj reads its weights, and y is written last (y was checked against x and the
  // weights).
  const attngen_mha_weights none{};
  const attngen_mha_weights& w = caller != nullptr ? *caller : none;
  const std::pair<const attngen_tensor*, const char*> inputs[] = {
      {x, "x"},
      {w.in_proj_weight, "in_proj_weight"},
      {w.in_proj_bias, "in_proj_bias"},
      {w.out_proj_weight, "out_proj_weight"},
      {w.out_proj_bias, "out_proj_bias"},
      {counts_tensor, "counts"}};
  for (const auto& [in, name] : inputs) {
    if (in != nullptr && !check_clear_of_cache(c, *cache, layer, *in, name, false)) {
      return finish(c, nullptr);
    }
  }
  if ((counts_tensor != nullptr && !check_no_alias(c, *y, "y", *counts_tensor, "counts")) ||
      !check_clear_of_cache(c, *cache, layer, *y, "y", true)) {
    return finish(c, nullptr);
  }
  const attngen_kernel_info* linear = select_kernel(c, KernelQuery{ATTNGEN_OP_LINEAR}, nullptr);
  // The slots the decode reads, its sequences t positions longer at most after the append (a
  // size query: every length).
  const int64_t longest = mode == CallMode::kSize ? 0 : longest_length(*cache, layer);
  const int64_t lo = mode == CallMode::kSize ? 1 : slots_read(*cache, longest);
  const int64_t hi = mode == CallMode::kSize ? o.capacity : slots_read(*cache, longest + t);
  const DecodeKernels decode =
      linear != nullptr ? select_decode(c, *cache, ATTNGEN_F32, ATTNGEN_F32, nullptr, lo, hi)
                        : DecodeKernels{};
  if (decode.short_keys == nullptr) return finish(c, nullptr);

  // in_proj: qkv [B, t, 3E]; q, k and v are views of it, [B, t, H, Dh] each.
  const int64_t n_in = 3 * embed;
  attngen_tensor iw{}, ow{}, ib{}, ob{};
  if (!weights.packed(c, scratch, 0, linear->weight_panel, &iw) ||
      !weights.packed(c, scratch, 1, linear->weight_panel, &ow) ||
      !weights.bias(c, scratch, 0, ATTNGEN_F32, &ib) ||
      !weights.bias(c, scratch, 1, ATTNGEN_F32, &ob)) {
    return finish(c, nullptr);
  }
  float* qkv = scratch.array<float>(c, static_cast<size_t>(batch * t * n_in), "the projections");
  float* attn = qkv != nullptr ? scratch.array<float>(c, static_cast<size_t>(batch * t * embed),
                                                      "the attention output")
                               : nullptr;
  if (attn == nullptr) return finish(c, nullptr);
  const int64_t qkv_shape[3] = {batch, t, n_in};
  DecodeQueries queries;
  const attngen_tensor t_qkv = attngen_tensor_contiguous(qkv, ATTNGEN_F32, 3, qkv_shape);
  const auto head_view = [&](int part) {
    const int64_t shape[4] = {batch, t, heads, dh};
    attngen_tensor v = attngen_tensor_contiguous(qkv + part * embed, ATTNGEN_F32, 4, shape);
    v.strides[0] = t * n_in;
    v.strides[1] = n_in;
    return v;
  };
  const int64_t attn_shape[4] = {batch, t, heads, dh};
  const attngen_tensor t_attn = attngen_tensor_contiguous(attn, ATTNGEN_F32, 4, attn_shape);
  const int64_t rows_shape[3] = {batch, t, embed};
  const attngen_tensor t_rows = attngen_tensor_contiguous(attn, ATTNGEN_F32, 3, rows_shape);
  if (!queries.take(c, scratch, *cache, head_view(0))) return finish(c, nullptr);
  LinearRun in_proj, out_proj;
  in_proj.make(*x, iw, ib, t_qkv);
  out_proj.make(t_rows, ow, ob, *y);
  if (mode == CallMode::kRun) {
    // In a workspace, all three kernels must fit before the append writes the cache.
    DecodeRun step;
    step.make(DecodeSource::of(*cache, layer), head_view(0), t_attn, 0.0f, kv_len, counts, 1,
              kv_splits);
    if (!precheck_kernel(c, linear, in_proj.args) ||
        !precheck_kernel(c, decode.short_keys, step.args) ||
        (decode.long_keys != decode.short_keys &&
         !precheck_kernel(c, decode.long_keys, step.args)) ||
        !precheck_kernel(c, linear, out_proj.args) || !reserve_lengths(c, *cache, layer)) {
      return finish(c, nullptr);
    }
  }
  if (run_kernel(c, linear, in_proj.args) != ATTNGEN_OK) return finish(c, nullptr);
  if (mode == CallMode::kRun) {
    take_pages(*cache, layer, counts);
    append_rows(*cache, layer, head_view(1), head_view(2), counts, row);
  }
  const attngen_kernel_info* ran = run_decode(c, decode, *cache, layer, head_view(0), queries,
                                              t_attn, 0.0f, counts, kv_len, kv_splits);
  if (!c.ok()) return finish(c, nullptr);
  run_kernel(c, linear, out_proj.args);
  if (mode == CallMode::kSize && c.ok()) *bytes = scratch.bytes();
  return finish(c, ran);
}

// attngen_mha_decode() and its size query.
attngen_status mha_decode(CallMode mode, const attngen_tensor* x,
                          const attngen_mha_weights* weights, attngen_kv_cache* cache,
                          int64_t layer, attngen_tensor* y,
                          const attngen_mha_decode_options* options, size_t* bytes) {
  Check c;
  CallScratch scratch(mode);
  if (mode == CallMode::kSize && bytes == nullptr)
    c.fail(ATTNGEN_ERROR_NULL_POINTER, "bytes is NULL");
  if (weights == nullptr) c.fail(ATTNGEN_ERROR_NULL_POINTER, "weights is NULL");
  if (options == nullptr) c.fail(ATTNGEN_ERROR_NULL_POINTER, "options is NULL (num_heads)");
  attngen_mha_decode_options opt = attngen_mha_decode_options_default();
  if (!c.ok() || !read_options(c, options, "options", &opt) ||
      !check_cache_layer(c, cache, layer)) {
    return finish(c, nullptr);
  }
  if (!check_mha_layer(c, x, *weights, y, opt.num_heads, "t")) return finish(c, nullptr);
  CallerWeights own(weights->in_proj_weight, weights->in_proj_bias, "in_proj_bias",
                    weights->out_proj_weight, weights->out_proj_bias);
  return run_mha_decode(c, scratch, mode, x, own, weights, cache, layer, y, opt.num_heads,
                        opt.counts, opt.kv_splits, bytes);
}

// attngen_mha_layer_decode() and its size query.
attngen_status layer_decode(CallMode mode, attngen_mha_layer* mha, const attngen_tensor* x,
                            attngen_kv_cache* cache, int64_t layer, attngen_tensor* y,
                            const attngen_mha_decode_options* options, size_t* bytes) {
  Check c;
  CallScratch scratch(mode);
  if (mode == CallMode::kSize && bytes == nullptr)
    c.fail(ATTNGEN_ERROR_NULL_POINTER, "bytes is NULL");
  attngen_mha_decode_options opt = attngen_mha_decode_options_default();
  if (!c.ok() || !read_options(c, options, "options", &opt) ||
      !check_cache_layer(c, cache, layer)) {
    return finish(c, nullptr);
  }
  if (!check_layer_call(c, mha, x, y, "t", &opt.num_heads, /*f32_only=*/true)) {
    return finish(c, nullptr);
  }
  LayerSource source(mha->layer);
  return run_mha_decode(c, scratch, mode, x, source, nullptr, cache, layer, y, opt.num_heads,
                        opt.counts, opt.kv_splits, bytes);
}

// Whether a run's cache is one the plan was made for: the options that shape its kernels,
// storage and validation (any layer count; the layer is the run's); false, c saying which
// differs.
bool same_cache_shape(Check& c, const attngen_kv_cache_options& planned,
                      const attngen_kv_cache_options& run) {
  const struct {
    int64_t planned, run;
    const char* name;
  } fields[] = {{planned.batch, run.batch, "batch"},
                {planned.heads_kv, run.heads_kv, "heads_kv"},
                {planned.head_dim_qk, run.head_dim_qk, "head_dim_qk"},
                {planned.head_dim_v, run.head_dim_v, "head_dim_v"},
                {planned.capacity, run.capacity, "capacity"},
                {planned.window, run.window, "window"},
                {planned.page_slots, run.page_slots, "page_slots"},
                {static_cast<int64_t>(planned.dtype), static_cast<int64_t>(run.dtype), "dtype"}};
  for (const auto& f : fields) {
    if (f.planned != f.run) {
      return c.fail(ATTNGEN_ERROR_INVALID_ARGUMENT,
                    std::string("the cache's ") + f.name + " is " + std::to_string(f.run) +
                        ", the plan's cache had " + std::to_string(f.planned));
    }
  }
  return true;
}

}  // namespace

}  // namespace attngen::rt

using namespace attngen::rt;

extern "C" {

attngen_decode_options attngen_decode_options_default(void) {
  attngen_decode_options o{};
  o.struct_size = sizeof o;
  return o;
}

attngen_mha_decode_options attngen_mha_decode_options_default(void) {
  attngen_mha_decode_options o{};
  o.struct_size = sizeof o;
  return o;
}

attngen_decode_data attngen_decode_data_default(void) {
  attngen_decode_data d{};
  d.struct_size = sizeof d;
  return d;
}

}  // extern "C"

struct attngen_decode_plan {
  attngen_tensor q{}, out{}, counts{};  // descriptions, data pointers cleared
  attngen_decode_options opt{};         // its counts pointing at `counts` (or NULL), no modifier
  KeptModifier modifier;                // the call's modifier (its data a run's)
  attngen_kv_cache_options cache{};     // of the cache it was made for
  int64_t rope_dim = 0;                 // its rope's rotary dims (0: none): its runs' scratch
  DecodeChoice choice;
  KernelNeed need;   // of the kernels' runs at every length, measured when the plan was made
  size_t bytes = 0;  // the workspace a run needs
};

extern "C" {

attngen_status attngen_decode_plan_create(const attngen_tensor* q, const attngen_kv_cache* cache,
                                          int64_t layer, const attngen_tensor* out,
                                          const attngen_decode_options* options,
                                          attngen_decode_plan** plan) {
  Check c;
  if (plan == nullptr) {
    c.fail(ATTNGEN_ERROR_NULL_POINTER, "plan is NULL");
    return finish(c, nullptr);
  }
  *plan = nullptr;
  CallScratch scratch(CallMode::kSize);
  DecodeCall call{q, cache, layer, const_cast<attngen_tensor*>(out),
                  attngen_decode_options_default()};
  DecodeChoice choice;
  if (!read_options_decode(c, options, &call.opt) ||
      !prepare_decode(c, scratch, CallMode::kSize, call, &choice) ||
      execute_decode(c, scratch, call, choice) == nullptr) {
    return finish(c, nullptr);
  }
  attngen_decode_plan* p = new (std::nothrow) attngen_decode_plan;
  if (p == nullptr) {
    c.fail(ATTNGEN_ERROR_OUT_OF_MEMORY, "cannot allocate the plan");
    return finish(c, nullptr);
  }
  p->q = *q;
  p->out = *out;
  p->q.data = p->out.data = nullptr;
  p->opt = call.opt;
  p->opt.kernel = nullptr;  // resolved into the plan's choice
  p->modifier.keep(call.opt.modifier, choice.kernels.short_keys->modifier);
  p->opt.modifier = nullptr;
  if (call.opt.counts != nullptr) {
    p->counts = *call.opt.counts;
    p->counts.data = nullptr;
    p->opt.counts = &p->counts;
  }
  p->cache = cache->options;
  p->rope_dim = cache->rope.dim;
  p->choice = choice;
  p->need = scratch.measured_need();
  p->bytes = scratch.bytes();
  *plan = p;
  return finish(c, choice.kernels.short_keys);
}

attngen_status attngen_decode_plan_workspace_size(const attngen_decode_plan* plan, size_t* bytes) {
  Check c;
  if (plan == nullptr) c.fail(ATTNGEN_ERROR_NULL_POINTER, "plan is NULL");
  if (bytes == nullptr) c.fail(ATTNGEN_ERROR_NULL_POINTER, "bytes is NULL");
  if (c.ok()) *bytes = plan->bytes;
  return finish(c, nullptr);
}

attngen_status attngen_decode_plan_run(const attngen_decode_plan* plan,
                                       const attngen_kv_cache* cache, int64_t layer,
                                       const attngen_decode_data* data) {
  Check c;
  if (plan == nullptr) c.fail(ATTNGEN_ERROR_NULL_POINTER, "plan is NULL");
  if (data == nullptr) c.fail(ATTNGEN_ERROR_NULL_POINTER, "data is NULL");
  attngen_decode_data d = attngen_decode_data_default();
  if (!c.ok() ||
      !read_options(c, data, "data", &d, offsetof(attngen_decode_data, modifier_tensors)) ||
      !check_cache_layer(c, cache, layer) || !same_cache_shape(c, plan->cache, cache->options)) {
    return finish(c, nullptr);
  }
  if (cache->rope.dim != plan->rope_dim) {
    c.fail(ATTNGEN_ERROR_INVALID_ARGUMENT,
           "the cache's rope rotates " + std::to_string(cache->rope.dim) +
               " dims, the plan's cache's " + std::to_string(plan->rope_dim) + " (0: no rope)");
    return finish(c, nullptr);
  }
  attngen_tensor q = plan->q, out = plan->out, counts = plan->counts;
  q.data = const_cast<void*>(d.q);
  out.data = d.out;
  attngen_decode_options opt = plan->opt;
  if (plan->opt.counts != nullptr) {
    counts.data = const_cast<void*>(d.counts);
    opt.counts = &counts;
  } else if (d.counts != nullptr) {
    c.fail(ATTNGEN_ERROR_INVALID_ARGUMENT, "data.counts is set, but the plan's call has no counts");
    return finish(c, nullptr);
  }
  KeptModifier modifier;
  if (!plan->modifier.over(c, d.modifier_tensors, modifier)) return finish(c, nullptr);
  opt.modifier = modifier.get();
  CallScratch scratch(CallMode::kRun);
  scratch.set_planned_need(&plan->need);
  DecodeCall call{&q, cache, layer, &out, opt};
  if (!prepare_decode(c, scratch, CallMode::kRun, call, nullptr)) return finish(c, nullptr);
  return finish(c, execute_decode(c, scratch, call, plan->choice));
}

void attngen_decode_plan_destroy(attngen_decode_plan* plan) { delete plan; }

attngen_status attngen_decode(const attngen_tensor* q, const attngen_kv_cache* cache, int64_t layer,
                              attngen_tensor* out, const attngen_decode_options* options) {
  return decode(CallMode::kRun, q, cache, layer, out, options, nullptr);
}

attngen_status attngen_decode_workspace_size(const attngen_tensor* q, const attngen_kv_cache* cache,
                                             int64_t layer, const attngen_tensor* out,
                                             const attngen_decode_options* options, size_t* bytes) {
  return decode(CallMode::kSize, q, cache, layer, const_cast<attngen_tensor*>(out), options, bytes);
}

attngen_status attngen_mha_decode(const attngen_tensor* x, const attngen_mha_weights* weights,
                                  attngen_kv_cache* cache, int64_t layer, attngen_tensor* y,
                                  const attngen_mha_decode_options* options) {
  return mha_decode(CallMode::kRun, x, weights, cache, layer, y, options, nullptr);
}

attngen_status attngen_mha_layer_decode(attngen_mha_layer* layer, const attngen_tensor* x,
                                        attngen_kv_cache* cache, int64_t cache_layer,
                                        attngen_tensor* y,
                                        const attngen_mha_decode_options* options) {
  return layer_decode(CallMode::kRun, layer, x, cache, cache_layer, y, options, nullptr);
}

attngen_status attngen_mha_layer_decode_workspace_size(attngen_mha_layer* layer,
                                                       const attngen_tensor* x,
                                                       const attngen_kv_cache* cache,
                                                       int64_t cache_layer, const attngen_tensor* y,
                                                       const attngen_mha_decode_options* options,
                                                       size_t* bytes) {
  return layer_decode(CallMode::kSize, layer, x, const_cast<attngen_kv_cache*>(cache), cache_layer,
                      const_cast<attngen_tensor*>(y), options, bytes);
}

attngen_status attngen_mha_decode_workspace_size(const attngen_tensor* x,
                                                 const attngen_mha_weights* weights,
                                                 const attngen_kv_cache* cache, int64_t layer,
                                                 const attngen_tensor* y,
                                                 const attngen_mha_decode_options* options,
                                                 size_t* bytes) {
  return mha_decode(CallMode::kSize, x, weights, const_cast<attngen_kv_cache*>(cache), layer,
                    const_cast<attngen_tensor*>(y), options, bytes);
}

}  // extern "C"
