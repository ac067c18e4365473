// A fixture for tests of one attention call's validation (tests/validation_test.cpp,
// tests/hardening_test.cpp): a valid call of fresh random inputs, to be broken one argument at a
// time, and the check that a broken call fails cleanly.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "attngen/attngen.h"
#include "tests/tensor.h"

namespace attngen::test {

class AttentionCall : public ::testing::Test {
 protected:
  void SetUp() override {
    std::mt19937_64 rng(fresh_seed());
    q.init({2, 5, 4, 64}, 0);
    k.init({2, 7, 2, 64}, 0);
    v.init({2, 7, 2, 64}, 0);
    out.init({2, 5, 4, 64}, 0);
    q.fill_random(rng, -1, 1);
    k.fill_random(rng, -1, 1);
    v.fill_random(rng, -1, 1);
    opt = attngen_attention_options_default();
  }

  attngen_status call() { return attngen_attention(&q.t, &k.t, &v.t, &out.t, &opt); }

  // The call fails with `status`, its message mentions `needle`, and out still holds its poison,
  // byte for byte.
  void expect_error(attngen_status status, const std::string& needle) {
    const std::vector<float> before = out.buf;
    const attngen_status got = call();
    EXPECT_EQ(got, status) << attngen_status_name(got) << ": " << attngen_last_error();
    EXPECT_NE(std::string(attngen_last_error()).find(needle), std::string::npos)
        << "message '" << attngen_last_error() << "' does not mention '" << needle << "'";
    EXPECT_EQ(std::memcmp(before.data(), out.buf.data(), before.size() * sizeof(float)), 0)
        << "output written on error";
  }

  Storage q, k, v, out;
  attngen_attention_options opt;
};

}  // namespace attngen::test
