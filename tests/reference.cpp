#include "tests/reference.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace attngen::test {
namespace {

// The sizes of one attention problem: q [batch, sq, hq, dqk], k [batch, skv, hkv, dqk],
// v [batch, skv, hkv, dv].
struct Sizes {
  int64_t batch, sq, hq, dqk, skv, hkv, dv;
};

// The attention of every query row: q(b, i, h, d), k(b, j, hk, d) and v(b, j, hk, d) read the
// inputs (strided float32 views, or float64 values such as a projection's). The reference's one
// softmax: reference_attention, reference_mha and reference_decode all come here.
template <typename Q, typename K, typename V>
std::vector<double> attention(const Sizes& n, const Q& q, const K& k, const V& v,
                              const RefAttention& p) {
  const int64_t B = n.batch, Sq = n.sq, Hq = n.hq, Dqk = n.dqk, Skv = n.skv, Hkv = n.hkv, Dv = n.dv;
  const int64_t group = Hq / Hkv;
  const double scale = p.scale != 0.0 ? p.scale : 1.0 / std::sqrt(static_cast<double>(Dqk));
  const double ninf = -std::numeric_limits<double>::infinity();
  std::vector<double> out(static_cast<size_t>(B * Sq * Hq * Dv), 0.0);
  if (p.weights) p.weights->assign(static_cast<size_t>(B * Hq * Sq * Skv), 0.0);
  if (p.lse) p.lse->assign(static_cast<size_t>(B * Hq * Sq), ninf);
  if (p.magnitude) p.magnitude->assign(out.size(), 0.0);
  std::vector<double> s(static_cast<size_t>(Skv));
  std::vector<bool> attend(static_cast<size_t>(Skv));
  // The inputs read once into contiguous float64 rows: a kv head's keys and values per
  // (sequence, kv head), a query's row per (sequence, head, row). The sums below run in the same
  // order as over the accessors (d, then j, ascending), so the results do not depend on it; only
  // the accessors' per-element cost goes (most of a test's time under qemu).
  std::vector<double> kh(static_cast<size_t>(Skv * Dqk)), vh(static_cast<size_t>(Skv * Dv));
  std::vector<double> qrow(static_cast<size_t>(Dqk)), acc(static_cast<size_t>(Dv)),
      mag(static_cast<size_t>(Dv));
  for (int64_t b = 0; b < B; ++b) {
    const int64_t len = p.kv_len.empty() ? Skv : p.kv_len[static_cast<size_t>(b)];
    const int64_t offset = p.bottom_right ? len - Sq : 0;
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t hk = h / group;
      if (h % group == 0) {
        for (int64_t j = 0; j < Skv; ++j) {
          for (int64_t d = 0; d < Dqk; ++d) kh[static_cast<size_t>(j * Dqk + d)] = k(b, j, hk, d);
          for (int64_t d = 0; d < Dv; ++d) vh[static_cast<size_t>(j * Dv + d)] = v(b, j, hk, d);
        }
      }
      for (int64_t i = 0; i < Sq; ++i) {
        for (int64_t d = 0; d < Dqk; ++d) qrow[static_cast<size_t>(d)] = q(b, i, h, d);
        double m = ninf;
        bool any = false, nan = false;
        for (int64_t j = 0; j < Skv; ++j) {
          bool ok = j < len;
          if (p.causal) ok = ok && j <= offset + i;
          if (p.keep) ok = ok && p.keep(b, h, i, j);
          if (p.pattern) ok = ok && p.pattern(offset + i, i, j);
          if (p.mask_mod) ok = ok && p.mask_mod(b, h, offset + i, j);
          // An additive mask value at or below -1e29 (-inf included) masks its key
          // (docs/semantics.md): the key is not attended, whatever its score would be.
          if (p.add && p.add(b, h, i, j) <= kAdditiveMaskBelow) ok = false;
          attend[static_cast<size_t>(j)] = ok;
          if (!ok) continue;
          const double* kj = &kh[static_cast<size_t>(j * Dqk)];
          double dot = 0.0;
          for (int64_t d = 0; d < Dqk; ++d) dot += qrow[static_cast<size_t>(d)] * kj[d];
          double x = dot * scale;
          if (p.softcap > 0.0) x = p.softcap * std::tanh(x / p.softcap);
          if (p.score_mod) x = p.score_mod(x, b, h, offset + i, j);
          if (p.add) x += p.add(b, h, i, j);
          s[static_cast<size_t>(j)] = x;
          if (std::isnan(x)) nan = true;
          m = std::max(m, x);
          any = true;
        }
        // A sink logit is one more term of the max and the sum, with no value.
        const double z = p.sink_logit ? p.sink_logit(h) : ninf;
        const bool sink = std::isnan(z) || z > ninf;
        if (sink) {
          if (std::isnan(z)) nan = true;
          m = std::max(m, z);
        }
        // A fully masked row, or one whose scores are all -inf: output 0. A NaN score makes
        // every exp(s - max), the sum and so the row NaN, as IEEE arithmetic does.
        if ((!any && !sink) || (!nan && m == ninf)) continue;
        if (nan) m = std::numeric_limits<double>::quiet_NaN();
        double sum = sink ? std::exp(z - m) : 0.0;
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
        std::fill(acc.begin(), acc.end(), 0.0);
        std::fill(mag.begin(), mag.end(), 0.0);
        for (int64_t j = 0; j < Skv; ++j) {
          // Keys not attended, and keys whose weight is exactly 0 (score -inf), add nothing,
          // whatever V holds there (docs/semantics.md).
          const double w = s[static_cast<size_t>(j)];
          if (!attend[static_cast<size_t>(j)] || w == 0.0) continue;
          const double* vj = &vh[static_cast<size_t>(j * Dv)];
          for (int64_t d = 0; d < Dv; ++d) acc[static_cast<size_t>(d)] += w * vj[d];
          // (Only where asked for: a third of the reference's arithmetic otherwise.)
          for (int64_t d = 0; p.magnitude && d < Dv; ++d) {
            mag[static_cast<size_t>(d)] += w * std::abs(vj[d]);
          }
        }
        for (int64_t d = 0; d < Dv; ++d) {
          const size_t o = static_cast<size_t>(((b * Sq + i) * Hq + h) * Dv + d);
          out[o] = acc[static_cast<size_t>(d)] / sum;
          if (p.magnitude) (*p.magnitude)[o] = mag[static_cast<size_t>(d)] / sum;
        }
      }
    }
  }
  return out;
}

std::vector<double> abs_of(std::vector<double> x) {
  for (double& e : x) e = std::abs(e);
  return x;
}

}  // namespace

std::vector<double> reference_attention(const View& q, const View& k, const View& v,
                                        const RefAttention& p) {
  const Sizes n{q.shape[0], q.shape[1], q.shape[2], q.shape[3], k.shape[1], k.shape[2], v.shape[3]};
  return attention(
      n,
      [&](int64_t b, int64_t i, int64_t h, int64_t d) {
        return q.at({b, i, h, d});
      },
      [&](int64_t b, int64_t j, int64_t h, int64_t d) {
        return k.at({b, j, h, d});
      },
      [&](int64_t b, int64_t j, int64_t h, int64_t d) {
        return v.at({b, j, h, d});
      },
      p);
}

bool reference_pattern_attends(const RefPattern& s, int64_t pos, int64_t i, int64_t j) {
  const attngen_pattern& p = s.p;
  const int64_t d = pos - j;
  switch (s.kind) {
    case ATTNGEN_PATTERN_NONE:
      return true;
    case ATTNGEN_PATTERN_WINDOW:
      return (p.window_left < 0 || j >= pos - p.window_left) &&
             (p.window_right < 0 || j <= pos + p.window_right);
    case ATTNGEN_PATTERN_STRIDED:
      return std::abs(d) < p.stride || d % p.stride == 0;
    case ATTNGEN_PATTERN_BLOCK_SPARSE: {
      const int64_t r = i / p.block, c = j / p.block;
      if (r >= s.rows || c >= s.cols) return false;
      return s.layout[static_cast<size_t>(r * s.cols + c)] != 0;
    }
    case ATTNGEN_PATTERN_GLOBAL_LOCAL:
      return std::abs(d) <= p.local || j < p.global_tokens || pos < p.global_tokens;
    default:
      return false;
  }
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
                                  const std::vector<int32_t>& kv_len, bool bottom_right,
                                  std::vector<double>* magnitude) {
  const int64_t rows = batch * seq, dh = embed / heads;
  // qkv [B, S, 3E]: q, k and v of head h are its columns h * dh .. of the first, second and
  // third E; the attention's output [B, S, H, dh] is the out-projection's input [B, S, E].
  const std::vector<double> qkv = reference_linear(x, rows, embed, in_w, 3 * embed, in_b);
  const auto part = [&](int64_t which) {
    return [&qkv, which, seq, embed, dh](int64_t b, int64_t i, int64_t h, int64_t d) {
      return qkv[static_cast<size_t>((b * seq + i) * 3 * embed + which * embed + h * dh + d)];
    };
  };
  RefAttention r;
  r.causal = causal;
  r.bottom_right = bottom_right;
  r.kv_len = kv_len;
  std::vector<double> attn_magnitude;
  if (magnitude) r.magnitude = &attn_magnitude;
  const std::vector<double> attn =
      attention(Sizes{batch, seq, heads, dh, seq, heads, dh}, part(0), part(1), part(2), r);
  if (magnitude) {
    *magnitude = reference_linear(attn_magnitude, rows, embed, abs_of(out_w), embed, abs_of(out_b));
  }
  return reference_linear(attn, rows, embed, out_w, embed, out_b);
}

std::vector<double> reference_decode(const std::vector<double>& q, int64_t batch, int64_t t,
                                     int64_t heads_q, const std::vector<std::vector<double>>& k,
                                     const std::vector<std::vector<double>>& v,
                                     const RefDecode& p) {
  const int64_t hkv = p.heads_kv, dqk = p.head_dim_qk, dv = p.head_dim_v;
  std::vector<double> out(static_cast<size_t>(batch * t * heads_q * dv), 0.0);
  if (p.magnitude) p.magnitude->assign(out.size(), 0.0);
  // Sequence by sequence: its rows aligned bottom-right over its positions, causal (every row
  // attends the positions up to its own), the window a pattern.
  RefAttention r;
  r.scale = p.scale;
  r.causal = true;
  r.bottom_right = true;
  if (p.window >= 0) {
    r.pattern = [w = p.window](int64_t pos, int64_t, int64_t j) { return j >= pos - w; };
  }
  // The modifiers, each call's sequence (its batch of 1) taken as sequence b of the batch.
  int64_t b = 0;
  if (p.score_mod) {
    r.score_mod = [&](double s, int64_t, int64_t h, int64_t pos, int64_t j) {
      return p.score_mod(s, b, h, pos, j);
    };
  }
  if (p.mask_mod) {
    r.mask_mod = [&](int64_t, int64_t h, int64_t pos, int64_t j) {
      return p.mask_mod(b, h, pos, j);
    };
  }
  r.sink_logit = p.sink_logit;
  std::vector<double> magnitude;
  if (p.magnitude) r.magnitude = &magnitude;
  for (; b < batch; ++b) {
    const std::vector<double>& kb = k[static_cast<size_t>(b)];
    const std::vector<double>& vb = v[static_cast<size_t>(b)];
    const int64_t rows = p.counts.empty() ? t : p.counts[static_cast<size_t>(b)];
    const int64_t positions = hkv * dqk > 0 ? static_cast<int64_t>(kb.size()) / (hkv * dqk) : 0;
    const std::vector<double> o = attention(
        Sizes{1, rows, heads_q, dqk, positions, hkv, dv},
        [&](int64_t, int64_t i, int64_t h, int64_t d) {
          return q[static_cast<size_t>(((b * t + i) * heads_q + h) * dqk + d)];
        },
        [&](int64_t, int64_t j, int64_t h, int64_t d) {
          return kb[static_cast<size_t>((j * hkv + h) * dqk + d)];
        },
        [&](int64_t, int64_t j, int64_t h, int64_t d) {
          return vb[static_cast<size_t>((j * hkv + h) * dv + d)];
        },
        r);
    const auto at = static_cast<std::ptrdiff_t>(b * t * heads_q * dv);
    std::copy(o.begin(), o.end(), out.begin() + at);
    if (p.magnitude) std::copy(magnitude.begin(), magnitude.end(), p.magnitude->begin() + at);
  }
  return out;
}

std::vector<double> reference_alibi_slopes(int64_t heads) {
  const auto powers = [](int64_t n) {  // the paper's get_slopes_power_of_2(n)
    const double start = std::pow(2.0, -std::pow(2.0, -(std::log2(static_cast<double>(n)) - 3)));
    std::vector<double> slopes;
    for (int64_t i = 0; i < n; ++i) slopes.push_back(start * std::pow(start, i));
    return slopes;
  };
  int64_t closest = 1;
  while (closest * 2 <= heads) closest *= 2;
  std::vector<double> slopes = powers(closest);
  const std::vector<double> twice = powers(2 * closest);
  for (int64_t k = 0; static_cast<int64_t>(slopes.size()) < heads; k += 2) {
    slopes.push_back(twice[static_cast<size_t>(k)]);
  }
  return slopes;
}

bool reference_document_attends(const int32_t* ids, int64_t n, int64_t p, int64_t j) {
  const int64_t query = p < 0 ? 0 : p >= n ? n - 1 : p;
  return ids[query] == ids[j];
}

bool reference_prefix_attends(int64_t length, int64_t p, int64_t j) { return j < length || j <= p; }

int64_t reference_t5_bucket(int64_t rel, bool bidirectional, int64_t num_buckets,
                            double max_distance) {
  int64_t per_side = num_buckets, bucket = 0, n = 0;
  if (bidirectional) {
    per_side /= 2;
    if (rel > 0) bucket = per_side;
    n = rel < 0 ? -rel : rel;
  } else {
    n = rel < 0 ? -rel : 0;
  }
  const int64_t exact = std::max<int64_t>(per_side / 2, 1);
  const int64_t reach = std::max<int64_t>(
      static_cast<int64_t>(std::floor(std::min(std::max(max_distance, 0.0), 1048576.0))),
      exact + 1);
  if (n < exact) return bucket + n;
  // The k-th logarithmic bucket starts at exact * (reach / exact)^(k / (per_side - exact)): in
  // long double, with a margin for the distances that are exact powers (an integer k).
  const long double k = std::floor(static_cast<long double>(per_side - exact) *
                                       std::log(static_cast<long double>(n) / exact) /
                                       std::log(static_cast<long double>(reach) / exact) +
                                   1e-12L);
  return bucket + std::min<int64_t>(exact + static_cast<int64_t>(k), per_side - 1);
}

bool reference_sinks_attends(float sinks, float window, int64_t p, int64_t j) {
  const double n = std::floor(static_cast<double>(sinks));
  const double w = std::floor(static_cast<double>(window));
  return static_cast<double>(j) < n || w < 0.0 || static_cast<double>(p - j) <= w;
}

double reference_alibi(double s, double slope, int64_t p, int64_t j, bool symmetric) {
  const double distance = static_cast<double>(j - p);
  return symmetric ? s - slope * std::fabs(distance) : s + slope * distance;
}

std::vector<double> reference_rope(const View& x, int64_t rotary_dim, bool interleaved,
                                   const std::vector<double>& inv_freq,
                                   const std::vector<int64_t>& positions) {
  const int64_t B = x.shape[0], S = x.shape[1], H = x.shape[2], D = x.shape[3];
  const int64_t half = rotary_dim / 2;
  std::vector<double> out(static_cast<size_t>(B * S * H * D));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t s = 0; s < S; ++s) {
      const double t = static_cast<double>(positions[static_cast<size_t>(b * S + s)]);
      for (int64_t h = 0; h < H; ++h) {
        double* row = &out[static_cast<size_t>(((b * S + s) * H + h) * D)];
        for (int64_t d = 0; d < D; ++d) row[d] = x.at({b, s, h, d});
        for (int64_t i = 0; i < half; ++i) {
          const double angle = t * inv_freq[static_cast<size_t>(i)];
          const int64_t lo = interleaved ? 2 * i : i, hi = interleaved ? 2 * i + 1 : i + half;
          const double a = row[lo], c = row[hi];
          row[lo] = a * std::cos(angle) - c * std::sin(angle);
          row[hi] = a * std::sin(angle) + c * std::cos(angle);
        }
      }
    }
  }
  return out;
}

}  // namespace attngen::test
