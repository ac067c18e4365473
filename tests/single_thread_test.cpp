// The single-threaded runtime (ATTNGEN_SINGLE_THREADED, built by the embedded preset): the
// kernels run on the calling thread alone, results are right, and the thread count is fixed at
// one. The rest of the suite runs on the same build too (but concurrency_test.cpp, which is about
// the pool).
#include <dirent.h>

#include <random>
#include <string>

#include "gtest/gtest.h"
#include "runtime/include/attngen/attngen.h"
#include "tests/reference.h"
#include "tests/tensor.h"

namespace attngen::test {
namespace {

// The process's threads, as the kernel reports them (/proc/self/task; under qemu-user those of
// the emulator, whose own helper thread is there before and after).
int process_threads() {
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return -1;
  int n = 0;
  while (const dirent* e = readdir(dir)) n += e->d_name[0] != '.';
  closedir(dir);
  return n;
}

TEST(SingleThreaded, ThreadCountIsOne) {
  EXPECT_EQ(attngen_set_num_threads(0), ATTNGEN_OK);
  EXPECT_EQ(attngen_set_num_threads(1), ATTNGEN_OK);
  EXPECT_EQ(attngen_set_num_threads(2), ATTNGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(attngen_last_error()).find("single-threaded"), std::string::npos)
      << attngen_last_error();
  EXPECT_EQ(attngen_release_memory(), ATTNGEN_OK);
}

// Shapes of many parallel tasks (batches x heads x query tiles, key splits in decode): they all
// run on this thread, and give the float64 reference's result.
TEST(SingleThreaded, KernelsRunOnTheCallingThread) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const int before = process_threads();
  ASSERT_GT(before, 0);
  for (const bool causal : {false, true}) {
    const int64_t B = 2, S = 97, H = 4, D = 64;
    Storage q({B, S, H, D}, 0), k({B, S, H, D}, 0), v({B, S, H, D}, 0), o({B, S, H, D}, 0);
    q.fill_random(rng, -1, 1);
    k.fill_random(rng, -1, 1);
    v.fill_random(rng, -1, 1);
    attngen_attention_options opt = attngen_attention_options_default();
    opt.mask = causal ? ATTNGEN_MASK_CAUSAL : ATTNGEN_MASK_NONE;
    ASSERT_EQ(attngen_attention(&q.t, &k.t, &v.t, &o.t, &opt), ATTNGEN_OK) << attngen_last_error();
    RefAttention ref;
    ref.causal = causal;
    expect_close_f32(o.dense(), reference_attention(view_of(q.t), view_of(k.t), view_of(v.t), ref),
                     max_abs(v.dense()));
    EXPECT_EQ(process_threads(), before) << "a call started a thread";
  }
}

}  // namespace
}  // namespace attngen::test
