#include "examples/sentence_embedding/bert.h"

#include <sys/stat.h>
#include <algorithm>
#include <cmath>
#include <fstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "attngen/attngen.h"
#include "examples/sentence_embedding/npy.h"

namespace embed {
namespace {

nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw std::runtime_error(path + ": cannot open");
  try {
    return nlohmann::json::parse(f);
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(path + ": " + e.what());
  }
}

bool file_exists(const std::string& path) {
  struct stat sb;
  return stat(path.c_str(), &sb) == 0;
}

void check(attngen_status st, const char* what) {
  if (st != ATTNGEN_OK)
    throw std::runtime_error(std::string(what) + ": " + attngen_status_name(st) + ": " +
                             attngen_last_error());
}

// y [rows, n] = x [rows, e] W^T + b, W [n, e]: nn.Linear on attngen_linear().
void linear(const float* x, int64_t batch, int64_t seq, int64_t e, const std::vector<float>& w,
            const std::vector<float>& b, int64_t n, float* y) {
  const int64_t xs[] = {batch, seq, e}, ws[] = {n, e}, bs[] = {n}, ys[] = {batch, seq, n};
  const attngen_tensor xt = attngen_tensor_contiguous(const_cast<float*>(x), ATTNGEN_F32, 3, xs);
  const attngen_tensor wt =
      attngen_tensor_contiguous(const_cast<float*>(w.data()), ATTNGEN_F32, 2, ws);
  const attngen_tensor bt =
      attngen_tensor_contiguous(const_cast<float*>(b.data()), ATTNGEN_F32, 1, bs);
  attngen_tensor yt = attngen_tensor_contiguous(y, ATTNGEN_F32, 3, ys);
  check(attngen_linear(&xt, &wt, &bt, &yt), "attngen_linear");
}

// x = LayerNorm(x + r) over rows of e, statistics in double.
void add_layer_norm(float* x, const float* r, int64_t rows, int64_t e, const std::vector<float>& g,
                    const std::vector<float>& b, double eps) {
  std::vector<double> t(e);
  for (int64_t i = 0; i < rows; ++i) {
    float* xi = x + i * e;
    double mean = 0;
    for (int64_t k = 0; k < e; ++k) {
      t[k] = double(xi[k]) + (r ? double(r[i * e + k]) : 0.0);
      mean += t[k];
    }
    mean /= e;
    double var = 0;
    for (int64_t k = 0; k < e; ++k) var += (t[k] - mean) * (t[k] - mean);
    var /= e;
    const double inv = 1.0 / std::sqrt(var + eps);
    for (int64_t k = 0; k < e; ++k) xi[k] = float((t[k] - mean) * inv * g[k] + b[k]);
  }
}

// BERT's "gelu": the exact, erf form.
float gelu(float x) { return float(0.5 * x * (1.0 + std::erf(double(x) * M_SQRT1_2))); }

}  // namespace

BertConfig load_bert_config(const std::string& path) {
  const nlohmann::json j = read_json(path);
  BertConfig c;
  try {
    c.vocab_size = j.at("vocab_size").get<int64_t>();
    c.hidden = j.at("hidden_size").get<int64_t>();
    c.layers = j.at("num_hidden_layers").get<int64_t>();
    c.heads = j.at("num_attention_heads").get<int64_t>();
    c.intermediate = j.at("intermediate_size").get<int64_t>();
    c.max_positions = j.at("max_position_embeddings").get<int64_t>();
    c.type_vocab = j.value("type_vocab_size", int64_t(2));
    c.layer_norm_eps = j.value("layer_norm_eps", 1e-12);
    const std::string act = j.value("hidden_act", std::string("gelu"));
    if (act != "gelu")
      throw std::runtime_error("hidden_act \"" + act + "\" is not handled (only \"gelu\")");
    const std::string pos = j.value("position_embedding_type", std::string("absolute"));
    if (pos != "absolute")
      throw std::runtime_error("position_embedding_type \"" + pos + "\" is not handled");
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(path + ": " + e.what());
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(path + ": " + e.what());
  }
  if (c.vocab_size <= 0 || c.hidden <= 0 || c.layers <= 0 || c.heads <= 0 || c.intermediate <= 0 ||
      c.max_positions <= 0 || c.type_vocab <= 0 || c.hidden % c.heads)
    throw std::runtime_error(path + ": sizes must be positive and hidden_size a multiple of " +
                             "num_attention_heads");
  return c;
}

QkvObserver qk_dump_observer(const BertConfig& c, const std::string& dir) {
  return [c, dir](int64_t layer, const float* qkv, int64_t batch, int64_t seq) {
    if (batch != 1) throw std::runtime_error("the Q/K dump takes one sentence");
    const int64_t E = c.hidden;
    std::vector<float> q(size_t(seq * E)), k(size_t(seq * E));
    for (int64_t s = 0; s < seq; ++s)
      for (int64_t j = 0; j < E; ++j) {
        q[size_t(s * E + j)] = qkv[s * 3 * E + j];
        k[size_t(s * E + j)] = qkv[s * 3 * E + E + j];
      }
    const std::vector<int64_t> shape = {seq, c.heads, c.head_dim()};
    const std::string base = dir + "/layer" + std::to_string(layer);
    write_npy_f32(base + "_q.npy", q.data(), shape);
    write_npy_f32(base + "_k.npy", k.data(), shape);
  };
}

void write_tokens(const std::string& path, const std::vector<std::string>& tokens) {
  std::ofstream t(path);
  for (const auto& tok : tokens) t << tok << '\n';
  if (!t.flush()) throw std::runtime_error(path + ": write failed");
}

BertModel BertModel::load(const SafeTensors& st, const BertConfig& c) {
  BertModel m;
  m.config_ = c;
  const std::string p = st.contains("embeddings.word_embeddings.weight") ? "" : "bert.";
  const int64_t E = c.hidden, I = c.intermediate;
  auto get = [&](const std::string& name, std::vector<int64_t> shape) {
    return st.load_f32(p + name, shape);
  };
  m.word_ = get("embeddings.word_embeddings.weight", {c.vocab_size, E});
  m.position_ = get("embeddings.position_embeddings.weight", {c.max_positions, E});
  m.token_type_ = get("embeddings.token_type_embeddings.weight", {c.type_vocab, E});
  m.emb_ln_g_ = get("embeddings.LayerNorm.weight", {E});
  m.emb_ln_b_ = get("embeddings.LayerNorm.bias", {E});
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string q = "encoder.layer." + std::to_string(l) + ".";
    BertLayer L;
    for (const char* part : {"query", "key", "value"}) {
      const auto w = get(q + "attention.self." + part + ".weight", {E, E});
      const auto b = get(q + "attention.self." + part + ".bias", {E});
      L.qkv_w.insert(L.qkv_w.end(), w.begin(), w.end());
      L.qkv_b.insert(L.qkv_b.end(), b.begin(), b.end());
    }
    L.out_w = get(q + "attention.output.dense.weight", {E, E});
    L.out_b = get(q + "attention.output.dense.bias", {E});
    L.ln1_g = get(q + "attention.output.LayerNorm.weight", {E});
    L.ln1_b = get(q + "attention.output.LayerNorm.bias", {E});
    L.ff1_w = get(q + "intermediate.dense.weight", {I, E});
    L.ff1_b = get(q + "intermediate.dense.bias", {I});
    L.ff2_w = get(q + "output.dense.weight", {E, I});
    L.ff2_b = get(q + "output.dense.bias", {E});
    L.ln2_g = get(q + "output.LayerNorm.weight", {E});
    L.ln2_b = get(q + "output.LayerNorm.bias", {E});
    m.layers_.push_back(std::move(L));
  }
  return m;
}

std::vector<float> BertModel::forward(const std::vector<std::vector<int32_t>>& ids,
                                      int64_t* seq_out, const QkvObserver* observer) const {
  const BertConfig& c = config_;
  const int64_t B = int64_t(ids.size()), E = c.hidden, H = c.heads, D = c.head_dim(),
                I = c.intermediate;
  int64_t S = 0;
  for (const auto& s : ids) S = std::max<int64_t>(S, int64_t(s.size()));
  if (B == 0 || S == 0) throw std::runtime_error("forward: no tokens");
  if (S > c.max_positions)
    throw std::runtime_error("forward: " + std::to_string(S) + " tokens, the model has " +
                             std::to_string(c.max_positions) + " positions");
  *seq_out = S;

  // Embeddings: word + position + token type 0, then LayerNorm. Padding rows use id 0.
  std::vector<float> x(size_t(B * S * E));
  std::vector<int32_t> kv_len(B);
  for (int64_t b = 0; b < B; ++b) {
    kv_len[b] = int32_t(ids[b].size());
    for (int64_t s = 0; s < S; ++s) {
      const int32_t id = s < int64_t(ids[b].size()) ? ids[b][s] : 0;
      if (id < 0 || id >= c.vocab_size)
        throw std::runtime_error("forward: token id " + std::to_string(id) +
                                 " out of the vocabulary");
      float* xr = &x[size_t((b * S + s) * E)];
      for (int64_t k = 0; k < E; ++k)
        xr[k] = word_[size_t(id * E + k)] + position_[size_t(s * E + k)] + token_type_[size_t(k)];
    }
  }
  add_layer_norm(x.data(), nullptr, B * S, E, emb_ln_g_, emb_ln_b_, c.layer_norm_eps);

  std::vector<float> qkv(size_t(B * S * 3 * E)), ctx(size_t(B * S * E)), tmp(size_t(B * S * E)),
      hid(size_t(B * S * I));
  const int64_t lens[] = {B};
  const attngen_tensor kv_len_t = attngen_tensor_contiguous(kv_len.data(), ATTNGEN_I32, 1, lens);
  for (int64_t l = 0; l < c.layers; ++l) {
    const BertLayer& L = layers_[size_t(l)];
    // Self-attention: one projection into [B, S, 3, H, D], three strided BSHD views of it.
    linear(x.data(), B, S, E, L.qkv_w, L.qkv_b, 3 * E, qkv.data());
    if (observer) (*observer)(l, qkv.data(), B, S);
    attngen_tensor q, k, v;
    for (int i = 0; i < 3; ++i) {
      attngen_tensor& t = i == 0 ? q : i == 1 ? k : v;
      t.data = qkv.data() + i * E;
      t.dtype = ATTNGEN_F32;
      t.rank = 4;
      const int64_t shape[] = {B, S, H, D}, strides[] = {S * 3 * E, 3 * E, D, 1};
      for (int d = 0; d < 4; ++d) {
        t.shape[d] = shape[d];
        t.strides[d] = strides[d];
      }
    }
    const int64_t os[] = {B, S, H, D};
    attngen_tensor o = attngen_tensor_contiguous(ctx.data(), ATTNGEN_F32, 4, os);
    attngen_attention_options opt = attngen_attention_options_default();  // scale 1/sqrt(D)
    opt.kv_len = &kv_len_t;  // the keys past each sentence's length are masked
    check(attngen_attention(&q, &k, &v, &o, &opt), "attngen_attention");
    linear(ctx.data(), B, S, E, L.out_w, L.out_b, E, tmp.data());
    add_layer_norm(x.data(), tmp.data(), B * S, E, L.ln1_g, L.ln1_b, c.layer_norm_eps);
    // Feed-forward.
    linear(x.data(), B, S, E, L.ff1_w, L.ff1_b, I, hid.data());
    for (float& h : hid) h = gelu(h);
    linear(hid.data(), B, S, I, L.ff2_w, L.ff2_b, E, tmp.data());
    add_layer_norm(x.data(), tmp.data(), B * S, E, L.ln2_g, L.ln2_b, c.layer_norm_eps);
  }
  return x;
}

SentenceEncoder SentenceEncoder::load(const std::string& dir) {
  SentenceEncoder enc;
  const BertConfig config = load_bert_config(dir + "/config.json");
  enc.model_ = BertModel::load(SafeTensors::open(dir + "/model.safetensors"), config);
  enc.tokenizer_ = WordPieceTokenizer::from_file(dir + "/tokenizer.json");

  // The sentence-transformers pipeline: Transformer, Pooling, optionally Normalize. Without
  // modules.json, mean pooling of a plain Transformer (what sentence-transformers assumes).
  const std::string modules = dir + "/modules.json";
  if (file_exists(modules)) {
    const nlohmann::json mods = read_json(modules);
    for (const auto& m : mods) {
      const std::string type = m.value("type", std::string());
      const std::string kind = type.substr(type.rfind('.') + 1);
      if (kind == "Transformer") continue;
      if (kind == "Normalize") {
        enc.normalize_ = true;
      } else if (kind == "Pooling") {
        const std::string path = dir + "/" + m.value("path", std::string()) + "/config.json";
        const nlohmann::json p = read_json(path);
        const int modes = p.value("pooling_mode_mean_tokens", false) +
                          p.value("pooling_mode_cls_token", false) +
                          p.value("pooling_mode_max_tokens", false) +
                          p.value("pooling_mode_mean_sqrt_len_tokens", false);
        if (modes != 1) throw std::runtime_error(path + ": exactly one pooling mode is handled");
        if (p.value("pooling_mode_mean_sqrt_len_tokens", false))
          throw std::runtime_error(path + ": mean_sqrt_len pooling is not handled");
        enc.pooling_ = p.value("pooling_mode_cls_token", false)    ? Pooling::kCls
                       : p.value("pooling_mode_max_tokens", false) ? Pooling::kMax
                                                                   : Pooling::kMean;
      } else {
        throw std::runtime_error(modules + ": module type \"" + type + "\" is not handled");
      }
    }
  }
  // Truncation: sentence-transformers' max_seq_length, within the model's positions.
  enc.max_length_ = size_t(config.max_positions);
  const std::string st_config = dir + "/sentence_bert_config.json";
  if (file_exists(st_config)) {
    const nlohmann::json s = read_json(st_config);
    if (s.contains("max_seq_length") && s["max_seq_length"].is_number_unsigned())
      enc.max_length_ = std::min(enc.max_length_, s["max_seq_length"].get<size_t>());
  }
  return enc;
}

std::vector<float> SentenceEncoder::embed(const std::vector<Encoding>& encodings, size_t batch_size,
                                          const QkvObserver* observer) const {
  const int64_t E = model_.config().hidden;
  std::vector<float> out(encodings.size() * size_t(E));
  batch_size = std::max<size_t>(1, batch_size);
  // Batches of sentences of similar lengths, so that little is padded: sorted longest first
  // (as sentence-transformers does), a batch takes at most batch_size of them and none shorter
  // than half its longest (at most half of a batch's rows are padding). The results go back
  // in the input order.
  std::vector<size_t> order(encodings.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return encodings[a].ids.size() > encodings[b].ids.size();
  });
  size_t n = 0;
  for (size_t first = 0; first < encodings.size(); first += n) {
    const size_t longest = encodings[order[first]].ids.size();
    n = 1;
    while (n < batch_size && first + n < encodings.size() &&
           2 * encodings[order[first + n]].ids.size() >= longest)
      ++n;
    std::vector<std::vector<int32_t>> ids;
    for (size_t i = 0; i < n; ++i) ids.push_back(encodings[order[first + i]].ids);
    int64_t S = 0;
    const std::vector<float> h = model_.forward(ids, &S, observer);
    for (size_t i = 0; i < n; ++i) {
      const int64_t len = int64_t(ids[i].size());
      const float* hb = &h[size_t(i * S * E)];
      std::vector<double> acc(size_t(E), pooling_ == Pooling::kMax ? -INFINITY : 0.0);
      for (int64_t s = 0; s < (pooling_ == Pooling::kCls ? 1 : len); ++s)
        for (int64_t k = 0; k < E; ++k)
          acc[k] = pooling_ == Pooling::kMax ? std::max(acc[k], double(hb[s * E + k]))
                                             : acc[k] + hb[s * E + k];
      if (pooling_ == Pooling::kMean)
        for (double& a : acc) a /= double(len);
      if (normalize_) {  // torch.nn.functional.normalize: x / max(||x||, 1e-12)
        double n2 = 0;
        for (double a : acc) n2 += a * a;
        const double norm = std::max(std::sqrt(n2), 1e-12);
        for (double& a : acc) a /= norm;
      }
      for (int64_t k = 0; k < E; ++k) out[order[first + i] * size_t(E) + size_t(k)] = float(acc[k]);
    }
  }
  return out;
}

}  // namespace embed
