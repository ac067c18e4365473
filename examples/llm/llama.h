// A Llama-architecture decoder (Hugging Face LlamaForCausalLM and MistralForCausalLM: RMSNorm,
// rotary embeddings, grouped-query attention, SwiGLU MLP, tied or untied embeddings) loaded from
// a model directory as save_pretrained() writes it (config.json, model.safetensors), decoding
// several sequences at once on attngen: the projections on attngen_linear_layer (weights packed
// once), the keys and values
// in an attngen KV cache that rotates them (its rope), attention on attngen_decode(). The rest
// (embedding, norms, the MLP's gate, greedy choice) is plain C++.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "attngen/attngen.h"
#include "examples/sentence_embedding/safetensors.h"

namespace llm {

// config.json's rope_scaling, or transformers 5's rope_parameters (Hugging Face's rope_type):
// "default" (none), "linear" (the frequencies divided by factor) or "llama3" (Llama 3.1's
// per-frequency interpolation).
struct RopeScaling {
  std::string type = "default";
  double factor = 1.0, low_freq_factor = 1.0, high_freq_factor = 4.0;
  int64_t original_max_positions = 8192;
};

struct LlamaConfig {
  int64_t vocab_size = 0, hidden = 0, intermediate = 0, layers = 0, heads = 0, kv_heads = 0;
  int64_t head_dim = 0;    // config.json's head_dim, else hidden / heads
  int64_t rotary_dim = 0;  // head_dim * partial_rotary_factor (1 unless given)
  int64_t max_positions = 0;
  double rms_norm_eps = 1e-6, rope_theta = 10000.0;
  RopeScaling rope_scaling;
  // Hugging Face's sliding_window (Mistral): a query at position p sees the keys j with
  // p - j < sliding_window, itself included; -1 (null): every earlier key.
  int64_t sliding_window = -1;
  bool tie_word_embeddings = false;
};

// Reads config.json (text or file); throws std::runtime_error for what it does not handle
// (hidden_act other than "silu", rope_scaling types other than the above).
LlamaConfig parse_llama_config(const std::string& json_text, const std::string& name);
LlamaConfig load_llama_config(const std::string& path);

// The rotary inverse frequencies [rotary_dim / 2] of the config, as Hugging Face's
// ROPE_INIT_FUNCTIONS compute them, in double.
std::vector<double> rope_inv_freq(const LlamaConfig& config);

// A projection's weights packed once: an attngen_linear_layer.
struct LinearDeleter {
  void operator()(attngen_linear_layer* l) const { attngen_linear_layer_destroy(l); }
};
using Linear = std::unique_ptr<attngen_linear_layer, LinearDeleter>;

// One layer: its norms' weights, and its projections (nn.Linear layout [out, in], F32) as linear
// layers: q, k and v stacked into one [(Hq + 2 Hkv) D, E] (one call writes q, k and v side by
// side, whose strided views the cache and the decode take), gate and up into one [2I, E].
struct LlamaLayer {
  std::vector<float> input_norm, post_norm;
  Linear qkv, o, gate_up, down;
};

class LlamaModel {
 public:
  // Weights named as LlamaForCausalLM's state dict ("model.embed_tokens.weight",
  // "model.layers.0.self_attn.q_proj.weight", ..., "lm_head.weight" unless tied), F32, F16 or
  // BF16 (converted); q/k/v biases where present (Qwen2). Throws on a missing tensor or a shape
  // that disagrees with the config.
  static LlamaModel load(const embed::SafeTensors& st, const LlamaConfig& config);
  static LlamaModel load_dir(const std::string& dir);

  const LlamaConfig& config() const { return config_; }

 private:
  friend class Session;
  LlamaConfig config_;
  std::vector<float> embed_, norm_;
  Linear lm_head_;  // the embedding's weights where they are tied
  std::vector<LlamaLayer> layers_;
  std::vector<float> inv_freq_;
};

// Several sequences decoded together: a KV cache of `batch` sequences, each fed tokens in steps.
class Session {
 public:
  // Room for `capacity` positions per sequence. page_slots > 0: the cache keeps them in pages of
  // that many slots (attngen.h, a paged cache: a sliding window masks); 0: a contiguous cache of
  // `capacity` slots per sequence (with a sliding window a ring of the window plus the most
  // tokens one step feeds a sequence, `max_step`).
  Session(const LlamaModel& model, int64_t batch, int64_t capacity, int64_t max_step,
          int64_t page_slots = kPageSlots);
  static constexpr int64_t kPageSlots = 16;
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Feeds tokens[b] (any number, 0 too) to sequence b; returns the logits of every fed token,
  // [batch, t, vocab] with t the most fed to one sequence (rows past a sequence's tokens are
  // zeros). Throws std::runtime_error on an attngen error or an id outside the vocabulary.
  std::vector<float> step(const std::vector<std::vector<int32_t>>& tokens);

  int64_t length(int64_t b) const { return lengths_[static_cast<size_t>(b)]; }

 private:
  const LlamaModel& model_;
  int64_t batch_;
  attngen_kv_cache* cache_ = nullptr;
  std::vector<int64_t> lengths_;
};

// Greedy generation: each prompt fed in one step, then n_new tokens per prompt, each the argmax
// of the last logits (the lowest id of equal ones). Returns the new ids per prompt.
std::vector<std::vector<int32_t>> generate_greedy(const LlamaModel& model,
                                                  const std::vector<std::vector<int32_t>>& prompts,
                                                  int64_t n_new);

}  // namespace llm
