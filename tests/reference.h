// Independent float64 references for the contract in docs/semantics.md. Plain loops, no
// shared code with the kernels or the runtime.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

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
  std::vector<double>* weights = nullptr;  // if set: P, dense [B, Hq, Sq, Skv]
  std::vector<double>* lse = nullptr;      // if set: row log-sum-exp, dense [B, Hq, Sq]
};

// out[b][i][h][d], dense [B, Sq, Hq, Dv].
std::vector<double> reference_attention(const View& q, const View& k, const View& v,
                                        const RefAttention& p);

// y = x w^T + bias; x [B, S, E] dense, w [N, E], bias [N] or empty. Returns [B, S, N].
std::vector<double> reference_linear(const std::vector<double>& x, int64_t rows, int64_t e,
                                     const std::vector<double>& w, int64_t n,
                                     const std::vector<double>& bias);

// nn.MultiheadAttention(batch_first) forward, self-attention. x [B, S, E].
std::vector<double> reference_mha(const std::vector<double>& x, int64_t batch, int64_t seq,
                                  int64_t embed, int64_t heads, const std::vector<double>& in_w,
                                  const std::vector<double>& in_b, const std::vector<double>& out_w,
                                  const std::vector<double>& out_b, bool causal,
                                  const std::vector<int32_t>& kv_len);

}  // namespace attngen::test
