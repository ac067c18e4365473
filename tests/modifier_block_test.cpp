// The library modifiers' block tests (generator/modifier.h, modifier_block_visit) against brute
// force, through Halide's JIT: for every (query tile, key block) of a call, a block the test skips
// holds no attended pair (never wrong), and where the modifier's test is exact for the inputs
// (documents packed in order, prefixes, sinks and windows), every block that holds none is skipped
// (the test finds what there is to skip). Also the registry's check of a modifier's layout
// against its functions. Host builds only: it links libHalide.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "Halide.h"
#include "generator/modifier.h"

namespace attngen {
namespace {

using Halide::Buffer;
using Halide::Expr;
using Halide::Func;
using Halide::Var;

uint64_t fresh_seed() { return std::random_device{}() * 0x9e3779b97f4a7c15ull + 1; }

// One call's sizes: batch b's query i sits at position offsets[b] + i.
struct Call {
  int batch = 1, seq_q = 1, seq_kv = 1, query_tile = 64, key_block = 64;
  std::vector<int32_t> offsets;  // per batch
};

struct Counts {
  int blocks = 0, empty = 0, skipped = 0, empty_full_tiles = 0, skipped_full_tiles = 0;
};

// Classifies every (tile, block) of `call` with the modifier's block test and by brute force
// over its mask; fails where a skipped block holds an attended pair.
Counts classify(const Modifier& m, const Call& call, const ModifierParams& params) {
  const int tiles = (call.seq_q + call.query_tile - 1) / call.query_tile;
  const int blocks = (call.seq_kv + call.key_block - 1) / call.key_block;
  Buffer<int32_t> offsets(call.batch);
  for (int b = 0; b < call.batch; ++b) offsets(b) = call.offsets[static_cast<size_t>(b)];
  Var kb("kb"), qt("qt"), b("b"), i("i"), j("j");
  Func offset("offset");
  offset(b) = offsets(b);

  ModifierBlock block;
  block.b = b;
  block.h = 0;
  block.query_tile_index = qt;
  block.key_block_index = kb;
  block.query_tile = call.query_tile;
  block.key_block = call.key_block;
  block.offset = offset(b);
  block.heads_q = 1;
  block.seq_q = call.seq_q;
  block.seq_kv = call.seq_kv;
  std::vector<Func> stages;
  ModifierParams with_stages = params;
  with_stages.stages = &stages;
  Func visit("visit");
  visit(kb, qt, b) = Halide::select(modifier_block_visit(m, block, with_stages), 1, 0);
  for (Func s : stages) s.compute_root();
  const Buffer<int32_t> visits = visit.realize({blocks, tiles, call.batch});

  Func attend("attend");
  const ModifierIndex at{b, 0, i, j, offset(b) + i, 1, call.seq_q, call.seq_kv, offset(b), i};
  attend(j, i, b) = Halide::select(m.mask(at, params), 1, 0);
  const Buffer<int32_t> attends = attend.realize({call.seq_kv, call.seq_q, call.batch});

  Counts n;
  for (int bb = 0; bb < call.batch; ++bb) {
    for (int t = 0; t < tiles; ++t) {
      for (int k = 0; k < blocks; ++k) {
        bool any = false;
        for (int ii = t * call.query_tile; ii < std::min((t + 1) * call.query_tile, call.seq_q);
             ++ii) {
          for (int jj = k * call.key_block; jj < std::min((k + 1) * call.key_block, call.seq_kv);
               ++jj) {
            any = any || attends(jj, ii, bb) != 0;
          }
        }
        const bool skipped = visits(k, t, bb) == 0;
        EXPECT_FALSE(skipped && any) << "batch " << bb << " tile " << t << " block " << k
                                     << ": skipped, but a pair of it attends";
        const bool full_tile = (t + 1) * call.query_tile <= call.seq_q;
        ++n.blocks;
        n.empty += !any;
        n.skipped += skipped;
        n.empty_full_tiles += full_tile && !any;
        n.skipped_full_tiles += full_tile && skipped;
      }
    }
  }
  return n;
}

const Modifier& library(const char* name) {
  const Modifier* m = find_modifier(name);
  if (m == nullptr) throw std::runtime_error(std::string("no modifier ") + name);
  return *m;
}

// Document ids [batch, seq_kv]: packed documents of 1 to max_length tokens, ids counting up, or
// with `shuffled` ids drawn from a few values in any order (no packing).
Buffer<int32_t> document_ids(const Call& call, int max_length, bool shuffled,
                             std::mt19937_64& rng) {
  Buffer<int32_t> ids(call.seq_kv, call.batch);
  std::uniform_int_distribution<int> length(1, max_length), few(0, 2);
  for (int b = 0; b < call.batch; ++b) {
    int id = 0, left = length(rng);
    for (int j = 0; j < call.seq_kv; ++j, --left) {
      if (left == 0) {
        ++id;
        left = length(rng);
      }
      ids(j, b) = shuffled ? few(rng) : id;
    }
  }
  return ids;
}

Func wrap(const Buffer<int32_t>& buffer) {
  std::vector<Var> vars(static_cast<size_t>(buffer.dimensions()));
  std::vector<Expr> args(vars.begin(), vars.end());
  Func f;
  f(vars) = buffer(args);
  return f;
}

TEST(ModifierBlock, DocumentSkipsWhatNoDocumentSpans) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  // Self-attention over a packed batch; a chunk of queries over a longer context (positions
  // from the offsets); tiles and blocks of other sizes.
  const Call calls[] = {
      {2, 320, 320, 64, 64, {0, 0}},
      {2, 64, 500, 64, 128, {436, 100}},
      {1, 256, 256, 16, 32, {0}},
  };
  for (const Call& call : calls) {
    for (int max_length : {1, 40, 150}) {
      SCOPED_TRACE("Sq " + std::to_string(call.seq_q) + " Skv " + std::to_string(call.seq_kv) +
                   " documents up to " + std::to_string(max_length));
      ModifierParams params;
      params.tensors.push_back(wrap(document_ids(call, max_length, false, rng)));
      const Counts n = classify(library("document"), call, params);
      EXPECT_GT(n.empty_full_tiles, 0) << "nothing to skip: the case tests nothing";
      EXPECT_EQ(n.skipped_full_tiles, n.empty_full_tiles)
          << "packed documents: an empty block visited";
    }
  }
  // Ids in any order: never wrong (nothing exact to expect).
  for (const Call& call : calls) {
    ModifierParams params;
    params.tensors.push_back(wrap(document_ids(call, 8, true, rng)));
    classify(library("document"), call, params);
  }
}

TEST(ModifierBlock, PrefixIsDerivedExactly) {
  const Call call{5, 320, 320, 64, 64, {0, 0, 0, 0, 0}};
  Buffer<int32_t> lengths(call.batch);
  const int32_t values[] = {0, 1, 77, 320, 1000};  // none, one key, some, all, past the end
  for (int b = 0; b < call.batch; ++b) lengths(b) = values[b];
  ModifierParams params;
  params.tensors.push_back(wrap(lengths));
  const Counts n = classify(library("prefix"), call, params);
  EXPECT_GT(n.empty_full_tiles, 0);
  EXPECT_EQ(n.skipped_full_tiles, n.empty_full_tiles);
  // Bottom-right: a chunk of queries at the end of a longer context.
  const Call chunk{2, 64, 448, 32, 64, {384, 200}};
  Buffer<int32_t> two(2);
  two(0) = 5;
  two(1) = 300;
  ModifierParams p2;
  p2.tensors.push_back(wrap(two));
  const Counts c = classify(library("prefix"), chunk, p2);
  EXPECT_EQ(c.skipped_full_tiles, c.empty_full_tiles);
}

TEST(ModifierBlock, SinksAreDerivedExactly) {
  const Call call{1, 512, 512, 64, 64, {0}};
  // (sinks, window): StreamingLLM's, no sinks, a window of the query alone with fractional
  // sinks, no window, sinks past the sequence.
  const float cases[][2] = {
      {4.0f, 100.0f}, {0.0f, 64.0f}, {2.75f, 0.0f}, {3.0f, -1.0f}, {1000.0f, 10.0f}};
  for (const auto& c : cases) {
    SCOPED_TRACE("sinks " + std::to_string(c[0]) + " window " + std::to_string(c[1]));
    ModifierParams params;
    params.scalars = {Expr(c[0]), Expr(c[1])};
    const Counts n = classify(library("sinks"), call, params);
    EXPECT_EQ(n.skipped_full_tiles, n.empty_full_tiles);
    if (c[0] < 64.0f && c[1] >= 0.0f && c[1] < 200.0f) EXPECT_GT(n.empty_full_tiles, 0);
  }
}

// A mask modifier without a test of its own gets one derived from its mask; a modifier with no
// mask visits every block.
TEST(ModifierBlock, EveryMaskModifierHasATest) {
  const Call call{1, 128, 128, 64, 64, {0}};
  const Counts n = classify(library("document"), call, [] {
    ModifierParams p;
    Buffer<int32_t> ids(128, 1);
    ids.fill(0);
    p.tensors.push_back(wrap(ids));
    return p;
  }());
  EXPECT_EQ(n.skipped, 0) << "one document: every block attends";
  Var bv;
  ModifierBlock block;
  block.b = bv;
  block.h = 0;
  block.query_tile_index = 0;
  block.key_block_index = 0;
  block.offset = 0;
  block.heads_q = block.seq_q = block.seq_kv = 1;
  EXPECT_TRUE(Halide::Internal::is_const_one(
      modifier_block_visit(library("alibi"), block, ModifierParams{})));
}

// A modifier's layout must match its functions (register_modifier): each refused with a
// logic_error, nothing registered.
TEST(ModifierRegistry, LayoutsThatDoNotMatchTheirFunctionsAreRefused) {
  const auto mask = [](const ModifierIndex& at, const ModifierParams&) { return at.j <= at.p; };
  Modifier sink_without_function;
  sink_without_function.layout.name = "test_sink_without_function";
  sink_without_function.layout.sink = true;
  EXPECT_THROW(register_modifier(sink_without_function), std::logic_error);
  Modifier visit_without_mask;
  visit_without_mask.layout.name = "test_visit_without_mask";
  visit_without_mask.layout.sink = true;
  visit_without_mask.sink = [](const Expr&, const ModifierParams&) { return Expr(0.0f); };
  visit_without_mask.visit = [](const ModifierBlock&, const ModifierParams&) {
    return Halide::Internal::const_true();
  };
  EXPECT_THROW(register_modifier(visit_without_mask), std::logic_error);
  Modifier nothing;
  nothing.layout.name = "test_nothing";
  EXPECT_THROW(register_modifier(nothing), std::logic_error);
  Modifier twice;
  twice.layout.name = "prefix";  // the library's
  twice.layout.mask = true;
  twice.mask = mask;
  EXPECT_THROW(register_modifier(twice), std::logic_error);
  for (const char* name :
       {"test_sink_without_function", "test_visit_without_mask", "test_nothing"}) {
    EXPECT_EQ(find_modifier(name), nullptr) << name;
  }
  // A matching one registers and is found.
  Modifier fine;
  fine.layout.name = "test_causal_again";
  fine.layout.mask = true;
  fine.mask = mask;
  EXPECT_TRUE(register_modifier(fine));
  EXPECT_NE(find_modifier("test_causal_again"), nullptr);
}

}  // namespace
}  // namespace attngen
