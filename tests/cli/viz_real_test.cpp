// Tests of `attngen viz` on real-head inputs (tools/attngen/README.md, "Real heads"): Q and K
// written here as .npy and safetensors files, built so that each head has a known pattern
// (diagonal, previous token, broad, first-token sink, [SEP] sink, saturated, local,
// long-range) with fresh random vectors and noise every run. The report's figures are checked
// against the measures computed here in float64, from the README's definitions, on weights
// computed here in float64 from the same Q and K; malformed inputs must exit with status 2 and
// a message naming the problem.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "tests/cli/cli_util.h"

namespace fs = std::filesystem;
using namespace attngen_cli_test;

namespace {

// ---- Writing inputs.

std::string shape_tuple(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t k = 0; k < shape.size(); ++k) s += (k ? ", " : "") + std::to_string(shape[k]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

std::string bytes_of(const std::vector<float>& data) {
  return std::string(reinterpret_cast<const char*>(data.data()), data.size() * sizeof(float));
}

// An .npy file as numpy writes it (header padded to a multiple of 64 with spaces and '\n').
std::string npy_bytes(const std::vector<int64_t>& shape, const std::string& data, int version = 1,
                      const std::string& descr = "<f4", bool fortran = false) {
  std::string dict = "{'descr': '" + descr + "', 'fortran_order': " + (fortran ? "True" : "False") +
                     ", 'shape': " + shape_tuple(shape) + ", }";
  const size_t pre = version == 1 ? 10 : 12;
  dict += std::string(64 - (pre + dict.size() + 1) % 64, ' ') + "\n";
  std::string out = "\x93NUMPY";
  out += char(version);
  out += char(0);
  const uint32_t n = uint32_t(dict.size());
  out += char(n & 0xff);
  out += char((n >> 8) & 0xff);
  if (version != 1) {
    out += char((n >> 16) & 0xff);
    out += char((n >> 24) & 0xff);
  }
  return out + dict + data;
}

void write_file(const fs::path& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary);
  f << bytes;
  ASSERT_TRUE(f.good()) << p;
}

void write_npy(const fs::path& p, const std::vector<int64_t>& shape, const std::vector<float>& data,
               int version = 1) {
  write_file(p, npy_bytes(shape, bytes_of(data), version));
}

struct StEntry {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::string data;
};

std::string safetensors_bytes(const std::vector<StEntry>& entries) {
  nlohmann::json h = {{"__metadata__", {{"format", "pt"}}}};
  std::string data;
  for (const StEntry& e : entries) {
    h[e.name] = {{"dtype", e.dtype},
                 {"shape", e.shape},
                 {"data_offsets", {data.size(), data.size() + e.data.size()}}};
    data += e.data;
  }
  std::string header = h.dump();
  header += std::string((8 - header.size() % 8) % 8, ' ');
  std::string out;
  for (int k = 0; k < 8; ++k) out += char((uint64_t(header.size()) >> (8 * k)) & 0xff);
  return out + header + data;
}

void write_tokens(const fs::path& p, const std::vector<std::string>& tokens) {
  std::string s;
  for (const std::string& t : tokens) s += t + "\n";
  write_file(p, s);
}

// ---- Heads with known structure. q [S, H, D], k [S, Hkv, D], float32 as the tool reads them.

struct Case {
  int64_t seq = 0, heads = 0, heads_kv = 0, dim = 0;
  bool causal = false;
  std::vector<float> q, k;
  std::vector<std::string> tokens;  // empty: none given
  std::vector<std::string> expect;  // the pattern each head was built to have
  std::vector<std::string> expect_flags;
};

class Builder {
 public:
  Builder(Case& c, uint64_t seed) : c_(c), rng_(seed) {
    c_.q.assign(size_t(c.seq * c.heads * c.dim), 0.0f);
    c_.k.assign(size_t(c.seq * c.heads_kv * c.dim), 0.0f);
  }
  std::vector<double> unit() {
    std::vector<double> v(size_t(c_.dim));
    double n = 0;
    for (double& x : v) {
      x = normal_(rng_);
      n += x * x;
    }
    for (double& x : v) x /= std::sqrt(n);
    return v;
  }
  std::vector<std::vector<double>> units() {
    std::vector<std::vector<double>> u;
    for (int64_t s = 0; s < c_.seq; ++s) u.push_back(unit());
    return u;
  }
  // Amplitude a such that a^2 * (unit . unit) / sqrt(D) = score.
  double amp(double score) const { return std::sqrt(score * std::sqrt(double(c_.dim))); }
  void set_q(int64_t s, int64_t h, const std::vector<double>& v, double a) {
    for (int64_t d = 0; d < c_.dim; ++d) q(s, h, d) += float(a * v[size_t(d)]);
  }
  void set_k(int64_t s, int64_t h, const std::vector<double>& v, double a) {
    for (int64_t d = 0; d < c_.dim; ++d) k(s, h, d) += float(a * v[size_t(d)]);
  }
  float& q(int64_t s, int64_t h, int64_t d) {
    return c_.q[size_t((s * c_.heads + h) * c_.dim + d)];
  }
  float& k(int64_t s, int64_t h, int64_t d) {
    return c_.k[size_t((s * c_.heads_kv + h) * c_.dim + d)];
  }
  // Noise on every element from dim `from` on: scores move by about sigma^2 * sqrt(D) / ...
  void noise(double sigma, int64_t from = 0) {
    for (int64_t s = 0; s < c_.seq; ++s) {
      for (int64_t d = from; d < c_.dim; ++d) {
        for (int64_t h = 0; h < c_.heads; ++h) q(s, h, d) += float(sigma * normal_(rng_));
        for (int64_t h = 0; h < c_.heads_kv; ++h) k(s, h, d) += float(sigma * normal_(rng_));
      }
    }
  }
  std::mt19937_64& rng() { return rng_; }

 private:
  Case& c_;
  std::mt19937_64 rng_;
  std::normal_distribution<double> normal_{0.0, 1.0};
};

const char* kWords[] = {"the",  "quick", "brown", "fox",   "jumps", "over",
                        "lazy", "dog",   "and",   "then",  "a",     "cat",
                        "sat",  "on",    "mat",   "while", "it",    "was",
                        "very", "quiet", "in",    "old",   "town",  "extraordinarily"};

// Eight heads over 24 tokens, [CLS] ... [SEP], not causal, D 64, one kv head per head.
Case bidirectional_case(uint64_t seed) {
  Case c;
  c.seq = 24;
  c.heads = c.heads_kv = 8;
  c.dim = 64;
  c.tokens.push_back("[CLS]");
  for (int64_t s = 1; s + 1 < c.seq; ++s) c.tokens.push_back(kWords[s % 24]);
  c.tokens.push_back("[SEP]");
  Builder b(c, seed);
  const int64_t S = c.seq;
  {  // 0: diagonal, q_i = k_i
    const auto x = b.units();
    for (int64_t s = 0; s < S; ++s) b.set_q(s, 0, x[s], b.amp(6)), b.set_k(s, 0, x[s], b.amp(6));
  }
  {  // 1: previous token, q_i = k_{i-1}
    const auto x = b.units();
    const auto first = b.unit();
    for (int64_t s = 0; s < S; ++s) {
      b.set_q(s, 1, s > 0 ? x[s - 1] : first, b.amp(6));
      b.set_k(s, 1, x[s], b.amp(6));
    }
  }
  // 2: broad: noise only.
  {  // 3: first-token sink: one direction, in k_0 and every q
    const auto u = b.unit();
    b.set_k(0, 3, u, b.amp(5));
    for (int64_t s = 0; s < S; ++s) b.set_q(s, 3, u, b.amp(5));
  }
  {  // 4: [SEP] sink, the last token
    const auto u = b.unit();
    b.set_k(S - 1, 4, u, b.amp(5));
    for (int64_t s = 0; s < S; ++s) b.set_q(s, 4, u, b.amp(5));
  }
  {  // 5: diagonal again, saturated (score 30)
    const auto x = b.units();
    for (int64_t s = 0; s < S; ++s) {
      b.set_q(s, 5, x[s], b.amp(30));
      b.set_k(s, 5, x[s], b.amp(30));
    }
  }
  {  // 6: local: score -(i - j)^2 / 2 from dims 0 and 1 (noise from dim 2 on)
    const double lambda = 0.5, root_d = std::sqrt(double(c.dim)), centre = 0.5 * double(S - 1);
    for (int64_t s = 0; s < S; ++s) {
      const double x = double(s) - centre;
      b.q(s, 6, 0) = float(root_d * 2 * lambda * x);
      b.k(s, 6, 0) = float(x);
      b.q(s, 6, 1) = float(-root_d * lambda);
      b.k(s, 6, 1) = float(x * x);
    }
  }
  {  // 7: long-range: q_i = k_{(i + S/2) mod S}
    const auto x = b.units();
    for (int64_t s = 0; s < S; ++s) {
      b.set_q(s, 7, x[size_t((s + S / 2) % S)], b.amp(6));
      b.set_k(s, 7, x[s], b.amp(6));
    }
  }
  // Noise everywhere but head 6's position dims (scores move by ~0.03^2 * 64 / 8 ... ~0.01).
  for (int64_t s = 0; s < S; ++s) {
    std::normal_distribution<double> n(0.0, 0.03);
    for (int64_t h = 0; h < c.heads; ++h) {
      for (int64_t d = h == 6 ? 2 : 0; d < c.dim; ++d) {
        b.q(s, h, d) += float(n(b.rng()));
        b.k(s, h, d) += float(n(b.rng()));
      }
    }
  }
  c.expect = {"diagonal",       "previous_token", "broad", "first_token_sink",
              "separator_sink", "diagonal",       "local", "long_range"};
  c.expect_flags = {"", "", "prune", "", "", "scale", "", ""};
  return c;
}

// Four query heads over two kv heads (grouped-query), causal, D 40 (a generic kernel), 30 tokens,
// no token labels.
Case causal_gqa_case(uint64_t seed) {
  Case c;
  c.seq = 30;
  c.heads = 4;
  c.heads_kv = 2;
  c.dim = 40;
  c.causal = true;
  Builder b(c, seed);
  const int64_t S = c.seq;
  const auto x = b.units();
  const auto first = b.unit();
  const auto u = b.unit();
  for (int64_t s = 0; s < S; ++s) {
    b.set_k(s, 0, x[s], b.amp(6));
    b.set_q(s, 0, x[s], b.amp(6));                      // diagonal
    b.set_q(s, 1, s > 0 ? x[s - 1] : first, b.amp(6));  // previous token
    b.set_q(s, 3, u, b.amp(5));                         // first-token sink (kv head 1)
  }
  b.set_k(0, 1, u, b.amp(5));
  b.noise(0.03);  // head 2 (kv head 1): noise only, broad
  c.expect = {"diagonal", "previous_token", "broad", "first_token_sink"};
  c.expect_flags = {"", "", "prune", ""};
  return c;
}

// ---- The float64 reference: weights, then the measures of tools/attngen/README.md.

std::vector<double> reference_weights(const Case& c) {
  const int64_t S = c.seq, H = c.heads, D = c.dim, g = c.heads / c.heads_kv;
  std::vector<double> w(size_t(H * S * S), 0.0);
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t i = 0; i < S; ++i) {
      std::vector<double> s(size_t(S), -INFINITY);
      double mx = -INFINITY;
      for (int64_t j = 0; j < S && (!c.causal || j <= i); ++j) {
        double dot = 0;
        for (int64_t d = 0; d < D; ++d) {
          dot += double(c.q[size_t((i * H + h) * D + d)]) *
                 double(c.k[size_t((j * c.heads_kv + h / g) * D + d)]);
        }
        s[size_t(j)] = dot / std::sqrt(double(D));
        mx = std::max(mx, s[size_t(j)]);
      }
      double sum = 0;
      for (int64_t j = 0; j < S; ++j) sum += std::isinf(s[size_t(j)]) ? 0 : std::exp(s[j] - mx);
      for (int64_t j = 0; j < S; ++j) {
        w[size_t((h * S + i) * S + j)] = std::isinf(s[size_t(j)]) ? 0 : std::exp(s[j] - mx) / sum;
      }
    }
  }
  return w;
}

struct Measures {
  double rows = 0, masked = 0, entropy = 0, entropy_norm = 0, max_weight = 0, saturation = 0;
  double diagonal = 0, previous = 0, first = 0, separator = -1, local = 0, band = 0;
  double distance = 0, distance_ratio = 0;
  std::string pattern, flags;
  bool near_threshold = false;  // a measure within 1e-4 of a threshold: classes not compared
  int ambiguous_rows = 0;       // rows whose maximum is within 1e-4 of 0.99
};

bool sep_token(const std::string& t) { return t == "[SEP]" || t == "</s>"; }

Measures reference_measures(const double* w, int64_t S, bool causal,
                            const std::vector<std::string>& tokens) {
  Measures m;
  const int64_t band = std::max<int64_t>(2, (S + 31) / 32);
  m.band = double(band);
  double uniform = 0, sep_sum = 0, saturated = 0;
  int after_first = 0, sep_rows = 0;
  bool any_sep = false;
  for (const std::string& t : tokens) any_sep = any_sep || sep_token(t);
  for (int64_t i = 0; i < S; ++i) {
    const int64_t n = causal ? i + 1 : S;
    double sum = 0;
    for (int64_t j = 0; j < S; ++j) sum += w[i * S + j];
    if (sum == 0) {
      ++m.masked;
      continue;
    }
    if (n < 2) continue;
    double mx = 0, h = 0, loc = 0, dist = 0, u = 0, on_sep = 0;
    for (int64_t j = 0; j < S; ++j) {
      const double p = w[i * S + j] / sum;
      mx = std::max(mx, p);
      if (p > 0) h -= p * std::log2(p);
      if (std::llabs(i - j) <= band) loc += p;
      dist += p * double(std::llabs(i - j));
      if (j < n || !causal) u += double(std::llabs(i - j));
      if (any_sep && sep_token(tokens[size_t(j)])) on_sep += p;
    }
    ++m.rows;
    m.entropy += h;
    m.entropy_norm += h / std::log2(double(n));
    m.max_weight += mx;
    saturated += mx > 0.99;
    m.ambiguous_rows += std::fabs(mx - 0.99) < 1e-4;
    m.diagonal += w[i * S + i] / sum;
    m.local += loc;
    m.distance += dist;
    uniform += u / double(n);
    if (i >= 1) {
      ++after_first;
      m.previous += w[i * S + i - 1] / sum;
      m.first += w[i * S] / sum;
    }
    if (any_sep && !sep_token(tokens[size_t(i)])) {
      ++sep_rows;
      sep_sum += on_sep;
    }
  }
  m.entropy /= m.rows;
  m.entropy_norm /= m.rows;
  m.max_weight /= m.rows;
  m.saturation = saturated / m.rows;
  m.diagonal /= m.rows;
  m.local /= m.rows;
  m.distance /= m.rows;
  m.distance_ratio = m.distance / (uniform / m.rows);
  m.previous /= after_first;
  m.first /= after_first;
  if (sep_rows > 0) m.separator = sep_sum / sep_rows;
  const auto near = [&](double v, double t) { m.near_threshold |= std::fabs(v - t) < 1e-4; };
  near(m.diagonal, 0.5);
  near(m.previous, 0.5);
  near(m.first, 0.5);
  near(m.separator, 0.5);
  near(m.entropy_norm, 0.9);
  near(m.local, 0.8);
  near(m.distance_ratio, 1.25);
  near(m.saturation, 0.5);
  if (m.diagonal >= 0.5) {
    m.pattern = "diagonal";
  } else if (m.previous >= 0.5) {
    m.pattern = "previous_token";
  } else if (m.first >= 0.5) {
    m.pattern = "first_token_sink";
  } else if (m.separator >= 0.5) {
    m.pattern = "separator_sink";
  } else if (m.entropy_norm >= 0.9) {
    m.pattern = "broad";
  } else if (m.local >= 0.8) {
    m.pattern = "local";
  } else if (m.distance_ratio >= 1.25) {
    m.pattern = "long_range";
  } else {
    m.pattern = "mixed";
  }
  if (m.entropy_norm >= 0.9) m.flags = "prune";
  if (m.saturation > 0.5) m.flags += m.flags.empty() ? "scale" : ";scale";
  return m;
}

// ---- Reading the report.

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (const char c : s) {
    if (c == sep) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}

std::vector<std::map<std::string, std::string>> read_csv(const fs::path& p) {
  std::vector<std::map<std::string, std::string>> rows;
  std::ifstream f(p);
  std::string line;
  std::vector<std::string> names;
  while (std::getline(f, line)) {
    const std::vector<std::string> v = split(line, ',');
    if (names.empty()) {
      names = v;
      continue;
    }
    std::map<std::string, std::string> row;
    for (size_t k = 0; k < names.size() && k < v.size(); ++k) row[names[k]] = v[k];
    rows.push_back(row);
  }
  return rows;
}

double num(const std::map<std::string, std::string>& row, const std::string& key) {
  const auto it = row.find(key);
  if (it == row.end()) {
    ADD_FAILURE() << "no column " << key;
    return NAN;
  }
  return it->second.empty() ? -1.0 : std::stod(it->second);
}

class VizReal : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "attngen_viz_real.XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr) << std::strerror(errno);
    dir_ = tmpl;
    seed_ = std::random_device{}();
    std::printf("seed %llu\n", static_cast<unsigned long long>(seed_));
  }
  void TearDown() override {
    if (!HasFailure()) {
      std::error_code ec;
      fs::remove_all(dir_, ec);
    } else {
      std::printf("outputs kept in %s (seed %llu)\n", dir_.c_str(),
                  static_cast<unsigned long long>(seed_));
    }
  }
  RunResult run(const std::vector<std::string>& args) { return run_tool(dir_, args); }

  // Writes the case's inputs into dir as layer<L>_{q,k}.npy (and tokens.txt).
  void write_case(const Case& c, const fs::path& dir, int layer = 0) {
    fs::create_directories(dir);
    const std::string stem = (dir / ("layer" + std::to_string(layer))).string();
    write_npy(stem + "_q.npy", {c.seq, c.heads, c.dim}, c.q, 1);
    write_npy(stem + "_k.npy", {c.seq, c.heads_kv, c.dim}, c.k, 2);  // either version
    if (!c.tokens.empty()) write_tokens(dir / "tokens.txt", c.tokens);
  }

  // Checks report.csv in out against the float64 measures of w (the case's weights).
  void check_report(const Case& c, const std::vector<double>& w, const fs::path& out) {
    const auto rows = read_csv(out / "report.csv");
    ASSERT_EQ(int64_t(rows.size()), c.heads) << slurp(out / "report.csv");
    for (int64_t h = 0; h < c.heads; ++h) {
      SCOPED_TRACE("head " + std::to_string(h));
      const auto& row = rows[size_t(h)];
      const Measures m =
          reference_measures(&w[size_t(h * c.seq * c.seq)], c.seq, c.causal, c.tokens);
      EXPECT_EQ(num(row, "head"), double(h));
      EXPECT_EQ(num(row, "rows"), m.rows);
      EXPECT_EQ(num(row, "masked_rows"), m.masked);
      EXPECT_NEAR(num(row, "entropy_bits"), m.entropy, 5e-4);
      EXPECT_NEAR(num(row, "entropy_norm"), m.entropy_norm, 1e-4);
      EXPECT_NEAR(num(row, "max_weight"), m.max_weight, 1e-4);
      EXPECT_NEAR(num(row, "saturation"), m.saturation, 1e-6 + double(m.ambiguous_rows) / m.rows);
      EXPECT_NEAR(num(row, "diagonal"), m.diagonal, 1e-4);
      EXPECT_NEAR(num(row, "previous"), m.previous, 1e-4);
      EXPECT_NEAR(num(row, "first"), m.first, 1e-4);
      EXPECT_NEAR(num(row, "separator"), m.separator, 1e-4);
      EXPECT_NEAR(num(row, "local"), m.local, 1e-4);
      EXPECT_EQ(num(row, "band"), m.band);
      EXPECT_NEAR(num(row, "distance"), m.distance, 1e-3);
      EXPECT_NEAR(num(row, "distance_ratio"), m.distance_ratio, 1e-4);
      if (!m.near_threshold) {
        EXPECT_EQ(row.at("pattern"), m.pattern);
        EXPECT_EQ(row.at("flags"), m.flags);
      }
      // What the head was built to be (a property of the construction, checked so that a
      // reference that drifted along with the tool would still fail).
      EXPECT_EQ(row.at("pattern"), c.expect[size_t(h)]);
      EXPECT_EQ(row.at("flags"), c.expect_flags[size_t(h)]);
    }
  }

  fs::path dir_;
  uint64_t seed_ = 0;
};

std::vector<float> to_float(const std::vector<double>& v) {
  return std::vector<float>(v.begin(), v.end());
}

}  // namespace

// Q and K from .npy files through --dir / --layer: the kernel's weights, the measures and
// classes per head, the report files, the images.
TEST_F(VizReal, QkBidirectional) {
  const Case c = bidirectional_case(seed_);
  write_case(c, dir_ / "in", 3);
  const fs::path out = dir_ / "out";
  const RunResult r =
      run({"viz", "--dir", (dir_ / "in").string(), "--layer", "3", "--out", out.string()});
  ASSERT_TRUE(r.exited && r.status == 0) << r.status << "\n" << r.err << r.out;
  EXPECT_NE(r.out.find("kernel attn_"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[CLS] sink"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[SEP] sink"), std::string::npos) << r.out;
  const std::vector<double> w = reference_weights(c);
  check_report(c, w, out);

  // report.json: the same figures, the tokens, where each image's panel is.
  std::ifstream jf(out / "report.json");
  const nlohmann::json j = nlohmann::json::parse(jf, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << slurp(out / "report.json");
  EXPECT_EQ(j["seq"], c.seq);
  EXPECT_EQ(j["tokens"], c.tokens);
  EXPECT_EQ(j["causal"], false);
  ASSERT_EQ(j["head_stats"].size(), size_t(c.heads));
  const int side = panel_side(c.seq, 512), u = side / int(c.seq), line = line_height(side);
  for (int64_t h = 0; h < c.heads; ++h) {
    const nlohmann::json& hs = j["head_stats"][size_t(h)];
    EXPECT_EQ(hs["pattern"], c.expect[size_t(h)]);
    const Measures m = reference_measures(&w[size_t(h * c.seq * c.seq)], c.seq, false, c.tokens);
    EXPECT_NEAR(hs["entropy_norm"].get<double>(), m.entropy_norm, 1e-4);
    // The image: the panel where the report says, the layout of README.md around it.
    Png png;
    ASSERT_TRUE(read_png(out / hs["image"].get<std::string>(), png));
    const int x0 = hs["panel"]["x"], y0 = hs["panel"]["y"];
    EXPECT_EQ(hs["panel"]["side"], side);
    EXPECT_EQ(png.width, x0 + side + 8);
    EXPECT_EQ(png.height, y0 + side + 4 + 8 + 2 + line + 8);
    EXPECT_EQ(y0 - x0, 2 * line);  // label areas: as wide as they are high
    if (h == 5) {
      // The saturated diagonal head: far from the diagonal the weights are more than four
      // decades below the largest, the bottom of the colour scale (viridis purple).
      EXPECT_LT(png.at(x0 + 20 * u + u / 2, y0 + 2 * u + u / 2)[1], 60);
      EXPECT_GT(png.at(x0 + 9 * u + u / 2, y0 + 9 * u + u / 2)[1], 180);
    }
    if (h == 0) {
      // The diagonal head: bright (viridis yellow) on the diagonal.
      for (int i : {0, 7, 23}) {
        EXPECT_GT(png.at(x0 + i * u + u / 2, y0 + i * u + u / 2)[1], 180) << "cell " << i;
      }
      // Token labels: text-coloured pixels left of row 0 and above column 23.
      int left = 0, above = 0;
      for (int x = 8; x < x0 - 2; ++x) {
        for (int y = y0; y < y0 + u; ++y) left += png.luma(x, y) > 200;
      }
      for (int y = y0 - x0 + 8; y < y0 - 2; ++y) {
        for (int x = x0 + 23 * u; x < x0 + 24 * u; ++x) above += png.luma(x, y) > 200;
      }
      EXPECT_GT(left, 20) << "no label for [CLS]";
      EXPECT_GT(above, 20) << "no label for [SEP]";
    }
  }
  Png grid;
  EXPECT_TRUE(read_png(out / "heads_grid.png", grid));
}

// Grouped-query heads under causal on a generic kernel (D 40), through --q/--k, no tokens.
TEST_F(VizReal, QkCausalGroupedQuery) {
  const Case c = causal_gqa_case(seed_);
  write_case(c, dir_ / "in");
  const fs::path out = dir_ / "out";
  const RunResult r =
      run({"viz", "--q", (dir_ / "in" / "layer0_q.npy").string(), "--k",
           (dir_ / "in" / "layer0_k.npy").string(), "--causal", "--out", out.string()});
  ASSERT_TRUE(r.exited && r.status == 0) << r.status << "\n" << r.err << r.out;
  EXPECT_NE(r.out.find("_generic_"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("first-token sink"), std::string::npos) << r.out;
  check_report(c, reference_weights(c), out);
  // Causal: above the diagonal is masked, drawn black.
  std::ifstream jf(out / "report.json");
  const nlohmann::json j = nlohmann::json::parse(jf, nullptr, false);
  ASSERT_FALSE(j.is_discarded());
  Png png;
  ASSERT_TRUE(read_png(out / "head_2.png", png));
  const int x0 = j["head_stats"][2]["panel"]["x"], y0 = j["head_stats"][2]["panel"]["y"];
  const int u = panel_side(c.seq, 512) / int(c.seq);
  const uint8_t* above = png.at(x0 + 25 * u + u / 2, y0 + 3 * u + u / 2);
  EXPECT_EQ(above[0] + above[1] + above[2], 0);
}

// Safetensors: q and k in one file give the same report as the .npy files.
TEST_F(VizReal, Safetensors) {
  const Case c = bidirectional_case(seed_);
  write_case(c, dir_ / "in");
  write_file(dir_ / "qk.safetensors",
             safetensors_bytes({{"k", "F32", {c.seq, c.heads_kv, c.dim}, bytes_of(c.k)},
                                {"q", "F32", {1, c.seq, c.heads, c.dim}, bytes_of(c.q)}}));
  const fs::path a = dir_ / "a", b = dir_ / "b";
  const std::string tokens = (dir_ / "in" / "tokens.txt").string();
  RunResult r = run({"viz", "--dir", (dir_ / "in").string(), "--layer", "0", "--out", a.string()});
  ASSERT_TRUE(r.exited && r.status == 0) << r.err;
  r = run({"viz", "--tensors", (dir_ / "qk.safetensors").string(), "--tokens", tokens, "--out",
           b.string()});
  ASSERT_TRUE(r.exited && r.status == 0) << r.err;
  EXPECT_EQ(slurp(a / "report.csv"), slurp(b / "report.csv"));
  // --q and --k may name the same safetensors file.
  r = run({"viz", "--q", (dir_ / "qk.safetensors").string(), "--k",
           (dir_ / "qk.safetensors").string(), "--tokens", tokens, "--out", (dir_ / "c").string()});
  ASSERT_TRUE(r.exited && r.status == 0) << r.err;
  EXPECT_EQ(slurp(a / "report.csv"), slurp(dir_ / "c" / "report.csv"));
}

// --weights: the weights themselves, [H, S, S] (.npy) or [S, S] (safetensors 'weights');
// causal weights are recognised (nothing above the diagonal).
TEST_F(VizReal, Weights) {
  for (const bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "bidirectional");
    Case c = causal ? causal_gqa_case(seed_) : bidirectional_case(seed_);
    const std::vector<double> w = reference_weights(c);
    const fs::path in = dir_ / (causal ? "wc.npy" : "w.npy"), out = dir_ / (causal ? "oc" : "o");
    write_npy(in, {c.heads, c.seq, c.seq}, to_float(w));
    std::vector<std::string> args = {"viz", "--weights", in.string(), "--out", out.string()};
    if (!c.tokens.empty()) {
      write_tokens(dir_ / "tokens.txt", c.tokens);
      args.push_back("--tokens");
      args.push_back((dir_ / "tokens.txt").string());
    }
    const RunResult r = run(args);
    ASSERT_TRUE(r.exited && r.status == 0) << r.status << "\n" << r.err;
    EXPECT_EQ(r.out.find("kernel "), std::string::npos) << "no kernel runs on weights\n" << r.out;
    EXPECT_EQ(r.out.find("causal (detected") != std::string::npos, causal) << r.out;
    check_report(c, w, out);
  }
  // One head, [S, S], in a safetensors file.
  Case c = bidirectional_case(seed_);
  const std::vector<double> w = reference_weights(c);
  const std::vector<double> head0(w.begin(), w.begin() + c.seq * c.seq);
  write_file(dir_ / "w.safetensors",
             safetensors_bytes({{"weights", "F32", {c.seq, c.seq}, bytes_of(to_float(head0))}}));
  const RunResult r =
      run({"viz", "--tensors", (dir_ / "w.safetensors").string(), "--out", (dir_ / "s").string()});
  ASSERT_TRUE(r.exited && r.status == 0) << r.err;
  const auto rows = read_csv(dir_ / "s" / "report.csv");
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].at("pattern"), "diagonal");
  const Measures m = reference_measures(head0.data(), c.seq, false, {});
  EXPECT_NEAR(num(rows[0], "entropy_norm"), m.entropy_norm, 1e-4);
  EXPECT_NEAR(num(rows[0], "diagonal"), m.diagonal, 1e-4);
  EXPECT_EQ(rows[0].at("separator"), "");  // no tokens, no separator
}

// Rows that are all zero (masked) are counted apart and never make NaN.
TEST_F(VizReal, MaskedRows) {
  const int64_t S = 16;
  std::vector<float> w(size_t(2 * S * S), 0.0f);
  std::mt19937_64 rng(seed_);
  std::uniform_real_distribution<double> uni(0.1, 1.0);
  for (int64_t i = 0; i < S; ++i) {
    if (i % 4 == 3) continue;  // head 0: every 4th row masked; head 1 all masked
    double sum = 0;
    std::vector<double> row(static_cast<size_t>(S));
    for (double& x : row) sum += x = uni(rng);
    for (int64_t j = 0; j < S; ++j) w[size_t(i * S + j)] = float(row[size_t(j)] / sum);
  }
  write_npy(dir_ / "w.npy", {2, S, S}, w);
  const RunResult r =
      run({"viz", "--weights", (dir_ / "w.npy").string(), "--out", (dir_ / "o").string()});
  ASSERT_TRUE(r.exited && r.status == 0) << r.err;
  const auto rows = read_csv(dir_ / "o" / "report.csv");
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(num(rows[0], "masked_rows"), 4);
  EXPECT_EQ(num(rows[0], "rows"), 12);
  EXPECT_EQ(rows[0].at("pattern"), "broad");
  EXPECT_EQ(num(rows[1], "masked_rows"), double(S));
  EXPECT_EQ(rows[1].at("pattern"), "masked");
  EXPECT_EQ(r.out.find("nan"), std::string::npos) << r.out;
  EXPECT_EQ(slurp(dir_ / "o" / "report.csv").find("nan"), std::string::npos);
}

// Malformed inputs: exit status 2, a message naming the file and the problem, no output.
TEST_F(VizReal, MalformedInputs) {
  const int64_t S = 6, H = 2, D = 8;
  std::vector<float> q(size_t(S * H * D));
  std::mt19937_64 rng(seed_);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& x : q) x = normal(rng);
  const std::string data = bytes_of(q);
  const fs::path in = dir_ / "in";
  fs::create_directories(in);
  const auto file = [&](const std::string& name, const std::string& bytes) {
    write_file(in / name, bytes);
    return (in / name).string();
  };
  const std::string good = file("good.npy", npy_bytes({S, H, D}, data));
  write_tokens(in / "tokens6.txt", {"[CLS]", "a", "b", "c", "d", "[SEP]"});
  write_tokens(in / "tokens5.txt", {"[CLS]", "a", "b", "c", "[SEP]"});
  std::vector<float> qnan = q;
  qnan[size_t((2 * H + 1) * D + 3)] = NAN;
  std::vector<float> w(size_t(S * S), 1.0f / S);
  std::vector<float> wbad = w;
  wbad[7] = 0.5f;  // row 1 sums to about 1.33
  std::vector<float> wneg = w;
  wneg[0] = -wneg[0];
  const std::string gqa_k =
      file("k3.npy", npy_bytes({S, 3, D}, std::string(size_t(S * 3 * D * 4), '\0')));
  std::string big_data(size_t(10000) * 2 * 2 * 4, '\0');

  const std::string st_ok_q = bytes_of(q);
  struct Bad {
    std::vector<std::string> args;
    std::string message;  // a part of what stderr must say
  };
  const std::vector<Bad> cases = {
      {{"--q", file("magic.npy", "hello, not numpy at all"), "--k", good}, "neither .npy"},
      {{"--q", file("trunc.npy", npy_bytes({S, H, D}, data.substr(0, data.size() - 5))), "--k",
        good},
       "truncated"},
      {{"--q", file("long.npy", npy_bytes({S, H, D}, data + "xyz")), "--k", good},
       "3 bytes after the data"},
      {{"--q", file("f8.npy", npy_bytes({S, H, D / 2}, data, 1, "<f8")), "--k", good},
       "dtype '<f8'"},
      {{"--q", file("be.npy", npy_bytes({S, H, D}, data, 1, ">f4")), "--k", good}, "big-endian"},
      {{"--q", file("i4.npy", npy_bytes({S, H, D}, data, 1, "<i4")), "--k", good}, "dtype '<i4'"},
      {{"--q", file("fortran.npy", npy_bytes({S, H, D}, data, 1, "<f4", true)), "--k", good},
       "fortran_order"},
      {{"--q", file("v9.npy", "\x93NUMPY\x09" + std::string("\0", 1) + "xxxxxxxx"), "--k", good},
       "format version 9.0"},
      {{"--q",
        file("header.npy", "\x93NUMPY\x01" + std::string("\0", 1) + "\x20" + std::string("\0", 1) +
                               "{'descr': '<f4', 'shape': (6,"),
        "--k", good},
       "truncated .npy file"},
      {{"--q", file("dict.npy", npy_bytes({S, H, D}, data).replace(10, 2, "[[")), "--k", good},
       "malformed .npy header"},
      {{"--q", file("huge.npy", npy_bytes({1000000, 1000000, 64}, data)), "--k", good},
       "too large"},
      {{"--q", file("empty.npy", npy_bytes({0, H, D}, "")), "--k", good}, "empty tensor"},
      {{"--q", file("rank2.npy", npy_bytes({S, H * D}, data)), "--k", good}, "expected [S, H, D]"},
      {{"--q", good, "--k",
        file("k5.npy", npy_bytes({S - 1, H, D}, data.substr(0, (S - 1) * H * D * 4)))},
       "q has 6 tokens, k 5"},
      {{"--q", good, "--k", file("kd.npy", npy_bytes({S, H * 2, D / 2}, data))},
       "head dims differ"},
      {{"--q", good, "--k", gqa_k}, "grouped-query"},
      {{"--q", file("nan.npy", npy_bytes({S, H, D}, bytes_of(qnan))), "--k", good},
       "element [2, 1, 3] is nan"},
      {{"--q", good, "--k", good, "--tokens", (in / "tokens5.txt").string()},
       "5 tokens, but the inputs have S = 6"},
      {{"--q", (in / "missing.npy").string(), "--k", good}, "cannot open"},
      {{"--q", in.string(), "--k", good}, "is a directory"},
      {{"--q", file("bigq.npy", npy_bytes({10000, 2, 2}, big_data)), "--k",
        (in / "bigq.npy").string()},
       "256 MiB"},
      // safetensors
      {{"--tensors",
        file("hlen.safetensors", std::string("\xff\xff\x00\x00\x00\x00\x00\x00{}", 10))},
       "neither .npy"},
      {{"--tensors", file("json.safetensors", std::string("\x05\0\0\0\0\0\0\0{\"q\":", 13))},
       "not a JSON object"},
      {{"--tensors",
        file("f16.safetensors",
             safetensors_bytes({{"q", "F16", {S, H, D}, data.substr(0, data.size() / 2)},
                                {"k", "F32", {S, H, D}, data}}))},
       "dtype F16, expected F32"},
      {{"--tensors", file("nok.safetensors", safetensors_bytes({{"q", "F32", {S, H, D}, data}}))},
       "no tensor named 'k' (it holds 'q')"},
      {{"--tensors", file("off.safetensors",
                          [&] {
                            const std::string b = safetensors_bytes(
                                {{"q", "F32", {S, H, D}, data}, {"k", "F32", {S, H, D}, data}});
                            return b.substr(0, b.size() - 100);
                          }())},
       "reach past"},
      {{"--tensors", file("short.safetensors", safetensors_bytes({{"q", "F32", {S, H, D + 1}, data},
                                                                  {"k", "F32", {S, H, D}, data}}))},
       "truncated"},
      {{"--tensors", file("shape.safetensors", safetensors_bytes({{"q", "F32", {S, -H, D}, data},
                                                                  {"k", "F32", {S, H, D}, data}}))},
       "something other than a size"},
      {{"--tensors", good}, "--tensors reads a safetensors file"},
      {{"--q", good, "--k", good, "--tokens", in.string()}, "is a directory"},
      // weights
      {{"--weights", file("wsq.npy", npy_bytes({2, S, S / 2}, bytes_of(w)))}, "expected [H, S, S]"},
      {{"--weights", file("wsum.npy", npy_bytes({S, S}, bytes_of(wbad)))},
       "row 1 of head 0 sums to"},
      {{"--weights", file("wneg.npy", npy_bytes({S, S}, bytes_of(wneg)))}, "is negative"},
      {{"--weights", file("w.npy", npy_bytes({S, S}, bytes_of(w))), "--causal"},
       "attend keys after the query"},
      {{"--weights", (in / "w.npy").string(), "--tokens", (in / "tokens5.txt").string()},
       "5 tokens, but the weights have S = 6"},
      // arguments
      {{"--q", good}, "--q and --k go together"},
      {{"--q", good, "--k", good, "--weights", (in / "w.npy").string()}, "give one of"},
      {{"--q", good, "--k", good, "--seq", "16"}, "--seq is for the synthetic heads"},
      {{"--dir", in.string()}, "--dir needs --layer L"},
      {{"--dir", in.string(), "--layer", "4"}, "layer4_q.npy: cannot open"},
      {{"--tokens", (in / "tokens6.txt").string()}, "--tokens labels real inputs"},
  };
  const fs::path out = dir_ / "out";
  for (const Bad& b : cases) {
    std::vector<std::string> args = {"viz"};
    args.insert(args.end(), b.args.begin(), b.args.end());
    args.push_back("--out");
    args.push_back(out.string());
    const RunResult r = run(args);
    EXPECT_TRUE(r.exited) << show(args) << ": killed by signal " << -r.status << "\n" << r.err;
    EXPECT_EQ(r.status, 2) << show(args) << "\n" << r.err;
    EXPECT_NE(r.err.find(b.message), std::string::npos)
        << show(args) << "\nwanted: " << b.message << "\ngot: " << r.err;
    EXPECT_EQ(r.out, "") << show(args);
  }
  EXPECT_FALSE(fs::exists(out)) << "a failed viz wrote files";
  // The good file itself is fine (so the cases above fail for their own reason).
  const RunResult r = run({"viz", "--q", good, "--k", good, "--tokens",
                           (in / "tokens6.txt").string(), "--out", out.string()});
  EXPECT_TRUE(r.exited && r.status == 0) << r.err;
}
