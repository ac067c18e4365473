// The KV cache: storage per layer and sequence in the layout the decode kernels read
// ([B, Hkv, capacity, Dqk + Dv] per layer: each slot's K, then its V), lengths per layer and
// sequence, appends with full validation before anything is written.
#include "runtime/src/kv_cache.h"

#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <string>

namespace attngen::rt {

namespace {

constexpr int64_t kMaxIndex = std::numeric_limits<int32_t>::max();
constexpr size_t kAlignment = 64;

const char* const kKDims[] = {"B", "t", "Hkv", "Dqk"};
const char* const kVDims[] = {"B", "t", "Hkv", "Dv"};
const char* const kCountsDims[] = {"B"};

bool ring(const attngen_kv_cache& cache) { return cache.options.window >= 0; }

int64_t& length_of(attngen_kv_cache& cache, int64_t layer, int64_t b) {
  return cache.lengths[static_cast<size_t>(layer * cache.options.batch + b)];
}

int64_t length_of(const attngen_kv_cache& cache, int64_t layer, int64_t b) {
  return cache.lengths[static_cast<size_t>(layer * cache.options.batch + b)];
}

// Floats of one slot (K then V) and of one layer.
int64_t slot_elements(const attngen_kv_cache_options& o) { return o.head_dim_qk + o.head_dim_v; }
int64_t layer_elements(const attngen_kv_cache_options& o) {
  return o.batch * o.heads_kv * o.capacity * slot_elements(o);
}

// Validates the options (head_dim_v resolved) and computes the storage size in bytes.
bool check_options(Check& c, const attngen_kv_cache_options* options, attngen_kv_cache_options& o,
                   size_t& bytes) {
  if (options == nullptr) return c.fail(ATTNGEN_ERROR_NULL_POINTER, "options is NULL");
  o = *options;
  if (o.head_dim_v == 0) o.head_dim_v = o.head_dim_qk;
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
  if (o.dtype != ATTNGEN_F32) {
    return c.fail(ATTNGEN_ERROR_DTYPE, std::string("options.dtype is ") + dtype_name(o.dtype) +
                                           ", expected F32 (the only cached type so far)");
  }
  if (o.window < -1) {
    return c.fail(ATTNGEN_ERROR_INVALID_ARGUMENT,
                  "options.window is " + std::to_string(o.window) +
                      ", expected -1 (none) or a left window L >= 0");
  }
  if (o.window >= 0 && o.capacity < o.window + 1) {
    return c.fail(ATTNGEN_ERROR_INVALID_ARGUMENT,
                  "options.capacity is " + std::to_string(o.capacity) +
                      ", expected >= window + 1 = " + std::to_string(o.window + 1) +
                      " (a ring buffer keeps a whole window)");
  }
  // A kernel addresses one layer of the cache as one buffer of at most 2^31 - 1 bytes. Every
  // factor is below 2^31, so the product is checked step by step.
  int64_t n = o.batch;
  for (int64_t f : {o.heads_kv, o.capacity, o.head_dim_qk + o.head_dim_v, int64_t{4}}) {
    if (n > kMaxIndex / f) {
      return c.fail(ATTNGEN_ERROR_TOO_LARGE,
                    "one layer of the cache (B * Hkv * capacity * (Dqk + Dv) * 4 bytes) exceeds "
                    "2^31 - 1 bytes, the most a kernel can address");
    }
    n *= f;
  }
  if (static_cast<uint64_t>(n) > std::numeric_limits<size_t>::max() / o.layers) {
    return c.fail(ATTNGEN_ERROR_TOO_LARGE, "the cache's storage exceeds size_t");
  }
  bytes = static_cast<size_t>(n) * static_cast<size_t>(o.layers);
  return true;
}

void* aligned_storage(size_t bytes) {
  const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  return std::aligned_alloc(kAlignment, rounded);
}

}  // namespace

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
                    std::vector<int32_t>& values) {
  values.assign(static_cast<size_t>(batch), static_cast<int32_t>(t));
  if (counts == nullptr) return true;
  const TensorSpec spec{"counts", ATTNGEN_I32, 1, kCountsDims};
  if (!check_tensor(c, counts, spec) || !check_dim(c, *counts, spec, 0, batch, "B")) return false;
  const auto* data = static_cast<const int32_t*>(counts->data);
  for (int64_t b = 0; b < batch; ++b) {
    const int32_t n = data[b * counts->strides[0]];
    if (n < 0 || n > t) {
      return c.fail(ATTNGEN_ERROR_INVALID_ARGUMENT,
                    "counts[" + std::to_string(b) + "] is " + std::to_string(n) +
                        ", expected 0 <= counts <= t = " + std::to_string(t));
    }
    values[static_cast<size_t>(b)] = n;
  }
  return true;
}

bool check_append_fits(Check& c, const attngen_kv_cache& cache, int64_t layer,
                       const std::vector<int32_t>& counts) {
  const attngen_kv_cache_options& o = cache.options;
  for (int64_t b = 0; b < o.batch; ++b) {
    const int64_t n = counts[static_cast<size_t>(b)], len = length_of(cache, layer, b);
    const std::string where =
        "sequence " + std::to_string(b) + " of layer " + std::to_string(layer);
    if (ring(cache) && n > o.capacity - o.window) {
      return c.fail(ATTNGEN_ERROR_CAPACITY,
                    "appending " + std::to_string(n) + " tokens to " + where +
                        " at once: a ring buffer of capacity " + std::to_string(o.capacity) +
                        " with window " + std::to_string(o.window) + " takes at most " +
                        std::to_string(o.capacity - o.window) + " per append");
    }
    if (!ring(cache) && len + n > o.capacity) {
      return c.fail(ATTNGEN_ERROR_CAPACITY,
                    where + " holds " + std::to_string(len) + " positions; appending " +
                        std::to_string(n) + " exceeds the capacity " + std::to_string(o.capacity));
    }
    if (len + n > kMaxIndex) {
      return c.fail(ATTNGEN_ERROR_TOO_LARGE,
                    where + " would pass 2^31 - 1 positions, the most a kernel can index");
    }
  }
  return true;
}

bool check_decode_fits(Check& c, const attngen_kv_cache& cache, int64_t layer,
                       const std::vector<int32_t>& counts) {
  const attngen_kv_cache_options& o = cache.options;
  for (int64_t b = 0; b < o.batch; ++b) {
    const int64_t n = counts[static_cast<size_t>(b)], len = length_of(cache, layer, b);
    const std::string where =
        "sequence " + std::to_string(b) + " of layer " + std::to_string(layer);
    if (n > len) {
      return c.fail(ATTNGEN_ERROR_INVALID_ARGUMENT,
                    std::to_string(n) + " queries for " + where + ", which holds " +
                        std::to_string(len) +
                        " positions: append the new tokens' K and V before attending");
    }
    if (ring(cache) && n > o.capacity - o.window) {
      return c.fail(ATTNGEN_ERROR_CAPACITY,
                    std::to_string(n) + " queries for " + where + ": a ring buffer of capacity " +
                        std::to_string(o.capacity) + " with window " + std::to_string(o.window) +
                        " keeps the windows of at most " + std::to_string(o.capacity - o.window));
    }
  }
  return true;
}

void append_rows(attngen_kv_cache& cache, int64_t layer, const attngen_tensor& k,
                 const attngen_tensor& v, const std::vector<int32_t>& counts) {
  const attngen_kv_cache_options& o = cache.options;
  const size_t k_row = static_cast<size_t>(o.head_dim_qk) * sizeof(float);
  const size_t v_row = static_cast<size_t>(o.head_dim_v) * sizeof(float);
  const int64_t w = slot_elements(o);
  for (int64_t b = 0; b < o.batch; ++b) {
    int64_t& len = length_of(cache, layer, b);
    for (int64_t i = 0; i < counts[static_cast<size_t>(b)]; ++i) {
      const int64_t slot = (len + i) % o.capacity;  // len + i < capacity without a ring
      for (int64_t h = 0; h < o.heads_kv; ++h) {
        const int64_t row = ((layer * o.batch + b) * o.heads_kv + h) * o.capacity + slot;
        const int64_t k_src = b * k.strides[0] + i * k.strides[1] + h * k.strides[2];
        const int64_t v_src = b * v.strides[0] + i * v.strides[1] + h * v.strides[2];
        float* slot_data = cache.data + row * w;
        std::memcpy(slot_data, static_cast<const float*>(k.data) + k_src, k_row);
        std::memcpy(slot_data + o.head_dim_qk, static_cast<const float*>(v.data) + v_src, v_row);
      }
    }
    len += counts[static_cast<size_t>(b)];
  }
}

attngen_tensor cache_layer(const attngen_kv_cache& cache, int64_t layer, bool values,
                           int64_t slots) {
  const attngen_kv_cache_options& o = cache.options;
  const int64_t shape[4] = {o.batch, o.heads_kv, o.capacity, slot_elements(o)};
  attngen_tensor t = attngen_tensor_contiguous(
      cache.data + layer * layer_elements(o) + (values ? o.head_dim_qk : 0), ATTNGEN_F32, 4, shape);
  t.shape[2] = slots;  // the strides stay those of the full storage
  t.shape[3] = values ? o.head_dim_v : o.head_dim_qk;
  return t;
}

attngen_tensor cache_storage(const attngen_kv_cache& cache, int64_t layer) {
  const attngen_kv_cache_options& o = cache.options;
  const int64_t shape[4] = {o.batch, o.heads_kv, o.capacity, slot_elements(o)};
  return attngen_tensor_contiguous(cache.data + layer * layer_elements(o), ATTNGEN_F32, 4, shape);
}

}  // namespace attngen::rt

using namespace attngen::rt;

extern "C" {

attngen_kv_cache_options attngen_kv_cache_options_default(void) {
  attngen_kv_cache_options o{};
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
  auto* kv = new (std::nothrow) attngen_kv_cache;
  if (kv != nullptr) {
    try {
      kv->lengths.assign(static_cast<size_t>(o.layers * o.batch), 0);
    } catch (const std::bad_alloc&) {
      delete kv;
      kv = nullptr;
    }
  }
  if (kv == nullptr) {
    c.fail(ATTNGEN_ERROR_OUT_OF_MEMORY, "cannot allocate the cache");
    return finish(c, nullptr);
  }
  if (o.storage != nullptr) {
    kv->data = static_cast<float*>(o.storage);
  } else {
    kv->owned = true;
    kv->data = static_cast<float*>(aligned_storage(bytes));
    o.storage = kv->data;
    if (kv->data == nullptr) {
      attngen_kv_cache_destroy(kv);
      c.fail(ATTNGEN_ERROR_OUT_OF_MEMORY,
             "cannot allocate " + std::to_string(bytes) + " bytes of K/V storage");
      return finish(c, nullptr);
    }
  }
  kv->options = o;
  *cache = kv;
  return finish(c, nullptr);
}

void attngen_kv_cache_destroy(attngen_kv_cache* cache) {
  if (cache == nullptr) return;
  if (cache->owned) std::free(cache->data);
  delete cache;
}

attngen_status attngen_kv_cache_append(attngen_kv_cache* cache, int64_t layer,
                                       const attngen_tensor* k, const attngen_tensor* v,
                                       const attngen_tensor* counts) {
  Check c;
  if (!check_cache_layer(c, cache, layer)) return finish(c, nullptr);
  const attngen_kv_cache_options& o = cache->options;
  const TensorSpec ks{"k", ATTNGEN_F32, 4, kKDims};
  const TensorSpec vs{"v", ATTNGEN_F32, 4, kVDims};
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
  std::vector<int32_t> n;
  if (!prepare_counts(c, counts, o.batch, t, n) || !check_append_fits(c, *cache, layer, n)) {
    return finish(c, nullptr);
  }
  // The inputs must not overlap the layer's storage they are copied into.
  const attngen_tensor store = cache_storage(*cache, layer);
  if (!check_no_alias(c, store, "the cache's storage", *k, "k") ||
      !check_no_alias(c, store, "the cache's storage", *v, "v")) {
    return finish(c, nullptr);
  }
  append_rows(*cache, layer, *k, *v, n);
  return finish(c, nullptr);
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
    *length = length_of(*cache, layer, sequence);
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
  } else {
    for (int64_t layer = 0; layer < cache->options.layers; ++layer) {
      for (int64_t b = 0; b < cache->options.batch; ++b) {
        if (sequence < 0 || b == sequence) length_of(*cache, layer, b) = 0;
      }
    }
  }
  return finish(c, nullptr);
}

}  // extern "C"
