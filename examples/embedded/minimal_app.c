/* The smallest app attngen serves: one attention kernel, registered, called once.
 *
 * It links attngen_core (the runtime without the built-in kernel table), the one kernel it
 * registers and that kernel's Halide runtime, nothing else (examples/embedded/CMakeLists.txt).
 * It checks its result against a float64 reference and exits 1 if it is wrong, so the size
 * test (tests/size_budget.cmake) measures an app that really works. Built with
 * -DATTNGEN_EMBEDDED_BASELINE, the same app without attngen (inputs, reference, printing):
 * the size test subtracts it from the app to get what attngen costs. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#ifndef ATTNGEN_EMBEDDED_BASELINE
#include "attngen/attngen.h"
#include ATTNGEN_EMBEDDED_KERNEL_HEADER
#endif

enum { kSq = 5, kSkv = 9, kHeads = 2, kDim = 64 };

static float q[kSq][kHeads][kDim], k[kSkv][kHeads][kDim], v[kSkv][kHeads][kDim];
static float out[kSq][kHeads][kDim];

static uint64_t state;
static float uniform(void) { /* in [-1, 1) */
  state = state * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((double)(state >> 11) / 4503599627370496.0 - 1.0);
}

/* The largest |out - reference| over every element, relative to max |v|; NaN if one is. */
static double max_error(void) {
  double worst = 0.0, vmax = 0.0;
  for (int j = 0; j < kSkv; ++j)
    for (int h = 0; h < kHeads; ++h)
      for (int d = 0; d < kDim; ++d)
        if (fabs(v[j][h][d]) > vmax) vmax = fabs(v[j][h][d]);
  for (int h = 0; h < kHeads; ++h) {
    for (int i = 0; i < kSq; ++i) {
      double s[kSkv], m = -INFINITY, sum = 0.0;
      for (int j = 0; j < kSkv; ++j) {
        s[j] = 0.0;
        for (int d = 0; d < kDim; ++d) s[j] += (double)q[i][h][d] * k[j][h][d];
        s[j] /= sqrt((double)kDim);
        if (s[j] > m) m = s[j];
      }
      for (int j = 0; j < kSkv; ++j) sum += (s[j] = exp(s[j] - m));
      for (int d = 0; d < kDim; ++d) {
        double o = 0.0;
        for (int j = 0; j < kSkv; ++j) o += s[j] / sum * v[j][h][d];
        const double e = fabs(out[i][h][d] - o) / vmax;
        if (!(e <= worst)) worst = e; /* NaN (an unwritten element) wins */
      }
    }
  }
  return worst;
}

int main(int argc, char** argv) {
  state = argc > 1 ? strtoull(argv[1], NULL, 10) : (uint64_t)time(NULL);
  float* all[] = {&q[0][0][0], &k[0][0][0], &v[0][0][0]};
  const int count[] = {kSq * kHeads * kDim, kSkv * kHeads * kDim, kSkv * kHeads * kDim};
  for (int t = 0; t < 3; ++t)
    for (int e = 0; e < count[t]; ++e) all[t][e] = uniform();
  for (int e = 0; e < kSq * kHeads * kDim; ++e) (&out[0][0][0])[e] = NAN;

#ifndef ATTNGEN_EMBEDDED_BASELINE
  const int64_t qs[] = {1, kSq, kHeads, kDim}, ks[] = {1, kSkv, kHeads, kDim};
  attngen_tensor tq = attngen_tensor_contiguous(q, ATTNGEN_F32, 4, qs);
  attngen_tensor tk = attngen_tensor_contiguous(k, ATTNGEN_F32, 4, ks);
  attngen_tensor tv = attngen_tensor_contiguous(v, ATTNGEN_F32, 4, ks);
  attngen_tensor to = attngen_tensor_contiguous(out, ATTNGEN_F32, 4, qs);
  attngen_status st = ATTNGEN_EMBEDDED_REGISTER();
  if (st == ATTNGEN_OK) st = attngen_attention(&tq, &tk, &tv, &to, NULL);
  if (st != ATTNGEN_OK) {
    fprintf(stderr, "%s: %s\n", attngen_status_name(st), attngen_last_error());
    return st == ATTNGEN_ERROR_UNSUPPORTED_TARGET ? 77 : 1; /* 77: ctest's skip */
  }
  printf("ran %s\n", attngen_last_kernel());
#else
  for (int e = 0; e < kSq * kHeads * kDim; ++e) (&out[0][0][0])[e] = (&q[0][0][0])[e];
#endif
  const double error = max_error();
  printf("max |out - reference| / max|v| = %.3g (seed %llu)\n", error,
         (unsigned long long)(argc > 1 ? strtoull(argv[1], NULL, 10) : 0));
#ifndef ATTNGEN_EMBEDDED_BASELINE
  return error <= 1e-5 ? 0 : 1;
#else
  return 0;
#endif
}
