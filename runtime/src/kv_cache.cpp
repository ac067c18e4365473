// The KV cache: storage per layer in pages, in the layout the decode kernels read ([pages, Hkv,
// page slots, Dqk + Dv] per layer: each slot's K, then its V, in an F32 cache; an I8, F16 or
// BF16 cache's in groups of 16 slots, core/kv_layout.h, and an I8 cache's scales after all
// layers; a contiguous cache's pages are its sequences), each sequence's block table, lengths
// per used layer and sequence, appends (converting from F32, F16 or BF16) with full validation
// before anything is written.
#include "runtime/src/kv_cache.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <string>
#include <utility>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "core/kv_layout.h"
#include "runtime/src/convert.h"
#include "runtime/src/workspace.h"

namespace attngen::rt {

// Huge pages for long-lived buffers that kernels stream (internal.h). For a KV cache: a decode
// step reads each kv head's slots in order, K then V of each key block; in 4 KiB pages the
// hardware prefetchers start again every 4 slots (at D128), and the step waits on its loads.
// Measured at 64 MiB caches (B1 Hq32 Hkv8 D128 Skv8192, 6 pairs; bench/RESULTS.md): 1.04x
// (decode/l3) to 1.39x (decode_cache/f32) faster, i8 1.10x. Best effort: no huge pages, no harm.
void advise_huge_pages(void* p, size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + kHuge - 1) / kHuge * kHuge;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + bytes) / kHuge * kHuge;
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
#else
  (void)p;
  (void)bytes;
#endif
}

namespace {

constexpr int64_t kMaxIndex = std::numeric_limits<int32_t>::max();
constexpr int64_t kMaxPageSlots = 256;
constexpr size_t kAlignment = 64;

const char* const kKDims[] = {"B", "t", "Hkv", "Dqk"};
const char* const kVDims[] = {"B", "t", "Hkv", "Dv"};
const char* const kCountsDims[] = {"B"};

// A contiguous cache with a window keeps the last `capacity` positions; a paged one masks.
bool ring(const attngen_kv_cache& cache) { return cache.options.window >= 0 && !is_paged(cache); }

// A layer's lengths, which reserve_lengths() has allocated.
int64_t& length_of(attngen_kv_cache& cache, int64_t layer, int64_t b) {
  return cache.lengths.at(layer)[static_cast<size_t>(b)];
}

bool is_i8(const attngen_kv_cache_options& o) { return o.dtype == ATTNGEN_I8; }
// Every cache but an F32 one keeps its slots in groups (core/kv_layout.h).
bool is_grouped(const attngen_kv_cache_options& o) { return o.dtype != ATTNGEN_F32; }
int64_t element_bytes(const attngen_kv_cache_options& o) {
  return static_cast<int64_t>(dtype_size(o.dtype));
}
// Adjacent elements per lane of a grouped cache's K part (kv_layout.h).
int pack_of(const attngen_kv_cache_options& o) {
  return group_pack(static_cast<int>(element_bytes(o)));
}
bool paged(const attngen_kv_cache_options& o) { return o.page_slots > 0; }
// Slots stored per (layer, page, kv head): a paged cache's page slots; a contiguous cache's
// capacity, a grouped cache's rounded up to whole groups of slots.
int64_t stored_slots(const attngen_kv_cache_options& o) {
  if (paged(o)) return o.page_slots;
  return is_grouped(o) ? padded_slots(o.capacity) : o.capacity;
}
// Pages per layer: a contiguous cache's sequences.
int64_t pages_of(const attngen_kv_cache_options& o) { return paged(o) ? o.pages : o.batch; }
// Elements of a group's K part, and of a whole group (grouped caches).
int64_t group_k_of(const attngen_kv_cache_options& o) {
  return group_k_elements(o.head_dim_qk, pack_of(o));
}
int64_t group_of(const attngen_kv_cache_options& o) {
  return group_elements(o.head_dim_qk, o.head_dim_v, pack_of(o));
}
// Bytes of one slot (K then V; an I8 cache's K with its head dim rounded up to 4 bytes) and of
// one layer.
int64_t slot_bytes(const attngen_kv_cache_options& o) {
  return is_grouped(o) ? group_of(o) * element_bytes(o) / kSlotGroup
                       : (o.head_dim_qk + o.head_dim_v) * element_bytes(o);
}
int64_t page_bytes(const attngen_kv_cache_options& o) {
  return o.heads_kv * stored_slots(o) * slot_bytes(o);
}
int64_t layer_bytes(const attngen_kv_cache_options& o) { return pages_of(o) * page_bytes(o); }
// Scales (K's, V's) of one page and of one layer of an I8 cache, 2 floats per stored slot.
int64_t page_scales(const attngen_kv_cache_options& o) { return o.heads_kv * stored_slots(o) * 2; }
int64_t layer_scales(const attngen_kv_cache_options& o) { return pages_of(o) * page_scales(o); }
// Byte offset of the scales in the storage: after every layer's K/V, 64-byte aligned.
size_t scales_offset(const attngen_kv_cache_options& o) {
  const size_t kv = static_cast<size_t>(o.layers * layer_bytes(o));
  return (kv + kAlignment - 1) / kAlignment * kAlignment;
}

bool is_cache_dtype(int32_t d) {
  return d == ATTNGEN_F32 || d == ATTNGEN_F16 || d == ATTNGEN_BF16 || d == ATTNGEN_I8;
}

// The dtypes an append converts from.
bool check_input_dtype(Check& c, const attngen_tensor* t, const char* name) {
  if (t == nullptr) return true;               // (NULL is check_tensor's to report)
  const int32_t dtype = enum_value(t->dtype);  // any int a caller stored
  if (dtype == ATTNGEN_F32 || dtype == ATTNGEN_F16 || dtype == ATTNGEN_BF16) return true;
  return c.fail(ATTNGEN_ERROR_DTYPE, std::string(name) + " has dtype " + dtype_name(dtype) +
                                         ", expected F32, F16 or BF16 (the types an append "
                                         "converts into the cache's)");
}

// Validates the options (head_dim_v resolved) and computes the storage size in bytes.
bool check_options(Check& c, const attngen_kv_cache_options* options, attngen_kv_cache_options& o,
                   size_t& bytes) {
  if (options == nullptr) return c.fail(ATTNGEN_ERROR_NULL_POINTER, "options is NULL");
  o = attngen_kv_cache_options_default();
  if (!read_options(c, options, "options", &o, offsetof(attngen_kv_cache_options, rope))) {
    return false;
  }
  if (o.head_dim_v == 0) o.head_dim_v = o.head_dim_qk;
  const int64_t p = o.page_slots;
  if (p != 0 && (p < kSlotGroup || p > kMaxPageSlots || (p & (p - 1)) != 0)) {
    return c.fail(ATTNGEN_ERROR_INVALID_ARGUMENT,
                  "options.page_slots is " + std::to_string(p) +
                      ", expected 0 (a contiguous cache) or a power of two from 16 to 256");
  }
  if (p == 0 && o.pages != 0) {
    return c.fail(ATTNGEN_ERROR_INVALID_ARGUMENT,
                  "options.pages is " + std::to_string(o.pages) +
                      " for a contiguous cache (page_slots 0), expected 0");
  }
  if (o.pages < 0) {
    return c.fail(ATTNGEN_ERROR_INVALID_ARGUMENT,
                  "options.pages is " + std::to_string(o.pages) + ", expected >= 0");
  }
  const struct {
    int64_t value;
    const char* name;
  } sizes[] = {{o.layers, "layers"},         {o.batch, "batch"},
               {o.heads_kv, "heads_kv"},     {o.head_dim_qk, "head_dim_qk"},
               {o.head_dim_v, "head_dim_v"}, {o.capacity, "capacity"}};
  for (const auto& s : sizes) {
    if (s.value == 0) {
      return c.fail(ATTNGEN_ERROR_EMPTY, std::string("options.") + s.name + " is 0");
    }
    if (s.value < 0) {
      return c.fail(ATTNGEN_ERROR_INVALID_ARGUMENT, std::string("options.") + s.name + " is " +
                                                        std::to_string(s.value) + ", expected > 0");
    }
    if (s.value > kMaxIndex) {
      return c.fail(ATTNGEN_ERROR_TOO_LARGE, std::string("options.") + s.name + " = " +
                                                 std::to_string(s.value) + " exceeds 2^31 - 1");
    }
  }
  if (p != 0 && o.pages == 0) {  // every sequence's capacity (each factor < 2^31)
    const int64_t per_sequence = (o.capacity + p - 1) / p;
    o.pages = per_sequence > kMaxIndex / o.batch ? kMaxIndex + 1 : o.batch * per_sequence;
  }
  if (o.pages > kMaxIndex) {
    return c.fail(ATTNGEN_ERROR_TOO_LARGE,
                  "options.pages = " + std::to_string(o.pages) + " exceeds 2^31 - 1");
  }
  const int32_t dtype = enum_value(o.dtype);  // any int a caller stored
  if (!is_cache_dtype(dtype)) {
    return c.fail(ATTNGEN_ERROR_DTYPE, std::string("options.dtype is ") + dtype_name(dtype) + " (" +
                                           std::to_string(dtype) +
                                           "), expected F32, F16, BF16 or I8");
  }
  // The I8 decode kernels read one page per sequence (docs/decisions/paged-kv.md).
  if (p != 0 && dtype == ATTNGEN_I8) {
    return c.fail(ATTNGEN_ERROR_DTYPE,
                  "a paged cache (page_slots " + std::to_string(p) +
                      ") of I8 is not supported: page an F32, F16 or BF16 cache, or keep I8 "
                      "contiguous");
  }
  if (o.window < -1) {
    return c.fail(ATTNGEN_ERROR_INVALID_ARGUMENT,
                  "options.window is " + std::to_string(o.window) +
                      ", expected -1 (none) or a left window L >= 0");
  }
  if (!paged(o) && o.window >= o.capacity) {  // (capacity < window + 1, which may overflow)
    return c.fail(ATTNGEN_ERROR_INVALID_ARGUMENT,
                  "options.capacity is " + std::to_string(o.capacity) +
                      ", expected >= window + 1 = " +
                      (o.window < std::numeric_limits<int64_t>::max() ? std::to_string(o.window + 1)
                                                                      : "2^63") +
                      " (a ring buffer keeps a whole window)");
  }
  // A kernel addresses one layer of the cache (and an I8 cache's scales of one layer) as one
  // buffer of at most 2^31 - 1 bytes. Every factor is below 2^31, so the product is checked
  // step by step.
  // (An I8 cache's head dim of K is rounded up to 4 bytes, and a grouped cache's capacity to
  // whole groups of 16 slots: both stay below 2^31 + 16.)
  const bool i8 = is_i8(o);
  for (int64_t last : {slot_bytes(o), i8 ? int64_t{8} : int64_t{1}}) {
    int64_t n = pages_of(o);
    for (int64_t f : {o.heads_kv, stored_slots(o), last}) {
      if (n > kMaxIndex / f) {
        return c.fail(ATTNGEN_ERROR_TOO_LARGE,
                      "one layer of the cache (B * Hkv * capacity * (Dqk + Dv) * element size, "
                      "and an I8 cache's scales, B * Hkv * capacity * 8 bytes; a paged cache's "
                      "pages * Hkv * page_slots in place of B * Hkv * capacity) exceeds "
                      "2^31 - 1 bytes, the most a kernel can address");
      }
      n *= f;
    }
    if (static_cast<uint64_t>(n) >
        std::numeric_limits<size_t>::max() / 2 / static_cast<uint64_t>(o.layers)) {
      return c.fail(ATTNGEN_ERROR_TOO_LARGE, "the cache's storage exceeds size_t");
    }
  }
  bytes = static_cast<size_t>(o.layers * layer_bytes(o));
  if (i8) bytes = scales_offset(o) + static_cast<size_t>(o.layers * layer_scales(o)) * 4;
  return true;
}

// The block tables: a contiguous cache's sequence b is page b, which the kernels see as a page
// of the power of two of slots at or above its stored ones (the shift and mask of their page
// lookup: docs/decisions/paged-kv.md); a paged cache's sequences hold no page, and every page is
// free (taken lowest first).
bool make_tables(attngen_kv_cache& cache) {
  const attngen_kv_cache_options& o = cache.options;
  try {
    if (paged(o)) {
      // At least two entries: a table of one entry per sequence is the kernels' contiguous form
      // (sequence b in page b: decode_algorithm.cpp, one_page).
      cache.table_width = std::max<int64_t>(2, (o.capacity + o.page_slots - 1) / o.page_slots);
      cache.table.assign(static_cast<size_t>(o.batch * cache.table_width), 0);
      cache.held.assign(static_cast<size_t>(o.batch), 0);
      cache.holders.assign(static_cast<size_t>(o.pages), 0);
      cache.free_pages.resize(static_cast<size_t>(o.pages));
      for (int64_t p = 0; p < o.pages; ++p) {
        cache.free_pages[static_cast<size_t>(p)] = static_cast<int32_t>(o.pages - 1 - p);
      }
    } else {
      cache.table_width = 1;
      cache.table.resize(static_cast<size_t>(o.batch));
      for (int64_t b = 0; b < o.batch; ++b) {
        cache.table[static_cast<size_t>(b)] = static_cast<int32_t>(b);
      }
    }
  } catch (const std::bad_alloc&) {
    return false;
  }
  int32_t shift = 0;
  while ((int64_t{1} << shift) < stored_slots(o)) ++shift;
  cache.page_shift = shift;
  return true;
}

// A paged cache: sequence b's pages back to the pool (those it shares stay with the others).
void release_pages(attngen_kv_cache& cache, int64_t b) {
  int32_t& held = cache.held[static_cast<size_t>(b)];
  for (int64_t e = 0; e < held; ++e) {
    int32_t& entry = cache.table[static_cast<size_t>(b * cache.table_width + e)];
    if (--cache.holders[static_cast<size_t>(entry)] == 0) cache.free_pages.push_back(entry);
    entry = 0;
  }
  held = 0;
}

// Zeroed storage aligned to kAlignment, from calloc (large blocks come as fresh zero pages, so a
// big cache is not committed before it is written, and in huge pages where Linux gives them);
// *raw is what to free.
uint8_t* zeroed_storage(size_t bytes, void** raw) {
  *raw = bytes > SIZE_MAX - kAlignment ? nullptr : std::calloc(1, bytes + kAlignment);
  if (*raw == nullptr) return nullptr;
  advise_huge_pages(*raw, bytes + kAlignment);
  const uintptr_t p = reinterpret_cast<uintptr_t>(*raw);
  return reinterpret_cast<uint8_t*>((p + kAlignment - 1) / kAlignment * kAlignment);
}

}  // namespace

int64_t cache_length(const attngen_kv_cache& cache, int64_t layer, int64_t b) {
  const auto it = cache.lengths.find(layer);
  return it == cache.lengths.end() ? 0 : it->second[static_cast<size_t>(b)];
}

bool reserve_lengths(Check& c, attngen_kv_cache& cache, int64_t layer) {
  if (cache.lengths.count(layer) != 0) return true;
  try {
    cache.lengths.emplace(layer, std::vector<int64_t>(static_cast<size_t>(cache.options.batch)));
  } catch (const std::bad_alloc&) {
    return c.fail(ATTNGEN_ERROR_OUT_OF_MEMORY,
                  "cannot allocate the lengths of layer " + std::to_string(layer));
  }
  return true;
}

bool check_cache_layer(Check& c, const attngen_kv_cache* cache, int64_t layer) {
  if (cache == nullptr) return c.fail(ATTNGEN_ERROR_NULL_POINTER, "cache is NULL");
  if (layer < 0 || layer >= cache->options.layers) {
    return c.fail(ATTNGEN_ERROR_INVALID_ARGUMENT,
                  "layer is " + std::to_string(layer) + ", expected 0 <= layer < " +
                      std::to_string(cache->options.layers) + " (the cache's layers)");
  }
  return true;
}

bool prepare_counts(Check& c, const attngen_tensor* counts, int64_t batch, int64_t t,
                    int32_t* values) {
  std::fill(values, values + batch, static_cast<int32_t>(t));
  if (counts == nullptr) return true;
  const TensorSpec spec{"counts", ATTNGEN_I32, 1, kCountsDims};
  if (!check_tensor(c, counts, spec) || !check_dim(c, *counts, spec, 0, batch, "B")) return false;
  const auto* data = static_cast<const uint8_t*>(counts->data);
  for (int64_t b = 0; b < batch; ++b) {
    int32_t n;  // the caller's data need not be 4-byte aligned
    std::memcpy(&n, data + b * counts->strides[0] * 4, sizeof n);
    if (n < 0 || n > t) {
      return c.fail(ATTNGEN_ERROR_INVALID_ARGUMENT,
                    "counts[" + std::to_string(b) + "] is " + std::to_string(n) +
                        ", expected 0 <= counts <= t = " + std::to_string(t));
    }
    values[b] = n;
  }
  return true;
}

bool check_append_fits(Check& c, const attngen_kv_cache& cache, int64_t layer,
                       const int32_t* counts) {
  const attngen_kv_cache_options& o = cache.options;
  for (int64_t b = 0; b < o.batch; ++b) {
    const int64_t n = counts[b], len = cache_length(cache, layer, b);
    // (Built only for a message: a call in a workspace allocates nothing.)
    const auto where = [&] {
      return "sequence " + std::to_string(b) + " of layer " + std::to_string(layer);
    };
    if (ring(cache) && n > o.capacity - o.window) {
      return c.fail(ATTNGEN_ERROR_CAPACITY,
                    "appending " + std::to_string(n) + " tokens to " + where() +
                        " at once: a ring buffer of capacity " + std::to_string(o.capacity) +
                        " with window " + std::to_string(o.window) + " takes at most " +
                        std::to_string(o.capacity - o.window) + " per append");
    }
    if (!ring(cache) && len + n > o.capacity) {
      return c.fail(ATTNGEN_ERROR_CAPACITY,
                    where() + " holds " + std::to_string(len) + " positions; appending " +
                        std::to_string(n) + " exceeds the capacity " + std::to_string(o.capacity));
    }
    if (len + n > kMaxIndex) {
      return c.fail(ATTNGEN_ERROR_TOO_LARGE,
                    where() + " would pass 2^31 - 1 positions, the most a kernel can index");
    }
  }
  return true;
}

bool check_decode_fits(Check& c, const attngen_kv_cache& cache, int64_t layer,
                       const int32_t* counts) {
  const attngen_kv_cache_options& o = cache.options;
  for (int64_t b = 0; b < o.batch; ++b) {
    const int64_t n = counts[b], len = cache_length(cache, layer, b);
    // (Built only for a message: a call in a workspace allocates nothing.)
    const auto where = [&] {
      return "sequence " + std::to_string(b) + " of layer " + std::to_string(layer);
    };
    if (n > len) {
      return c.fail(ATTNGEN_ERROR_INVALID_ARGUMENT,
                    std::to_string(n) + " queries for " + where() + ", which holds " +
                        std::to_string(len) +
                        " positions: append the new tokens' K and V before attending");
    }
    if (ring(cache) && n > o.capacity - o.window) {
      return c.fail(ATTNGEN_ERROR_CAPACITY,
                    std::to_string(n) + " queries for " + where() + ": a ring buffer of capacity " +
                        std::to_string(o.capacity) + " with window " + std::to_string(o.window) +
                        " keeps the windows of at most " + std::to_string(o.capacity - o.window));
    }
  }
  return true;
}

namespace {

// One row of n elements of `src` (F32, F16 or BF16) into `dst` of the cache's dtype; an I8 row
// goes through `tmp` (n floats) and returns its scale.
float store_row(const void* src, attngen_dtype src_dtype, int64_t n, attngen_dtype dtype,
                uint8_t* dst, float* tmp) {
  if (src_dtype == dtype) {
    std::memcpy(dst, src, static_cast<size_t>(n) * dtype_size(dtype));
    return 1.0f;
  }
  switch (dtype) {
    case ATTNGEN_F32:
      for (int64_t i = 0; i < n; ++i) tmp[i] = load_f32(src, src_dtype, i);
      std::memcpy(dst, tmp, static_cast<size_t>(n) * sizeof(float));
      break;
    case ATTNGEN_F16:
    case ATTNGEN_BF16:
      for (int64_t i = 0; i < n; ++i) {
        const float x = load_f32(src, src_dtype, i);
        const uint16_t h = dtype == ATTNGEN_F16 ? f32_to_f16(x) : f32_to_bf16(x);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      break;
    default:  // I8
      for (int64_t i = 0; i < n; ++i) tmp[i] = load_f32(src, src_dtype, i);
      return quantise_i8(tmp, n, reinterpret_cast<int8_t*>(dst));
  }
  return 1.0f;
}

// Whether a row as stored (n elements of dtype at `row`; an I8 row by its scale) holds a NaN or an
// infinity: what the cache's v_nonfinite tracks for the decode kernels' P.V (kv_cache.h).
bool stored_row_nonfinite(const uint8_t* row, attngen_dtype dtype, int64_t n, float scale) {
  switch (dtype) {
    case ATTNGEN_F32:
      for (int64_t i = 0; i < n; ++i) {
        uint32_t bits;
        std::memcpy(&bits, row + 4 * i, 4);
        if ((bits & 0x7f800000u) == 0x7f800000u) return true;
      }
      return false;
    case ATTNGEN_F16:
    case ATTNGEN_BF16: {
      const uint16_t exponent = dtype == ATTNGEN_F16 ? 0x7c00u : 0x7f80u;
      for (int64_t i = 0; i < n; ++i) {
        uint16_t bits;
        std::memcpy(&bits, row + 2 * i, 2);
        if ((bits & exponent) == exponent) return true;
      }
      return false;
    }
    default:  // I8: a row holding a NaN or an infinity has a NaN scale
      return scale != scale;
  }
}

}  // namespace

size_t append_scratch_floats(const attngen_kv_cache& cache) {
  // A row as floats, and a grouped cache's K row (an I8 cache's V row too) as stored, before it
  // is spread over its group (in floats' room: a quarter of the row for I8, half for 16 bits).
  const attngen_kv_cache_options& o = cache.options;
  // Then the rope's angles of one position: r floats, and 2 r doubles (4 r floats' room, plus 1
  // for their alignment).
  const int64_t row = std::max(o.head_dim_qk, o.head_dim_v);
  const int64_t per_float = 4 / element_bytes(o);
  const int64_t rope = cache.rope.dim > 0 ? 5 * cache.rope.dim + 1 : 0;
  return static_cast<size_t>(row + (is_grouped(o) ? (row + per_float - 1) / per_float : 0) + rope);
}

namespace {

// A row of n elements of esize bytes, as stored at `row`, into its places in a group.
template <typename Offset>
void spread_row(const uint8_t* row, int64_t n, int64_t esize, uint8_t* group,
                const Offset& offset) {
  for (int64_t d = 0; d < n; ++d) {
    std::memcpy(group + offset(d) * esize, row + d * esize, static_cast<size_t>(esize));
  }
}

}  // namespace

void append_rows(attngen_kv_cache& cache, int64_t layer, const attngen_tensor& k,
                 const attngen_tensor& v, const int32_t* counts, float* tmp) {
  const attngen_kv_cache_options& o = cache.options;
  const bool i8 = is_i8(o), grouped = is_grouped(o);
  const int pack = pack_of(o);
  const int64_t esize = element_bytes(o), head_slots = stored_slots(o), width = slot_bytes(o);
  const int64_t group_k = group_k_of(o), dv = o.head_dim_v;
  const size_t k_size = dtype_size(k.dtype), v_size = dtype_size(v.dtype);
  const int64_t row_floats = std::max(o.head_dim_qk, o.head_dim_v);
  auto* row_stored = reinterpret_cast<uint8_t*>(tmp + row_floats);
  // The rope's angles: after the stored row (its room as append_scratch_floats() counts it).
  const RopeView rope = cache.rope.view();
  const int64_t per_float = 4 / element_bytes(o);
  float* rope_cs = tmp + row_floats + (grouped ? (row_floats + per_float - 1) / per_float : 0);
  auto* rope_state = reinterpret_cast<double*>(
      (reinterpret_cast<uintptr_t>(rope_cs + rope.dim) + sizeof(double) - 1) / sizeof(double) *
      sizeof(double));
  RopeAngles angles(rope, rope_state, rope_cs);
  const int64_t pages = pages_of(o);
  for (int64_t b = 0; b < o.batch; ++b) {
    int64_t& len = length_of(cache, layer, b);
    for (int64_t i = 0; i < counts[b]; ++i) {
      // The position's page and slot of the page (len + i < capacity without a ring).
      const int64_t position = paged(o) ? len + i : (len + i) % o.capacity;
      const int64_t page = cache.table[static_cast<size_t>(
          b * cache.table_width + (paged(o) ? position / o.page_slots : 0))];
      const int64_t slot = paged(o) ? position % o.page_slots : position;
      const float* turn = rope ? angles.at(len + i) : nullptr;
      for (int64_t h = 0; h < o.heads_kv; ++h) {
        const int64_t row = ((layer * pages + page) * o.heads_kv + h) * head_slots + slot;
        const auto* k_row = static_cast<const uint8_t*>(k.data) +
                            (b * k.strides[0] + i * k.strides[1] + h * k.strides[2]) * k_size;
        const auto* v_row = static_cast<const uint8_t*>(v.data) +
                            (b * v.strides[0] + i * v.strides[1] + h * v.strides[2]) * v_size;
        // Where the slot's K and V go: one after the other, or in a grouped cache's group
        // (core/kv_layout.h), K spread over the group's K part, and V over its V part (I8)
        // or as a row of it (16-bit elements: one lane a slot).
        uint8_t* k_data = cache.data + row * width;
        uint8_t* v_data = k_data + o.head_dim_qk * esize;
        const int64_t j = slot % kSlotGroup;
        uint8_t* group = cache.data + (row - j) * width;
        if (grouped) {
          k_data = row_stored;
          v_data =
              i8 ? row_stored : group + (group_k + group_v_offset<int64_t>(0, j, dv, pack)) * esize;
        }
        const void* k_src = k_row;
        attngen_dtype k_dtype = k.dtype;
        if (rope) {  // K as F32 in tmp, rotated, then stored from there
          for (int64_t d = 0; d < o.head_dim_qk; ++d) tmp[d] = load_f32(k_row, k.dtype, d);
          rope_row(rope, turn, tmp, tmp);
          k_src = tmp;
          k_dtype = ATTNGEN_F32;
        }
        const float k_scale = store_row(k_src, k_dtype, o.head_dim_qk, o.dtype, k_data, tmp);
        if (grouped) {
          spread_row(k_data, o.head_dim_qk, esize, group,
                     [&](int64_t d) { return group_k_offset<int64_t>(d, j, pack); });
        }
        const float v_scale = store_row(v_row, v.dtype, dv, o.dtype, v_data, tmp);
        if (i8) {
          spread_row(v_data, dv, esize, group,
                     [&](int64_t d) { return group_k + group_v_offset<int64_t>(d, j, dv, pack); });
          float* group_scales = cache.scales + (row - j) / kSlotGroup * kScaleGroup;
          group_scales[group_scale_offset<int64_t>(0, j)] = k_scale;
          group_scales[group_scale_offset<int64_t>(1, j)] = v_scale;
        }
        if (!cache.v_nonfinite) {
          cache.v_nonfinite = stored_row_nonfinite(v_data, o.dtype, dv, v_scale);
        }
      }
    }
    len += counts[b];
  }
}

namespace {

// A grouped cache's group's first n slots (core/kv_layout.h) as F32 rows of Dqk + Dv floats at
// out, element by element; `convert` takes an element's index in the group and its slot's
// scales part (the I8 cache's).
template <typename Convert>
void copy_group_f32(int64_t n, int64_t dqk, int64_t dv, int64_t group_k, int pack, float* out,
                    const Convert& convert) {
  const int64_t width = dqk + dv;
  for (int64_t d = 0; d < dqk; ++d) {
    for (int64_t j = 0; j < n; ++j) out[j * width + d] = convert(group_k_offset(d, j, pack), j, 0);
  }
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t d = 0; d < dv; ++d) {
      out[j * width + dqk + d] = convert(group_k + group_v_offset(d, j, dv, pack), j, 1);
    }
  }
}

// An F16 / BF16 group's first n slots (pack 1: K's element d of the slots contiguous, each V row
// contiguous) as F32 rows of Dqk + Dv floats at out: K converted a block of rows at a time into
// `block`, then transposed into the slots' rows; V converted straight into them.
template <typename Convert>
void copy_half_group_f32(const uint16_t* group, int64_t n, int64_t dqk, int64_t dv, int64_t group_k,
                         float* out, const Convert& convert) {
  constexpr int64_t kBlockRows = 64;
  const int64_t width = dqk + dv;
  float block[kBlockRows * kSlotGroup];
  for (int64_t d0 = 0; d0 < dqk; d0 += kBlockRows) {
    const int64_t rows = std::min(kBlockRows, dqk - d0);
    convert(group + group_k_offset<int64_t>(d0, 0, 1), block, rows * kSlotGroup);
    for (int64_t j = 0; j < n; ++j) {
      float* row = out + j * width + d0;
      for (int64_t d = 0; d < rows; ++d) row[d] = block[group_k_offset<int64_t>(d, j, 1)];
    }
  }
  for (int64_t j = 0; j < n; ++j) {
    convert(group + group_k + group_v_offset<int64_t>(0, j, dv, 1), out + j * width + dqk, dv);
  }
}

// The copy of a layer's slots [0, slots) into F32 (copy_layer_f32), in tasks of `per_task` groups
// of one (sequence, kv head).
struct CopyJob {
  const attngen_kv_cache* cache;
  int64_t layer, slots, chunks, per_task;
  float* dst;
};

void copy_groups_f32(const CopyJob& job, int64_t b, int64_t h, int64_t first_slot,
                     int64_t end_slot) {
  const attngen_kv_cache& cache = *job.cache;
  const attngen_kv_cache_options& o = cache.options;
  const int64_t esize = element_bytes(o), head_slots = stored_slots(o), width = slot_bytes(o);
  const int64_t group_k = group_k_of(o), dqk = o.head_dim_qk, dv = o.head_dim_v;
  const int64_t pages = pages_of(o);
  // A group (16 slots; one slot of an F32 cache) at a time: a page's slots are whole groups.
  const int64_t step = is_grouped(o) ? kSlotGroup : 1;
  for (int64_t s = first_slot; s < end_slot; s += step) {
    // Slot s of a contiguous cache is its page's slot s; a paged cache's is position s.
    const int64_t page =
        cache.table[static_cast<size_t>(b * cache.table_width + (paged(o) ? s / o.page_slots : 0))];
    const int64_t slot = paged(o) ? s % o.page_slots : s;
    const int64_t row = ((job.layer * pages + page) * o.heads_kv + h) * head_slots + slot;
    const uint8_t* first = cache.data + row * width;
    float* out = job.dst + ((b * o.heads_kv + h) * o.capacity + s) * (dqk + dv);
    const int64_t n = std::min(step, end_slot - s);
    const auto* halves = reinterpret_cast<const uint16_t*>(first);
    switch (o.dtype) {
      case ATTNGEN_F16:
        copy_half_group_f32(halves, n, dqk, dv, group_k, out, f16_to_f32_n);
        break;
      case ATTNGEN_BF16:
        copy_half_group_f32(halves, n, dqk, dv, group_k, out, bf16_to_f32_n);
        break;
      case ATTNGEN_I8: {
        const float* scales = cache.scales + row / kSlotGroup * kScaleGroup;
        const auto* bytes = reinterpret_cast<const int8_t*>(first);
        copy_group_f32(n, dqk, dv, group_k, kI8DotBytes, out, [&](int64_t e, int64_t j, int part) {
          return static_cast<float>(bytes[e]) * scales[group_scale_offset<int64_t>(part, j)];
        });
        break;
      }
      default:
        std::memcpy(out, first, static_cast<size_t>((dqk + dv) * esize));
        break;
    }
  }
}

// Task t: chunk t % chunks of (sequence, kv head) t / chunks, the slots it holds of those filled.
int copy_task(void* user_context, int task, uint8_t* closure) {
  (void)user_context;
  const CopyJob& job = *reinterpret_cast<const CopyJob*>(closure);
  const attngen_kv_cache_options& o = job.cache->options;
  const int64_t bh = task / job.chunks, b = bh / o.heads_kv, h = bh % o.heads_kv;
  const int64_t filled = std::min(job.slots, cache_length(*job.cache, job.layer, b));
  const int64_t span = job.per_task * (is_grouped(o) ? kSlotGroup : 1);
  const int64_t first = task % job.chunks * span;
  if (first < filled) copy_groups_f32(job, b, h, first, std::min(filled, first + span));
  return 0;
}

}  // namespace

void copy_layer_f32(const attngen_kv_cache& cache, int64_t layer, int64_t slots, float* dst) {
  const attngen_kv_cache_options& o = cache.options;
  // Tasks of at least 256 KiB of F32 rows each (a few per thread over a long cache), so that a
  // short cache is copied on this thread.
  const int64_t step = is_grouped(o) ? kSlotGroup : 1;
  const int64_t groups = (slots + step - 1) / step;
  if (groups == 0) return;
  const int64_t group_floats = step * (o.head_dim_qk + o.head_dim_v);
  const int64_t min_groups = std::max<int64_t>(1, (int64_t{64} << 10) / group_floats);
  const int64_t heads = o.batch * o.heads_kv;
  const int64_t chunks =
      std::clamp<int64_t>(std::min(groups / min_groups, 4 * thread_count() / heads + 1), 1, groups);
  CopyJob job{&cache, layer, slots, chunks, (groups + chunks - 1) / chunks, dst};
  if (heads * groups <= min_groups) {
    for (int64_t t = 0; t < heads * chunks; ++t) {
      copy_task(nullptr, static_cast<int>(t), reinterpret_cast<uint8_t*>(&job));
    }
    return;
  }
  const KernelRunScope running;
  halide_do_par_for(nullptr, copy_task, 0, static_cast<int>(heads * chunks),
                    reinterpret_cast<uint8_t*>(&job));
}

attngen_tensor cache_layer(const attngen_kv_cache& cache, int64_t layer, bool values) {
  const attngen_kv_cache_options& o = cache.options;
  uint8_t* first = cache.data + layer * layer_bytes(o);
  if (is_grouped(o)) {  // [pages, Hkv, groups, elements of the group's K or V part] (kv_layout.h)
    const int64_t group_k = group_k_of(o);
    const int64_t shape[4] = {pages_of(o), o.heads_kv, stored_slots(o) / kSlotGroup, group_of(o)};
    attngen_tensor t = attngen_tensor_contiguous(first + (values ? group_k * element_bytes(o) : 0),
                                                 o.dtype, 4, shape);
    t.shape[3] = values ? o.head_dim_v * kSlotGroup : group_k;
    return t;
  }
  const int64_t shape[4] = {pages_of(o), o.heads_kv, stored_slots(o), o.head_dim_qk + o.head_dim_v};
  attngen_tensor t = attngen_tensor_contiguous(
      first + (values ? o.head_dim_qk * element_bytes(o) : 0), o.dtype, 4, shape);
  t.shape[3] = values ? o.head_dim_v : o.head_dim_qk;  // the strides stay those of the storage
  return t;
}

attngen_tensor cache_scales(const attngen_kv_cache& cache, int64_t layer) {
  const attngen_kv_cache_options& o = cache.options;
  const int64_t shape[4] = {pages_of(o), o.heads_kv, stored_slots(o) / kSlotGroup, kScaleGroup};
  return attngen_tensor_contiguous(cache.scales + layer * layer_scales(o), ATTNGEN_F32, 4, shape);
}

attngen_tensor cache_table(const attngen_kv_cache& cache) {
  const int64_t shape[2] = {cache.options.batch, cache.table_width};
  return attngen_tensor_contiguous(const_cast<int32_t*>(cache.table.data()), ATTNGEN_I32, 2, shape);
}

namespace {

// The table entries of sequence b an append of n positions to a layer holding len writes into.
struct PageRange {
  int64_t first, end;
};
PageRange pages_written(const attngen_kv_cache& cache, int64_t len, int64_t n) {
  const int64_t p = cache.options.page_slots;
  return n <= 0 ? PageRange{0, 0} : PageRange{len / p, (len + n - 1) / p + 1};
}

// Whether entry e of sequence b needs a page of its own before it is written: none yet, or one
// shared with another sequence.
bool needs_page(const attngen_kv_cache& cache, int64_t b, int64_t e) {
  if (e >= cache.held[static_cast<size_t>(b)]) return true;
  const int32_t page = cache.table[static_cast<size_t>(b * cache.table_width + e)];
  return cache.holders[static_cast<size_t>(page)] > 1;
}

}  // namespace

bool check_pages_free(Check& c, const attngen_kv_cache& cache, int64_t layer,
                      const int32_t* counts) {
  if (!is_paged(cache)) return true;
  int64_t needed = 0;
  for (int64_t b = 0; b < cache.options.batch; ++b) {
    const PageRange r = pages_written(cache, cache_length(cache, layer, b), counts[b]);
    for (int64_t e = r.first; e < r.end; ++e) needed += needs_page(cache, b, e) ? 1 : 0;
  }
  const auto free = static_cast<int64_t>(cache.free_pages.size());
  if (needed <= free) return true;
  return c.fail(ATTNGEN_ERROR_CAPACITY,
                "the append to layer " + std::to_string(layer) + " needs " +
                    std::to_string(needed) + " pages and the pool has " + std::to_string(free) +
                    " free of " + std::to_string(cache.options.pages) +
                    " (reset finished sequences, or create the cache with more pages)");
}

void take_pages(attngen_kv_cache& cache, int64_t layer, const int32_t* counts) {
  if (!is_paged(cache)) return;
  const attngen_kv_cache_options& o = cache.options;
  for (int64_t b = 0; b < o.batch; ++b) {
    const PageRange r = pages_written(cache, cache_length(cache, layer, b), counts[b]);
    for (int64_t e = r.first; e < r.end; ++e) {
      if (!needs_page(cache, b, e)) continue;
      const int32_t page = cache.free_pages.back();
      cache.free_pages.pop_back();
      cache.holders[static_cast<size_t>(page)] = 1;
      int32_t& entry = cache.table[static_cast<size_t>(b * cache.table_width + e)];
      int32_t& held = cache.held[static_cast<size_t>(b)];
      if (e < held) {  // shared: this sequence's copy, of every layer (copy on write)
        const auto bytes = static_cast<size_t>(page_bytes(o));
        const auto scales = static_cast<size_t>(page_scales(o));
        for (int64_t l = 0; l < o.layers; ++l) {
          std::memcpy(cache.data + (l * o.pages + page) * page_bytes(o),
                      cache.data + (l * o.pages + entry) * page_bytes(o), bytes);
          if (cache.scales != nullptr) {
            std::memcpy(cache.scales + (l * o.pages + page) * page_scales(o),
                        cache.scales + (l * o.pages + entry) * page_scales(o),
                        scales * sizeof(float));
          }
        }
        --cache.holders[static_cast<size_t>(entry)];
      } else {
        held = static_cast<int32_t>(e + 1);  // (entries are taken in order)
      }
      entry = page;
    }
  }
}

bool check_clear_of_cache(Check& c, const attngen_kv_cache& cache, int64_t layer,
                          const attngen_tensor& t, const char* name, bool output) {
  const attngen_kv_cache_options& o = cache.options;
  const int64_t bytes = layer_bytes(o);
  const attngen_tensor store =
      attngen_tensor_contiguous(cache.data + layer * bytes, ATTNGEN_I8, 1, &bytes);
  const bool i8 = cache.scales != nullptr;
  const attngen_tensor scales = i8 ? cache_scales(cache, layer) : store;
  // An output may not lie anywhere in the cache's storage, other layers included: writing it
  // would corrupt what the cache holds (found by the fuzzer: y inside layer 0 of a step on
  // layer 2 was accepted).
  const int64_t total = static_cast<int64_t>(
      i8 ? scales_offset(o) + static_cast<size_t>(o.layers * layer_scales(o)) * 4
         : static_cast<size_t>(o.layers * layer_bytes(o)));
  const attngen_tensor whole = attngen_tensor_contiguous(cache.data, ATTNGEN_I8, 1, &total);
  if (output) {
    const Overlap overlap = bytes_overlap(t, whole);
    if (overlap == Overlap::kNone) return true;
    return c.fail(
        ATTNGEN_ERROR_ALIAS,
        std::string(name) +
            (overlap == Overlap::kOverlap ? " overlaps" : " may overlap (too large to check)") +
            " the cache's storage; the output must not alias the cache");
  }
  for (const attngen_tensor* part : {&store, &scales}) {
    const Overlap overlap = bytes_overlap(t, *part);
    if (overlap == Overlap::kNone) continue;
    const std::string where =
        std::string(name) +
        (overlap == Overlap::kOverlap ? " overlaps" : " may overlap (too large to check)") +
        " the cache's storage of layer " + std::to_string(layer);
    return c.fail(ATTNGEN_ERROR_ALIAS,
                  where + (output ? "; the output must not alias the cache"
                                  : ", which the call writes; its inputs must not alias it"));
  }
  return true;
}

}  // namespace attngen::rt

using namespace attngen::rt;

extern "C" {

attngen_kv_cache_options attngen_kv_cache_options_default(void) {
  attngen_kv_cache_options o{};
  o.struct_size = sizeof o;
  o.dtype = ATTNGEN_F32;
  o.window = -1;
  return o;
}

attngen_status attngen_kv_cache_storage_size(const attngen_kv_cache_options* options,
                                             size_t* bytes) {
  Check c;
  attngen_kv_cache_options o;
  size_t n = 0;
  if (bytes == nullptr) {
    c.fail(ATTNGEN_ERROR_NULL_POINTER, "bytes is NULL");
  } else if (check_options(c, options, o, n)) {
    *bytes = n;
  }
  return finish(c, nullptr);
}

attngen_status attngen_kv_cache_create(const attngen_kv_cache_options* options,
                                       attngen_kv_cache** cache) {
  Check c;
  attngen_kv_cache_options o;
  size_t bytes = 0;
  if (cache == nullptr) {
    c.fail(ATTNGEN_ERROR_NULL_POINTER, "cache is NULL (where to return the new cache)");
    return finish(c, nullptr);
  }
  if (!check_options(c, options, o, bytes)) return finish(c, nullptr);
  KeptRope rope;
  if (!rope.keep(c, o.rope, o.head_dim_qk, "options.rope")) return finish(c, nullptr);
  o.rope = nullptr;
  // The lengths come with each layer's first append (reserve_lengths()): nothing here grows
  // with the layers but the storage.
  auto* kv = new (std::nothrow) attngen_kv_cache;
  if (kv == nullptr) {
    c.fail(ATTNGEN_ERROR_OUT_OF_MEMORY, "cannot allocate the cache");
    return finish(c, nullptr);
  }
  if (o.storage != nullptr) {
    kv->data = static_cast<uint8_t*>(o.storage);
  } else {
    kv->owned = true;
    kv->data = zeroed_storage(bytes, &kv->raw);
    o.storage = kv->data;
    if (kv->data == nullptr) {
      attngen_kv_cache_destroy(kv);
      c.fail(ATTNGEN_ERROR_OUT_OF_MEMORY,
             "cannot allocate " + std::to_string(bytes) + " bytes of K/V storage");
      return finish(c, nullptr);
    }
  }
  // Cleared (owned storage comes zeroed): the slots past a sequence's length share key blocks
  // with its last positions, which the kernels read with weight 0; zeros (finite) keep them out
  // of every output (kv_cache.h).
  if (!kv->owned) std::memset(kv->data, 0, bytes);
  if (o.dtype == ATTNGEN_I8) kv->scales = reinterpret_cast<float*>(kv->data + scales_offset(o));
  kv->options = o;
  kv->rope = std::move(rope);
  if (!make_tables(*kv)) {
    attngen_kv_cache_destroy(kv);
    c.fail(ATTNGEN_ERROR_OUT_OF_MEMORY, "cannot allocate the cache's block tables");
    return finish(c, nullptr);
  }
  *cache = kv;
  return finish(c, nullptr);
}

void attngen_kv_cache_destroy(attngen_kv_cache* cache) {
  if (cache == nullptr) return;
  if (cache->owned) std::free(cache->raw);
  delete cache;
}

}  // extern "C"

namespace attngen::rt {
namespace {

// attngen_kv_cache_append() and its size query (kSize: appends nothing, *bytes the workspace).
attngen_status append(CallMode mode, attngen_kv_cache* cache, int64_t layer,
                      const attngen_tensor* k, const attngen_tensor* v,
                      const attngen_tensor* counts, size_t* bytes) {
  Check c;
  CallScratch scratch(mode);
  if (mode == CallMode::kSize && bytes == nullptr)
    c.fail(ATTNGEN_ERROR_NULL_POINTER, "bytes is NULL");
  if (!c.ok() || !check_cache_layer(c, cache, layer)) return finish(c, nullptr);
  const attngen_kv_cache_options& o = cache->options;
  if (!check_input_dtype(c, k, "k") || !check_input_dtype(c, v, "v")) return finish(c, nullptr);
  const TensorSpec ks{"k", k != nullptr ? k->dtype : ATTNGEN_F32, 4, kKDims};
  const TensorSpec vs{"v", v != nullptr ? v->dtype : ATTNGEN_F32, 4, kVDims};
  if (!check_tensor(c, k, ks) || !check_tensor(c, v, vs)) return finish(c, nullptr);
  const int64_t t = k->shape[1];
  if (!check_dim(c, *k, ks, 0, o.batch, "B of the cache") ||
      !check_dim(c, *k, ks, 2, o.heads_kv, "Hkv of the cache") ||
      !check_dim(c, *k, ks, 3, o.head_dim_qk, "Dqk of the cache") ||
      !check_dim(c, *v, vs, 0, o.batch, "B of the cache") ||
      !check_dim(c, *v, vs, 1, t, "t of k") ||
      !check_dim(c, *v, vs, 2, o.heads_kv, "Hkv of the cache") ||
      !check_dim(c, *v, vs, 3, o.head_dim_v, "Dv of the cache")) {
    return finish(c, nullptr);
  }
  int32_t* n = scratch.array<int32_t>(c, static_cast<size_t>(o.batch), "the counts");
  float* tmp =
      n != nullptr ? scratch.array<float>(c, append_scratch_floats(*cache), "a row") : nullptr;
  if (tmp == nullptr || !prepare_counts(c, counts, o.batch, t, n) ||
      (mode == CallMode::kRun &&
       (!check_append_fits(c, *cache, layer, n) || !check_pages_free(c, *cache, layer, n)))) {
    return finish(c, nullptr);
  }
  // The inputs must not overlap the layer's storage they are copied into.
  if (!check_clear_of_cache(c, *cache, layer, *k, "k", false) ||
      !check_clear_of_cache(c, *cache, layer, *v, "v", false) ||
      (counts != nullptr && !check_clear_of_cache(c, *cache, layer, *counts, "counts", false))) {
    return finish(c, nullptr);
  }
  if (mode == CallMode::kSize) {
    *bytes = scratch.bytes();
    return finish(c, nullptr);
  }
  if (!reserve_lengths(c, *cache, layer)) return finish(c, nullptr);
  take_pages(*cache, layer, n);
  append_rows(*cache, layer, *k, *v, n, tmp);
  return finish(c, nullptr);
}

}  // namespace
}  // namespace attngen::rt

extern "C" {

attngen_status attngen_kv_cache_append(attngen_kv_cache* cache, int64_t layer,
                                       const attngen_tensor* k, const attngen_tensor* v,
                                       const attngen_tensor* counts) {
  return append(CallMode::kRun, cache, layer, k, v, counts, nullptr);
}

attngen_status attngen_kv_cache_append_workspace_size(const attngen_kv_cache* cache, int64_t layer,
                                                      const attngen_tensor* k,
                                                      const attngen_tensor* v,
                                                      const attngen_tensor* counts, size_t* bytes) {
  return append(CallMode::kSize, const_cast<attngen_kv_cache*>(cache), layer, k, v, counts, bytes);
}

attngen_status attngen_kv_cache_length(const attngen_kv_cache* cache, int64_t layer,
                                       int64_t sequence, int64_t* length) {
  Check c;
  if (!check_cache_layer(c, cache, layer)) return finish(c, nullptr);
  if (length == nullptr) {
    c.fail(ATTNGEN_ERROR_NULL_POINTER, "length is NULL");
  } else if (sequence < 0 || sequence >= cache->options.batch) {
    c.fail(ATTNGEN_ERROR_INVALID_ARGUMENT,
           "sequence is " + std::to_string(sequence) + ", expected 0 <= sequence < " +
               std::to_string(cache->options.batch) + " (the cache's batch)");
  } else {
    *length = cache_length(*cache, layer, sequence);
  }
  return finish(c, nullptr);
}

attngen_status attngen_kv_cache_reset(attngen_kv_cache* cache, int64_t sequence) {
  Check c;
  if (cache == nullptr) {
    c.fail(ATTNGEN_ERROR_NULL_POINTER, "cache is NULL");
  } else if (sequence < -1 || sequence >= cache->options.batch) {
    c.fail(ATTNGEN_ERROR_INVALID_ARGUMENT, "sequence is " + std::to_string(sequence) +
                                               ", expected -1 (all) or 0 <= sequence < " +
                                               std::to_string(cache->options.batch));
  } else if (sequence < 0) {
    cache->lengths.clear();  // every layer holds 0 positions again, as created
    if (is_paged(*cache)) {
      for (int64_t b = 0; b < cache->options.batch; ++b) release_pages(*cache, b);
    }
  } else {
    for (auto& layer : cache->lengths) layer.second[static_cast<size_t>(sequence)] = 0;
    if (is_paged(*cache)) release_pages(*cache, sequence);
  }
  return finish(c, nullptr);
}

attngen_status attngen_kv_cache_fork(attngen_kv_cache* cache, int64_t from, int64_t to) {
  Check c;
  if (cache == nullptr) {
    c.fail(ATTNGEN_ERROR_NULL_POINTER, "cache is NULL");
    return finish(c, nullptr);
  }
  const attngen_kv_cache_options& o = cache->options;
  for (const auto& [value, name] : {std::pair{from, "from"}, std::pair{to, "to"}}) {
    if (value < 0 || value >= o.batch) {
      c.fail(ATTNGEN_ERROR_INVALID_ARGUMENT, std::string(name) + " is " + std::to_string(value) +
                                                 ", expected 0 <= " + name + " < " +
                                                 std::to_string(o.batch) + " (the cache's batch)");
      return finish(c, nullptr);
    }
  }
  if (from == to) {
    c.fail(ATTNGEN_ERROR_INVALID_ARGUMENT,
           "from and to are both " + std::to_string(from) + ": a sequence is its own copy");
    return finish(c, nullptr);
  }
  for (const auto& layer : cache->lengths) {
    if (layer.second[static_cast<size_t>(to)] != 0) {
      c.fail(ATTNGEN_ERROR_INVALID_ARGUMENT,
             "sequence " + std::to_string(to) + " holds " +
                 std::to_string(layer.second[static_cast<size_t>(to)]) + " positions of layer " +
                 std::to_string(layer.first) + "; reset it before forking into it");
      return finish(c, nullptr);
    }
  }
  if (is_paged(*cache)) {
    const int32_t held = cache->held[static_cast<size_t>(from)];
    for (int64_t e = 0; e < held; ++e) {
      const int32_t page = cache->table[static_cast<size_t>(from * cache->table_width + e)];
      cache->table[static_cast<size_t>(to * cache->table_width + e)] = page;
      ++cache->holders[static_cast<size_t>(page)];
    }
    cache->held[static_cast<size_t>(to)] = held;
  } else {  // the sequence's slots of every layer (its page), and an I8 cache's scales
    const int64_t bytes = page_bytes(o), scales = page_scales(o);
    for (int64_t l = 0; l < o.layers; ++l) {
      std::memcpy(cache->data + (l * o.batch + to) * bytes,
                  cache->data + (l * o.batch + from) * bytes, static_cast<size_t>(bytes));
      if (cache->scales != nullptr) {
        std::memcpy(cache->scales + (l * o.batch + to) * scales,
                    cache->scales + (l * o.batch + from) * scales,
                    static_cast<size_t>(scales) * sizeof(float));
      }
    }
  }
  for (auto& layer : cache->lengths) {
    layer.second[static_cast<size_t>(to)] = layer.second[static_cast<size_t>(from)];
  }
  return finish(c, nullptr);
}

attngen_status attngen_kv_cache_free_pages(const attngen_kv_cache* cache, int64_t* pages) {
  Check c;
  if (cache == nullptr) {
    c.fail(ATTNGEN_ERROR_NULL_POINTER, "cache is NULL");
  } else if (pages == nullptr) {
    c.fail(ATTNGEN_ERROR_NULL_POINTER, "pages is NULL");
  } else {
    *pages = static_cast<int64_t>(cache->free_pages.size());
  }
  return finish(c, nullptr);
}

}  // extern "C"
