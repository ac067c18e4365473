#include "tests/reference.h"

#include <cmath>
#include <limits>

namespace attngen::test {

std::vector<double> reference_attention(const View& q, const View& k, const View& v,
                                        const RefAttention& p) {
  const int64_t B = q.shape[0], Sq = q.shape[1], Hq = q.shape[2], Dqk = q.shape[3];
  const int64_t Skv = k.shape[1], Hkv = k.shape[2], Dv = v.shape[3];
  const int64_t group = Hq / Hkv;
  const double scale = p.scale != 0.0 ? p.scale : 1.0 / std::sqrt(static_cast<double>(Dqk));
  const double ninf = -std::numeric_limits<double>::infinity();
  std::vector<double> out(static_cast<size_t>(B * Sq * Hq * Dv), 0.0);
  if (p.weights) p.weights->assign(static_cast<size_t>(B * Hq * Sq * Skv), 0.0);
  if (p.lse) p.lse->assign(static_cast<size_t>(B * Hq * Sq), ninf);
  std::vector<double> s(static_cast<size_t>(Skv));
  std::vector<bool> attend(static_cast<size_t>(Skv));
  for (int64_t b = 0; b < B; ++b) {
    const int64_t len = p.kv_len.empty() ? Skv : p.kv_len[static_cast<size_t>(b)];
    const int64_t offset = p.bottom_right ? len - Sq : 0;
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t hk = h / group;
      for (int64_t i = 0; i < Sq; ++i) {
        double m = ninf;
        bool any = false, nan = false;
        for (int64_t j = 0; j < Skv; ++j) {
          bool ok = j < len;
          if (p.causal) ok = ok && j <= offset + i;
          if (p.keep) ok = ok && p.keep(b, h, i, j);
          if (p.pattern) ok = ok && p.pattern(offset + i, i, j);
          // An additive mask value at or below -1e29 (-inf included) masks its key
          // (docs/semantics.md): the key is not attended, whatever its score would be.
          if (p.add && p.add(b, h, i, j) <= kAdditiveMaskBelow) ok = false;
          attend[static_cast<size_t>(j)] = ok;
          if (!ok) continue;
          double dot = 0.0;
          for (int64_t d = 0; d < Dqk; ++d) dot += q.at({b, i, h, d}) * k.at({b, j, hk, d});
          double x = dot * scale;
          if (p.softcap > 0.0) x = p.softcap * std::tanh(x / p.softcap);
          if (p.add) x += p.add(b, h, i, j);
          s[static_cast<size_t>(j)] = x;
          if (std::isnan(x)) nan = true;
          m = std::max(m, x);
          any = true;
        }
        // A fully masked row, or one whose scores are all -inf: output 0. A NaN score makes
        // every exp(s - max), the sum and so the row NaN, as IEEE arithmetic does.
        if (!any || (!nan && m == ninf)) continue;
        if (nan) m = std::numeric_limits<double>::quiet_NaN();
        double sum = 0.0;
        for (int64_t j = 0; j < Skv; ++j) {
          if (!attend[static_cast<size_t>(j)]) continue;
          s[static_cast<size_t>(j)] = std::exp(s[static_cast<size_t>(j)] - m);
          sum += s[static_cast<size_t>(j)];
        }
        const int64_t row = (b * Hq + h) * Sq + i;
        if (p.lse) (*p.lse)[static_cast<size_t>(row)] = m + std::log(sum);
        for (int64_t j = 0; p.weights && j < Skv; ++j) {
          if (attend[static_cast<size_t>(j)]) {
            (*p.weights)[static_cast<size_t>(row * Skv + j)] = s[static_cast<size_t>(j)] / sum;
          }
        }
        for (int64_t d = 0; d < Dv; ++d) {
          double acc = 0.0;
          for (int64_t j = 0; j < Skv; ++j) {
            // Keys not attended, and keys whose weight is exactly 0 (score -inf), add nothing,
            // whatever V holds there (docs/semantics.md).
            if (attend[static_cast<size_t>(j)] && s[static_cast<size_t>(j)] != 0.0)
              acc += s[static_cast<size_t>(j)] * v.at({b, j, hk, d});
          }
          out[static_cast<size_t>(((b * Sq + i) * Hq + h) * Dv + d)] = acc / sum;
        }
      }
    }
  }
  return out;
}

std::vector<double> reference_linear(const std::vector<double>& x, int64_t rows, int64_t e,
                                     const std::vector<double>& w, int64_t n,
                                     const std::vector<double>& bias) {
  std::vector<double> y(static_cast<size_t>(rows * n));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < n; ++o) {
      double acc = bias.empty() ? 0.0 : bias[static_cast<size_t>(o)];
      for (int64_t c = 0; c < e; ++c) {
        acc += x[static_cast<size_t>(r * e + c)] * w[static_cast<size_t>(o * e + c)];
      }
      y[static_cast<size_t>(r * n + o)] = acc;
    }
  }
  return y;
}

std::vector<double> reference_mha(const std::vector<double>& x, int64_t batch, int64_t seq,
                                  int64_t embed, int64_t heads, const std::vector<double>& in_w,
                                  const std::vector<double>& in_b, const std::vector<double>& out_w,
                                  const std::vector<double>& out_b, bool causal,
                                  const std::vector<int32_t>& kv_len) {
  const int64_t rows = batch * seq, dh = embed / heads;
  const std::vector<double> qkv = reference_linear(x, rows, embed, in_w, 3 * embed, in_b);
  std::vector<double> attn(static_cast<size_t>(rows * embed), 0.0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(dh));
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t len = kv_len.empty() ? seq : kv_len[static_cast<size_t>(b)];
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t i = 0; i < seq; ++i) {
        std::vector<double> s(static_cast<size_t>(seq), 0.0);
        double m = -std::numeric_limits<double>::infinity();
        bool nan = false;
        for (int64_t j = 0; j < len; ++j) {
          if (causal && j > len - seq + i) continue;
          double dot = 0.0;
          for (int64_t d = 0; d < dh; ++d) {
            dot += qkv[static_cast<size_t>((b * seq + i) * 3 * embed + h * dh + d)] *
                   qkv[static_cast<size_t>((b * seq + j) * 3 * embed + embed + h * dh + d)];
          }
          s[static_cast<size_t>(j)] = dot * scale;
          if (std::isnan(dot)) nan = true;
          m = std::max(m, dot * scale);
        }
        if (!nan && m == -std::numeric_limits<double>::infinity()) continue;
        if (nan) m = std::numeric_limits<double>::quiet_NaN();
        double sum = 0.0;
        for (int64_t j = 0; j < len; ++j) {
          if (causal && j > len - seq + i) continue;
          s[static_cast<size_t>(j)] = std::exp(s[static_cast<size_t>(j)] - m);
          sum += s[static_cast<size_t>(j)];
        }
        for (int64_t d = 0; d < dh; ++d) {
          double acc = 0.0;
          for (int64_t j = 0; j < len; ++j) {
            if ((causal && j > len - seq + i) || s[static_cast<size_t>(j)] == 0.0) continue;
            acc += s[static_cast<size_t>(j)] *
                   qkv[static_cast<size_t>((b * seq + j) * 3 * embed + 2 * embed + h * dh + d)];
          }
          attn[static_cast<size_t>((b * seq + i) * embed + h * dh + d)] = acc / sum;
        }
      }
    }
  }
  return reference_linear(attn, rows, embed, out_w, embed, out_b);
}

}  // namespace attngen::test
