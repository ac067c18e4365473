// Tests of examples/sentence_embedding: the WordPiece tokenizer on crafted cases, the
// safetensors reader on malformed files, and a small random BERT sentence-transformers model
// written to disk (safetensors, tokenizer.json, configs) and run through the library against a
// float64 reference forward written here with plain loops.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "examples/sentence_embedding/bert.h"
#include "examples/sentence_embedding/npy.h"
#include "examples/sentence_embedding/safetensors.h"
#include "examples/sentence_embedding/safetensors_writer.h"
#include "examples/sentence_embedding/tokenizer.h"

namespace embed {
namespace {

using json = nlohmann::json;
using test::RawTensor;
using test::safetensors_bytes;
using test::u64_le;

// ---- Files ----

// A fresh directory under $TMPDIR (or /tmp) for one test, removed with what it holds when it goes
// out of scope (so that runs leave nothing behind), unless the test has failed by then: then
// kept, and named in the output.
class TempDir {
 public:
  TempDir() {
    const char* base = getenv("TMPDIR");
    std::string tmpl =
        std::string(base && *base ? base : "/tmp") + "/sentence_embedding_test.XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr) {
      ADD_FAILURE() << "mkdtemp(" << tmpl << "): " << std::strerror(errno);
      return;
    }
    path_ = tmpl;
  }
  ~TempDir() {
    if (path_.empty()) return;
    if (::testing::Test::HasFailure()) {
      std::printf("files kept in %s\n", path_.c_str());
      return;
    }
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), std::streamsize(bytes.size()));
  ASSERT_TRUE(f.good()) << path;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// ---- safetensors writing: examples/sentence_embedding/safetensors_writer.h ----

// The encodings of values m * 2^-e, |m| < 256: exact in F32, BF16 and F16 (normal range).
std::string encode(const std::vector<float>& v, const std::string& dtype) {
  std::string out;
  for (float x : v) {
    uint32_t b;
    std::memcpy(&b, &x, 4);
    if (dtype == "F32") {
      for (int i = 0; i < 4; ++i) out += char((b >> (8 * i)) & 0xff);
      continue;
    }
    uint16_t h;
    if (dtype == "BF16") {
      EXPECT_EQ(b & 0xffffu, 0u) << x << " not exact in bf16";
      h = uint16_t(b >> 16);
    } else {  // F16
      if (x == 0) {
        h = uint16_t((b >> 16) & 0x8000u);
      } else {
        int e;
        const double m = std::frexp(std::fabs(double(x)), &e);  // x = m 2^e, m in [0.5, 1)
        const int exp16 = e - 1 + 15;
        EXPECT_TRUE(exp16 >= 1 && exp16 <= 30) << x << " outside f16's normal range";
        const double frac = m * 2 - 1;  // in [0, 1)
        const double mant = frac * 1024;
        EXPECT_EQ(mant, std::floor(mant)) << x << " not exact in f16";
        h = uint16_t((x < 0 ? 0x8000 : 0) | (exp16 << 10) | int(mant));
      }
    }
    out += char(h & 0xff);
    out += char(h >> 8);
  }
  return out;
}

// ---- The random model ----

struct Dims {
  int64_t E, H, L, I, P;  // hidden, heads, layers, intermediate, positions
};

// Vocabulary: specials, whole words, continuation pieces, punctuation.
const std::vector<std::string> kWords = {
    "the", "quick", "brown", "fox",  "jumps", "over",   "lazy", "dog",   "cat",   "sat",
    "on",  "mat",   "a",     "man",  "is",    "eating", "food", "bread", "girl",  "baby",
    "run", "play",  "red",   "blue", "green", "sky",    "sea",  "tree",  "house", "car",
    "un",  "hello", "world", "cafe", "naive", "don",    "t",    "s",     "中",    "国"};
const std::vector<std::string> kPieces = {"##s", "##ning", "##aff", "##able", "##ed", "##ly"};
const std::vector<std::string> kPunct = {",", ".", "!", "?", "'", "—", "(", ")"};

std::vector<std::string> make_vocab() {
  std::vector<std::string> v = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
  for (const auto* list : {&kWords, &kPieces, &kPunct})
    v.insert(v.end(), list->begin(), list->end());
  return v;
}

json tokenizer_json(const std::vector<std::string>& vocab, int max_chars = 100) {
  json v = json::object();
  for (size_t i = 0; i < vocab.size(); ++i) v[vocab[i]] = i;
  auto id = [&](const std::string& t) { return v.at(t).get<int>(); };
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"normalizer",
           {{"type", "BertNormalizer"},
            {"clean_text", true},
            {"handle_chinese_chars", true},
            {"strip_accents", nullptr},
            {"lowercase", true}}},
          {"pre_tokenizer", {{"type", "BertPreTokenizer"}}},
          {"post_processor",
           {{"type", "TemplateProcessing"},
            {"single",
             {{{"SpecialToken", {{"id", "[CLS]"}, {"type_id", 0}}}},
              {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
              {{"SpecialToken", {{"id", "[SEP]"}, {"type_id", 0}}}}}},
            {"special_tokens",
             {{"[CLS]", {{"id", "[CLS]"}, {"ids", {id("[CLS]")}}, {"tokens", {"[CLS]"}}}},
              {"[SEP]", {{"id", "[SEP]"}, {"ids", {id("[SEP]")}}, {"tokens", {"[SEP]"}}}}}}}},
          {"decoder", {{"type", "WordPiece"}, {"prefix", "##"}, {"cleanup", true}}},
          {"model",
           {{"type", "WordPiece"},
            {"unk_token", "[UNK]"},
            {"continuing_subword_prefix", "##"},
            {"max_input_chars_per_word", max_chars},
            {"vocab", v}}}};
}

// Weights as exact small-mantissa values (m * scale, |m| < 256, scale a power of two).
struct RefModel {
  Dims d;
  int64_t V;
  std::map<std::string, std::vector<float>> w;
  std::map<std::string, std::vector<int64_t>> shapes;
};

RefModel random_model(std::mt19937_64& rng, const Dims& d, int64_t V) {
  RefModel m{d, V, {}, {}};
  auto add = [&](const std::string& name, std::vector<int64_t> shape, int lo, int hi,
                 double scale) {
    size_t n = 1;
    for (int64_t s : shape) n *= size_t(s);
    std::uniform_int_distribution<int> u(lo, hi);
    std::vector<float> v(n);
    for (float& x : v) x = float(u(rng) * scale);
    m.w[name] = v;
    m.shapes[name] = shape;
  };
  const int64_t E = d.E, I = d.I;
  add("embeddings.word_embeddings.weight", {V, E}, -255, 255, 1.0 / 256);
  add("embeddings.position_embeddings.weight", {d.P, E}, -255, 255, 1.0 / 512);
  add("embeddings.token_type_embeddings.weight", {2, E}, -255, 255, 1.0 / 512);
  add("embeddings.LayerNorm.weight", {E}, 64, 191, 1.0 / 128);
  add("embeddings.LayerNorm.bias", {E}, -255, 255, 1.0 / 1024);
  for (int64_t l = 0; l < d.L; ++l) {
    const std::string p = "encoder.layer." + std::to_string(l) + ".";
    for (const char* qkv : {"query", "key", "value"}) {
      add(p + "attention.self." + qkv + ".weight", {E, E}, -255, 255, 1.0 / 1024);
      add(p + "attention.self." + qkv + ".bias", {E}, -255, 255, 1.0 / 512);
    }
    add(p + "attention.output.dense.weight", {E, E}, -255, 255, 1.0 / 1024);
    add(p + "attention.output.dense.bias", {E}, -255, 255, 1.0 / 512);
    add(p + "attention.output.LayerNorm.weight", {E}, 64, 191, 1.0 / 128);
    add(p + "attention.output.LayerNorm.bias", {E}, -255, 255, 1.0 / 1024);
    add(p + "intermediate.dense.weight", {I, E}, -255, 255, 1.0 / 1024);
    add(p + "intermediate.dense.bias", {I}, -255, 255, 1.0 / 512);
    add(p + "output.dense.weight", {E, I}, -255, 255, 1.0 / 2048);
    add(p + "output.dense.bias", {E}, -255, 255, 1.0 / 512);
    add(p + "output.LayerNorm.weight", {E}, 64, 191, 1.0 / 128);
    add(p + "output.LayerNorm.bias", {E}, -255, 255, 1.0 / 1024);
  }
  // A tensor the model does not use, of another dtype (as the real checkpoint has).
  m.shapes["embeddings.position_ids"] = {1, d.P};
  return m;
}

void write_model_dir(const std::string& dir, const RefModel& m, const std::string& dtype,
                     int max_seq_length) {
  std::map<std::string, RawTensor> raw;
  for (const auto& [name, v] : m.w) raw[name] = {dtype, m.shapes.at(name), encode(v, dtype)};
  std::string ids;
  for (int64_t i = 0; i < m.d.P; ++i) ids += u64_le(uint64_t(i));
  raw["embeddings.position_ids"] = {"I64", {1, m.d.P}, ids};
  write_file(dir + "/model.safetensors", safetensors_bytes(raw));
  const json config = {{"architectures", {"BertModel"}},
                       {"model_type", "bert"},
                       {"hidden_act", "gelu"},
                       {"hidden_size", m.d.E},
                       {"intermediate_size", m.d.I},
                       {"layer_norm_eps", 1e-12},
                       {"max_position_embeddings", m.d.P},
                       {"num_attention_heads", m.d.H},
                       {"num_hidden_layers", m.d.L},
                       {"position_embedding_type", "absolute"},
                       {"type_vocab_size", 2},
                       {"vocab_size", m.V}};
  write_file(dir + "/config.json", config.dump(2));
  write_file(dir + "/tokenizer.json", tokenizer_json(make_vocab()).dump());
  const json modules = json::array({{{"idx", 0},
                                     {"name", "0"},
                                     {"path", ""},
                                     {"type", "sentence_transformers.models.Transformer"}},
                                    {{"idx", 1},
                                     {"name", "1"},
                                     {"path", "1_Pooling"},
                                     {"type", "sentence_transformers.models.Pooling"}},
                                    {{"idx", 2},
                                     {"name", "2"},
                                     {"path", "2_Normalize"},
                                     {"type", "sentence_transformers.models.Normalize"}}});
  write_file(dir + "/modules.json", modules.dump(2));
  mkdir((dir + "/1_Pooling").c_str(), 0777);
  write_file(dir + "/1_Pooling/config.json", json({{"word_embedding_dimension", m.d.E},
                                                   {"pooling_mode_cls_token", false},
                                                   {"pooling_mode_mean_tokens", true},
                                                   {"pooling_mode_max_tokens", false},
                                                   {"pooling_mode_mean_sqrt_len_tokens", false}})
                                                 .dump());
  write_file(dir + "/sentence_bert_config.json",
             json({{"max_seq_length", max_seq_length}, {"do_lower_case", false}}).dump());
}

// ---- The float64 reference: BertModel + mean pooling + L2 normalisation, plain loops ----

using Mat = std::vector<double>;  // row-major

Mat lin(const Mat& x, int64_t rows, int64_t in, const std::vector<float>& w,
        const std::vector<float>& b, int64_t out) {
  Mat y(size_t(rows * out));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double s = b[size_t(o)];
      for (int64_t i = 0; i < in; ++i) s += x[size_t(r * in + i)] * double(w[size_t(o * in + i)]);
      y[size_t(r * out + o)] = s;
    }
  return y;
}

void layer_norm(Mat& x, int64_t rows, int64_t e, const std::vector<float>& g,
                const std::vector<float>& b) {
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int64_t k = 0; k < e; ++k) mean += x[size_t(r * e + k)];
    mean /= double(e);
    for (int64_t k = 0; k < e; ++k) var += std::pow(x[size_t(r * e + k)] - mean, 2);
    var /= double(e);
    for (int64_t k = 0; k < e; ++k)
      x[size_t(r * e + k)] =
          (x[size_t(r * e + k)] - mean) / std::sqrt(var + 1e-12) * g[size_t(k)] + b[size_t(k)];
  }
}

// The embedding of one sentence; q_out / k_out (if given) get each layer's Q and K [S, E].
std::vector<double> reference_embedding(const RefModel& m, const std::vector<int32_t>& ids,
                                        std::vector<Mat>* q_out = nullptr,
                                        std::vector<Mat>* k_out = nullptr) {
  const int64_t E = m.d.E, H = m.d.H, D = E / H, S = int64_t(ids.size()), I = m.d.I;
  auto W = [&](const std::string& n) -> const std::vector<float>& { return m.w.at(n); };
  Mat x(size_t(S * E));
  for (int64_t s = 0; s < S; ++s)
    for (int64_t k = 0; k < E; ++k)
      x[size_t(s * E + k)] =
          double(W("embeddings.word_embeddings.weight")[size_t(ids[s] * E + k)]) +
          W("embeddings.position_embeddings.weight")[size_t(s * E + k)] +
          W("embeddings.token_type_embeddings.weight")[size_t(k)];
  layer_norm(x, S, E, W("embeddings.LayerNorm.weight"), W("embeddings.LayerNorm.bias"));
  for (int64_t l = 0; l < m.d.L; ++l) {
    const std::string p = "encoder.layer." + std::to_string(l) + ".";
    const Mat q =
        lin(x, S, E, W(p + "attention.self.query.weight"), W(p + "attention.self.query.bias"), E);
    const Mat k =
        lin(x, S, E, W(p + "attention.self.key.weight"), W(p + "attention.self.key.bias"), E);
    const Mat v =
        lin(x, S, E, W(p + "attention.self.value.weight"), W(p + "attention.self.value.bias"), E);
    if (q_out) q_out->push_back(q);
    if (k_out) k_out->push_back(k);
    Mat ctx(size_t(S * E), 0.0);
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < S; ++i) {
        std::vector<double> sc(static_cast<size_t>(S));
        double mx = -INFINITY;
        for (int64_t j = 0; j < S; ++j) {
          double dot = 0;
          for (int64_t c = 0; c < D; ++c)
            dot += q[size_t(i * E + h * D + c)] * k[size_t(j * E + h * D + c)];
          sc[size_t(j)] = dot / std::sqrt(double(D));
          mx = std::max(mx, sc[size_t(j)]);
        }
        double sum = 0;
        for (double& s : sc) sum += (s = std::exp(s - mx));
        for (int64_t j = 0; j < S; ++j)
          for (int64_t c = 0; c < D; ++c)
            ctx[size_t(i * E + h * D + c)] += sc[size_t(j)] / sum * v[size_t(j * E + h * D + c)];
      }
    Mat a = lin(ctx, S, E, W(p + "attention.output.dense.weight"),
                W(p + "attention.output.dense.bias"), E);
    for (size_t t = 0; t < a.size(); ++t) x[t] += a[t];
    layer_norm(x, S, E, W(p + "attention.output.LayerNorm.weight"),
               W(p + "attention.output.LayerNorm.bias"));
    Mat hdn = lin(x, S, E, W(p + "intermediate.dense.weight"), W(p + "intermediate.dense.bias"), I);
    for (double& t : hdn) t = 0.5 * t * (1 + std::erf(t / std::sqrt(2.0)));
    Mat f = lin(hdn, S, I, W(p + "output.dense.weight"), W(p + "output.dense.bias"), E);
    for (size_t t = 0; t < f.size(); ++t) x[t] += f[t];
    layer_norm(x, S, E, W(p + "output.LayerNorm.weight"), W(p + "output.LayerNorm.bias"));
  }
  std::vector<double> pooled(size_t(E), 0.0);
  for (int64_t s = 0; s < S; ++s)
    for (int64_t k = 0; k < E; ++k) pooled[size_t(k)] += x[size_t(s * E + k)] / double(S);
  double n2 = 0;
  for (double t : pooled) n2 += t * t;
  for (double& t : pooled) t /= std::sqrt(n2);
  return pooled;
}

double rel_l2(const float* got, const double* want, size_t n, double* max_abs = nullptr) {
  double e2 = 0, r2 = 0, mx = 0;
  for (size_t i = 0; i < n; ++i) {
    const double e = double(got[i]) - want[i];
    e2 += e * e;
    r2 += want[i] * want[i];
    mx = std::max(mx, std::fabs(e));
  }
  if (max_abs) *max_abs = mx;
  return std::sqrt(e2 / r2);
}

uint64_t test_seed() {
  if (const char* s = getenv("SENTENCE_EMBEDDING_TEST_SEED")) return std::strtoull(s, nullptr, 10);
  return std::random_device{}() ^ (uint64_t(std::random_device{}()) << 32);
}

// End to end, f32 kernels against the float64 reference. Each f32 op is within rel L2 1e-5
// of float64 (docs/semantics.md); through 2 layers the embeddings (unit vectors) measured rel L2
// 1e-7 to 5e-7 (max 4.8e-7 over 8 runs of all four models, x86 AVX-512), so 2e-5 leaves a 40x
// margin without hiding a real mistake: dropping kv_len fails every padded sentence, and the
// tanh approximation of GELU in place of erf (rel L2 ~1e-4) fails too.
constexpr double kEmbeddingTolerance = 2e-5;

struct ModelCase {
  Dims dims;
  const char* dtype;
};

void PrintTo(const ModelCase& c, std::ostream* os) {
  *os << c.dtype << " E" << c.dims.E << " H" << c.dims.H << " L" << c.dims.L << " I" << c.dims.I;
}

class RandomModel : public ::testing::TestWithParam<ModelCase> {};

TEST_P(RandomModel, MatchesFloat64Reference) {
  const ModelCase c = GetParam();
  const uint64_t seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (SENTENCE_EMBEDDING_TEST_SEED reruns it)");
  std::mt19937_64 rng(seed);
  const std::vector<std::string> vocab = make_vocab();
  const RefModel m = random_model(rng, c.dims, int64_t(vocab.size()));
  const int max_seq = 24;
  const TempDir tmp;
  const std::string dir = tmp.path();
  write_model_dir(dir, m, c.dtype, max_seq);

  const SentenceEncoder enc = SentenceEncoder::load(dir);
  EXPECT_EQ(enc.max_length(), size_t(max_seq));
  EXPECT_TRUE(enc.normalize());
  EXPECT_EQ(enc.pooling(), Pooling::kMean);

  // Sentences of random whole words (lengths 1 to 30 words, so one is truncated), their
  // expected ids known without the tokenizer.
  std::vector<std::string> sentences;
  std::vector<std::vector<int32_t>> want_ids;
  std::uniform_int_distribution<size_t> word(0, kWords.size() - 3);  // not the CJK ones
  for (int len : {1, 7, 30, 3, 12, 22}) {
    std::string s;
    std::vector<int32_t> ids = {2};
    for (int w = 0; w < len; ++w) {
      const size_t i = word(rng);
      s += (w ? " " : "") + kWords[i];
      if (int(ids.size()) < max_seq - 1) ids.push_back(int32_t(5 + i));
    }
    ids.push_back(3);
    sentences.push_back(s);
    want_ids.push_back(ids);
  }
  std::vector<Encoding> encodings;
  for (size_t i = 0; i < sentences.size(); ++i) {
    encodings.push_back(enc.tokenize(sentences[i]));
    ASSERT_EQ(encodings.back().ids, want_ids[i]) << sentences[i];
  }

  const size_t E = size_t(c.dims.E);
  // All at once (padded to the longest, masked through kv_len), two by two, and one by one.
  for (size_t batch : {size_t(32), size_t(2), size_t(1)}) {
    const std::vector<float> got = enc.embed(encodings, batch);
    ASSERT_EQ(got.size(), sentences.size() * E);
    for (size_t i = 0; i < sentences.size(); ++i) {
      const std::vector<double> want = reference_embedding(m, want_ids[i]);
      double max_abs;
      const double rel = rel_l2(&got[i * E], want.data(), E, &max_abs);
      EXPECT_LE(rel, kEmbeddingTolerance)
          << "batch " << batch << ", sentence " << i << " (" << want_ids[i].size() << " tokens)";
      if (batch == 32)
        std::printf("  [%s E%lld H%lld] sentence %zu, %zu tokens: rel L2 %.2e, max abs %.2e\n",
                    c.dtype, (long long)c.dims.E, (long long)c.dims.H, i, want_ids[i].size(), rel,
                    max_abs);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Models, RandomModel,
    ::testing::Values(ModelCase{{64, 2, 2, 128, 64}, "F32"},   // head dim 32, as MiniLM
                      ModelCase{{64, 4, 2, 128, 64}, "F32"},   // head dim 16 (generic kernels)
                      ModelCase{{96, 3, 2, 160, 64}, "BF16"},  // converted on load
                      ModelCase{{64, 2, 2, 128, 64}, "F16"}),
    [](const ::testing::TestParamInfo<ModelCase>& i) {
      return std::string(i.param.dtype) + "_E" + std::to_string(i.param.dims.E) + "_H" +
             std::to_string(i.param.dims.H);
    });

// --dump-qk's files: npy 1.0 headers byte for byte, and each layer's projected Q and K.
TEST(RandomModelDump, QkNpyFiles) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const Dims d{64, 2, 2, 128, 64};
  const RefModel m = random_model(rng, d, int64_t(make_vocab().size()));
  const TempDir tmp;
  const std::string dir = tmp.path();
  write_model_dir(dir, m, "F32", 64);
  const SentenceEncoder enc = SentenceEncoder::load(dir);
  const Encoding e = enc.tokenize("The quick brown fox, unaffable!");
  const std::vector<std::string> want_tokens = {"[CLS]", "the",   "quick",  "brown", "fox",  ",",
                                                "un",    "##aff", "##able", "!",     "[SEP]"};
  ASSERT_EQ(e.tokens, want_tokens);
  const QkvObserver dump = qk_dump_observer(enc.model().config(), dir);
  enc.embed({e}, 1, &dump);
  write_tokens(dir + "/tokens.txt", e.tokens);
  EXPECT_EQ(read_file(dir + "/tokens.txt"),
            "[CLS]\nthe\nquick\nbrown\nfox\n,\nun\n##aff\n##able\n!\n[SEP]\n");

  std::vector<Mat> q_ref, k_ref;
  reference_embedding(m, e.ids, &q_ref, &k_ref);
  const int64_t S = int64_t(e.ids.size());
  std::string dict =
      "{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(S) + ", 2, 32), }";
  for (int64_t l = 0; l < d.L; ++l)
    for (const char* which : {"q", "k"}) {
      const std::string path = dir + "/layer" + std::to_string(l) + "_" + which + ".npy";
      const std::string f = read_file(path);
      ASSERT_GE(f.size(), 10u) << path;
      EXPECT_EQ(f.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8)) << path;
      const size_t hlen = size_t((unsigned char)f[8]) | size_t((unsigned char)f[9]) << 8;
      EXPECT_EQ((10 + hlen) % 64, 0u) << path;
      const std::string header = f.substr(10, hlen);
      EXPECT_EQ(header.substr(0, dict.size()), dict) << path;
      EXPECT_EQ(header.back(), '\n');
      EXPECT_EQ(header.find_first_not_of(' ', dict.size()), hlen - 1) << "space padding";
      ASSERT_EQ(f.size(), 10 + hlen + size_t(S) * 64 * 4) << path;
      std::vector<float> got(size_t(S) * 64);
      for (size_t i = 0; i < got.size(); ++i) {
        uint32_t b = 0;
        for (int k = 0; k < 4; ++k)
          b |= uint32_t((unsigned char)f[10 + hlen + 4 * i + k]) << (8 * k);
        std::memcpy(&got[i], &b, 4);
      }
      const Mat& want = (which[0] == 'q' ? q_ref : k_ref)[size_t(l)];
      EXPECT_LE(rel_l2(got.data(), want.data(), got.size()), kEmbeddingTolerance) << path;
    }
}

TEST(Npy, HeaderMatchesNumpy) {
  // numpy.save(np.zeros((11, 12, 32), np.float32)) writes exactly this header.
  const std::string h = npy_header_f32({11, 12, 32});
  std::string want = std::string("\x93NUMPY\x01\x00\x76\x00", 10) +
                     "{'descr': '<f4', 'fortran_order': False, 'shape': (11, 12, 32), }";
  want.append(127 - want.size(), ' ');
  want += '\n';
  EXPECT_EQ(h, want);
  EXPECT_EQ(npy_header_f32({5}).substr(10, 62),
            "{'descr': '<f4', 'fortran_order': False, 'shape': (5,), }     ");
}

// ---- Tokenizer ----

class Tokenizer : public ::testing::Test {
 protected:
  void SetUp() override {
    tok_ = WordPieceTokenizer::from_json_text(tokenizer_json(make_vocab(), 12).dump(), "test");
  }
  std::vector<std::string> tokens(const std::string& text, size_t max_length = 512) {
    return tok_.encode(text, max_length).tokens;
  }
  WordPieceTokenizer tok_;
};

using V = std::vector<std::string>;

TEST_F(Tokenizer, SubwordsPunctuationUnknown) {
  EXPECT_EQ(tokens("unaffable"), V({"[CLS]", "un", "##aff", "##able", "[SEP]"}));
  EXPECT_EQ(tokens("runs running"), V({"[CLS]", "run", "##s", "run", "##ning", "[SEP]"}));
  EXPECT_EQ(tokens("Hello, world!"), V({"[CLS]", "hello", ",", "world", "!", "[SEP]"}));
  EXPECT_EQ(tokens("don't"), V({"[CLS]", "don", "'", "t", "[SEP]"}));
  EXPECT_EQ(tokens("(dog)...?"), V({"[CLS]", "(", "dog", ")", ".", ".", ".", "?", "[SEP]"}));
  // A word with any unmatched rest is one [UNK], not a partial split.
  EXPECT_EQ(tokens("dogx cat zebra"), V({"[CLS]", "[UNK]", "cat", "[UNK]", "[SEP]"}));
  // Longer than max_input_chars_per_word (12 here): [UNK] without trying.
  EXPECT_EQ(tokens("unaffableness"), V({"[CLS]", "[UNK]", "[SEP]"}));
  EXPECT_EQ(tokens("unaffables"), V({"[CLS]", "un", "##aff", "##able", "##s", "[SEP]"}));
  EXPECT_EQ(tokens(""), V({"[CLS]", "[SEP]"}));
  EXPECT_EQ(tok_.encode("the cat", 512).ids, std::vector<int32_t>({2, 5, 13, 3}));
}

TEST_F(Tokenizer, NormalisesCaseAccentsWhitespaceControls) {
  EXPECT_EQ(tokens("THE Quick\tBROWN\n\r fox"),
            V({"[CLS]", "the", "quick", "brown", "fox", "[SEP]"}));
  EXPECT_EQ(tokens("Café NAÏVE"), V({"[CLS]", "cafe", "naive", "[SEP]"}));
  // Already decomposed: e + U+0301.
  EXPECT_EQ(tokens("cafe\xcc\x81"), V({"[CLS]", "cafe", "[SEP]"}));
  EXPECT_EQ(tok_.normalize("ÀÉÎÕÜÇÑÝ ÆØß Ŭŝ ΣΑΒ ДОМ"), "aeioucny æøß us σαβ дом");
  // Control and zero-width characters vanish; no-break spaces split.
  EXPECT_EQ(tokens("ca\x01t\xe2\x80\x8b sat\xc2\xa0on"), V({"[CLS]", "cat", "sat", "on", "[SEP]"}));
  // Unicode punctuation (em dash) splits; CJK ideographs are words of their own.
  EXPECT_EQ(tokens("cat—dog"), V({"[CLS]", "cat", "—", "dog", "[SEP]"}));
  EXPECT_EQ(tokens("中国x"), V({"[CLS]", "中", "国", "[UNK]", "[SEP]"}));
  // Invalid UTF-8 is dropped, not a crash.
  EXPECT_EQ(tokens("cat\xff\xc3"), V({"[CLS]", "cat", "[SEP]"}));
}

TEST_F(Tokenizer, Truncation) {
  EXPECT_EQ(tokens("the quick brown fox jumps", 5), V({"[CLS]", "the", "quick", "brown", "[SEP]"}));
  // Subword pieces count one by one.
  EXPECT_EQ(tokens("unaffable dog", 4), V({"[CLS]", "un", "##aff", "[SEP]"}));
  EXPECT_EQ(tokens("the quick", 2), V({"[CLS]", "[SEP]"}));
  EXPECT_EQ(tokens("the quick", 4), V({"[CLS]", "the", "quick", "[SEP]"}));
}

TEST(TokenizerSchema, RejectsWhatItDoesNotHandle) {
  json j = tokenizer_json(make_vocab());
  j["model"]["type"] = "BPE";
  EXPECT_THROW(WordPieceTokenizer::from_json_text(j.dump(), "t"), TokenizerError);
  j = tokenizer_json(make_vocab());
  j["pre_tokenizer"]["type"] = "Whitespace";
  EXPECT_THROW(WordPieceTokenizer::from_json_text(j.dump(), "t"), TokenizerError);
  j = tokenizer_json(make_vocab());
  j["model"]["unk_token"] = "<unk>";
  EXPECT_THROW(WordPieceTokenizer::from_json_text(j.dump(), "t"), TokenizerError);
  EXPECT_THROW(WordPieceTokenizer::from_json_text("{not json", "t"), TokenizerError);
  // Cased model: no lowercasing, and strip_accents follows lowercase.
  j = tokenizer_json(make_vocab());
  j["normalizer"]["lowercase"] = false;
  const auto t = WordPieceTokenizer::from_json_text(j.dump(), "t");
  EXPECT_EQ(t.normalize("Café"), "Café");
}

// ---- safetensors ----

std::string expect_error(const std::string& bytes) {
  try {
    SafeTensors::from_bytes(std::vector<uint8_t>(bytes.begin(), bytes.end()), "bad");
  } catch (const SafeTensorsError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

std::string with_header(const std::string& header, const std::string& data) {
  return u64_le(header.size()) + header + data;
}

TEST(SafeTensors, ReadsF32F16BF16) {
  const std::vector<float> v = {1.5f, -0.25f, 0.0f, 3.0f, -2.0f, 0.125f};
  const std::string f = safetensors_bytes({{"a", {"F32", {2, 3}, encode(v, "F32")}},
                                           {"b", {"F16", {6}, encode(v, "F16")}},
                                           {"c", {"BF16", {3, 2}, encode(v, "BF16")}},
                                           {"i", {"I64", {1}, u64_le(7)}}});
  const TempDir tmp;
  const std::string path = tmp.path() + "/t.safetensors";
  write_file(path, f);
  const SafeTensors st = SafeTensors::open(path);
  EXPECT_EQ(st.names(), std::vector<std::string>({"a", "b", "c", "i"}));
  EXPECT_EQ(st.metadata().at("format"), "pt");
  EXPECT_EQ(st.load_f32("a", {2, 3}), v);
  EXPECT_EQ(st.load_f32("b"), v);
  EXPECT_EQ(st.load_f32("c", {3, 2}), v);
  EXPECT_EQ(st.info("c").shape, std::vector<int64_t>({3, 2}));
  // Wrong dtype, wrong shape, absent: clear errors.
  EXPECT_THROW(st.load_f32("i"), SafeTensorsError);
  try {
    st.load_f32("i");
  } catch (const SafeTensorsError& e) {
    EXPECT_NE(std::string(e.what()).find("dtype I64, expected F32, F16 or BF16"), std::string::npos)
        << e.what();
  }
  try {
    st.load_f32("a", {3, 2});
    ADD_FAILURE();
  } catch (const SafeTensorsError& e) {
    EXPECT_NE(std::string(e.what()).find("shape [2, 3], expected [3, 2]"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(st.load_f32("missing"), SafeTensorsError);
  // Subnormal, infinity and NaN halves convert exactly.
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f16_to_f32(0x03ff), std::ldexp(1023.0f, -24));
  EXPECT_EQ(f16_to_f32(0xfc00), -INFINITY);
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7e00)));
  EXPECT_EQ(bf16_to_f32(0x3fc0), 1.5f);
}

TEST(SafeTensors, MalformedFilesAreErrors) {
  const std::string four(16, '\0');
  auto has = [](const std::string& msg, const char* what) {
    return msg.find(what) != std::string::npos;
  };
  EXPECT_PRED2(has, expect_error(""), "too short");
  EXPECT_PRED2(has, expect_error("\x05\x00\x00"), "too short");
  EXPECT_PRED2(has, expect_error(u64_le(1000) + "{}"), "header length 1000 exceeds");
  EXPECT_PRED2(has, expect_error(u64_le(~0ull) + "{}"), "exceeds");
  EXPECT_PRED2(has, expect_error(with_header("{\"a\": ", "")), "not valid JSON");
  EXPECT_PRED2(has, expect_error(with_header("[1, 2]", "")), "not a JSON object");
  EXPECT_PRED2(
      has,
      expect_error(with_header(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,32]}})", four)),
      "run past the data buffer");
  EXPECT_PRED2(
      has,
      expect_error(with_header(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[16,0]}})", four)),
      "begin after they end");
  EXPECT_PRED2(
      has,
      expect_error(with_header(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})", four)),
      "expected 12");
  EXPECT_PRED2(
      has,
      expect_error(with_header(R"({"a":{"dtype":"Q4","shape":[4],"data_offsets":[0,16]}})", four)),
      "unknown dtype");
  EXPECT_PRED2(has,
               expect_error(with_header(
                   R"({"a":{"dtype":"F32","shape":[-4],"data_offsets":[0,16]}})", four)),
               "not a list of sizes");
  EXPECT_PRED2(
      has,
      expect_error(with_header(
          R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,4],"data_offsets":[0,16]}})",
          four)),
      "overflows");
  EXPECT_PRED2(
      has,
      expect_error(with_header(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0]}})", four)),
      "data_offsets");
  EXPECT_PRED2(has, expect_error(with_header(R"({"a":{"dtype":"F32","shape":[4]}})", four)),
               "data_offsets");
  EXPECT_PRED2(has,
               expect_error(with_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},
                                            "b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                                        four)),
               "overlap");
  EXPECT_PRED2(
      has,
      expect_error(with_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", four)),
      "cover 8 of the 16");
  EXPECT_PRED2(has, expect_error(with_header(R"({"__metadata__": [1]})", "")), "__metadata__");
  EXPECT_THROW(SafeTensors::open("/nonexistent/model.safetensors"), SafeTensorsError);
}

TEST(ModelLoading, MissingTensorsAndUnsupportedConfigsAreErrors) {
  std::mt19937_64 rng(test_seed());
  const Dims d{64, 2, 1, 128, 64};
  RefModel m = random_model(rng, d, int64_t(make_vocab().size()));
  const TempDir tmp;
  const std::string dir = tmp.path();
  write_model_dir(dir, m, "F32", 64);
  EXPECT_NO_THROW(SentenceEncoder::load(dir));
  // A weight of the wrong shape names the tensor.
  RefModel bad = m;
  bad.w["encoder.layer.0.intermediate.dense.bias"].resize(127);
  bad.shapes["encoder.layer.0.intermediate.dense.bias"] = {127};
  write_model_dir(dir, bad, "F32", 64);
  try {
    SentenceEncoder::load(dir);
    ADD_FAILURE() << "loaded a wrong shape";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(
        std::string(e.what()).find("intermediate.dense.bias\" has shape [127], expected [128]"),
        std::string::npos)
        << e.what();
  }
  write_model_dir(dir, m, "F32", 64);
  json config = json::parse(read_file(dir + "/config.json"));
  config["hidden_act"] = "relu";
  write_file(dir + "/config.json", config.dump());
  EXPECT_THROW(SentenceEncoder::load(dir), std::runtime_error);
}

}  // namespace
}  // namespace embed
