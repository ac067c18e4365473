// Tests of examples/llm: config.json parsing and the rotary frequencies of its scalings, and small
// random Llama-architecture models (grouped-query heads, a sliding window shorter than the
// prompts, Llama 3's rope scaling, tied embeddings and q/k/v biases) decoded on attngen against a
// float64 reference forward written here with plain loops: cached decoding step by step, several
// prompts of different lengths at once, against the reference's logits of the whole sequence and
// against recomputing the whole sequence in one step.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "examples/llm/llama.h"
#include "examples/sentence_embedding/safetensors_writer.h"

namespace llm {
namespace {

using json = nlohmann::json;
size_t at(int64_t i) { return static_cast<size_t>(i); }

// A random model: its config, its weights (as written into the safetensors file) and the model
// the library loads from them.
struct RandomModel {
  LlamaConfig c;
  std::map<std::string, std::vector<float>> w;
  bool bias = false;

  const std::vector<float>& operator[](const std::string& name) const { return w.at(name); }
};

json config_json(int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t window, bool llama3,
                 bool tied) {
  json j = {{"architectures", {"LlamaForCausalLM"}},
            {"vocab_size", 61},
            {"hidden_size", heads * head_dim},
            {"intermediate_size", 80},
            {"num_hidden_layers", 2},
            {"num_attention_heads", heads},
            {"num_key_value_heads", kv_heads},
            {"max_position_embeddings", 256},
            {"rms_norm_eps", 1e-5},
            {"rope_theta", 500.0},
            {"hidden_act", "silu"},
            {"tie_word_embeddings", tied},
            {"sliding_window", nullptr}};
  if (window > 0) j["sliding_window"] = window;
  if (llama3) {
    // Scaled so that the short test sequences reach every regime of the interpolation.
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", 8.0},
                         {"low_freq_factor", 1.0},
                         {"high_freq_factor", 4.0},
                         {"original_max_position_embeddings", 64}};
  }
  return j;
}

RandomModel make_model(const json& config, bool bias, uint64_t seed) {
  RandomModel m;
  m.c = parse_llama_config(config.dump(), "config.json");
  m.bias = bias;
  const LlamaConfig& c = m.c;
  std::mt19937_64 rng(seed);
  const auto fill = [&](const std::string& name, std::vector<int64_t> shape, double lo, double hi) {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    std::uniform_real_distribution<float> d(static_cast<float>(lo), static_cast<float>(hi));
    std::vector<float>& v = m.w[name];
    v.resize(at(n));
    for (float& x : v) x = d(rng);
  };
  const int64_t E = c.hidden, D = c.head_dim, I = c.intermediate, V = c.vocab_size;
  fill("model.embed_tokens.weight", {V, E}, -1.0, 1.0);
  fill("model.norm.weight", {E}, 0.9, 1.1);
  if (!c.tie_word_embeddings) fill("lm_head.weight", {V, E}, -0.2, 0.2);
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    fill(p + "input_layernorm.weight", {E}, 0.9, 1.1);
    fill(p + "post_attention_layernorm.weight", {E}, 0.9, 1.1);
    fill(p + "self_attn.q_proj.weight", {c.heads * D, E}, -0.2, 0.2);
    fill(p + "self_attn.k_proj.weight", {c.kv_heads * D, E}, -0.2, 0.2);
    fill(p + "self_attn.v_proj.weight", {c.kv_heads * D, E}, -0.2, 0.2);
    if (bias) {
      fill(p + "self_attn.q_proj.bias", {c.heads * D}, -0.5, 0.5);
      fill(p + "self_attn.k_proj.bias", {c.kv_heads * D}, -0.5, 0.5);
      fill(p + "self_attn.v_proj.bias", {c.kv_heads * D}, -0.5, 0.5);
    }
    fill(p + "self_attn.o_proj.weight", {E, c.heads * D}, -0.2, 0.2);
    fill(p + "mlp.gate_proj.weight", {I, E}, -0.2, 0.2);
    fill(p + "mlp.up_proj.weight", {I, E}, -0.2, 0.2);
    fill(p + "mlp.down_proj.weight", {E, I}, -0.2, 0.2);
  }
  return m;
}

LlamaModel load(const RandomModel& m) {
  std::map<std::string, embed::test::RawTensor> raw;
  const LlamaConfig& c = m.c;
  for (const auto& [name, v] : m.w) {
    std::vector<int64_t> shape = {static_cast<int64_t>(v.size())};
    // Two-dimensional tensors: [out, in] with `in` the hidden size, the head dims or I.
    const int64_t E = c.hidden, HD = c.heads * c.head_dim;
    if (name.find("_proj.weight") != std::string::npos || name.find("embed") != std::string::npos ||
        name == "lm_head.weight") {
      const int64_t in = name.find("o_proj") != std::string::npos      ? HD
                         : name.find("down_proj") != std::string::npos ? c.intermediate
                                                                       : E;
      shape = {static_cast<int64_t>(v.size()) / in, in};
    }
    raw[name] = embed::test::f32_tensor(v, shape);
  }
  const std::string bytes = embed::test::safetensors_bytes(raw);
  return LlamaModel::load(
      embed::SafeTensors::from_bytes(std::vector<uint8_t>(bytes.begin(), bytes.end())), c);
}

// ---- The float64 reference ----

// Logits [n, V] of every position of one sequence: Hugging Face's LlamaForCausalLM in exact
// arithmetic, the rotary frequencies rounded to f32 as the library gives them to its cache.
std::vector<double> reference_logits(const RandomModel& m, const std::vector<int32_t>& ids) {
  const LlamaConfig& c = m.c;
  const int64_t n = static_cast<int64_t>(ids.size()), E = c.hidden, D = c.head_dim;
  const int64_t I = c.intermediate, V = c.vocab_size, H = c.heads, G = c.heads / c.kv_heads;
  std::vector<double> freq;
  for (double f : rope_inv_freq(c)) freq.push_back(static_cast<float>(f));
  const auto matvec = [](const std::vector<float>& w, const std::vector<double>& x, int64_t rows,
                         const std::vector<float>* b) {
    const int64_t cols = static_cast<int64_t>(x.size());
    std::vector<double> y(at(rows));
    for (int64_t r = 0; r < rows; ++r) {
      double acc = b != nullptr ? (*b)[at(r)] : 0.0;
      for (int64_t k = 0; k < cols; ++k) acc += double(w[at(r * cols + k)]) * x[at(k)];
      y[at(r)] = acc;
    }
    return y;
  };
  const auto rms = [&](const std::vector<double>& x, const std::vector<float>& g) {
    double ss = 0;
    for (double v : x) ss += v * v;
    const double inv = 1.0 / std::sqrt(ss / double(x.size()) + c.rms_norm_eps);
    std::vector<double> y(x.size());
    for (size_t k = 0; k < x.size(); ++k) y[k] = double(g[k]) * x[k] * inv;
    return y;
  };
  const auto rotate = [&](std::vector<double>& v, int64_t heads, int64_t pos) {
    const int64_t half = c.rotary_dim / 2;
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t i = 0; i < half; ++i) {
        const double a = v[at(h * D + i)], b = v[at(h * D + i + half)];
        const double angle = double(pos) * freq[at(i)];
        v[at(h * D + i)] = a * std::cos(angle) - b * std::sin(angle);
        v[at(h * D + i + half)] = a * std::sin(angle) + b * std::cos(angle);
      }
    }
  };
  std::vector<std::vector<double>> x(at(n));
  for (int64_t p = 0; p < n; ++p) {
    const std::vector<float>& e = m["model.embed_tokens.weight"];
    x[at(p)].assign(e.begin() + ids[at(p)] * E, e.begin() + (ids[at(p)] + 1) * E);
  }
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string pre = "model.layers." + std::to_string(l) + ".";
    const auto bias = [&](const char* part) {
      return m.bias ? &m[pre + "self_attn." + part + "_proj.bias"] : nullptr;
    };
    std::vector<std::vector<double>> q(at(n)), k(at(n)), v(at(n));
    for (int64_t p = 0; p < n; ++p) {
      const std::vector<double> h = rms(x[at(p)], m[pre + "input_layernorm.weight"]);
      q[at(p)] = matvec(m[pre + "self_attn.q_proj.weight"], h, H * D, bias("q"));
      k[at(p)] = matvec(m[pre + "self_attn.k_proj.weight"], h, c.kv_heads * D, bias("k"));
      v[at(p)] = matvec(m[pre + "self_attn.v_proj.weight"], h, c.kv_heads * D, bias("v"));
      rotate(q[at(p)], H, p);
      rotate(k[at(p)], c.kv_heads, p);
    }
    for (int64_t p = 0; p < n; ++p) {
      std::vector<double> attn(at(H * D), 0.0);
      for (int64_t h = 0; h < H; ++h) {
        const int64_t kh = h / G;
        const int64_t first =
            c.sliding_window > 0 ? std::max<int64_t>(0, p - c.sliding_window + 1) : 0;
        std::vector<double> s;
        double top = -INFINITY;
        for (int64_t j = first; j <= p; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += q[at(p)][at(h * D + d)] * k[at(j)][at(kh * D + d)];
          s.push_back(dot / std::sqrt(double(D)));
          top = std::max(top, s.back());
        }
        double sum = 0;
        for (double& e : s) sum += e = std::exp(e - top);
        for (int64_t j = first; j <= p; ++j) {
          for (int64_t d = 0; d < D; ++d) {
            attn[at(h * D + d)] += s[at(j - first)] / sum * v[at(j)][at(kh * D + d)];
          }
        }
      }
      const std::vector<double> o = matvec(m[pre + "self_attn.o_proj.weight"], attn, E, nullptr);
      for (int64_t e = 0; e < E; ++e) x[at(p)][at(e)] += o[at(e)];
      const std::vector<double> h = rms(x[at(p)], m[pre + "post_attention_layernorm.weight"]);
      const std::vector<double> g = matvec(m[pre + "mlp.gate_proj.weight"], h, I, nullptr);
      const std::vector<double> u = matvec(m[pre + "mlp.up_proj.weight"], h, I, nullptr);
      std::vector<double> a(at(I));
      for (int64_t i = 0; i < I; ++i) a[at(i)] = g[at(i)] / (1 + std::exp(-g[at(i)])) * u[at(i)];
      const std::vector<double> d = matvec(m[pre + "mlp.down_proj.weight"], a, E, nullptr);
      for (int64_t e = 0; e < E; ++e) x[at(p)][at(e)] += d[at(e)];
    }
  }
  std::vector<double> logits;
  const std::vector<float>& head =
      c.tie_word_embeddings ? m["model.embed_tokens.weight"] : m["lm_head.weight"];
  for (int64_t p = 0; p < n; ++p) {
    const std::vector<double> y = matvec(head, rms(x[at(p)], m["model.norm.weight"]), V, nullptr);
    logits.insert(logits.end(), y.begin(), y.end());
  }
  return logits;
}

double rel_l2(const std::vector<double>& got, const std::vector<double>& want) {
  double e = 0, r = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    e += (got[i] - want[i]) * (got[i] - want[i]);
    r += want[i] * want[i];
  }
  return std::sqrt(e / r);
}

// Sequences of random tokens; each prompt fed in one step (together), then the rest one token a
// step: every position's logits, per sequence, against the reference's.
void expect_cached_decoding_matches(const RandomModel& m, const std::vector<int64_t>& prompt_lens,
                                    int64_t steps, uint64_t seed,
                                    int64_t page_slots = Session::kPageSlots) {
  const LlamaModel model = load(m);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(m.c.vocab_size) - 1);
  const int64_t batch = static_cast<int64_t>(prompt_lens.size());
  std::vector<std::vector<int32_t>> seqs(at(batch));
  int64_t longest = 0;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t i = 0; i < prompt_lens[at(b)] + steps; ++i) seqs[at(b)].push_back(token(rng));
    longest = std::max(longest, prompt_lens[at(b)]);
  }
  Session session(model, batch, longest + steps, longest, page_slots);
  const int64_t V = m.c.vocab_size;
  std::vector<std::vector<double>> got(at(batch));
  std::vector<std::vector<int32_t>> feed(at(batch));
  for (int64_t b = 0; b < batch; ++b) {
    feed[at(b)].assign(seqs[at(b)].begin(), seqs[at(b)].begin() + prompt_lens[at(b)]);
  }
  int64_t t = longest;
  for (int64_t s = 0; s <= steps; ++s) {
    const std::vector<float> logits = session.step(feed);
    ASSERT_EQ(logits.size(), at(batch * t * V));
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t rows = static_cast<int64_t>(feed[at(b)].size());
      for (int64_t r = 0; r < t; ++r) {
        for (int64_t v = 0; v < V; ++v) {
          const float x = logits[at((b * t + r) * V + v)];
          if (r < rows) {
            got[at(b)].push_back(x);
          } else {
            ASSERT_EQ(x, 0.0f) << "a row past sequence " << b << "'s tokens";
          }
        }
      }
      EXPECT_EQ(session.length(b), prompt_lens[at(b)] + s);
    }
    if (s == steps) break;
    for (int64_t b = 0; b < batch; ++b) feed[at(b)] = {seqs[at(b)][at(prompt_lens[at(b)] + s)]};
    t = 1;
  }
  for (int64_t b = 0; b < batch; ++b) {
    SCOPED_TRACE("sequence " + std::to_string(b));
    const std::vector<double> want = reference_logits(m, seqs[at(b)]);  // every token was fed
    ASSERT_EQ(got[at(b)].size(), want.size());
    EXPECT_LE(rel_l2(got[at(b)], want), 1e-5);
  }
}

uint64_t seed() { return std::random_device{}(); }

TEST(LlmConfig, ParsesLlamaAndMistral) {
  const LlamaConfig a =
      parse_llama_config(config_json(4, 2, 32, -1, true, false).dump(), "config.json");
  EXPECT_EQ(a.heads, 4);
  EXPECT_EQ(a.kv_heads, 2);
  EXPECT_EQ(a.head_dim, 32);
  EXPECT_EQ(a.rotary_dim, 32);
  EXPECT_EQ(a.sliding_window, -1);
  EXPECT_EQ(a.rope_scaling.type, "llama3");
  const LlamaConfig b =
      parse_llama_config(config_json(4, 4, 16, 5, false, true).dump(), "config.json");
  EXPECT_EQ(b.sliding_window, 5);
  EXPECT_TRUE(b.tie_word_embeddings);
  // transformers 5 writes the rotary parameters together, as "rope_parameters".
  json v5 = config_json(4, 2, 32, -1, true, false);
  v5.erase("rope_theta");
  v5["rope_parameters"] = v5["rope_scaling"];
  v5["rope_parameters"]["rope_theta"] = 250.0;
  v5.erase("rope_scaling");
  const LlamaConfig c5 = parse_llama_config(v5.dump(), "config.json");
  EXPECT_EQ(c5.rope_theta, 250.0);
  EXPECT_EQ(c5.rope_scaling.type, "llama3");
  EXPECT_EQ(c5.rope_scaling.original_max_positions, 64);
  json bad = config_json(4, 3, 16, -1, false, false);
  EXPECT_THROW(parse_llama_config(bad.dump(), "c"), std::runtime_error);  // 4 % 3
  bad = config_json(4, 4, 16, -1, false, false);
  bad["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  EXPECT_THROW(parse_llama_config(bad.dump(), "c"), std::runtime_error);
  bad = config_json(4, 4, 16, -1, false, false);
  bad["hidden_act"] = "gelu";
  EXPECT_THROW(parse_llama_config(bad.dump(), "c"), std::runtime_error);
}

// Llama 3's scaling: wavelengths below original / high_freq_factor keep their frequency, those
// above original / low_freq_factor are divided by the factor, those between lie between both.
TEST(LlmConfig, Llama3FrequenciesFollowTheirWavelengths) {
  LlamaConfig c = parse_llama_config(config_json(4, 2, 32, -1, true, false).dump(), "c");
  const std::vector<double> scaled = rope_inv_freq(c);
  c.rope_scaling = RopeScaling{};
  const std::vector<double> plain = rope_inv_freq(c);
  ASSERT_EQ(scaled.size(), 16u);
  int below = 0, above = 0, between = 0;
  for (size_t i = 0; i < plain.size(); ++i) {
    const double wavelen = 2 * 3.14159265358979323846 / plain[i];
    EXPECT_DOUBLE_EQ(plain[i], 1.0 / std::pow(500.0, 2.0 * double(i) / 32.0));
    if (wavelen < 64.0 / 4.0) {
      EXPECT_DOUBLE_EQ(scaled[i], plain[i]);
      ++below;
    } else if (wavelen > 64.0) {
      EXPECT_DOUBLE_EQ(scaled[i], plain[i] / 8.0);
      ++above;
    } else {
      EXPECT_LE(scaled[i], plain[i]);
      EXPECT_GE(scaled[i], plain[i] / 8.0);
      ++between;
    }
  }
  EXPECT_GT(below, 0);
  EXPECT_GT(above, 0);
  EXPECT_GT(between, 0);
}

TEST(Llm, GroupedQueryCachedDecodingMatchesReference) {
  const RandomModel m = make_model(config_json(4, 2, 32, -1, false, false), false, seed());
  expect_cached_decoding_matches(m, {5, 9, 1}, 6, seed());
}

// A window shorter than the prompts: over pages, the window masks; a contiguous cache keeps a
// ring of the window and one step's tokens.
TEST(Llm, SlidingWindowShorterThanThePrompts) {
  const RandomModel m = make_model(config_json(4, 4, 16, 5, false, true), false, seed());
  expect_cached_decoding_matches(m, {11, 7}, 9, seed());
  expect_cached_decoding_matches(m, {11, 7}, 9, seed(), 0);
}

// Llama 3's rope scaling at positions past its original context, q/k/v biases (Qwen2), tied
// embeddings, multi-query heads.
TEST(Llm, Llama3ScalingBiasesAndTiedEmbeddings) {
  const RandomModel m = make_model(config_json(4, 1, 32, -1, true, true), true, seed());
  expect_cached_decoding_matches(m, {70, 3}, 4, seed());
}

// The logits of a sequence fed step by step equal those of one step feeding it whole (the
// reference aside: cached decoding against a full recompute, both on attngen).
TEST(Llm, CachedEqualsFullRecompute) {
  const RandomModel m = make_model(config_json(4, 2, 32, -1, false, false), false, seed());
  const LlamaModel model = load(m);
  std::mt19937_64 rng(seed());
  std::uniform_int_distribution<int32_t> token(0, 60);
  std::vector<int32_t> ids;
  for (int i = 0; i < 20; ++i) ids.push_back(token(rng));
  Session whole(model, 1, 20, 20);
  const std::vector<float> all = whole.step({ids});
  Session stepwise(model, 1, 20, 8, 0);  // (a contiguous cache, the whole call's on pages)
  std::vector<double> got, want;
  std::vector<float> l = stepwise.step({{ids.begin(), ids.begin() + 8}});
  got.insert(got.end(), l.begin(), l.end());
  for (int i = 8; i < 20; ++i) {
    l = stepwise.step({{ids[at(i)]}});
    got.insert(got.end(), l.begin(), l.end());
  }
  want.assign(all.begin(), all.end());
  EXPECT_LE(rel_l2(got, want), 1e-5);
}

// Greedy generation of several prompts at once: each new token the argmax of the reference's
// logits along the generated sequence (where the reference's top two are not within 1e-4).
TEST(Llm, GreedyGenerationFollowsTheReference) {
  const RandomModel m = make_model(config_json(4, 2, 32, -1, false, false), false, seed());
  const LlamaModel model = load(m);
  const std::vector<std::vector<int32_t>> prompts = {{1, 2, 3, 4, 5}, {7}, {40, 41, 42}};
  const std::vector<std::vector<int32_t>> out = generate_greedy(model, prompts, 12);
  ASSERT_EQ(out.size(), prompts.size());
  for (size_t b = 0; b < prompts.size(); ++b) {
    ASSERT_EQ(out[b].size(), 12u);
    std::vector<int32_t> seq = prompts[b];
    seq.insert(seq.end(), out[b].begin(), out[b].end() - 1);
    const std::vector<double> want = reference_logits(m, seq);
    const int64_t V = m.c.vocab_size;
    for (size_t i = 0; i < out[b].size(); ++i) {
      const double* row = want.data() + (prompts[b].size() - 1 + i) * V;
      std::vector<double> sorted(row, row + V);
      std::sort(sorted.rbegin(), sorted.rend());
      if (sorted[0] - sorted[1] < 1e-4) break;  // a near tie: the rest may differ
      EXPECT_EQ(out[b][i], std::max_element(row, row + V) - row)
          << "prompt " << b << " token " << i;
    }
  }
}

}  // namespace
}  // namespace llm
