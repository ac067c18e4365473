// The work the benchmarks divide by time, counted in one place: FLOPs of attention, the MHA layer
// and a linear layer. attngen_bench, the autotune harness, the CUDA bench, the ggml peer and the
// `attngen patterns` tool all count with these, and the Python scripts take the counts from
// attngen_bench (--describe_shapes), so every GFLOP/s in the reports means the same thing.
// Attention follows FlashAttention's convention (QK^T and PV, 2 FLOPs per multiply-add:
// 4 * B * H * Sq * Skv * D dense) over the (query, key) pairs actually attended, so causal counts
// the S(S+1)/2 pairs on and below the diagonal and a sparse pattern its own pairs.
// Plain C++ and header-only: the autotune harness and the ggml peer are built outside CMake.
#pragma once

#include <cstdint>

namespace attngen::bench {

// (query, key) pairs one head of self-attention over s positions attends: all s^2, or under the
// causal mask those on and below the diagonal.
inline double self_attention_pairs(int64_t s, bool causal) {
  const double n = static_cast<double>(s);
  return causal ? 0.5 * n * (n + 1) : n * n;
}

// FLOPs of attention over `pairs` attended pairs per (batch, head): q.k over d_qk and p.v over
// d_v per pair, 2 per multiply-add.
inline double attention_flops(int64_t batch, int64_t heads, double pairs, int64_t d_qk,
                              int64_t d_v) {
  return 2.0 * static_cast<double>(batch) * static_cast<double>(heads) * pairs *
         static_cast<double>(d_qk + d_v);
}

// FLOPs of self-attention over s positions, head dim d for Q, K and V.
inline double self_attention_flops(int64_t batch, int64_t heads, int64_t s, int64_t d,
                                   bool causal) {
  return attention_flops(batch, heads, self_attention_pairs(s, causal), d, d);
}

// FLOPs of y = x W^T + bias for x [batch, s, e] and W [n, e] (the bias adds are not counted).
inline double linear_flops(int64_t batch, int64_t s, int64_t e, int64_t n) {
  return 2.0 * static_cast<double>(batch) * static_cast<double>(s) * static_cast<double>(e) *
         static_cast<double>(n);
}

// FLOPs of the MHA layer on x [batch, s, e]: the Q, K, V and output projections (e -> e each) and
// self-attention over the heads (heads of e / heads features cost as one head of e).
inline double mha_layer_flops(int64_t batch, int64_t s, int64_t e, bool causal) {
  return linear_flops(batch, s, e, 4 * e) + self_attention_flops(batch, 1, s, e, causal);
}

}  // namespace attngen::bench
