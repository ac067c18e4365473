// Published model families, one row each: their head dims, head counts (grouped-query and
// multi-query ratios included), masks, biases, soft caps and sparse patterns with the models' own
// parameters, at sequence lengths a CI run affords. Every row goes through the public API with
// automatic dispatch (no kernel named) against the float64 reference, on fresh random inputs
// into poisoned outputs (AttentionTester, DecodeTester); causal LMs also decode over a KV cache.
//
// Where a model's parameter is inert at these lengths (a sliding window of 4096 over 160 tokens
// is plain causal attention), the row keeps it and a second row of the family, named for it,
// scales the parameter down so that the pattern is exercised. No row is skipped: a configuration
// without a kernel fails with the runtime's status and message.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "attngen/attngen.h"
#include "tests/attention_tester.h"
#include "tests/decode_tester.h"
#include "tests/isas.h"
#include "tests/tensor.h"

namespace attngen::test {
namespace {

// A bias a family adds to its attention scores, computed here from the model's definition.
enum class Bias {
  kNone,
  kT5,     // T5's relative position buckets (bidirectional, 32 buckets, max distance 128)
  kAlibi,  // ALiBi: -m_h * (p - j), slopes m_h = 2^(-8 (h + 1) / H) (BLOOM, MPT)
};

// A block-sparse layout of a family's own.
enum class Layout {
  kNone,
  kBigBird,  // BigBird ITC: first and last blocks global, a 3-block window, 3 random blocks
};

// The KV-cache decode of a causal LM: per sequence `cached` tokens appended first, then `steps`
// calls of `new_tokens` tokens each, attended; `window` >= 0 for a sliding-window model.
struct DecodeRow {
  bool enabled = false;
  int64_t batch = 1;
  std::vector<int64_t> cached;
  int32_t new_tokens = 1;
  int64_t steps = 1;
  int64_t window = -1;
};

// One row: a family's attention configuration, built like the testers.
struct Family {
  std::string name;    // the gtest parameter name
  std::string config;  // what the row keeps of the published model, and what it scales down
  int64_t batch = 1, hq = 1, hkv = 1, sq = 1, skv = 1, dqk = 64, dv = 64;
  bool causal = false;
  float scale = 0.0f, softcap = 0.0f;
  std::vector<int32_t> kv_len;
  Bias bias = Bias::kNone;
  attngen_pattern pattern{};
  Layout layout = Layout::kNone;
  int integer_inputs = 0;
  DecodeRow decode;

  Family(std::string n, std::string c) : name(std::move(n)), config(std::move(c)) {}
  // B, Hq / Hkv, Sq / Skv, Dqk (= Dv).
  Family& shape(int64_t b, int64_t q_heads, int64_t kv_heads, int64_t q_len, int64_t kv_seq,
                int64_t head_dim) {
    batch = b;
    hq = q_heads;
    hkv = kv_heads;
    sq = q_len;
    skv = kv_seq;
    dqk = dv = head_dim;
    return *this;
  }
  Family& is_causal() {
    causal = true;
    return *this;
  }
  Family& with_scale(float s) {
    scale = s;
    return *this;
  }
  // Soft cap c: with q and k integers in [-n, n] so that the logits reach where c * tanh(s / c)
  // bends (random inputs in [-1, 1] give logits of about 1, where the cap is the identity).
  Family& with_softcap(float c, int n) {
    softcap = c;
    integer_inputs = n;
    return *this;
  }
  Family& padding(std::vector<int32_t> lengths) {
    kv_len = std::move(lengths);
    return *this;
  }
  Family& with_bias(Bias b) {
    bias = b;
    return *this;
  }
  // Sliding window of `size` keys up to and including the query's own position (left =
  // size - 1): transformers' `kv_idx > q_idx - sliding_window` for Mistral and Gemma-2.
  Family& sliding_window(int32_t size) {
    pattern = attngen_pattern{};
    pattern.kind = ATTNGEN_PATTERN_WINDOW;
    pattern.window_left = size - 1;
    pattern.window_right = 0;
    return *this;
  }
  Family& global_local(int32_t global_tokens, int32_t local) {
    pattern = attngen_pattern{};
    pattern.kind = ATTNGEN_PATTERN_GLOBAL_LOCAL;
    pattern.global_tokens = global_tokens;
    pattern.local = local;
    return *this;
  }
  Family& strided(int32_t stride) {
    pattern = attngen_pattern{};
    pattern.kind = ATTNGEN_PATTERN_STRIDED;
    pattern.stride = stride;
    return *this;
  }
  Family& block_sparse(int32_t block, Layout l) {
    pattern = attngen_pattern{};
    pattern.kind = ATTNGEN_PATTERN_BLOCK_SPARSE;
    pattern.block = block;
    layout = l;
    return *this;
  }
  // Decode with this row's heads and head dims.
  Family& decodes(int64_t b, std::vector<int64_t> cached, int32_t new_tokens, int64_t steps,
                  int64_t window = -1) {
    decode = DecodeRow{true, b, std::move(cached), new_tokens, steps, window};
    return *this;
  }
};

// Sliding windows, as models configure them, and the scaled-down size of the rows that make a
// window bite at CI lengths.
constexpr int32_t kMistralWindow = 4096, kGemma2Window = 4096, kScaledWindow = 64;

// The table. Head counts and head dims are the published ones (config.json of the Hugging Face
// checkpoint named); batch and lengths are CI-sized.
std::vector<Family> families() {
  return {
      // Encoders: bidirectional, padded batches.
      Family("BERT_base", "bert-base-uncased: 12 heads, D64, not causal; B2 S128, key padding")
          .shape(2, 12, 12, 128, 128, 64)
          .padding({128, 71}),
      Family("MiniLM", "all-MiniLM-L6-v2: hidden 384 / 12 heads = D32, not causal; key padding")
          .shape(2, 12, 12, 128, 128, 32)
          .padding({97, 128}),
      Family("ViT_B", "ViT-B/16 at 224 px: 196 patches + CLS = S197, 12 heads, D64, not causal")
          .shape(1, 12, 12, 197, 197, 64),
      Family("CLIP_text", "CLIP ViT-B/32 text encoder: width 512, 8 heads, D64, causal, S77")
          .shape(2, 8, 8, 77, 77, 64)
          .is_causal(),
      // Decoder-only LMs: causal, prefill as attention and token steps as decode.
      Family("GPT_2", "gpt2: 12 heads, D64, causal; S256")
          .shape(1, 12, 12, 256, 256, 64)
          .is_causal()
          .decodes(2, {37, 64}, 2, 3),
      Family("Llama_2_7B", "Llama-2-7b: 32 heads (MHA 32/32), D128, causal; S128")
          .shape(1, 32, 32, 128, 128, 128)
          .is_causal()
          .decodes(2, {40, 71}, 1, 3),
      Family("Llama_3_8B", "Meta-Llama-3-8B: GQA 32/8, D128, causal; S100")
          .shape(1, 32, 8, 100, 100, 128)
          .is_causal()
          .decodes(2, {33, 90}, 3, 2),
      Family("Mistral_7B",
             "Mistral-7B-v0.1: GQA 32/8, D128, causal, sliding window 4096 (inert at S160: "
             "causal)")
          .shape(1, 32, 8, 160, 160, 128)
          .is_causal()
          .sliding_window(kMistralWindow)
          .decodes(1, {100}, 2, 2, kMistralWindow - 1),
      Family("Mistral_7B_window64",
             "Mistral-7B-v0.1 SCALED DOWN: window 4096 -> 64 so that it bites at S160 (and the "
             "decode ring buffer wraps)")
          .shape(1, 32, 8, 160, 160, 128)
          .is_causal()
          .sliding_window(kScaledWindow)
          .decodes(2, {100, 150}, 2, 2, kScaledWindow - 1),
      Family("Falcon_7B", "falcon-7b: MQA 71/1, D64, causal; S100")
          .shape(1, 71, 1, 100, 100, 64)
          .is_causal()
          .decodes(2, {25, 60}, 2, 2),
      Family("Phi_2", "phi-2: hidden 2560 / 32 heads = D80, MHA, causal; S128")
          .shape(1, 32, 32, 128, 128, 80)
          .is_causal()
          .decodes(2, {30, 55}, 2, 2),
      Family("Phi_3_mini", "Phi-3-mini-4k: hidden 3072 / 32 heads = D96, MHA, causal; S128")
          .shape(1, 32, 32, 128, 128, 96)
          .is_causal()
          .decodes(2, {30, 55}, 2, 2),
      Family("Gemma_2B", "gemma-2b: MQA 8/1, D256, causal; S128")
          .shape(1, 8, 1, 128, 128, 256)
          .is_causal()
          .decodes(2, {20, 45}, 2, 2),
      // Gemma-2 alternates global and sliding-window layers, both with the logit soft cap 50;
      // query_pre_attn_scalar 256 = D gives the default scale. The decode API has no soft cap,
      // so these rows do not decode.
      Family("Gemma_2_global",
             "gemma-2-2b global layers: GQA 8/4, D256, causal, attention logit soft cap 50; S128, "
             "q and k integers in [-3, 3] (logits up to ~15, where the cap bends)")
          .shape(1, 8, 4, 128, 128, 256)
          .is_causal()
          .with_softcap(50.0f, 3),
      Family("Gemma_2_local",
             "gemma-2-2b sliding-window layers: as Gemma_2_global plus window 4096 (inert at "
             "S128: causal)")
          .shape(1, 8, 4, 128, 128, 256)
          .is_causal()
          .with_softcap(50.0f, 3)
          .sliding_window(kGemma2Window),
      Family("Gemma_2_local_window64",
             "gemma-2-2b sliding-window layers SCALED DOWN: window 4096 -> 64 so that it bites "
             "at S128")
          .shape(1, 8, 4, 128, 128, 256)
          .is_causal()
          .with_softcap(50.0f, 3)
          .sliding_window(kScaledWindow),
      // Encoder-decoders.
      Family("Whisper",
             "whisper-base decoder cross-attention: 8 heads, D64, not causal, 24 text tokens over "
             "the encoder's 1500 frames (Sq != Skv); decode: its causal self-attention")
          .shape(1, 8, 8, 24, 1500, 64)
          .decodes(2, {4, 30}, 1, 3),
      Family("T5_base",
             "t5-base encoder: 12 heads, D64, not causal, no 1/sqrt(D) scaling (scale 1), "
             "relative position bias [H, Sq, Skv] (32 buckets, max distance 128) as an "
             "additive mask, key padding; B2 S128")
          .shape(2, 12, 12, 128, 128, 64)
          .with_scale(1.0f)
          .with_bias(Bias::kT5)
          .padding({128, 90}),
      // ALiBi instead of position embeddings: a bias the decode API cannot take, so no decode.
      Family("BLOOM_560m",
             "bloom-560m: 16 heads, D64, causal, ALiBi bias [H, Sq, Skv] from the slopes; S128")
          .shape(1, 16, 16, 128, 128, 64)
          .is_causal()
          .with_bias(Bias::kAlibi),
      Family("MPT_7B", "mpt-7b: 32 heads, D128, causal, ALiBi (alibi_bias_max 8); S100")
          .shape(1, 32, 32, 100, 100, 128)
          .is_causal()
          .with_bias(Bias::kAlibi),
      // Stable Diffusion 1.5's UNet: 8 heads whose dim follows the level's channels (320, 640,
      // 1280), self-attention over the latent pixels and cross-attention to 77 CLIP tokens; B2
      // for classifier-free guidance.
      Family("SD_D40",
             "stable-diffusion-v1-5 UNet 320-channel level: 8 heads, D40, self-attention, not "
             "causal; S256 (16x16, scaled down from 64x64 = 4096)")
          .shape(2, 8, 8, 256, 256, 40),
      Family("SD_D80",
             "stable-diffusion-v1-5 UNet 640-channel level: 8 heads, D80, cross-attention of "
             "256 latent pixels (scaled down from 1024) over 77 text tokens")
          .shape(2, 8, 8, 256, 77, 80),
      Family("SD_D160",
             "stable-diffusion-v1-5 UNet middle block: 8 heads, D160, self-attention over the "
             "8x8 latent of a 512 px image, S64")
          .shape(2, 8, 8, 64, 64, 160),
      // Sparse-attention models.
      Family("Longformer_base",
             "longformer-base-4096: 12 heads, D64, not causal, attention window 512 (local 256 "
             "each side), 1 global token (CLS); S300")
          .shape(1, 12, 12, 300, 300, 64)
          .global_local(1, 256),
      Family("Longformer_base_local16",
             "longformer-base-4096 SCALED DOWN: local 256 -> 16 at S300, 4 global tokens (CLS "
             "and a 3-token question)")
          .shape(1, 12, 12, 300, 300, 64)
          .global_local(4, 16),
      Family("BigBird_base",
             "bigbird-roberta-base: 12 heads, D64, not causal, block-sparse, block 64, ITC "
             "layout (2 global blocks, 3-block window, 3 random blocks); S640 = 10 blocks, the "
             "shortest where the layout leaves blocks out")
          .shape(1, 12, 12, 640, 640, 64)
          .block_sparse(64, Layout::kBigBird),
      Family("Sparse_Transformer",
             "Sparse Transformer (Child et al. 2019, enwik8): 8 heads, D64, causal, strided "
             "stride 128; S300")
          .shape(1, 8, 8, 300, 300, 64)
          .is_causal()
          .strided(128),
      Family("Sparse_Transformer_stride16",
             "Sparse Transformer SCALED DOWN: stride 128 -> 16 at S300")
          .shape(1, 8, 8, 300, 300, 64)
          .is_causal()
          .strided(16),
  };
}

std::vector<Family> decoding_families() {
  std::vector<Family> out;
  for (const Family& f : families()) {
    if (f.decode.enabled) out.push_back(f);
  }
  return out;
}

// transformers' T5Attention._relative_position_bucket, bidirectional: relative position
// j - i into 32 buckets, exact up to 8 each way, logarithmic up to 128.
int t5_bucket(int64_t relative) {
  constexpr int kHalf = 16, kExact = 8, kMaxDistance = 128;
  int bucket = relative > 0 ? kHalf : 0;
  const int64_t n = relative < 0 ? -relative : relative;
  if (n < kExact) return bucket + static_cast<int>(n);
  const int large = kExact + static_cast<int>(std::log(static_cast<double>(n) / kExact) /
                                              std::log(static_cast<double>(kMaxDistance) / kExact) *
                                              (kHalf - kExact));
  return bucket + std::min(large, kHalf - 1);
}

// The family's bias as [H, Sq, Skv]; positions aligned bottom-right (p = Skv - Sq + i).
std::vector<float> bias_of(const Family& f, std::mt19937_64& rng) {
  std::vector<float> out(static_cast<size_t>(f.hq * f.sq * f.skv));
  std::vector<float> table;  // T5: a learned value per (bucket, head), here random
  if (f.bias == Bias::kT5) {
    std::uniform_real_distribution<float> value(-3.0f, 3.0f);
    table.resize(static_cast<size_t>(32 * f.hq));
    for (float& x : table) x = value(rng);
  }
  for (int64_t h = 0; h < f.hq; ++h) {
    const double slope = std::exp2(-8.0 * static_cast<double>(h + 1) / static_cast<double>(f.hq));
    for (int64_t i = 0; i < f.sq; ++i) {
      const int64_t p = f.skv - f.sq + i;
      for (int64_t j = 0; j < f.skv; ++j) {
        float& x = out[static_cast<size_t>((h * f.sq + i) * f.skv + j)];
        if (f.bias == Bias::kT5) {
          x = table[static_cast<size_t>(t5_bucket(j - i) * f.hq + h)];
        } else {
          x = static_cast<float>(-slope * static_cast<double>(p - j));
        }
      }
    }
  }
  return out;
}

// BigBird's ITC layout over n x n blocks: the first and last block rows and columns global, each
// other block row its window (i - 1, i, i + 1) and 3 random blocks from the rest.
std::vector<uint8_t> bigbird_layout(int64_t n, std::mt19937_64& rng) {
  constexpr int kRandomBlocks = 3;
  std::vector<uint8_t> l(static_cast<size_t>(n * n), 0);
  const auto set = [&](int64_t i, int64_t j) { l[static_cast<size_t>(i * n + j)] = 1; };
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      if (i == 0 || i == n - 1 || j == 0 || j == n - 1 || std::abs(i - j) <= 1) set(i, j);
    }
    if (i == 0 || i == n - 1) continue;
    std::vector<int64_t> rest;
    for (int64_t j = 1; j < n - 1; ++j) {
      if (std::abs(i - j) > 1) rest.push_back(j);
    }
    std::shuffle(rest.begin(), rest.end(), rng);
    for (size_t r = 0; r < rest.size() && r < kRandomBlocks; ++r) set(i, rest[r]);
  }
  return l;
}

std::string row_name(const ::testing::TestParamInfo<Family>& info) { return info.param.name; }

// How gtest names a row in its failure list (instead of the struct's bytes).
void PrintTo(const Family& f, std::ostream* os) { *os << f.name << " (" << f.config << ")"; }

// Runs `test` once per CPU ISA this machine runs that kernels of `op` were built for (x86: each
// of AVX-512, AVX2, SSE4.1 the CPU has; aarch64: NEON; tests/isas.h), dispatch restricted to it
// (attngen_set_isa), and records which kernel served the row on each (a property of the test:
// --gtest_output=xml shows it).
template <typename Run>
void on_each_isa(attngen_op op, const Run& test) {
  for (const std::string& isa : runnable_cpu_isas(&op)) {
    SCOPED_TRACE("ISA " + isa);
    ASSERT_EQ(attngen_set_isa(isa.c_str()), ATTNGEN_OK) << attngen_last_error();
    test();
    const std::string kernel = attngen_last_kernel();  // before set_isa, which resets it
    attngen_set_isa(nullptr);
    if (::testing::Test::HasFailure()) return;
    ::testing::Test::RecordProperty("kernel_" + isa, kernel);
  }
}

class ModelFamilyAttention : public ::testing::TestWithParam<Family> {};

TEST_P(ModelFamilyAttention, MatchesReference) {
  const Family& f = GetParam();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(f.name + ": " + f.config + " (bias/layout seed " + std::to_string(seed) + ")");
  std::mt19937_64 rng(seed);
  AttentionTester t;
  t.batch(f.batch).heads(f.hq, f.hkv).seq(f.sq, f.skv).head_dim(f.dqk, f.dv).causal(f.causal);
  t.scale(f.scale).softcap(f.softcap);
  if (f.integer_inputs) t.integer_inputs(f.integer_inputs);
  if (!f.kv_len.empty()) t.kv_len(f.kv_len);
  if (f.bias != Bias::kNone) t.additive_mask({f.hq, f.sq, f.skv}, bias_of(f, rng));
  if (f.layout == Layout::kBigBird) {
    const int64_t blocks = (f.sq + f.pattern.block - 1) / f.pattern.block;
    ASSERT_EQ(f.sq, f.skv) << "BigBird's layout is square";
    t.pattern(f.pattern, bigbird_layout(blocks, rng));
  } else {
    t.pattern(f.pattern);
  }
  // Automatic dispatch within each ISA, on one draw of inputs; the kernels that served the row are
  // properties of the test, by their ISA (as on_each_isa records them).
  const attngen_op op = ATTNGEN_OP_ATTENTION;
  const std::vector<std::string> isas = runnable_cpu_isas(&op);
  if (isas.empty()) GTEST_SKIP() << "no CPU ISA of this build runs on this machine";
  std::vector<std::string> ran;
  t.isas(isas).Test(nullptr, &ran);
  if (::testing::Test::HasFailure()) return;
  for (const std::string& name : ran) {
    const attngen_kernel_info* k = attngen_find_kernel(name.c_str());
    ASSERT_NE(k, nullptr) << name;
    ::testing::Test::RecordProperty(std::string("kernel_") + k->isa, name);
  }
}

INSTANTIATE_TEST_SUITE_P(Table, ModelFamilyAttention, ::testing::ValuesIn(families()), row_name);

class ModelFamilyDecode : public ::testing::TestWithParam<Family> {};

TEST_P(ModelFamilyDecode, MatchesFullCausalPass) {
  const Family& f = GetParam();
  const DecodeRow& d = f.decode;
  SCOPED_TRACE(f.name + ": " + f.config);
  DecodeTester t;
  t.batch(d.batch).heads(f.hq, f.hkv).head_dim(f.dqk, f.dv);
  t.cached(d.cached).new_tokens(d.new_tokens).steps(d.steps);
  if (d.window >= 0) t.window(d.window);
  on_each_isa(ATTNGEN_OP_DECODE, [&] { t.Test(); });  // automatic dispatch within each ISA
}

INSTANTIATE_TEST_SUITE_P(Table, ModelFamilyDecode, ::testing::ValuesIn(decoding_families()),
                         row_name);

}  // namespace
}  // namespace attngen::test
