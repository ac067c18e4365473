// Independent float64 references for the contract in docs/semantics.md. Plain loops, no
// shared code with the kernels or the runtime. The one reference of the project: the unit tests,
// the fuzzer (tests/fuzz), the demo and the autotuning harness (bench/autotune_harness.cpp) all
// compare against these.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "attngen/attngen.h"

namespace attngen::test {

// A strided float32 tensor view, outermost first (what the API receives).
struct View {
  const float* data;
  std::vector<int64_t> shape, strides;
  double at(std::initializer_list<int64_t> idx) const {
    int64_t off = 0, d = 0;
    for (int64_t i : idx) off += i * strides[d++];
    return data[off];
  }
};

// An additive mask value at or below this masks its key (docs/semantics.md).
constexpr double kAdditiveMaskBelow = -1e29;

struct RefAttention {
  double scale = 0.0;  // 0: 1/sqrt(Dqk)
  double softcap = 0.0;
  bool causal = false;
  bool bottom_right = true;
  std::vector<int32_t> kv_len;                                    // empty: Skv for every batch
  std::function<bool(int64_t, int64_t, int64_t, int64_t)> keep;   // (b, h, i, j), bool mask
  std::function<double(int64_t, int64_t, int64_t, int64_t)> add;  // additive mask
  std::function<bool(int64_t, int64_t, int64_t)> pattern;         // (p, i, j): sparse pattern
  // A score modifier, (s, b, h, p, j) -> s, after the scale and soft cap and before the masks
  // (docs/semantics.md, "Modifiers"); the reference's own below (reference_alibi).
  std::function<double(double, int64_t, int64_t, int64_t, int64_t)> score_mod;
  // A mask modifier, (b, h, p, j) -> attend (docs/semantics.md, "Modifiers"); the reference's
  // own below (reference_document_attends).
  std::function<bool(int64_t, int64_t, int64_t, int64_t)> mask_mod;
  // A sink logit per query head, h -> z_h (docs/semantics.md, "Modifiers"): one more term
  // exp(z_h) of every row's softmax denominator; -inf adds nothing.
  std::function<double(int64_t)> sink_logit;
  std::vector<double>* weights = nullptr;  // if set: P, dense [B, Hq, Sq, Skv]
  std::vector<double>* lse = nullptr;      // if set: row log-sum-exp, dense [B, Hq, Sq]
  // If set: the output computed with |V|, sum_j P_ij |V_jd|, dense like the output. The size of
  // the terms each output element sums, a denominator for relative errors where an output
  // cancels to almost 0.
  std::vector<double>* magnitude = nullptr;
};

// out[b][i][h][d], dense [B, Sq, Hq, Dv]. Grouped-query attention where Hq is a multiple of Hkv
// (query head h reads key/value head h / (Hq / Hkv)).
std::vector<double> reference_attention(const View& q, const View& k, const View& v,
                                        const RefAttention& p);

// A sparse pattern (docs/semantics.md; attngen.h's attngen_pattern_kind): `kind` an
// attngen_pattern_kind value held as an int (a caller's value outside the enum attends nothing),
// `p` the parameters (p.kind is not read), and a block-sparse layout's entries dense
// [rows, cols] (blocks outside them are not attended).
struct RefPattern {
  int kind = ATTNGEN_PATTERN_NONE;
  attngen_pattern p{};
  std::vector<uint8_t> layout;
  int64_t rows = 0, cols = 0;
};

// Whether query row i, at position pos (i plus the alignment's offset), attends key j: what a
// RefAttention::pattern of this pattern returns.
bool reference_pattern_attends(const RefPattern& s, int64_t pos, int64_t i, int64_t j);

// ALiBi (docs/semantics.md, "Modifiers"): the standard slopes of `heads` heads as the ALiBi
// paper's code computes them (powers of the first slope; for a head count that is no power of
// two, those of the power of two below it, then every other slope of twice that), and the
// modified score s + m (j - p), or s - m |j - p| where symmetric.
std::vector<double> reference_alibi_slopes(int64_t heads);
double reference_alibi(double s, double slope, int64_t p, int64_t j, bool symmetric);

// Document masking: the query at position p (clamped to [0, n)) attends key j of the same
// document, ids[p] == ids[j], ids one sequence's n document ids.
bool reference_document_attends(const int32_t* ids, int64_t n, int64_t p, int64_t j);

// Prefix-LM: key j is attended by the query at position p where it lies in the sequence's
// prefix of `length` keys or at or before p.
bool reference_prefix_attends(int64_t length, int64_t p, int64_t j);

// T5's relative position bucket of key j against the query at position p, rel = j - p
// (Hugging Face's _relative_position_bucket; docs/semantics.md, "Modifiers"): num_buckets, split
// in two directions where bidirectional (else keys after the query take bucket 0), distances
// below max_exact = buckets / 2 (per direction) exact, longer ones logarithmic up to max_distance
// (taken as at least max_exact + 1, rounded down), past which they share the last bucket.
int64_t reference_t5_bucket(int64_t rel, bool bidirectional, int64_t num_buckets,
                            double max_distance);

// Sinks (StreamingLLM): key j is attended by the query at position p where it is one of the first
// `sinks` keys, or within the left window p - window <= j (a negative window: every key); both
// parameters are f32 values rounded down to whole keys.
bool reference_sinks_attends(float sinks, float window, int64_t p, int64_t j);

// y = x w^T + bias; x [B, S, E] dense, w [N, E], bias [N] or empty. Returns [B, S, N].
std::vector<double> reference_linear(const std::vector<double>& x, int64_t rows, int64_t e,
                                     const std::vector<double>& w, int64_t n,
                                     const std::vector<double>& bias);

// nn.MultiheadAttention(batch_first) forward, self-attention. x [B, S, E]. bottom_right: the
// alignment of the causal mask and kv_len (docs/semantics.md). magnitude, if set: the output
// computed from the attention's magnitude (RefAttention::magnitude) with |out_w| and |out_b|.
std::vector<double> reference_mha(const std::vector<double>& x, int64_t batch, int64_t seq,
                                  int64_t embed, int64_t heads, const std::vector<double>& in_w,
                                  const std::vector<double>& in_b, const std::vector<double>& out_w,
                                  const std::vector<double>& out_b, bool causal,
                                  const std::vector<int32_t>& kv_len, bool bottom_right = true,
                                  std::vector<double>* magnitude = nullptr);

// One decoding step over a KV cache's layer (docs/semantics.md, "Incremental decoding").
struct RefDecode {
  int64_t heads_kv = 1, head_dim_qk = 1, head_dim_v = 1;
  double scale = 0.0;           // 0: 1/sqrt(head_dim_qk)
  int64_t window = -1;          // >= 0: a row at position p attends keys p - window .. p only
  std::vector<int64_t> counts;  // query rows per sequence; empty: every row of q
  // A modifier, as RefAttention's (the same signatures and meaning), of sequence b (the index in
  // the batch), query head h, the row's absolute position p and key j's absolute position: the
  // score one after the scale (decode has no soft cap) and before the masks, the mask one ANDed
  // with the causal mask and the window, the sink logit one term of every row's denominator.
  std::function<double(double, int64_t, int64_t, int64_t, int64_t)> score_mod;
  std::function<bool(int64_t, int64_t, int64_t, int64_t)> mask_mod;
  std::function<double(int64_t)> sink_logit;
  std::vector<double>* magnitude = nullptr;  // as RefAttention::magnitude
};

// q dense [B, t, Hq, Dqk]; k[b], v[b] what sequence b of the cache holds after the step, dense
// [n_b, Hkv, Dqk] and [n_b, Hkv, Dv], oldest position first: every position 0 .. n_b - 1, also
// those a ring buffer no longer keeps (the window masks them), so that key j is at position j.
// Sequence b's rows i < counts[b] are its last counts[b] positions (row i at position
// n_b - counts[b] + i) and attend the positions up to their own; rows past counts[b] are 0.
// Returns dense [B, t, Hq, Dv].
std::vector<double> reference_decode(const std::vector<double>& q, int64_t batch, int64_t t,
                                     int64_t heads_q, const std::vector<std::vector<double>>& k,
                                     const std::vector<std::vector<double>>& v, const RefDecode& p);

// RoPE (docs/semantics.md, "Rotary embeddings"): x [B, S, H, D] with row (b, s) rotated at
// positions[b * S + s] in its first rotary_dim dims, pairs (i, i + r / 2) or, interleaved,
// (2i, 2i + 1), angles t * inv_freq[i], all in double; dense [B, S, H, D].
std::vector<double> reference_rope(const View& x, int64_t rotary_dim, bool interleaved,
                                   const std::vector<double>& inv_freq,
                                   const std::vector<int64_t>& positions);

}  // namespace attngen::test
