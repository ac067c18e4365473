// Calls this project's kernels of its own modifier, "decay" (decay.cpp), through the attngen
// runtime: each call on fresh random inputs, its output first filled with NaN, must run the
// kernel expected and match a float64 computation of the modifier within attngen's F32 bound
// (relative L2 1e-5, max abs 1e-5 max|V| + 1e-6); parameters that do not match the modifier's
// layout must be named errors that write nothing. Exits non-zero on any failure.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "attngen/attngen.h"
#include "decay_d64_causal.attngen.h"
#include "decay_generic.attngen.h"

namespace {

struct Case {
  const char* kernel;  // the kernel dispatch must choose
  int64_t B, Sq, Skv, Hq, Hkv, D;
  bool causal;
  float horizon;  // < 0: no horizon
};

// Fresh inputs each run; the seed is printed, so that a failing run can be repeated
// (CUSTOM_MODIFIER_SEED).
uint32_t seed() {
  const char* given = std::getenv("CUSTOM_MODIFIER_SEED");
  return given != nullptr ? static_cast<uint32_t>(std::strtoul(given, nullptr, 10))
                          : std::random_device{}();
}
const uint32_t kSeed = seed();
std::mt19937 rng(kSeed);

std::vector<float> random_values(size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> x(n);
  for (float& e : x) e = u(rng);
  return x;
}

// softmax_j(s - m_h log(1 + |p - j|)) V over the keys the masks leave, in float64 (BSHD; the
// bottom-right alignment: p = Skv - Sq + i).
std::vector<double> reference(const Case& c, const std::vector<float>& q,
                              const std::vector<float>& k, const std::vector<float>& v,
                              const std::vector<float>& slopes) {
  std::vector<double> out(c.B * c.Sq * c.Hq * c.D, 0.0);
  const int64_t group = c.Hq / c.Hkv;
  for (int64_t b = 0; b < c.B; ++b) {
    for (int64_t h = 0; h < c.Hq; ++h) {
      const int64_t g = h / group;
      for (int64_t i = 0; i < c.Sq; ++i) {
        const int64_t p = c.Skv - c.Sq + i;
        std::vector<double> s(c.Skv, -INFINITY);
        double m = -INFINITY;
        for (int64_t j = 0; j < c.Skv; ++j) {
          const double distance = std::abs(double(p - j));
          if ((c.causal && j > p) || (c.horizon >= 0 && distance > c.horizon)) continue;
          double dot = 0;
          for (int64_t d = 0; d < c.D; ++d) {
            dot += double(q[((b * c.Sq + i) * c.Hq + h) * c.D + d]) *
                   k[((b * c.Skv + j) * c.Hkv + g) * c.D + d];
          }
          s[j] = dot / std::sqrt(double(c.D)) - slopes[h] * std::log1p(distance);
          m = std::max(m, s[j]);
        }
        double sum = 0;
        for (double& x : s) sum += (x = std::exp(x - m));
        for (int64_t d = 0; d < c.D; ++d) {
          double acc = 0;
          for (int64_t j = 0; j < c.Skv; ++j)
            acc += s[j] * v[((b * c.Skv + j) * c.Hkv + g) * c.D + d];
          out[((b * c.Sq + i) * c.Hq + h) * c.D + d] = acc / sum;
        }
      }
    }
  }
  return out;
}

struct Call {
  std::vector<float> q, k, v, o, slopes;
  attngen_tensor tq, tk, tv, to, tslopes;
  attngen_modifier modifier;
  attngen_attention_options options;

  explicit Call(const Case& c)
      : q(random_values(c.B * c.Sq * c.Hq * c.D, -2, 2)),
        k(random_values(c.B * c.Skv * c.Hkv * c.D, -2, 2)),
        v(random_values(c.B * c.Skv * c.Hkv * c.D, -1, 1)),
        o(c.B * c.Sq * c.Hq * c.D, NAN),
        slopes(random_values(c.Hq, 0.05f, 1.0f)) {
    const int64_t q_shape[] = {c.B, c.Sq, c.Hq, c.D};
    const int64_t kv_shape[] = {c.B, c.Skv, c.Hkv, c.D};
    const int64_t slopes_shape[] = {c.Hq};
    tq = attngen_tensor_contiguous(q.data(), ATTNGEN_F32, 4, q_shape);
    tk = attngen_tensor_contiguous(k.data(), ATTNGEN_F32, 4, kv_shape);
    tv = attngen_tensor_contiguous(v.data(), ATTNGEN_F32, 4, kv_shape);
    to = attngen_tensor_contiguous(o.data(), ATTNGEN_F32, 4, q_shape);
    tslopes = attngen_tensor_contiguous(slopes.data(), ATTNGEN_F32, 1, slopes_shape);
    modifier = attngen_modifier{};
    modifier.name = "decay";
    modifier.tensors[0] = &tslopes;
    modifier.scalars[0] = c.horizon;
    options = attngen_attention_options_default();
    options.mask = c.causal ? ATTNGEN_MASK_CAUSAL : ATTNGEN_MASK_NONE;
    options.modifier = &modifier;
  }
  attngen_status run() { return attngen_attention(&tq, &tk, &tv, &to, &options); }
  bool untouched() const {
    return std::all_of(o.begin(), o.end(), [](float x) { return std::isnan(x); });
  }
};

bool check(const Case& c) {
  Call call(c);
  const attngen_status st = call.run();
  if (st != ATTNGEN_OK) {
    std::printf("%s: %s\n", attngen_status_name(st), attngen_last_error());
    return false;
  }
  if (std::strcmp(attngen_last_kernel(), c.kernel) != 0) {
    std::printf("dispatch ran %s, not %s\n", attngen_last_kernel(), c.kernel);
    return false;
  }
  const std::vector<double> want = reference(c, call.q, call.k, call.v, call.slopes);
  double err2 = 0, want2 = 0, max_err = 0, max_v = 0;
  for (float x : call.v) max_v = std::max(max_v, double(std::abs(x)));
  for (size_t e = 0; e < want.size(); ++e) {
    const double err = std::abs(double(call.o[e]) - want[e]);
    max_err = std::isnan(err) ? INFINITY : std::max(max_err, err);
    err2 += err * err;
    want2 += want[e] * want[e];
  }
  const double rel_l2 = std::sqrt(err2 / want2);
  const bool ok = max_err <= 1e-5 * max_v + 1e-6 && rel_l2 <= 1e-5;
  std::printf(
      "custom_modifier: %s B%lld Sq%lld Skv%lld Hq%lld Hkv%lld D%lld%s horizon %g: "
      "max abs error %.2e, relative L2 %.2e%s\n",
      c.kernel, (long long)c.B, (long long)c.Sq, (long long)c.Skv, (long long)c.Hq,
      (long long)c.Hkv, (long long)c.D, c.causal ? " causal" : "", c.horizon, max_err, rel_l2,
      ok ? "" : "  FAILED");
  return ok;
}

// A call whose parameters do not match decay's layout: `want`, and nothing written.
bool check_refused(const char* what, attngen_status want, void (*spoil)(Call&)) {
  const Case c{"", 1, 8, 8, 2, 2, 64, true, 4.0f};
  Call call(c);
  spoil(call);
  const attngen_status st = call.run();
  const bool written = !call.untouched();
  const bool ok = st == want && !written;
  std::printf("custom_modifier: %s: %s (%s)%s%s\n", what, attngen_status_name(st),
              attngen_last_error(), st == want ? "" : "  FAILED: not the status expected",
              written ? "  FAILED: the output was written" : "");
  return ok;
}

}  // namespace

int main() {
  std::printf("custom_modifier: seed %u (CUSTOM_MODIFIER_SEED)\n", kSeed);
  if (attngen_register_decay_d64_causal() != ATTNGEN_OK ||
      attngen_register_decay_generic() != ATTNGEN_OK) {
    std::printf("register: %s\n", attngen_last_error());
    return 1;
  }
  const char* specialised = attngen_kernel_decay_d64_causal.name;
  const char* generic = attngen_kernel_decay_generic.name;
  bool ok = true;
  // Rows past whole tiles and key blocks, grouped-query heads, horizons inside and beyond the keys.
  ok &= check({specialised, 2, 70, 70, 4, 2, 64, true, 24.0f});
  ok &= check({specialised, 1, 9, 300, 4, 1, 64, true, 37.5f});
  ok &= check({specialised, 1, 33, 33, 2, 2, 64, true, -1.0f});
  // What the specialised kernel does not take: another head dim, no causal mask.
  ok &= check({generic, 2, 19, 53, 4, 2, 80, false, -1.0f});
  ok &= check({generic, 1, 40, 200, 2, 1, 64, false, 10.0f});
  ok &= check({generic, 1, 17, 17, 3, 3, 128, true, 5.0f});
  ok &= check_refused("slopes of Hq + 1", ATTNGEN_ERROR_SHAPE,
                      [](Call& call) { call.tslopes.shape[0] += 1; });
  ok &= check_refused("slopes missing", ATTNGEN_ERROR_NULL_POINTER,
                      [](Call& call) { call.modifier.tensors[0] = nullptr; });
  ok &= check_refused("slopes of I32", ATTNGEN_ERROR_DTYPE,
                      [](Call& call) { call.tslopes.dtype = ATTNGEN_I32; });
  return ok ? 0 : 1;
}
