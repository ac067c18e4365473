// A BERT encoder (Hugging Face BertModel: absolute position and token type embeddings,
// post-LayerNorm layers, GELU) with sentence-transformers' pooling and normalisation on top,
// loaded from a model directory as sentence-transformers saves it (config.json,
// model.safetensors, tokenizer.json, modules.json, <pooling>/config.json,
// sentence_bert_config.json). The projections run on attngen_linear() and the attention on
// attngen_attention(); the rest is plain C++.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "examples/sentence_embedding/safetensors.h"
#include "examples/sentence_embedding/tokenizer.h"

namespace embed {

struct BertConfig {
  int64_t vocab_size = 0, hidden = 0, layers = 0, heads = 0, intermediate = 0;
  int64_t max_positions = 0, type_vocab = 0;
  double layer_norm_eps = 1e-12;
  int64_t head_dim() const { return hidden / heads; }
};

// Reads config.json; throws std::runtime_error for what it does not handle (hidden_act other
// than "gelu", position_embedding_type other than "absolute").
BertConfig load_bert_config(const std::string& path);

// One layer's weights, nn.Linear layout [out, in]. Q, K and V are stacked into one [3E, E]
// projection so that a single attngen_linear() writes a [B, S, 3, H, D] buffer whose three
// BSHD views feed attngen_attention() without a copy.
struct BertLayer {
  std::vector<float> qkv_w, qkv_b, out_w, out_b, ln1_g, ln1_b;
  std::vector<float> ff1_w, ff1_b, ff2_w, ff2_b, ln2_g, ln2_b;
};

// Called after each layer's QKV projection with its output, [batch, seq, 3, heads, head_dim]
// (bias included, before scaling).
using QkvObserver =
    std::function<void(int64_t layer, const float* qkv, int64_t batch, int64_t seq)>;

// An observer that writes, for a batch of one sequence, dir/layer<L>_q.npy and
// dir/layer<L>_k.npy: float32 [seq, heads, head_dim], C order (npy.h). Throws on a write error.
QkvObserver qk_dump_observer(const BertConfig& config, const std::string& dir);

// One token per line.
void write_tokens(const std::string& path, const std::vector<std::string>& tokens);

class BertModel {
 public:
  // Weights named as BertModel's state dict ("embeddings.word_embeddings.weight", ...),
  // optionally under "bert."; F32, F16 or BF16 (converted). Throws on a missing tensor or a
  // shape that disagrees with the config.
  static BertModel load(const SafeTensors& st, const BertConfig& config);

  // Last hidden states [B, S, E] of a batch of token id sequences (S the longest), the shorter
  // ones padded and their padding masked as keys through attngen's kv_len; rows past a
  // sequence's length are unspecified. Token type 0 throughout. Throws std::runtime_error on an
  // attngen error or an id out of the vocabulary.
  std::vector<float> forward(const std::vector<std::vector<int32_t>>& ids, int64_t* seq_out,
                             const QkvObserver* observer = nullptr) const;

  const BertConfig& config() const { return config_; }

 private:
  BertConfig config_;
  std::vector<float> word_, position_, token_type_, emb_ln_g_, emb_ln_b_;
  std::vector<BertLayer> layers_;
};

enum class Pooling { kMean, kCls, kMax };

class SentenceEncoder {
 public:
  // Loads a model directory; throws std::runtime_error (SafeTensorsError, TokenizerError, ...).
  static SentenceEncoder load(const std::string& dir);

  Encoding tokenize(const std::string& text) const { return tokenizer_.encode(text, max_length_); }

  // Embeddings [n, E], one row per encoding, pooled (and L2-normalised if the model's modules
  // say so), computed in batches of at most batch_size sequences of similar lengths.
  std::vector<float> embed(const std::vector<Encoding>& encodings, size_t batch_size = 32,
                           const QkvObserver* observer = nullptr) const;

  const BertModel& model() const { return model_; }
  const WordPieceTokenizer& tokenizer() const { return tokenizer_; }
  size_t max_length() const { return max_length_; }
  void set_max_length(size_t n) { max_length_ = n; }
  bool normalize() const { return normalize_; }
  Pooling pooling() const { return pooling_; }

 private:
  BertModel model_;
  WordPieceTokenizer tokenizer_;
  size_t max_length_ = 0;
  Pooling pooling_ = Pooling::kMean;
  bool normalize_ = false;
};

}  // namespace embed
