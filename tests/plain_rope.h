// A rope for tests: plain RoPE's inverse frequencies of a base (attngen_rope_inv_freq()) over
// `rotary_dim` dims, their tensor, and the attngen_rope describing them (rotate-half pairs).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "attngen/attngen.h"

namespace attngen::test {

struct PlainRope {
  std::vector<float> freq;
  int64_t half;
  attngen_tensor freq_t{};
  attngen_rope rope = attngen_rope_default();

  explicit PlainRope(int64_t rotary_dim, double base = 10000.0)
      : freq(static_cast<size_t>(rotary_dim / 2)), half(rotary_dim / 2) {
    EXPECT_EQ(attngen_rope_inv_freq(base, rotary_dim, freq.data()), ATTNGEN_OK)
        << attngen_last_error();
    freq_t = attngen_tensor_contiguous(freq.data(), ATTNGEN_F32, 1, &half);
    rope.inv_freq = &freq_t;
  }
  PlainRope(const PlainRope&) = delete;
  PlainRope& operator=(const PlainRope&) = delete;
};

}  // namespace attngen::test
