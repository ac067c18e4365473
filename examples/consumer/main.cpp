// Uses a kernel this project generated itself (head dim 96, which attngen does not ship).
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "attngen/attngen.h"
#include "attngen/kernel.h"

extern "C" const attngen_kernel_info attngen_kernel_my_attn_d96_causal;

int main() {
  if (attngen_register_kernel(&attngen_kernel_my_attn_d96_causal) != ATTNGEN_OK) {
    std::printf("register: %s\n", attngen_last_error());
    return 1;
  }
  const int64_t S = 33, H = 2, D = 96;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> q(S * H * D), k(S * H * D), v(S * H * D), o(S * H * D);
  for (auto* t : {&q, &k, &v}) {
    for (float& x : *t) x = u(rng);
  }
  const int64_t shape[] = {1, S, H, D};
  attngen_tensor tq = attngen_tensor_contiguous(q.data(), ATTNGEN_F32, 4, shape);
  attngen_tensor tk = attngen_tensor_contiguous(k.data(), ATTNGEN_F32, 4, shape);
  attngen_tensor tv = attngen_tensor_contiguous(v.data(), ATTNGEN_F32, 4, shape);
  attngen_tensor to = attngen_tensor_contiguous(o.data(), ATTNGEN_F32, 4, shape);
  attngen_attention_options opt = attngen_attention_options_default();
  opt.mask = ATTNGEN_MASK_CAUSAL;
  const attngen_status st = attngen_attention(&tq, &tk, &tv, &to, &opt);
  if (st != ATTNGEN_OK) {
    std::printf("%s: %s\n", attngen_status_name(st), attngen_last_error());
    return 1;
  }
  // Spot check one head against a direct float64 computation.
  double max_err = 0;
  const int64_t h = 1;
  for (int64_t i = 0; i < S; ++i) {
    std::vector<double> p(i + 1);
    double m = -1e300, sum = 0;
    for (int64_t j = 0; j <= i; ++j) {
      double dot = 0;
      for (int64_t d = 0; d < D; ++d)
        dot += double(q[(i * H + h) * D + d]) * k[(j * H + h) * D + d];
      p[j] = dot / std::sqrt(double(D));
      m = std::max(m, p[j]);
    }
    for (double& x : p) sum += (x = std::exp(x - m));
    for (int64_t d = 0; d < D; ++d) {
      double acc = 0;
      for (int64_t j = 0; j <= i; ++j) acc += p[j] * v[(j * H + h) * D + d];
      max_err = std::max(max_err, std::abs(acc / sum - o[(i * H + h) * D + d]));
    }
  }
  std::printf("consumer: kernel %s, max abs error %.2e\n", attngen_last_kernel(), max_err);
  return max_err < 1e-5 ? 0 : 1;
}
