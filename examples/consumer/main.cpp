// Uses kernels this project generated itself (head dim 96, which attngen does not ship): one
// registered here, one registered at start-up (AUTO_REGISTER). Each is checked against a direct
// float64 computation; exits non-zero on any mismatch.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "attngen/attngen.h"
#include "my_attn_d96_causal.attngen.h"
#include "my_attn_d96_none.attngen.h"

namespace {

// One call on [1, S, H, D] random inputs, which must run `kernel`; true when every output
// matches softmax(Q K^T / sqrt(D)) V.
bool check(const char* kernel, bool causal) {
  const int64_t S = 33, H = 2, D = 96;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> q(S * H * D), k(S * H * D), v(S * H * D), o(S * H * D, NAN);
  for (auto* t : {&q, &k, &v}) {
    for (float& x : *t) x = u(rng);
  }
  const int64_t shape[] = {1, S, H, D};
  attngen_tensor tq = attngen_tensor_contiguous(q.data(), ATTNGEN_F32, 4, shape);
  attngen_tensor tk = attngen_tensor_contiguous(k.data(), ATTNGEN_F32, 4, shape);
  attngen_tensor tv = attngen_tensor_contiguous(v.data(), ATTNGEN_F32, 4, shape);
  attngen_tensor to = attngen_tensor_contiguous(o.data(), ATTNGEN_F32, 4, shape);
  attngen_attention_options opt = attngen_attention_options_default();
  opt.mask = causal ? ATTNGEN_MASK_CAUSAL : ATTNGEN_MASK_NONE;
  const attngen_status st = attngen_attention(&tq, &tk, &tv, &to, &opt);
  if (st != ATTNGEN_OK) {
    std::printf("%s: %s\n", attngen_status_name(st), attngen_last_error());
    return false;
  }
  if (std::strcmp(attngen_last_kernel(), kernel) != 0) {
    std::printf("dispatch ran %s, not %s\n", attngen_last_kernel(), kernel);
    return false;
  }
  double max_err = 0;
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t i = 0; i < S; ++i) {
      const int64_t keys = causal ? i + 1 : S;
      std::vector<double> p(keys);
      double m = -1e300, sum = 0;
      for (int64_t j = 0; j < keys; ++j) {
        double dot = 0;
        for (int64_t d = 0; d < D; ++d)
          dot += double(q[(i * H + h) * D + d]) * k[(j * H + h) * D + d];
        p[j] = dot / std::sqrt(double(D));
        m = std::max(m, p[j]);
      }
      for (double& x : p) sum += (x = std::exp(x - m));
      for (int64_t d = 0; d < D; ++d) {
        double acc = 0;
        for (int64_t j = 0; j < keys; ++j) acc += p[j] * v[(j * H + h) * D + d];
        const double err = std::abs(acc / sum - o[(i * H + h) * D + d]);
        max_err = std::isnan(err) ? INFINITY : std::max(max_err, err);
      }
    }
  }
  std::printf("consumer: kernel %s, max abs error %.2e\n", kernel, max_err);
  return max_err < 1e-5;
}

}  // namespace

int main() {
  // AUTO_REGISTER: registered before main() ran.
  if (attngen_find_kernel(attngen_kernel_my_attn_d96_none.name) !=
      &attngen_kernel_my_attn_d96_none) {
    std::printf("my_attn_d96_none was not registered at start-up\n");
    return 1;
  }
  if (attngen_register_my_attn_d96_causal() != ATTNGEN_OK) {
    std::printf("register: %s\n", attngen_last_error());
    return 1;
  }
  // Registering again is a no-op (so is it for an AUTO_REGISTER kernel).
  if (attngen_register_my_attn_d96_causal() != ATTNGEN_OK ||
      attngen_register_my_attn_d96_none() != ATTNGEN_OK) {
    std::printf("registering again: %s\n", attngen_last_error());
    return 1;
  }
  const bool causal_ok = check(attngen_kernel_my_attn_d96_causal.name, true);
  const bool none_ok = check(attngen_kernel_my_attn_d96_none.name, false);
  return causal_ok && none_ok ? 0 : 1;
}
