// Packed weights (weights.h) and the persistent MHA layer's life (attngen_mha_layer_create /
// destroy); its calls are in api.cpp (forward) and decode.cpp (a decode step).
#include "runtime/src/weights.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <string>

#include "runtime/src/convert.h"

namespace attngen::rt {

namespace {

// The packing loop over panels [po0, po1), from any source of rows: value(r, c) is w[r][c] in
// F32. Written a column of the panel at a time (contiguous stores, one read from each of the
// panel's rows): 1.65x faster than a row at a time (strided stores) for a [2304, 768] matrix
// in panels of 48.
template <typename Value>
void pack_rows(int64_t n, int64_t e, int panel, float* out, Value value, int64_t po0, int64_t po1) {
  for (int64_t po = po0; po < po1; ++po) {
    float* dst = out + po * e * panel;
    const int64_t r0 = po * panel;
    const int rows = static_cast<int>(std::min<int64_t>(panel, n - r0));
    for (int64_t col = 0; col < e; ++col) {
      float* d = dst + col * panel;
      for (int pi = 0; pi < rows; ++pi) d[pi] = value(r0 + pi, col);
      for (int pi = rows; pi < panel; ++pi) d[pi] = 0.0f;
    }
  }
}

// Element [r][c] of a packed matrix.
float packed_at(const float* p, int64_t e, int panel, int64_t r, int64_t c) {
  return p[((r / panel) * e + c) * panel + r % panel];
}

}  // namespace

float* packed_storage(int64_t floats) {
  const size_t bytes = static_cast<size_t>(floats) * sizeof(float);
  void* p = ::operator new[](bytes, std::align_val_t{64}, std::nothrow);
  // A persistent layer's weights are read whole on every call (a decode step streams them).
  if (p != nullptr) advise_huge_pages(p, bytes);
  return static_cast<float*>(p);
}

void AlignedDelete::operator()(float* p) const { ::operator delete[](p, std::align_val_t{64}); }

int64_t packed_floats(int64_t n, int64_t e, int panel) {
  return (n + panel - 1) / panel * panel * e;
}

attngen_tensor packed_tensor(float* data, int64_t n, int64_t e, int panel) {
  const int64_t shape[3] = {(n + panel - 1) / panel, e, panel};
  return attngen_tensor_contiguous(data, ATTNGEN_F32, 3, shape);
}

namespace {

// Panels [po0, po1) of w.
void pack_panels(const attngen_tensor& w, int panel, float* out, int64_t po0, int64_t po1) {
  const auto* base = static_cast<const char*>(w.data);
  const size_t elem = dtype_size(w.dtype);
  const int64_t rs = w.strides[0], cs = w.strides[1];
  if (w.dtype == ATTNGEN_F32 && cs == 1) {
    const auto* f = reinterpret_cast<const float*>(base);
    pack_rows(
        w.shape[0], w.shape[1], panel, out, [&](int64_t r, int64_t c) { return f[r * rs + c]; },
        po0, po1);
    return;
  }
  pack_rows(
      w.shape[0], w.shape[1], panel, out,
      [&](int64_t r, int64_t c) {
        return load_f32(base + static_cast<size_t>(r * rs) * elem, w.dtype, c * cs);
      },
      po0, po1);
}

// The panels split into tasks of Halide's thread pool (as the kernels' parallel loops: with the
// pool held by a KernelRunScope). Packed on the calling thread alone, attngen_mha() was 4-5%
// slower than with the packing inside its kernel (B4 S512 E768, 2 threads; now about 3%,
// bench/RESULTS.md).
struct PackJob {
  const attngen_tensor* w;
  int panel;
  float* out;
  int64_t panels, per_task;
};

int pack_task(void* user_context, int task, uint8_t* closure) {
  (void)user_context;
  const PackJob& j = *reinterpret_cast<const PackJob*>(closure);
  const int64_t po0 = task * j.per_task;
  pack_panels(*j.w, j.panel, j.out, po0, std::min(j.panels, po0 + j.per_task));
  return 0;
}

}  // namespace

void pack_weights(const attngen_tensor& w, int panel, float* out) {
  const int64_t panels = (w.shape[0] + panel - 1) / panel;
  // Tasks of at least 64 KiB of weights, a few per thread.
  const int64_t min_panels = std::max<int64_t>(1, (int64_t{16} << 10) / (panel * w.shape[1]));
  const int64_t tasks =
      std::max<int64_t>(1, std::min<int64_t>(4 * thread_count(), panels / min_panels));
  PackJob job{&w, panel, out, panels, (panels + tasks - 1) / tasks};
  if (tasks == 1) {
    pack_panels(w, panel, out, 0, panels);
    return;
  }
  const KernelRunScope running;
  halide_do_par_for(nullptr, pack_task, 0,
                    static_cast<int>((panels + job.per_task - 1) / job.per_task),
                    reinterpret_cast<uint8_t*>(&job));
}

bool CallerWeights::packed(Check& c, CallScratch& scratch, int which, int panel,
                           attngen_tensor* w) {
  const attngen_tensor& t = *w_[which];
  const int64_t floats = packed_floats(t.shape[0], t.shape[1], panel);
  float* p = scratch.array<float>(c, static_cast<size_t>(floats), "the packed weights");
  if (p == nullptr) return false;
  pack_weights(t, panel, p);
  *w = packed_tensor(p, t.shape[0], t.shape[1], panel);
  return true;
}

bool CallerWeights::bias(Check& c, CallScratch& scratch, int which, attngen_dtype dtype,
                         attngen_tensor* b) {
  const attngen_tensor* given = b_[which];
  if (given == nullptr) {  // zeros: all-zero bits in every dtype
    const int64_t n = w_[which]->shape[0];
    void* zeros = scratch.take(c, static_cast<size_t>(n) * sizeof(float), "a zero bias");
    if (zeros == nullptr) return false;
    std::memset(zeros, 0, static_cast<size_t>(n) * sizeof(float));
    *b = attngen_tensor_contiguous(zeros, dtype, 1, &n);
    return true;
  }
  if (dtype == given->dtype) {
    *b = *given;
    return true;
  }
  return staging_.input(c, *given, which == 0 ? b0_name_ : "out_proj_bias", b);
}

float* PackedLayer::weights(int which, int panel) {
  std::lock_guard<Mutex> lock(mutex);
  for (const auto& p : panels) {
    if (p->panel == panel) return p->w[which].get();
  }
  // Packed from the first panels (there always are some: attngen_mha_layer_create packs once).
  const Panels& from = *panels.front();
  auto next = std::make_unique<Panels>();
  next->panel = panel;
  for (int i = 0; i < matrices; ++i) {
    const int64_t n = rows(i), floats = packed_floats(n, embed, panel);
    next->w[i].reset(packed_storage(floats));
    if (next->w[i] == nullptr) return nullptr;
    const float* src = from.w[i].get();
    const int p = from.panel;
    const int64_t e = embed;
    pack_rows(
        n, e, panel, next->w[i].get(),
        [&](int64_t r, int64_t c) { return packed_at(src, e, p, r, c); }, 0,
        (n + panel - 1) / panel);
  }
  panels.push_back(std::move(next));
  return panels.back()->w[which].get();
}

bool LayerSource::packed(Check& c, CallScratch& scratch, int which, int panel, attngen_tensor* w) {
  (void)scratch;
  float* p = layer_.weights(which, panel);
  if (p == nullptr) {
    return c.fail(ATTNGEN_ERROR_OUT_OF_MEMORY,
                  "out of memory packing the layer's weights for panels of " +
                      std::to_string(panel) + " rows");
  }
  *w = packed_tensor(p, layer_.rows(which), layer_.embed, panel);
  return true;
}

bool LayerSource::bias(Check& c, CallScratch& scratch, int which, attngen_dtype dtype,
                       attngen_tensor* b) {
  (void)c;
  (void)scratch;
  const int64_t n = layer_.rows(which);
  void* data = dtype == ATTNGEN_F32 ? static_cast<void*>(layer_.bias32[which].data())
                                    : static_cast<void*>(layer_.bias16[which].data());
  *b = attngen_tensor_contiguous(data, dtype, 1, &n);
  return true;
}

}  // namespace attngen::rt

namespace attngen::rt {

namespace {

// The weight panel of the best kernel for the query (0: none fits).
int panel_of(attngen_op op, attngen_dtype dtype, int64_t head_dim) {
  KernelQuery query = layer_query(op, dtype);
  query.head_dim_qk = query.head_dim_v = static_cast<int>(head_dim);
  Check ignored;
  const attngen_kernel_info* k = select_kernel(ignored, query, nullptr);
  return k != nullptr ? k->weight_panel : 0;
}

// Packs the layer's matrices (m[0 .. layer.matrices)) for `panel` into a new entry of
// layer.panels; false when out of memory.
bool add_panels(PackedLayer& layer, const attngen_tensor* const* m, int panel) {
  auto p = std::make_unique<PackedLayer::Panels>();
  p->panel = panel;
  for (int i = 0; i < layer.matrices; ++i) {
    p->w[i].reset(packed_storage(packed_floats(layer.rows(i), layer.embed, panel)));
    if (p->w[i] == nullptr) return false;
    pack_weights(*m[i], panel, p->w[i].get());
  }
  layer.panels.push_back(std::move(p));
  return true;
}

// The layer's biases (`biases[i]` of matrix i, NULL: zeros) in F32 and, for an F16 / BF16 layer,
// as given; false when out of memory.
bool copy_biases(PackedLayer& l, const attngen_tensor* const* biases) {
  try {
    for (int i = 0; i < l.matrices; ++i) {
      const int64_t n = l.rows(i);
      l.bias32[i].assign(static_cast<size_t>(n), 0.0f);
      if (l.dtype != ATTNGEN_F32) l.bias16[i].assign(static_cast<size_t>(n), 0);
      const attngen_tensor* b = biases[i];
      if (b == nullptr) continue;
      const auto* base = static_cast<const char*>(b->data);
      for (int64_t j = 0; j < n; ++j) {
        l.bias32[i][j] = load_f32(base, l.dtype, j * b->strides[0]);
        if (l.dtype != ATTNGEN_F32) {
          std::memcpy(&l.bias16[i][j], base + static_cast<size_t>(j * b->strides[0]) * 2, 2);
        }
      }
    }
  } catch (const std::bad_alloc&) {
    return false;
  }
  return true;
}

}  // namespace

bool make_linear_layer(Check& c, const attngen_tensor& w, const attngen_tensor* bias,
                       attngen_linear_layer** layer) {
  auto made = std::unique_ptr<attngen_linear_layer>(new (std::nothrow) attngen_linear_layer);
  bool ok = made != nullptr;
  if (ok) {
    PackedLayer& l = made->layer;
    l.matrices = 1;
    l.embed = w.shape[1];
    l.out_rows[0] = w.shape[0];
    l.dtype = w.dtype;
    const attngen_tensor* matrices[1] = {&w};
    const attngen_tensor* biases[1] = {bias};
    // Packed for the linear kernel of the layer's dtype (or F32's, converted); another width is
    // packed when a call first needs it.
    int panel = panel_of(ATTNGEN_OP_LINEAR, l.dtype, 0);
    if (panel == 0) panel = panel_of(ATTNGEN_OP_LINEAR, ATTNGEN_F32, 0);
    ok = copy_biases(l, biases) && add_panels(l, matrices, panel > 0 ? panel : 1);
  }
  if (!ok) {
    return c.fail(ATTNGEN_ERROR_OUT_OF_MEMORY, "out of memory copying the layer's weights (" +
                                                   std::to_string(w.shape[0] * w.shape[1]) +
                                                   " floats packed)");
  }
  *layer = made.release();
  return true;
}

bool check_layer_call(Check& c, const attngen_mha_layer* layer, const attngen_tensor* x,
                      const attngen_tensor* y, const char* seq, int64_t* num_heads, bool f32_only) {
  if (layer == nullptr) return c.fail(ATTNGEN_ERROR_NULL_POINTER, "layer is NULL");
  const PackedLayer& l = layer->layer;
  if (f32_only && l.dtype != ATTNGEN_F32) {
    return c.fail(ATTNGEN_ERROR_DTYPE, std::string("the layer's weights are ") +
                                           dtype_name(l.dtype) +
                                           "; a decode step takes an F32 layer");
  }
  const char* const rows_dims[] = {"B", seq, "E"};
  const TensorSpec xs{"x", l.dtype, 3, rows_dims, false, false, "the layer"};
  if (!check_tensor(c, x, xs) || !check_dim(c, *x, xs, 2, l.embed, "E of the layer") ||
      !check_mha_rows(c, x, y, l.embed, seq, xs)) {
    return false;
  }
  if (*num_heads == 0) *num_heads = l.heads;
  if (*num_heads != l.heads) {
    return c.fail(ATTNGEN_ERROR_HEADS, "num_heads is " + std::to_string(*num_heads) +
                                           "; the layer has " + std::to_string(l.heads) +
                                           " (or pass 0)");
  }
  return true;
}

}  // namespace attngen::rt

using namespace attngen::rt;

extern "C" {

attngen_status attngen_mha_layer_create(const attngen_mha_weights* weights, int64_t num_heads,
                                        attngen_mha_layer** layer) {
  Check c;
  if (layer == nullptr) {
    c.fail(ATTNGEN_ERROR_NULL_POINTER, "layer is NULL");
    return finish(c, nullptr);
  }
  *layer = nullptr;
  if (weights == nullptr) {
    c.fail(ATTNGEN_ERROR_NULL_POINTER, "weights is NULL");
    return finish(c, nullptr);
  }
  // E from in_proj_weight [3E, E] (rank and dtype first, so that its shape may be read).
  static const char* const kInWDims[] = {"3E", "E"};
  const TensorSpec first{"in_proj_weight", ATTNGEN_F32, 2, kInWDims, false, /*floating=*/true};
  if (!check_tensor(c, weights->in_proj_weight, first)) return finish(c, nullptr);
  const attngen_dtype dtype = weights->in_proj_weight->dtype;
  const int64_t embed = weights->in_proj_weight->shape[1];
  if (!check_mha_weights(c, *weights, embed, dtype, "in_proj_weight", "in_proj_weight") ||
      !check_heads(c, num_heads, embed)) {
    return finish(c, nullptr);
  }
  auto made = std::unique_ptr<attngen_mha_layer>(new (std::nothrow) attngen_mha_layer);
  bool ok = made != nullptr;
  if (ok) {
    PackedLayer& l = made->layer;
    l.embed = embed;
    l.heads = num_heads;
    l.out_rows[0] = 3 * embed;
    l.out_rows[1] = embed;
    l.dtype = dtype;
    const attngen_tensor* biases[2] = {weights->in_proj_bias, weights->out_proj_bias};
    const attngen_tensor* matrices[2] = {weights->in_proj_weight, weights->out_proj_weight};
    // Packed for the kernels a forward (of the layer's dtype, or F32 converted) and a decode
    // step's projections would run; another width is packed when a call first needs it.
    const int64_t dh = embed / num_heads;
    int forward = panel_of(ATTNGEN_OP_MHA, dtype, dh);
    if (forward == 0) forward = panel_of(ATTNGEN_OP_MHA, ATTNGEN_F32, dh);
    const int step = panel_of(ATTNGEN_OP_LINEAR, ATTNGEN_F32, 0);
    ok = copy_biases(l, biases) &&
         add_panels(l, matrices,
                    forward > 0 ? forward
                    : step > 0  ? step
                                : 1) &&
         (step <= 0 || step == l.panels.front()->panel || add_panels(l, matrices, step));
  }
  if (!ok) {
    c.fail(ATTNGEN_ERROR_OUT_OF_MEMORY, "out of memory copying the layer's weights (" +
                                            std::to_string(4 * embed * embed) + " floats packed)");
    return finish(c, nullptr);
  }
  *layer = made.release();
  return finish(c, nullptr);
}

void attngen_mha_layer_destroy(attngen_mha_layer* layer) { delete layer; }

void attngen_linear_layer_destroy(attngen_linear_layer* layer) { delete layer; }

}  // extern "C"
