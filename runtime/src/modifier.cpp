// The library modifiers' host helpers (attngen.h, "Modifiers"): the standard ALiBi slopes.
#include <cmath>

#include "runtime/src/internal.h"

using namespace attngen::rt;

extern "C" {

attngen_status attngen_alibi_slopes(int64_t heads, float* slopes) {
  Check c;
  if (slopes == nullptr) {
    c.fail(ATTNGEN_ERROR_NULL_POINTER, "slopes is NULL");
  } else if (heads < 1 || heads > (int64_t{1} << 30)) {
    c.fail(ATTNGEN_ERROR_INVALID_ARGUMENT,
           "heads is " + std::to_string(heads) + ", expected 1 to 2^30");
  } else {
    // n slopes 2^(-8 i / n), i = 1 .. n, for the largest power of two n <= heads; the rest every
    // other slope of 2n heads: 2^(-8 (2k + 1) / 2n), k = 0, 1, ...
    int64_t n = 1;
    while (n * 2 <= heads) n *= 2;
    for (int64_t h = 0; h < heads; ++h) {
      const double exponent =
          h < n ? -8.0 * static_cast<double>(h + 1) / static_cast<double>(n)
                : -8.0 * static_cast<double>(2 * (h - n) + 1) / static_cast<double>(2 * n);
      slopes[h] = static_cast<float>(std::exp2(exponent));
    }
  }
  return finish(c, nullptr);
}

}  // extern "C"
