#include "examples/llm/llama.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace llm {
namespace {

constexpr double kPi = 3.14159265358979323846;

size_t at(int64_t i) { return static_cast<size_t>(i); }

void check(attngen_status st, const char* what) {
  if (st != ATTNGEN_OK) {
    throw std::runtime_error(std::string(what) + ": " + attngen_status_name(st) + ": " +
                             attngen_last_error());
  }
}

// A linear layer of w [n, e] and bias [n] (empty: none), F32, packed once.
Linear make_linear(const std::vector<float>& w, const std::vector<float>& b, int64_t n, int64_t e) {
  const int64_t ws[] = {n, e}, bs[] = {n};
  const attngen_tensor wt =
      attngen_tensor_contiguous(const_cast<float*>(w.data()), ATTNGEN_F32, 2, ws);
  const attngen_tensor bt =
      attngen_tensor_contiguous(const_cast<float*>(b.data()), ATTNGEN_F32, 1, bs);
  attngen_linear_layer* layer = nullptr;
  check(attngen_linear_layer_create(&wt, b.empty() ? nullptr : &bt, &layer),
        "attngen_linear_layer_create");
  return Linear(layer);
}

// y [batch, seq, n] = x [batch, seq, e] W^T (+ b): nn.Linear on the layer's packed weights.
void linear(const float* x, int64_t batch, int64_t seq, int64_t e, const Linear& w, int64_t n,
            float* y) {
  const int64_t xs[] = {batch, seq, e}, ys[] = {batch, seq, n};
  const attngen_tensor xt = attngen_tensor_contiguous(const_cast<float*>(x), ATTNGEN_F32, 3, xs);
  attngen_tensor yt = attngen_tensor_contiguous(y, ATTNGEN_F32, 3, ys);
  check(attngen_linear_layer_forward(w.get(), &xt, &yt), "attngen_linear_layer_forward");
}

// out = RMSNorm(x) * g over rows of e (Hugging Face's LlamaRMSNorm; the mean square in double).
void rms_norm(const float* x, int64_t rows, int64_t e, const std::vector<float>& g, double eps,
              float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * e;
    double ss = 0;
    for (int64_t k = 0; k < e; ++k) ss += double(xr[k]) * double(xr[k]);
    const float inv = static_cast<float>(1.0 / std::sqrt(ss / double(e) + eps));
    for (int64_t k = 0; k < e; ++k) out[r * e + k] = g[at(k)] * (xr[k] * inv);
  }
}

// A tensor of the file as F32 of the expected shape; `or_empty`: absent is an empty vector.
std::vector<float> weight(const embed::SafeTensors& st, const std::string& name,
                          const std::vector<int64_t>& shape, bool or_empty = false) {
  if (or_empty && !st.contains(name)) return {};
  return st.load_f32(name, shape);
}

void append(std::vector<float>& to, const std::vector<float>& from) {
  to.insert(to.end(), from.begin(), from.end());
}

}  // namespace

LlamaConfig parse_llama_config(const std::string& json_text, const std::string& name) {
  LlamaConfig c;
  try {
    const nlohmann::json j = nlohmann::json::parse(json_text);
    c.vocab_size = j.at("vocab_size").get<int64_t>();
    c.hidden = j.at("hidden_size").get<int64_t>();
    c.intermediate = j.at("intermediate_size").get<int64_t>();
    c.layers = j.at("num_hidden_layers").get<int64_t>();
    c.heads = j.at("num_attention_heads").get<int64_t>();
    c.kv_heads = j.contains("num_key_value_heads") && !j["num_key_value_heads"].is_null()
                     ? j["num_key_value_heads"].get<int64_t>()
                     : c.heads;
    c.head_dim = j.contains("head_dim") && !j["head_dim"].is_null() ? j["head_dim"].get<int64_t>()
                                                                    : c.hidden / c.heads;
    // The rotary parameters: transformers 5 writes them as "rope_parameters" (rope_theta and the
    // scaling together), earlier versions (and most checkpoints) as "rope_theta" and
    // "rope_scaling".
    const bool v5 = j.contains("rope_parameters") && j["rope_parameters"].is_object();
    const nlohmann::json none = nlohmann::json::object();
    const nlohmann::json& rope = v5 ? j["rope_parameters"] : none;
    c.rotary_dim = static_cast<int64_t>(
        std::llround(double(c.head_dim) *
                     rope.value("partial_rotary_factor", j.value("partial_rotary_factor", 1.0))));
    c.max_positions = j.value("max_position_embeddings", int64_t(2048));
    c.rms_norm_eps = j.value("rms_norm_eps", 1e-6);
    c.rope_theta = rope.value("rope_theta", j.value("rope_theta", 10000.0));
    c.tie_word_embeddings = j.value("tie_word_embeddings", false);
    const std::string act = j.value("hidden_act", std::string("silu"));
    if (act != "silu") throw std::runtime_error("hidden_act \"" + act + "\" is not handled");
    if (j.contains("sliding_window") && !j["sliding_window"].is_null() &&
        j.value("use_sliding_window", true)) {
      c.sliding_window = j["sliding_window"].get<int64_t>();
    }
    const bool scaled = v5 || (j.contains("rope_scaling") && !j["rope_scaling"].is_null());
    if (scaled) {
      const nlohmann::json& s = v5 ? rope : j["rope_scaling"];
      RopeScaling& r = c.rope_scaling;
      r.type = s.contains("rope_type") ? s["rope_type"].get<std::string>()
                                       : s.value("type", std::string("default"));
      r.factor = s.value("factor", 1.0);
      r.low_freq_factor = s.value("low_freq_factor", 1.0);
      r.high_freq_factor = s.value("high_freq_factor", 4.0);
      r.original_max_positions = s.value("original_max_position_embeddings", int64_t(8192));
      if (r.type != "default" && r.type != "linear" && r.type != "llama3") {
        throw std::runtime_error("rope_scaling type \"" + r.type +
                                 "\" is not handled (default, linear, llama3)");
      }
    }
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(name + ": " + e.what());
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(name + ": " + e.what());
  }
  if (c.vocab_size <= 0 || c.hidden <= 0 || c.intermediate <= 0 || c.layers <= 0 || c.heads <= 0 ||
      c.kv_heads <= 0 || c.head_dim <= 0 || c.heads % c.kv_heads != 0 || c.rotary_dim < 2 ||
      c.rotary_dim % 2 != 0 || c.rotary_dim > c.head_dim || c.sliding_window == 0 ||
      c.sliding_window < -1) {
    throw std::runtime_error(name +
                             ": sizes must be positive, num_attention_heads a multiple of "
                             "num_key_value_heads, the rotary dims even, sliding_window >= 1");
  }
  return c;
}

LlamaConfig load_llama_config(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw std::runtime_error(path + ": cannot open");
  std::stringstream text;
  text << f.rdbuf();
  return parse_llama_config(text.str(), path);
}

std::vector<double> rope_inv_freq(const LlamaConfig& c) {
  const int64_t half = c.rotary_dim / 2;
  std::vector<double> f(at(half));
  for (int64_t i = 0; i < half; ++i) {
    f[at(i)] = 1.0 / std::pow(c.rope_theta, double(2 * i) / double(c.rotary_dim));
  }
  const RopeScaling& s = c.rope_scaling;
  if (s.type == "linear") {
    for (double& x : f) x /= s.factor;
  } else if (s.type == "llama3") {
    const double old = double(s.original_max_positions);
    const double low_wavelen = old / s.low_freq_factor, high_wavelen = old / s.high_freq_factor;
    for (double& x : f) {
      const double wavelen = 2 * kPi / x;
      if (wavelen > low_wavelen) {
        x /= s.factor;                       // long wavelengths: interpolated
      } else if (wavelen >= high_wavelen) {  // between: smoothly from one to the other
        const double smooth =
            (old / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        x = (1 - smooth) * x / s.factor + smooth * x;
      }
    }
  }
  return f;
}

LlamaModel LlamaModel::load(const embed::SafeTensors& st, const LlamaConfig& c) {
  LlamaModel m;
  m.config_ = c;
  const int64_t E = c.hidden, D = c.head_dim, hq = c.heads * D, hkv = c.kv_heads * D;
  m.embed_ = weight(st, "model.embed_tokens.weight", {c.vocab_size, E});
  m.norm_ = weight(st, "model.norm.weight", {E});
  m.lm_head_ = make_linear(
      c.tie_word_embeddings ? m.embed_ : weight(st, "lm_head.weight", {c.vocab_size, E}), {},
      c.vocab_size, E);
  const std::pair<const char*, int64_t> qkv_parts[] = {{"q", hq}, {"k", hkv}, {"v", hkv}};
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    LlamaLayer layer;
    layer.input_norm = weight(st, p + "input_layernorm.weight", {E});
    layer.post_norm = weight(st, p + "post_attention_layernorm.weight", {E});
    std::vector<float> qkv_w, qkv_b, gate_up_w;
    for (const auto& [part, rows] : qkv_parts) {
      append(qkv_w, weight(st, p + "self_attn." + part + "_proj.weight", {rows, E}));
    }
    if (st.contains(p + "self_attn.q_proj.bias")) {
      for (const auto& [part, rows] : qkv_parts) {
        append(qkv_b, weight(st, p + "self_attn." + part + "_proj.bias", {rows}));
      }
    }
    layer.qkv = make_linear(qkv_w, qkv_b, hq + 2 * hkv, E);
    layer.o = make_linear(weight(st, p + "self_attn.o_proj.weight", {E, hq}), {}, E, hq);
    append(gate_up_w, weight(st, p + "mlp.gate_proj.weight", {c.intermediate, E}));
    append(gate_up_w, weight(st, p + "mlp.up_proj.weight", {c.intermediate, E}));
    layer.gate_up = make_linear(gate_up_w, {}, 2 * c.intermediate, E);
    layer.down = make_linear(weight(st, p + "mlp.down_proj.weight", {E, c.intermediate}), {}, E,
                             c.intermediate);
    m.layers_.push_back(std::move(layer));
  }
  for (double f : rope_inv_freq(c)) m.inv_freq_.push_back(static_cast<float>(f));
  return m;
}

LlamaModel LlamaModel::load_dir(const std::string& dir) {
  return load(embed::SafeTensors::open(dir + "/model.safetensors"),
              load_llama_config(dir + "/config.json"));
}

Session::Session(const LlamaModel& model, int64_t batch, int64_t capacity, int64_t max_step,
                 int64_t page_slots)
    : model_(model), batch_(batch), lengths_(at(batch), 0) {
  const LlamaConfig& c = model.config();
  const int64_t half = c.rotary_dim / 2;
  const attngen_tensor freq =
      attngen_tensor_contiguous(const_cast<float*>(model.inv_freq_.data()), ATTNGEN_F32, 1, &half);
  attngen_rope rope = attngen_rope_default();
  rope.rotary_dim = c.rotary_dim;
  rope.pairs = ATTNGEN_ROPE_HALF;  // Hugging Face's rotate_half
  rope.inv_freq = &freq;
  attngen_kv_cache_options o = attngen_kv_cache_options_default();
  o.layers = c.layers;
  o.batch = batch;
  o.heads_kv = c.kv_heads;
  o.head_dim_qk = c.head_dim;
  o.capacity = capacity;
  o.rope = &rope;  // copied by the cache
  o.page_slots = page_slots;
  // A query sees itself and the sliding_window - 1 positions before it: a contiguous cache keeps
  // a ring of those and of the most one step appends.
  if (c.sliding_window > 0) o.window = c.sliding_window - 1;
  if (c.sliding_window > 0 && page_slots == 0) {
    o.capacity = std::min(capacity, o.window + std::max<int64_t>(max_step, 1));
    o.capacity = std::max(o.capacity, o.window + 1);
  }
  check(attngen_kv_cache_create(&o, &cache_), "attngen_kv_cache_create");
}

Session::~Session() { attngen_kv_cache_destroy(cache_); }

std::vector<float> Session::step(const std::vector<std::vector<int32_t>>& tokens) {
  const LlamaConfig& c = model_.config();
  if (static_cast<int64_t>(tokens.size()) != batch_) {
    throw std::runtime_error("step: " + std::to_string(tokens.size()) +
                             " sequences, the session has " + std::to_string(batch_));
  }
  std::vector<int32_t> counts(at(batch_));
  int64_t t = 0;
  for (int64_t b = 0; b < batch_; ++b) {
    counts[at(b)] = static_cast<int32_t>(tokens[at(b)].size());
    t = std::max<int64_t>(t, counts[at(b)]);
  }
  if (t == 0) return {};
  const int64_t E = c.hidden, D = c.head_dim, I = c.intermediate, V = c.vocab_size;
  const int64_t hq = c.heads * D, hkv = c.kv_heads * D, n_qkv = hq + 2 * hkv, rows = batch_ * t;
  // The embeddings of the fed tokens; rows past a sequence's tokens stay zero.
  std::vector<float> x(at(rows * E), 0.0f);
  for (int64_t b = 0; b < batch_; ++b) {
    for (int64_t i = 0; i < counts[at(b)]; ++i) {
      const int32_t id = tokens[at(b)][at(i)];
      if (id < 0 || id >= V)
        throw std::runtime_error("token id " + std::to_string(id) + " is outside the vocabulary");
      std::copy_n(model_.embed_.begin() + id * E, E, x.begin() + (b * t + i) * E);
    }
  }
  const int64_t n_batch = batch_;
  const attngen_tensor counts_t =
      attngen_tensor_contiguous(counts.data(), ATTNGEN_I32, 1, &n_batch);
  const bool uneven = std::any_of(counts.begin(), counts.end(), [&](int32_t n) { return n != t; });
  attngen_decode_options dopt = attngen_decode_options_default();
  dopt.counts = uneven ? &counts_t : nullptr;
  std::vector<float> h(at(rows * E)), qkv(at(rows * n_qkv)), attn(at(rows * hq)), y(at(rows * E));
  std::vector<float> gate_up(at(rows * 2 * I)), act(at(rows * I));
  // q, k and v: views of the projection [B, t, Hq + 2 Hkv, D] (innermost stride 1).
  const auto heads_view = [&](int64_t first_head, int64_t heads) {
    const int64_t shape[4] = {batch_, t, heads, D};
    attngen_tensor v =
        attngen_tensor_contiguous(qkv.data() + first_head * D, ATTNGEN_F32, 4, shape);
    v.strides[0] = t * n_qkv;
    v.strides[1] = n_qkv;
    return v;
  };
  const attngen_tensor q = heads_view(0, c.heads), k = heads_view(c.heads, c.kv_heads),
                       v = heads_view(c.heads + c.kv_heads, c.kv_heads);
  const int64_t attn_shape[4] = {batch_, t, c.heads, D};
  attngen_tensor attn_t = attngen_tensor_contiguous(attn.data(), ATTNGEN_F32, 4, attn_shape);
  for (int64_t l = 0; l < c.layers; ++l) {
    const LlamaLayer& w = model_.layers_[at(l)];
    rms_norm(x.data(), rows, E, w.input_norm, c.rms_norm_eps, h.data());
    linear(h.data(), batch_, t, E, w.qkv, n_qkv, qkv.data());
    check(attngen_kv_cache_append(cache_, l, &k, &v, dopt.counts), "attngen_kv_cache_append");
    check(attngen_decode(&q, cache_, l, &attn_t, &dopt), "attngen_decode");
    linear(attn.data(), batch_, t, hq, w.o, E, y.data());
    for (size_t e = 0; e < x.size(); ++e) x[e] += y[e];
    rms_norm(x.data(), rows, E, w.post_norm, c.rms_norm_eps, h.data());
    linear(h.data(), batch_, t, E, w.gate_up, 2 * I, gate_up.data());
    for (int64_t r = 0; r < rows; ++r) {  // SwiGLU: silu(gate) * up
      const float* g = gate_up.data() + r * 2 * I;
      for (int64_t i = 0; i < I; ++i)
        act[at(r * I + i)] = g[i] / (1.0f + std::exp(-g[i])) * g[I + i];
    }
    linear(act.data(), batch_, t, I, w.down, E, y.data());
    for (size_t e = 0; e < x.size(); ++e) x[e] += y[e];
  }
  rms_norm(x.data(), rows, E, model_.norm_, c.rms_norm_eps, h.data());
  std::vector<float> logits(at(rows * V));
  linear(h.data(), batch_, t, E, model_.lm_head_, V, logits.data());
  for (int64_t b = 0; b < batch_; ++b) {
    std::fill(logits.begin() + (b * t + counts[at(b)]) * V, logits.begin() + (b + 1) * t * V, 0.0f);
    lengths_[at(b)] += counts[at(b)];
  }
  return logits;
}

std::vector<std::vector<int32_t>> generate_greedy(const LlamaModel& model,
                                                  const std::vector<std::vector<int32_t>>& prompts,
                                                  int64_t n_new) {
  const int64_t batch = static_cast<int64_t>(prompts.size()), V = model.config().vocab_size;
  int64_t longest = 0;
  for (const auto& p : prompts) {
    if (p.empty()) throw std::runtime_error("generate_greedy: an empty prompt");
    longest = std::max<int64_t>(longest, static_cast<int64_t>(p.size()));
  }
  Session session(model, batch, longest + n_new, longest);
  std::vector<std::vector<int32_t>> out(at(batch));
  std::vector<float> logits = session.step(prompts);
  int64_t t = longest;
  for (int64_t n = 0; n < n_new; ++n) {
    std::vector<std::vector<int32_t>> next(at(batch));
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t row = n == 0 ? static_cast<int64_t>(prompts[at(b)].size()) - 1 : 0;
      const float* l = logits.data() + (b * t + row) * V;
      const int32_t id = static_cast<int32_t>(std::max_element(l, l + V) - l);
      out[at(b)].push_back(id);
      next[at(b)] = {id};
    }
    if (n + 1 < n_new) {
      logits = session.step(next);
      t = 1;
    }
  }
  return out;
}

}  // namespace llm
