// Links only the installed attngen::attngen: attention on random inputs through the built-in
// kernels, checked against a direct float64 computation. Exits non-zero on any mismatch.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "attngen/attngen.h"
#include "attngen/kernel.h"

namespace {

struct Shape {
  int64_t batch, seq_q, seq_kv, heads_q, heads_kv, head_dim;
};

// O = softmax(Q K^T / sqrt(D)) V per batch and head, BSHD; causal is bottom-right aligned
// (query i sees keys j <= i + Skv - Sq), attngen's default.
std::vector<double> reference(const Shape& s, bool causal, const std::vector<float>& q,
                              const std::vector<float>& k, const std::vector<float>& v) {
  const int64_t D = s.head_dim, group = s.heads_q / s.heads_kv;
  std::vector<double> out(s.batch * s.seq_q * s.heads_q * D);
  std::vector<double> p(s.seq_kv);
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t h = 0; h < s.heads_q; ++h) {
      const int64_t hk = h / group;
      for (int64_t i = 0; i < s.seq_q; ++i) {
        const int64_t keys = causal ? i + s.seq_kv - s.seq_q + 1 : s.seq_kv;
        const float* qi = &q[((b * s.seq_q + i) * s.heads_q + h) * D];
        double m = -INFINITY, sum = 0;
        for (int64_t j = 0; j < keys; ++j) {
          const float* kj = &k[((b * s.seq_kv + j) * s.heads_kv + hk) * D];
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += double(qi[d]) * kj[d];
          p[j] = dot / std::sqrt(double(D));
          m = std::max(m, p[j]);
        }
        for (int64_t j = 0; j < keys; ++j) sum += (p[j] = std::exp(p[j] - m));
        double* oi = &out[((b * s.seq_q + i) * s.heads_q + h) * D];
        for (int64_t j = 0; j < keys; ++j) {
          const float* vj = &v[((b * s.seq_kv + j) * s.heads_kv + hk) * D];
          for (int64_t d = 0; d < D; ++d) oi[d] += p[j] / sum * vj[d];
        }
      }
    }
  }
  return out;
}

// Runs one call and compares it with the reference; true when it matches.
bool check(const Shape& s, bool causal, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1, 1);
  const int64_t D = s.head_dim;
  std::vector<float> q(s.batch * s.seq_q * s.heads_q * D), k(s.batch * s.seq_kv * s.heads_kv * D),
      v(k.size()), o(q.size(), NAN);
  for (auto* t : {&q, &k, &v}) {
    for (float& x : *t) x = u(rng);
  }
  const int64_t qs[] = {s.batch, s.seq_q, s.heads_q, D}, ks[] = {s.batch, s.seq_kv, s.heads_kv, D};
  attngen_tensor tq = attngen_tensor_contiguous(q.data(), ATTNGEN_F32, 4, qs);
  attngen_tensor tk = attngen_tensor_contiguous(k.data(), ATTNGEN_F32, 4, ks);
  attngen_tensor tv = attngen_tensor_contiguous(v.data(), ATTNGEN_F32, 4, ks);
  attngen_tensor to = attngen_tensor_contiguous(o.data(), ATTNGEN_F32, 4, qs);
  attngen_attention_options opt = attngen_attention_options_default();
  opt.mask = causal ? ATTNGEN_MASK_CAUSAL : ATTNGEN_MASK_NONE;
  const attngen_status st = attngen_attention(&tq, &tk, &tv, &to, &opt);
  if (st != ATTNGEN_OK) {
    std::printf("attngen_attention: %s: %s\n", attngen_status_name(st), attngen_last_error());
    return false;
  }
  // The call must have run one of the package's built-in kernels.
  const char* kernel = attngen_last_kernel();
  if (kernel == nullptr || attngen_find_kernel(kernel) == nullptr) {
    std::printf("ran '%s', not a built-in kernel\n", kernel ? kernel : "(null)");
    return false;
  }
  const std::vector<double> want = reference(s, causal, q, k, v);
  double max_err = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double err = std::abs(want[i] - o[i]);
    max_err = std::isnan(err) ? INFINITY : std::max(max_err, err);
  }
  const bool ok = max_err < 1e-5;
  std::printf(
      "consumer_prebuilt: %s, B%lld Sq%lld Skv%lld Hq%lld Hkv%lld D%lld: kernel %s, "
      "max abs error %.2e%s\n",
      causal ? "causal" : "dense", (long long)s.batch, (long long)s.seq_q, (long long)s.seq_kv,
      (long long)s.heads_q, (long long)s.heads_kv, (long long)D, kernel, max_err,
      ok ? "" : " (FAIL)");
  return ok;
}

}  // namespace

int main() {
  std::mt19937 rng(2024);
  bool ok = true;
  // Odd lengths, grouped-query heads, a head dim of the built-in variants.
  for (const Shape& s : {Shape{2, 37, 53, 4, 2, 64}, Shape{1, 1, 29, 3, 1, 64}}) {
    for (bool causal : {false, true}) ok = check(s, causal, rng) && ok;
  }
  return ok ? 0 : 1;
}
