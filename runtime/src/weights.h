// The weights of linear and MHA calls as their kernels read them (kernel.h): F32 panels of the
// kernel's weight_panel output features, each panel contiguous. A call with the caller's
// tensors packs them into its scratch for the kernel it runs (CallerWeights); a persistent
// layer (attngen_mha_layer) packs them once, when created (LayerSource).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/src/internal.h"
#include "runtime/src/workspace.h"

struct attngen_mha_layer;
struct attngen_linear_layer;

namespace attngen::rt {

// Floats of an [n, e] weight matrix packed in panels of `panel` rows (the last panel padded).
int64_t packed_floats(int64_t n, int64_t e, int panel);

// The packed F32 tensor [ceil(n / panel), e, panel] over data.
attngen_tensor packed_tensor(float* data, int64_t n, int64_t e, int panel);

// 64-byte aligned storage for `floats` packed floats (freed by AlignedDelete), or nullptr; its
// whole 2 MiB pages advised to be huge pages (advise_huge_pages()).
float* packed_storage(int64_t floats);

// Packs w [n, e] (F32, F16 or BF16, any strides) into out, packed_floats() floats: element
// [r / panel, c, r % panel] = w[r][c] in F32, rows past n zero.
void pack_weights(const attngen_tensor& w, int panel, float* out);

// A linear's or an MHA layer's weights and biases, as one call's kernels take them. Matrix and
// bias 0 are a linear's, or an MHA layer's in_proj ([3E, E], [3E]); 1 its out_proj ([E, E], [E]).
class LayerWeights {
 public:
  virtual ~LayerWeights() = default;
  // Weight matrix `which` packed for a kernel's weight_panel (>= 1), in *w (valid during the
  // call).
  virtual bool packed(Check& c, CallScratch& scratch, int which, int panel, attngen_tensor* w) = 0;
  // Bias `which` in `dtype` (the kernel's: the weights' own, or F32 where the call converts
  // its tensors), zeros where there is none, in *b.
  virtual bool bias(Check& c, CallScratch& scratch, int which, attngen_dtype dtype,
                    attngen_tensor* b) = 0;
};

// The caller's tensors of one call (already validated), packed and converted into its scratch.
class CallerWeights final : public LayerWeights {
 public:
  // b0_name: bias 0 in messages ("bias", "in_proj_bias").
  CallerWeights(const attngen_tensor* w0, const attngen_tensor* b0, const char* b0_name,
                const attngen_tensor* w1 = nullptr, const attngen_tensor* b1 = nullptr)
      : w_{w0, w1}, b_{b0, b1}, b0_name_(b0_name) {}
  bool packed(Check& c, CallScratch& scratch, int which, int panel, attngen_tensor* w) override;
  bool bias(Check& c, CallScratch& scratch, int which, attngen_dtype dtype,
            attngen_tensor* b) override;

 private:
  const attngen_tensor* w_[2];
  const attngen_tensor* b_[2];
  const char* b0_name_;
  F32Staging staging_;
};

// A layer's weights, packed once per panel width its calls' kernels read (one, unless a later
// call runs a kernel of another ISA or schedule: attngen_set_isa(), a kernel named by a call).
struct AlignedDelete {
  void operator()(float* p) const;
};

struct PackedLayer {
  struct Panels {
    int panel = 0;
    std::unique_ptr<float[], AlignedDelete> w[2];
  };
  // Its matrices [out_rows[i], embed]: an MHA layer's in_proj [3E, E] and out_proj [E, E], a
  // linear layer's one matrix [N, E] (matrices 1).
  int64_t embed = 0, heads = 0;
  int matrices = 2;
  int64_t out_rows[2] = {0, 0};
  attngen_dtype dtype = ATTNGEN_F32;
  std::vector<float> bias32[2];     // the biases in F32 (zeros where absent)
  std::vector<uint16_t> bias16[2];  // an F16 / BF16 layer's biases as given (zeros where absent)
  Mutex mutex;                      // guards `panels` (calls may run concurrently)
  std::vector<std::unique_ptr<Panels>> panels;

  int64_t rows(int which) const { return out_rows[which]; }
  // Weight matrix `which` packed for `panel`, packing it (from the first panels) if no panels of
  // that width exist yet; nullptr when out of memory.
  float* weights(int which, int panel);
};

// A call's view of a layer.
class LayerSource final : public LayerWeights {
 public:
  explicit LayerSource(PackedLayer& layer) : layer_(layer) {}
  bool packed(Check& c, CallScratch& scratch, int which, int panel, attngen_tensor* w) override;
  bool bias(Check& c, CallScratch& scratch, int which, attngen_dtype dtype,
            attngen_tensor* b) override;

 private:
  PackedLayer& layer_;
};

// A linear layer of w [N, E] and bias [N] (or NULL), both validated: packed once into *layer;
// false (c: ATTNGEN_ERROR_OUT_OF_MEMORY) if the copy does not fit.
bool make_linear_layer(Check& c, const attngen_tensor& w, const attngen_tensor* bias,
                       attngen_linear_layer** layer);

// A layer call's arguments: the layer given; x and y [B, seq, E] of the layer's dtype (an
// `f32_only` call: F32), y clear of x; *num_heads 0 (set to the layer's) or the layer's.
bool check_layer_call(Check& c, const attngen_mha_layer* layer, const attngen_tensor* x,
                      const attngen_tensor* y, const char* seq, int64_t* num_heads,
                      bool f32_only = false);

}  // namespace attngen::rt

struct attngen_mha_layer {
  attngen::rt::PackedLayer layer;
};

// A linear layer: one matrix (heads 0).
struct attngen_linear_layer {
  attngen::rt::PackedLayer layer;
};
