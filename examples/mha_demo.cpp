// attngen demo: a causal multi-head self-attention layer (PyTorch nn.MultiheadAttention
// weights, per call and as a persistent layer) and a grouped-query attention call, run through
// the C API and checked against the float64 reference. Exits non-zero if any is off.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "attngen/attngen.h"
#include "tests/reference.h"

namespace {

std::vector<float> random_vector(std::mt19937_64& rng, size_t n, float a) {
  std::uniform_real_distribution<float> d(-a, a);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Relative L2 and max abs error of got against want.
void errors(const std::vector<float>& got, const std::vector<double>& want, double& rel,
            double& max_abs) {
  double e2 = 0, r2 = 0;
  max_abs = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double e = got[i] - want[i];
    e2 += e * e;
    r2 += want[i] * want[i];
    max_abs = std::max(max_abs, std::abs(e));
  }
  rel = std::sqrt(e2 / r2);
}

template <typename F>
double best_ms(F f, int reps) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    const auto t1 = std::chrono::steady_clock::now();
    best = std::min(best, std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  return best;
}

bool report(const char* what, const std::vector<float>& got, const std::vector<double>& want,
            double ms) {
  double rel, max_abs;
  errors(got, want, rel, max_abs);
  const bool ok = rel <= 1e-5 && std::isfinite(rel);
  std::printf("  %-34s %8.3f ms   rel L2 %.2e   max abs %.2e   %s\n", what, ms, rel, max_abs,
              ok ? "OK" : "MISMATCH");
  return ok;
}

}  // namespace

int main() {
  std::mt19937_64 rng(std::random_device{}());
  bool ok = true;

  // 1. nn.MultiheadAttention(embed_dim=256, num_heads=4, batch_first=True), causal.
  const int64_t B = 2, S = 128, E = 256, H = 4;
  const float a = 1.0f / std::sqrt(static_cast<float>(E));
  std::vector<float> x = random_vector(rng, B * S * E, 1.0f);
  std::vector<float> in_w = random_vector(rng, 3 * E * E, a), in_b = random_vector(rng, 3 * E, a);
  std::vector<float> out_w = random_vector(rng, E * E, a), out_b = random_vector(rng, E, a);
  std::vector<float> y(B * S * E);
  const int64_t xs[] = {B, S, E}, iws[] = {3 * E, E}, ibs[] = {3 * E}, ows[] = {E, E}, obs[] = {E};
  attngen_tensor tx = attngen_tensor_contiguous(x.data(), ATTNGEN_F32, 3, xs);
  attngen_tensor ty = attngen_tensor_contiguous(y.data(), ATTNGEN_F32, 3, xs);
  attngen_tensor tiw = attngen_tensor_contiguous(in_w.data(), ATTNGEN_F32, 2, iws);
  attngen_tensor tib = attngen_tensor_contiguous(in_b.data(), ATTNGEN_F32, 1, ibs);
  attngen_tensor tow = attngen_tensor_contiguous(out_w.data(), ATTNGEN_F32, 2, ows);
  attngen_tensor tob = attngen_tensor_contiguous(out_b.data(), ATTNGEN_F32, 1, obs);
  attngen_mha_weights weights{&tiw, &tib, &tow, &tob};
  attngen_mha_options mha = attngen_mha_options_default();
  mha.num_heads = H;
  mha.mask = ATTNGEN_MASK_CAUSAL;

  attngen_status st = ATTNGEN_OK;
  const double mha_ms = best_ms([&] { st = attngen_mha(&tx, &weights, &ty, &mha); }, 5);
  if (st != ATTNGEN_OK) {
    std::printf("attngen_mha: %s: %s\n", attngen_status_name(st), attngen_last_error());
    return 1;
  }
  std::printf("attngen demo\n");
  std::printf("  MHA layer B%lld S%lld E%lld H%lld causal, kernel %s\n", (long long)B, (long long)S,
              (long long)E, (long long)H, attngen_last_kernel());
  const std::vector<double> dx(x.begin(), x.end()), diw(in_w.begin(), in_w.end()),
      dib(in_b.begin(), in_b.end()), dow(out_w.begin(), out_w.end()),
      dob(out_b.begin(), out_b.end());
  const std::vector<double> want =
      attngen::test::reference_mha(dx, B, S, E, H, diw, dib, dow, dob, true, {});
  ok &= report("MHA vs float64 reference", y, want, mha_ms);

  // The same layer made once (its weights packed once), then called: attngen_mha()'s output.
  attngen_mha_layer* layer = nullptr;
  st = attngen_mha_layer_create(&weights, H, &layer);
  if (st != ATTNGEN_OK) {
    std::printf("attngen_mha_layer_create: %s: %s\n", attngen_status_name(st),
                attngen_last_error());
    return 1;
  }
  std::vector<float> y_layer(y.size());
  attngen_tensor ty_layer = attngen_tensor_contiguous(y_layer.data(), ATTNGEN_F32, 3, xs);
  const double layer_ms =
      best_ms([&] { st = attngen_mha_layer_forward(layer, &tx, &ty_layer, &mha); }, 5);
  attngen_mha_layer_destroy(layer);
  if (st != ATTNGEN_OK) {
    std::printf("attngen_mha_layer_forward: %s: %s\n", attngen_status_name(st),
                attngen_last_error());
    return 1;
  }
  ok &= report("persistent MHA layer vs reference", y_layer, want, layer_ms);
  const bool same = y_layer == y;
  std::printf("  persistent layer == attngen_mha(): %s\n", same ? "bitwise" : "DIFFERS");
  ok &= same;

  // 2. Grouped-query attention: 8 query heads over 2 kv heads, head dim 64, Sq != Skv.
  const int64_t Sq = 96, Skv = 160, Hq = 8, Hkv = 2, D = 64;
  std::vector<float> q = random_vector(rng, B * Sq * Hq * D, 1.0f);
  std::vector<float> k = random_vector(rng, B * Skv * Hkv * D, 1.0f);
  std::vector<float> v = random_vector(rng, B * Skv * Hkv * D, 1.0f);
  std::vector<float> o(B * Sq * Hq * D);
  const int64_t qs[] = {B, Sq, Hq, D}, ks[] = {B, Skv, Hkv, D};
  attngen_tensor tq = attngen_tensor_contiguous(q.data(), ATTNGEN_F32, 4, qs);
  attngen_tensor tk = attngen_tensor_contiguous(k.data(), ATTNGEN_F32, 4, ks);
  attngen_tensor tv = attngen_tensor_contiguous(v.data(), ATTNGEN_F32, 4, ks);
  attngen_tensor to = attngen_tensor_contiguous(o.data(), ATTNGEN_F32, 4, qs);
  attngen_attention_options opt = attngen_attention_options_default();
  opt.mask = ATTNGEN_MASK_CAUSAL;
  const double attn_ms = best_ms([&] { st = attngen_attention(&tq, &tk, &tv, &to, &opt); }, 5);
  if (st != ATTNGEN_OK) {
    std::printf("attngen_attention: %s: %s\n", attngen_status_name(st), attngen_last_error());
    return 1;
  }
  std::printf("  GQA attention B%lld Sq%lld Skv%lld H%lld/%lld D%lld causal, kernel %s\n",
              (long long)B, (long long)Sq, (long long)Skv, (long long)Hq, (long long)Hkv,
              (long long)D, attngen_last_kernel());
  attngen::test::RefAttention ref;
  ref.causal = true;
  const attngen::test::View vq{q.data(), {B, Sq, Hq, D}, {Sq * Hq * D, Hq * D, D, 1}};
  const attngen::test::View vk{k.data(), {B, Skv, Hkv, D}, {Skv * Hkv * D, Hkv * D, D, 1}};
  const attngen::test::View vv{v.data(), {B, Skv, Hkv, D}, {Skv * Hkv * D, Hkv * D, D, 1}};
  ok &= report("attention vs float64 reference", o,
               attngen::test::reference_attention(vq, vk, vv, ref), attn_ms);

  // 3. Bad input is a status and a message, never a crash.
  tk.shape[3] = 32;
  st = attngen_attention(&tq, &tk, &tv, &to, &opt);
  std::printf("  bad input -> %s: %s\n", attngen_status_name(st), attngen_last_error());
  ok &= st == ATTNGEN_ERROR_SHAPE;

  std::printf("%s\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}
