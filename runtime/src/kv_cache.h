// The KV cache behind attngen_kv_cache (attngen.h), shared by kv_cache.cpp (the cache's own
// API) and decode.cpp (the decode calls that append to it and attend over it).
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "runtime/src/internal.h"
#include "runtime/src/rope.h"

struct attngen_kv_cache {
  attngen_kv_cache_options options;  // as created, head_dim_v and pages resolved, storage set
  // [layers, pages, Hkv, page slots, Dqk + Dv] of the dtype: K then V per slot; an I8, F16 or
  // BF16 cache's slots in groups of 16 (core/kv_layout.h). A contiguous cache is one page per
  // sequence (pages = B) of the capacity's slots, rounded up to whole groups.
  uint8_t* data = nullptr;
  float* scales = nullptr;  // I8 only: [layers, pages, Hkv, groups of a page, 2, 16]
  // Each sequence's pages in order, [B, table_width] (the decode kernels' block table): a
  // contiguous cache's one entry per sequence (the kernels then read sequence b in page b); a
  // paged one's, at least two, past `held` page 0 (any page is valid storage: the kernels read
  // no position the sequence does not hold).
  std::vector<int32_t> table;
  int64_t table_width = 1;
  int32_t page_shift = 0;  // log2 of the slots the kernels see a page hold (>= its stored slots)
  // A paged cache only: the pages each sequence holds (its first table entries), each page's
  // holders (sequences forked from one another share pages) and the free pages.
  std::vector<int32_t> held;
  std::vector<int32_t> holders;
  std::vector<int32_t> free_pages;
  bool owned = false;   // storage allocated by the cache
  void* raw = nullptr;  // owned storage: the allocation (data is aligned within it)
  // Positions appended so far to each sequence, [B] per layer, allocated by the layer's first
  // append: a cache of many layers costs no bookkeeping for the layers not used yet (a layer
  // absent here holds 0 positions in every sequence).
  std::unordered_map<int64_t, std::vector<int64_t>> lengths;
  // Whether any V appended so far holds a NaN or an infinity (as stored): decode kernels then
  // mask V by the attention weights, so that positions a query does not attend (future tokens of
  // the same step, outside a window) never reach it. Sticky for the cache's life; values written
  // into external storage other than by an append are not seen (docs/semantics.md).
  bool v_nonfinite = false;
  // The rope its keys are stored rotated by and its decodes rotate the queries by (dim 0: none);
  // options.rope points at nothing of the caller's once created.
  attngen::rt::KeptRope rope;
};

namespace attngen::rt {

// cache != NULL and 0 <= layer < layers.
bool check_cache_layer(Check& c, const attngen_kv_cache* cache, int64_t layer);

// Positions appended so far to sequence b of the layer.
int64_t cache_length(const attngen_kv_cache& cache, int64_t layer, int64_t b);

// Allocates the layer's lengths, if not yet, before its first append: ATTNGEN_ERROR_OUT_OF_MEMORY
// (and nothing appended) if that fails.
bool reserve_lengths(Check& c, attngen_kv_cache& cache, int64_t layer);

// Per-sequence token counts: I32 [B] with values in [0, t], or all t when `counts` is NULL, into
// values[0 .. B).
bool prepare_counts(Check& c, const attngen_tensor* counts, int64_t batch, int64_t t,
                    int32_t* values);

// Whether appending counts[b] tokens to each sequence of the layer fits (capacity, ring window).
bool check_append_fits(Check& c, const attngen_kv_cache& cache, int64_t layer,
                       const int32_t* counts);

// Whether counts[b] queries of each sequence can attend over what the layer holds: no more
// queries than positions, and in a ring buffer every query's window still kept.
bool check_decode_fits(Check& c, const attngen_kv_cache& cache, int64_t layer,
                       const int32_t* counts);

// Converts the first counts[b] rows of k and v ([B, t, Hkv, D] of F32, F16 or BF16, already
// validated) into the layer's slots, in the cache's dtype (an I8 cache: quantised, with their
// scales), K rotated by the cache's rope at its position, through tmp (append_scratch_floats()
// floats). Cannot fail once reserve_lengths() has succeeded for the layer.
void append_rows(attngen_kv_cache& cache, int64_t layer, const attngen_tensor& k,
                 const attngen_tensor& v, const int32_t* counts, float* tmp);
size_t append_scratch_floats(const attngen_kv_cache& cache);

// Whether the cache keeps its sequences in pages of a pool (options.page_slots > 0).
inline bool is_paged(const attngen_kv_cache& cache) { return cache.options.page_slots > 0; }

// One layer's K (values = false) or V as a tensor [pages, Hkv, slots of a page, D] of the
// cache's dtype whose slots are Dqk + Dv apart: K and V of a slot are adjacent in the storage. A
// grouped cache's: [pages, Hkv, groups of a page, elements of a group's K or V part], its groups
// of slots (core/kv_layout.h). A contiguous cache's pages are its sequences.
attngen_tensor cache_layer(const attngen_kv_cache& cache, int64_t layer, bool values);

// The filled slots among the first `slots` of each sequence and kv head of the layer as F32 (an
// I8 cache's dequantised), K then V of each slot: the layer of an F32 contiguous cache of the
// same batch, heads, head dims and capacity, [B, Hkv, capacity, Dqk + Dv] at dst (other slots
// not written: the kernels read no slot past a sequence's length). A paged cache's slots are its
// positions. For decode calls whose kernel reads F32 caches only (decode.cpp).
void copy_layer_f32(const attngen_kv_cache& cache, int64_t layer, int64_t slots, float* dst);
// An I8 cache's scales of one layer, F32 [pages, Hkv, groups of a page, 32] (per group its K
// scales, then its V scales).
attngen_tensor cache_scales(const attngen_kv_cache& cache, int64_t layer);

// The block table as the kernels read it: I32 [B, table_width].
attngen_tensor cache_table(const attngen_kv_cache& cache);

// A paged cache: whether counts[b] more positions of each sequence of the layer find pages (each
// new page, and each shared one the append writes into, takes a free page); checked with
// check_append_fits(). take_pages() then takes them, copying shared pages (every layer's), so
// that append_rows() writes only pages its sequence holds alone.
bool check_pages_free(Check& c, const attngen_kv_cache& cache, int64_t layer,
                      const int32_t* counts);
void take_pages(attngen_kv_cache& cache, int64_t layer, const int32_t* counts);

// `t` (named `name`) must not overlap the layer's storage (its K/V and, for I8, its scales).
bool check_clear_of_cache(Check& c, const attngen_kv_cache& cache, int64_t layer,
                          const attngen_tensor& t, const char* name, bool output);

}  // namespace attngen::rt
