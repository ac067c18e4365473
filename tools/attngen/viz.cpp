#include "tools/attngen/viz.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "attngen/attngen.h"
#include "attngen/kernel.h"
#include "tools/attngen/args.h"
#include "tools/attngen/head_stats.h"
#include "tools/attngen/image.h"
#include "tools/attngen/patterns.h"
#include "tools/attngen/tensor_io.h"

namespace attngen::cli {

namespace {

constexpr int64_t kMaxSeq = 2048;
constexpr int64_t kMaxHeads = 16;  // the weights, H * S^2 floats, stay within 256 MiB
constexpr int kExitNoKernel = 3;
constexpr double kDecades = 4.0;  // the colour scale spans [max * 1e-4, max], logarithmic

constexpr Rgb kBackground{24, 24, 28};
constexpr Rgb kText{232, 232, 232};
constexpr Rgb kDimText{160, 160, 168};
constexpr Rgb kFrame{96, 96, 104};
constexpr Rgb kMasked{0, 0, 0};
constexpr Rgb kMaskOff{8, 8, 16};
constexpr Rgb kMaskOn{255, 238, 176};

// ---- Structured inputs: q and k from position encodings with per-head frequencies, so that
// each head's weights have a known shape (a band, a shifted diagonal, a column, stripes, blocks),
// plus noise. The score of query p and key j (after the kernel's 1 / sqrt(D)) is built from:
// - an envelope -(p - shift - j)^2 / (2 sigma^2): dims 0 and 1 carry its two terms that depend
//   on j (2 lambda p j and -lambda j^2; the rest is constant along a row, which softmax
//   ignores), so it stays local over any length, unlike sums of cosines, which recur;
// - a sink: dim 2, a bonus for key 0 from every query;
// - sums of cos(omega (p - shift - j)) over frequency pairs in dims 3.., or token embeddings;
// - noise in dims 3.. .

enum class HeadKind { kLocal, kBroad, kPrevious, kSink, kPeriodic, kContent };
constexpr int kHeadKinds = 6;

const char* head_kind_name(HeadKind k) {
  switch (k) {
    case HeadKind::kLocal:
      return "local";
    case HeadKind::kBroad:
      return "broad";
    case HeadKind::kPrevious:
      return "previous token";
    case HeadKind::kSink:
      return "sink (token 0)";
    case HeadKind::kPeriodic:
      return "periodic";
    case HeadKind::kContent:
      return "same content";
  }
  return "?";
}

HeadKind head_kind(int64_t h) { return static_cast<HeadKind>(h % kHeadKinds); }

struct HeadRecipe {
  double envelope_sigma = 0;          // 0: no envelope
  double shift = 0;                   // query p looks like key p - shift
  double sink = 0;                    // score bonus of key 0
  double cos_amplitude = 0;           // peak of the sum of cosines
  std::vector<double> omega, weight;  // its frequencies and their shares (summing to 1)
  double content = 0;                 // score of equal tokens (cosine similarity 1)
};

// Frequencies spread over (0, pi) by the golden ratio (no two commensurate, so the sum does
// not recur at a short period), weighted exp(-(omega sigma)^2 / 2): a bump of width ~sigma.
void gaussian_spectrum(HeadRecipe& r, int pairs, double sigma) {
  double sum = 0;
  for (int m = 0; m < pairs; ++m) {
    const double golden = 0.6180339887498949 * (m + 1);
    const double w = M_PI * (golden - std::floor(golden));
    r.omega.push_back(w);
    r.weight.push_back(std::exp(-0.5 * w * w * sigma * sigma));
    sum += r.weight.back();
  }
  for (double& w : r.weight) w /= sum;
}

HeadRecipe head_recipe(int64_t h, int pairs) {
  const double variant = double(h / kHeadKinds);  // later heads of a kind: wider, further
  HeadRecipe r;
  switch (head_kind(h)) {
    case HeadKind::kLocal:
      r.envelope_sigma = 3.0 + 3.0 * variant;
      break;
    case HeadKind::kBroad:
      r.envelope_sigma = 16.0 + 8.0 * variant;
      break;
    case HeadKind::kPrevious:
      r.envelope_sigma = 4.0;
      r.shift = 1.0 + variant;
      r.cos_amplitude = 8.0;
      gaussian_spectrum(r, pairs, 0.5);
      break;
    case HeadKind::kSink:
      r.sink = 8.0;
      break;
    case HeadKind::kPeriodic:
      r.envelope_sigma = 3.0 * (10.0 + 4.0 * variant);
      r.cos_amplitude = 8.0;
      r.omega = {2.0 * M_PI / (10.0 + 4.0 * variant)};
      r.weight = {1.0};
      break;
    case HeadKind::kContent:
      r.content = 9.0;
      break;
  }
  return r;
}

struct Inputs {
  std::vector<float> q, k, v;  // [1, S, H, D] (v: [1, S, H, Dv])
};

Inputs make_inputs(int64_t seq, int64_t heads, int dim, int dim_v, uint64_t seed) {
  Inputs in;
  in.q.assign(size_t(seq * heads * dim), 0.0f);
  in.k.assign(in.q.size(), 0.0f);
  in.v.resize(size_t(seq * heads * dim_v));
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  const int free_dims = std::max(0, dim - 3);    // dims 3.. : cosines, embeddings, noise
  const double root_d = std::sqrt(double(dim));  // the kernel's scale is 1 / root_d
  const double centre = 0.5 * double(seq - 1);   // positions centred: smaller float terms
  for (int64_t h = 0; h < heads; ++h) {
    const HeadRecipe r = head_recipe(h, free_dims / 2);
    // Runs of equal tokens from a vocabulary of 5, for the content head.
    const int64_t run = std::max<int64_t>(2, seq / 20);
    std::vector<std::vector<double>> vocab(5, std::vector<double>(size_t(free_dims)));
    for (auto& e : vocab) {
      double norm = 0;
      for (double& x : e) {
        x = normal(rng);
        norm += x * x;
      }
      for (double& x : e) x /= std::sqrt(std::max(norm, 1e-30));
    }
    std::vector<int> run_token(size_t(seq / run + 1));
    for (int& t : run_token) t = int(rng() % 5);

    for (int64_t s = 0; s < seq; ++s) {
      float* q = &in.q[size_t((s * heads + h) * dim)];
      float* k = &in.k[size_t((s * heads + h) * dim)];
      const double x = double(s) - centre, xq = x - r.shift;
      if (r.envelope_sigma > 0 && dim >= 2) {
        const double lambda = 1.0 / (2.0 * r.envelope_sigma * r.envelope_sigma);
        q[0] = float(root_d * 2.0 * lambda * xq);
        k[0] = float(x);
        q[1] = float(-root_d * lambda);
        k[1] = float(x * x);
      }
      if (r.sink > 0 && dim >= 3) {
        q[2] = float(std::sqrt(root_d * r.sink));
        k[2] = s == 0 ? q[2] : 0.0f;
      }
      for (size_t m = 0; m < r.omega.size() && 3 + 2 * m + 1 < size_t(dim); ++m) {
        const double a = std::sqrt(root_d * r.cos_amplitude * r.weight[m]);
        q[3 + 2 * m] = float(a * std::cos(r.omega[m] * xq));
        q[4 + 2 * m] = float(a * std::sin(r.omega[m] * xq));
        k[3 + 2 * m] = float(a * std::cos(r.omega[m] * x));
        k[4 + 2 * m] = float(a * std::sin(r.omega[m] * x));
      }
      if (r.content > 0) {
        const double a = std::sqrt(root_d * r.content);
        const std::vector<double>& e = vocab[size_t(run_token[size_t(s / run)])];
        for (int d = 0; d < free_dims; ++d) q[3 + d] = k[3 + d] = float(a * e[size_t(d)]);
      }
      // Noise: each score moves by about 0.25.
      for (int d = 3; d < dim; ++d) {
        q[d] += float(0.5 * normal(rng));
        k[d] += float(0.5 * normal(rng));
      }
    }
  }
  for (float& x : in.v) x = float(normal(rng));
  return in;
}

// ---- Kernels with a weights output.

// What the kernel computes in a few words, the same on every ISA: its descriptor's shape class.
std::string variant_name(const attngen_kernel_info& k) {
  return k.tuning_class != nullptr && k.tuning_class[0] != '\0' ? k.tuning_class : k.name;
}

bool kernel_is_pattern(const attngen_kernel_info& k, PatternId id) {
  const attngen_pattern& p = k.pattern;
  switch (id) {
    case PatternId::kDense:
      return p.kind == ATTNGEN_PATTERN_NONE;
    case PatternId::kLocal:
      return p.kind == ATTNGEN_PATTERN_WINDOW && p.window_left >= 0 &&
             p.window_left == p.window_right;
    case PatternId::kStrided:
      return p.kind == ATTNGEN_PATTERN_STRIDED;
    case PatternId::kBlockSparse:
      return p.kind == ATTNGEN_PATTERN_BLOCK_SPARSE;
    case PatternId::kGlobalLocal:
      return p.kind == ATTNGEN_PATTERN_GLOBAL_LOCAL;
  }
  return false;
}

std::string describe_kernel(const attngen_kernel_info& k) {
  const attngen_pattern& p = k.pattern;
  std::string s;
  switch (p.kind) {
    case ATTNGEN_PATTERN_NONE:
      s = "dense";
      break;
    case ATTNGEN_PATTERN_WINDOW:
      s = p.window_left >= 0 && p.window_left == p.window_right
              ? "local --window " + std::to_string(p.window_left + 1)
              : "window [-" + std::to_string(p.window_left) + ", +" +
                    std::to_string(p.window_right) + "]";
      break;
    case ATTNGEN_PATTERN_STRIDED:
      s = "strided --stride " + std::to_string(p.stride);
      break;
    case ATTNGEN_PATTERN_BLOCK_SPARSE:
      s = "block-sparse --block " + std::to_string(p.block);
      break;
    case ATTNGEN_PATTERN_GLOBAL_LOCAL:
      s = "global-local --global " + std::to_string(p.global_tokens) + " --local " +
          std::to_string(p.local);
      break;
    default:
      s = "?";
  }
  if (k.mask == ATTNGEN_MASK_CAUSAL) s += " --causal";
  return s;
}

bool plain_attention_with_weights(const attngen_kernel_info& k) {
  return k.op == ATTNGEN_OP_ATTENTION && k.weights != 0 &&
         k.mask_tensor == ATTNGEN_MASK_TENSOR_NONE && k.softcap == 0;
}

// Whether the kernel's pattern parameters are those in p.
bool kernel_matches_params(const attngen_kernel_info& k, PatternId id, const PatternParams& p) {
  const attngen_pattern& kp = k.pattern;
  switch (id) {
    case PatternId::kLocal:
      return kp.window_left + 1 == p.window;
    case PatternId::kStrided:
      return kp.stride == p.stride;
    case PatternId::kBlockSparse:
      return kp.block == p.block;
    case PatternId::kGlobalLocal:
      return kp.global_tokens == p.global && kp.local == p.local;
    default:
      return true;
  }
}

// The pattern's parameters in p taken from the kernel's.
void take_kernel_params(const attngen_kernel_info& k, PatternId id, PatternParams& p) {
  const attngen_pattern& kp = k.pattern;
  if (id == PatternId::kLocal) p.window = kp.window_left + 1;
  if (id == PatternId::kStrided) p.stride = kp.stride;
  if (id == PatternId::kBlockSparse) p.block = kp.block;
  if (id == PatternId::kGlobalLocal) {
    p.global = kp.global_tokens;
    p.local = kp.local;
  }
}

attngen_pattern_kind kind_of(PatternId id) {
  switch (id) {
    case PatternId::kLocal:
      return ATTNGEN_PATTERN_WINDOW;
    case PatternId::kStrided:
      return ATTNGEN_PATTERN_STRIDED;
    case PatternId::kBlockSparse:
      return ATTNGEN_PATTERN_BLOCK_SPARSE;
    case PatternId::kGlobalLocal:
      return ATTNGEN_PATTERN_GLOBAL_LOCAL;
    case PatternId::kDense:
      break;
  }
  return ATTNGEN_PATTERN_NONE;
}

// A specialised weights kernel of the pattern (its parameters built in), or with `generic` the
// generic one of the pattern's kind (any parameters, causal or not).
const attngen_kernel_info* find_weights_kernel(PatternId id, bool causal, bool generic = false) {
  const attngen_kernel_info* found = nullptr;
  for (size_t i = 0; i < attngen_kernel_count(); ++i) {
    const attngen_kernel_info* k = attngen_kernel_at(i);
    if (!plain_attention_with_weights(*k) || (k->generic != 0) != generic) continue;
    if (generic ? k->pattern.kind != kind_of(id) : !kernel_is_pattern(*k, id)) continue;
    if (!generic && (k->mask == ATTNGEN_MASK_CAUSAL) != causal) continue;
    if (std::string(k->isa) == "cuda") continue;  // chosen only when asked for
    if (found == nullptr || (attngen_kernel_supported(k) && !attngen_kernel_supported(found))) {
      found = k;
    }
  }
  return found;
}

void list_weights_kernels(FILE* f) {
  std::set<std::string> seen;
  for (size_t i = 0; i < attngen_kernel_count(); ++i) {
    const attngen_kernel_info* k = attngen_kernel_at(i);
    if (!plain_attention_with_weights(*k) || !seen.insert(variant_name(*k)).second) continue;
    // A generic kernel takes its pattern's parameters and the causal mask at run time.
    std::string what = describe_kernel(*k);
    if (k->generic != 0) {
      what = what.substr(0, what.find(' ')) +
             " (any parameters, D <= " + std::to_string(k->head_dim_qk) + ")";
    }
    std::fprintf(f, "  --pattern %-40s (%s)\n", what.c_str(), variant_name(*k).c_str());
  }
  if (seen.empty()) std::fprintf(f, "  (none)\n");
}

// For real heads: the head dims the kernels with a weights output of dense attention take.
std::string weights_head_dims() {
  std::set<std::string> dims;
  for (size_t i = 0; i < attngen_kernel_count(); ++i) {
    const attngen_kernel_info* k = attngen_kernel_at(i);
    if (!plain_attention_with_weights(*k) || k->pattern.kind != ATTNGEN_PATTERN_NONE) continue;
    dims.insert(k->generic != 0 ? "any up to " + std::to_string(k->head_dim_qk)
                                : std::to_string(k->head_dim_qk));
  }
  std::string s;
  for (const std::string& d : dims) s += (s.empty() ? "" : ", ") + d;
  return s.empty() ? "none" : s;
}

PatternId parse_pattern(const std::string& command, const std::string& s) {
  if (s == "dense" || s == "none") return PatternId::kDense;
  if (s == "local" || s == "window") return PatternId::kLocal;
  if (s == "strided") return PatternId::kStrided;
  if (s == "block-sparse" || s == "block_sparse") return PatternId::kBlockSparse;
  if (s == "global-local" || s == "global_local" || s == "global+local") {
    return PatternId::kGlobalLocal;
  }
  throw UsageError(command + ": --pattern: expected dense, local, strided, block-sparse or " +
                   "global-local, got '" + s + "'");
}

// ---- Drawing.

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The cells [begin, end) of an seq-long axis that panel pixel x shows.
struct CellRange {
  int64_t begin, end;
};
CellRange cells_of_pixel(int64_t seq, int side, int x) {
  if (side >= seq) {
    const int64_t up = side / seq;
    return {x / up, x / up + 1};
  }
  const int64_t f = ceil_div(seq, side);
  return {x * f, std::min(seq, x * f + f)};
}

std::string format_weight(double v) {
  char buf[32];
  if (v >= 0.01) {
    std::snprintf(buf, sizeof buf, "%.3g", v);
  } else {
    std::snprintf(buf, sizeof buf, "%.0e", v);
  }
  return buf;
}

// Weight -> colour: viridis on a log scale over kDecades below the largest weight (or linear
// from 0 to it); negative: a masked pair, black.
class ColourScale {
 public:
  ColourScale(float vmax, bool linear) : vmax_(vmax), linear_(linear) {
    lo_ = std::log10(std::max(double(vmax), 1e-30)) - kDecades;
  }
  Rgb operator()(double v) const {
    if (v < 0.0) return kMasked;
    if (linear_) return viridis(vmax_ > 0 ? v / vmax_ : 0.0);
    return viridis(v == 0.0 ? 0.0 : (std::log10(v) - lo_) / kDecades);
  }
  // The values at the bar's left end, middle and right end, under a bar of width side at x.
  void draw_labels(Image& img, int x, int y, int side, int scale) const {
    const double low = linear_ ? 0.0 : vmax_ * std::pow(10.0, -kDecades);
    const double mid = linear_ ? vmax_ / 2 : vmax_ * std::pow(10.0, -kDecades / 2);
    const std::string l = linear_ ? "0" : format_weight(low), m = format_weight(mid),
                      h = format_weight(vmax_);
    img.text(x, y, l, kDimText, scale);
    img.text(x + (side - text_width(m, scale)) / 2, y, m, kDimText, scale);
    img.text(x + side - text_width(h, scale), y, h, kDimText, scale);
  }

 private:
  double vmax_, lo_ = 0;
  bool linear_;
};

// One head's weights (seq x seq, row = query) as a heatmap with a title and a colour bar.
// allowed (seq x seq) says which pairs the kernel's mask lets through: the others are drawn
// black, apart from the colour scale, whose bottom also holds weights that underflowed to 0.
Image head_image(const float* w, const std::vector<uint8_t>& allowed, int64_t seq, int cap,
                 const std::string& title, bool linear = false) {
  const int side = panel_side(seq, cap), scale = text_scale(side), line = line_height(scale);
  Image img(side + 2 * kMargin, side + 2 * line + 2 * kMargin + kGap + kColourBar + 2, kBackground);
  float vmax = 0.0f;
  for (int64_t i = 0; i < seq * seq; ++i) vmax = std::max(vmax, w[i]);
  const ColourScale colour(vmax, linear);
  img.text(kMargin, kMargin, title, kText, scale, side);
  const int y0 = kMargin + line;
  for (int y = 0; y < side; ++y) {
    const CellRange rows = cells_of_pixel(seq, side, y);
    for (int x = 0; x < side; ++x) {
      const CellRange cols = cells_of_pixel(seq, side, x);
      float v = -1.0f;  // the largest weight the pixel covers, so that peaks stay visible
      for (int64_t i = rows.begin; i < rows.end; ++i) {
        for (int64_t j = cols.begin; j < cols.end; ++j) {
          if (allowed[size_t(i * seq + j)]) v = std::max(v, w[i * seq + j]);
        }
      }
      img.set(kMargin + x, y0 + y, colour(v));
    }
  }
  const int bar_y = y0 + side + kGap;
  for (int x = 0; x < side; ++x) {
    img.fill_rect(kMargin + x, bar_y, 1, kColourBar, viridis(double(x) / (side - 1)));
  }
  const int label_y = bar_y + kColourBar + 2;
  colour.draw_labels(img, kMargin, label_y, side, scale);
  return img;
}

Image patterns_image(const PatternSet& set, const std::vector<PatternRow>& rows) {
  const PatternParams& p = set.params();
  const int side = panel_side(p.seq, kSmallCap), scale = text_scale(side);
  const int line = line_height(scale);
  const int n = int(std::size(kAllPatterns));
  Image img(n * side + (n + 1) * kMargin, side + 5 * line + 2 * kMargin + 2 * kGap, kBackground);
  char title[160];
  std::snprintf(title, sizeof title, "seq %lld%s, %lld head%s of dim %lld: attended = bright",
                static_cast<long long>(p.seq), p.causal ? " causal" : "",
                static_cast<long long>(p.heads), p.heads == 1 ? "" : "s",
                static_cast<long long>(p.dim));
  img.text(kMargin, kMargin, title, kText, scale, img.width() - 2 * kMargin);
  const int y0 = kMargin + line + kGap;
  for (int k = 0; k < n; ++k) {
    const PatternId id = kAllPatterns[k];
    const attngen_pattern pattern = set.pattern(id);
    const int x0 = kMargin + k * (side + kMargin);
    for (int y = 0; y < side; ++y) {
      const CellRange qs = cells_of_pixel(p.seq, side, y);
      for (int x = 0; x < side; ++x) {
        const CellRange ks = cells_of_pixel(p.seq, side, x);
        int64_t on = 0;
        for (int64_t i = qs.begin; i < qs.end; ++i) {
          for (int64_t j = ks.begin; j < ks.end; ++j) on += attended(pattern, p.causal, i, j);
        }
        const double cover = double(on) / double((qs.end - qs.begin) * (ks.end - ks.begin));
        // Square root: a pixel a quarter attended still shows at half brightness.
        img.set(x0 + x, y0 + y, mix(kMaskOff, kMaskOn, std::sqrt(cover)));
      }
    }
    img.frame(x0 - 1, y0 - 1, side + 2, side + 2, kFrame);
    const PatternRow* row = nullptr;
    for (const PatternRow& r : rows) {
      if (r.id == id && r.causal == p.causal) row = &r;
    }
    char pairs[64], flops[64];
    std::snprintf(pairs, sizeof pairs, "%lld pairs", static_cast<long long>(row->pairs));
    std::snprintf(flops, sizeof flops, "%s (%.1f%%)", si_flops(row->flops).c_str(),
                  100.0 * row->fraction);
    const int ty = y0 + side + kGap;
    img.text(x0, ty, set.short_name(id), kText, scale, side);
    img.text(x0, ty + line, set.parameters(id), kDimText, scale, side);
    img.text(x0, ty + 2 * line, pairs, kText, scale, side);
    img.text(x0, ty + 3 * line, flops, kText, scale, side);
  }
  return img;
}

bool save(const Image& img, const std::filesystem::path& path, std::vector<std::string>& written) {
  std::string error;
  if (!img.write_png(path.string(), &error)) {
    std::fprintf(stderr, "attngen viz: cannot write %s: %s\n", path.string().c_str(),
                 error.c_str());
    return false;
  }
  char buf[512];
  std::snprintf(buf, sizeof buf, "  %s  %d x %d", path.string().c_str(), img.width(), img.height());
  written.push_back(buf);
  return true;
}

std::vector<OptionSpec> viz_specs() {
  std::vector<OptionSpec> s = {
      {"q", "FILE", "real heads: projected queries [S, H, D] (.npy or safetensors 'q')"},
      {"k", "FILE", "real heads: projected keys [S, Hkv, D] (.npy or safetensors 'k')"},
      {"weights", "FILE", "real heads: attention weights [H, S, S] or [S, S] (.npy, safetensors)"},
      {"tensors", "FILE", "real heads: a safetensors file holding q and k, or weights"},
      {"dir", "DIR", "real heads: DIR/layer<L>_q.npy, DIR/layer<L>_k.npy, DIR/tokens.txt"},
      {"layer", "L", "with --dir: the layer (required there)"},
      {"tokens", "FILE", "real heads: one token per line, S lines (axis labels)"},
      {"linear", nullptr, "real heads: linear colour scale from 0 (default: log, 4 decades)"},
      {"seq", "N", "synthetic heads: sequence length, Sq = Skv (default 128, up to 2048)"},
      {"out", "DIR", "directory for the files (default $TMPDIR/attngen-viz; created)"},
      {"heads", "H", "synthetic heads: heads (default 6, up to 16)"},
      {"pattern", "NAME",
       "synthetic heads: the kernel: dense (default), local, strided, block-sparse,\n"
       "                    global-local"},
  };
  for (OptionSpec o : pattern_option_specs()) {
    if (std::string(o.name) == "causal") {
      o.help = "causal mask (j <= i); synthetic: run the causal kernel, panels with causal too";
    }
    s.push_back(o);
  }
  return s;
}

}  // namespace

int panel_side(int64_t seq, int cap) {
  if (seq <= cap) return int(seq * (cap / seq));
  return int(ceil_div(seq, ceil_div(seq, cap)));
}

int text_scale(int side) { return side >= 240 ? 2 : 1; }

std::string viz_help() {
  return "usage: attngen viz [--q FILE --k FILE | --weights FILE | --tensors FILE |\n"
         "                   --dir DIR --layer L] [--tokens FILE] [--causal] [--out DIR]\n"
         "       attngen viz [--seq N] [--heads H] [--pattern NAME] [--out DIR]   (synthetic)\n\n"
         "Real heads: reads the projected Q [S, H, D] and K [S, Hkv, D] of one layer (float32\n"
         ".npy, or tensors 'q' and 'k' of a safetensors file; the scale 1/sqrt(D) is applied\n"
         "here), computes the attention weights with attngen_attention (options.weights: a\n"
         "built-in inspection kernel, all heads in one call), or reads the weights [H, S, S]\n"
         "themselves, and writes to DIR:\n"
         "  head_<h>.png     head h, the tokens on both axes (queries down, keys across)\n"
         "  heads_grid.png   all heads\n"
         "  report.csv, report.json   per head: entropy, saturation, pattern (diagonal,\n"
         "                   previous token, first-token/[CLS] sink, separator sink, broad,\n"
         "                   local, long-range, mixed), flags prune and scale\n"
         "and prints the report. tools/attngen/README.md defines every measure.\n\n"
         "Synthetic heads (no input files): runs a built-in kernel with a weights output on\n"
         "structured q and k (local, broad, previous token, sink, periodic, same content\n"
         "heads) and writes head_<h>.png, heads_grid.png and patterns.png (the masks of dense\n"
         "and the four sparse patterns at this length, with pairs and FLOPs). --pattern and\n"
         "--causal choose among the kernels generated with WEIGHTS; the pattern options set\n"
         "the panels of patterns.png. With no arguments at all, `attngen viz` runs this demo\n"
         "(--seq 128) into $TMPDIR/attngen-viz.\n\n"
         "Colours: viridis on a log scale over four decades below the head's largest weight\n"
         "(--linear: from 0); black = masked. Image sizes follow tools/attngen/README.md.\n\n"
         "options:\n" +
         options_help(viz_specs()) +
         "\nExit status: 0 done, 1 the kernel or a file write failed, 2 bad arguments or input\n"
         "files (the message names the file and the problem), 3 no kernel with a weights\n"
         "output for that pattern or head dim.\n";
}

namespace {

// The attention weights of one run of a weights kernel, and what the run took.
struct WeightsRun {
  std::vector<float> weights;  // [heads, seq, seq]
  attngen_attention_options opt;
  double ms = 0;
};

// Runs `kernel` on random inputs of the pattern set's shape; false (with a message) on failure.
bool run_weights_kernel(const attngen_kernel_info& kernel, const PatternSet& set, PatternId id,
                        const PatternParams& params, bool causal, int64_t heads, WeightsRun& run) {
  const int64_t seq = params.seq;
  const int dim = params.dim, dim_v = kernel.generic ? params.dim : kernel.head_dim_v;
  Inputs in = make_inputs(seq, heads, dim, dim_v, params.seed);
  std::vector<float> o(size_t(seq * heads * dim_v)), lse(size_t(heads * seq));
  run.weights.assign(size_t(heads * seq * seq), 0.0f);
  const int64_t qs[4] = {1, seq, heads, dim}, vs[4] = {1, seq, heads, dim_v};
  const int64_t ws[4] = {1, heads, seq, seq}, ls[3] = {1, heads, seq};
  const attngen_tensor q = attngen_tensor_contiguous(in.q.data(), ATTNGEN_F32, 4, qs);
  const attngen_tensor k = attngen_tensor_contiguous(in.k.data(), ATTNGEN_F32, 4, qs);
  const attngen_tensor v = attngen_tensor_contiguous(in.v.data(), ATTNGEN_F32, 4, vs);
  attngen_tensor ot = attngen_tensor_contiguous(o.data(), ATTNGEN_F32, 4, vs);
  attngen_tensor wt = attngen_tensor_contiguous(run.weights.data(), ATTNGEN_F32, 4, ws);
  attngen_tensor lt = attngen_tensor_contiguous(lse.data(), ATTNGEN_F32, 3, ls);
  attngen_attention_options& opt = run.opt;
  opt = attngen_attention_options_default();
  opt.mask = causal ? ATTNGEN_MASK_CAUSAL : ATTNGEN_MASK_NONE;
  opt.pattern = kernel.generic ? set.pattern(id) : kernel.pattern;
  if (id == PatternId::kBlockSparse) opt.pattern = set.pattern(id);
  opt.weights = &wt;
  opt.lse = kernel.lse != 0 ? &lt : nullptr;
  const auto t0 = std::chrono::steady_clock::now();
  const attngen_status st = attngen_attention(&q, &k, &v, &ot, &opt);
  run.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  opt.weights = nullptr;  // the tensors above go out of scope
  opt.lse = nullptr;
  if (st != ATTNGEN_OK) {
    std::fprintf(stderr, "attngen viz: attngen_attention failed: %s: %s\n", attngen_status_name(st),
                 attngen_last_error());
    return false;
  }
  return true;
}

// Per head: mean max weight, mean distance attended, entropy and the worst row-sum error.
void print_head_stats(const attngen_kernel_info& kernel_info, const WeightsRun& run, int64_t seq,
                      int64_t heads, int dim) {
  // What ran: a generic kernel's pattern and mask are the call's.
  attngen_kernel_info kernel = kernel_info;
  kernel.pattern = run.opt.pattern;
  kernel.mask = run.opt.mask;
  std::printf("attngen viz: seq %lld, %lld head%s of dim %d, --pattern %s\n",
              static_cast<long long>(seq), static_cast<long long>(heads), heads == 1 ? "" : "s",
              dim, describe_kernel(kernel).c_str());
  std::printf("kernel %s: %.2f ms (weights%s written)\n\n", attngen_last_kernel(), run.ms,
              kernel.lse ? " and log-sum-exp" : "");
  std::printf("%-4s  %-16s %14s %14s %15s %14s\n", "head", "kind", "mean max weight",
              "mean distance", "entropy (bits)", "row sum error");
  for (int64_t h = 0; h < heads; ++h) {
    double max_sum = 0, dist_sum = 0, ent_sum = 0, row_err = 0;
    for (int64_t i = 0; i < seq; ++i) {
      const float* w = &run.weights[size_t((h * seq + i) * seq)];
      double mx = 0, dist = 0, ent = 0, sum = 0;
      for (int64_t j = 0; j < seq; ++j) {
        const double x = w[j];
        mx = std::max(mx, x);
        dist += x * double(std::llabs(i - j));
        if (x > 0) ent -= x * std::log2(x);
        sum += x;
      }
      max_sum += mx;
      dist_sum += dist;
      ent_sum += ent;
      row_err = std::max(row_err, std::fabs(sum - 1.0));
    }
    std::printf("%-4lld  %-16s %14.3f %14.2f %15.2f %14.1e\n", static_cast<long long>(h),
                head_kind_name(head_kind(h)), max_sum / seq, dist_sum / seq, ent_sum / seq,
                row_err);
  }
  std::printf("\n");
}

// One image per head, a grid of all heads, and the pattern panel; false on a write error.
bool write_images(const attngen_kernel_info& kernel, const WeightsRun& run, const PatternSet& set,
                  const std::vector<PatternRow>& rows, int64_t seq, int64_t heads,
                  const std::filesystem::path& out, std::vector<std::string>& written) {
  std::vector<uint8_t> allowed(size_t(seq * seq));
  for (int64_t i = 0; i < seq; ++i) {
    for (int64_t j = 0; j < seq; ++j) {
      allowed[size_t(i * seq + j)] =
          attended(run.opt.pattern, run.opt.mask == ATTNGEN_MASK_CAUSAL, i, j);
    }
  }
  const float* weights = run.weights.data();
  for (int64_t h = 0; h < heads; ++h) {
    const std::string title = "head " + std::to_string(h) + ": " + head_kind_name(head_kind(h));
    const Image img = head_image(&weights[size_t(h * seq * seq)], allowed, seq, kHeadCap, title);
    if (!save(img, out / ("head_" + std::to_string(h) + ".png"), written)) return false;
  }
  const int cols = int(std::ceil(std::sqrt(double(heads))));
  const int grid_rows = int(ceil_div(heads, cols));
  const int side = panel_side(seq, kSmallCap), line = line_height(text_scale(side));
  std::vector<Image> cells;
  for (int64_t h = 0; h < heads; ++h) {
    cells.push_back(head_image(&weights[size_t(h * seq * seq)], allowed, seq, kSmallCap,
                               std::to_string(h) + ": " + head_kind_name(head_kind(h))));
  }
  const int cw = cells[0].width(), ch = cells[0].height();
  Image grid(cols * cw, kMargin + line + grid_rows * ch, kBackground);
  grid.text(kMargin, kMargin,
            variant_name(kernel) + ", seq " + std::to_string(seq) + ", log colour scale", kText,
            text_scale(side), grid.width() - 2 * kMargin);
  for (int64_t h = 0; h < heads; ++h) {
    grid.blit(cells[size_t(h)], int(h % cols) * cw, kMargin + line + int(h / cols) * ch);
  }
  if (!save(grid, out / "heads_grid.png", written)) return false;
  return save(patterns_image(set, rows), out / "patterns.png", written);
}

// ---- Real heads: Q and K (or the weights) from files, token labels, measures per head.

constexpr int64_t kMaxRealHeads = 256;
constexpr int64_t kMaxWeights = int64_t(1) << 26;  // H * S^2 floats: 256 MiB
constexpr double kRowSumTolerance = 1e-3;          // weights files: |row sum - 1|
constexpr int kLabelChars = 12;                    // longer tokens are cut, ending in '.'

std::string default_out_dir() {
  const char* tmp = std::getenv("TMPDIR");
  const std::filesystem::path base = tmp != nullptr && tmp[0] != '\0' ? tmp : "/tmp";
  return (base / "attngen-viz").string();
}

struct RealHeads {
  std::string source;  // what was read, for the report
  int64_t seq = 0, heads = 0, heads_kv = 0, dim = 0;
  bool causal = false, causal_detected = false, from_weights = false;
  std::vector<float> weights;       // [heads, seq, seq]
  std::vector<std::string> tokens;  // seq labels as given (may be empty)
  std::string kernel;               // the kernel that computed the weights, if any
  double ms = 0;
};

[[noreturn]] void input_error(const std::string& what) { throw InputError("attngen viz: " + what); }

// [S, H, D] from [S, H, D] or [1, S, H, D].
void as_shd(FloatTensor& t, const char* what) {
  if (t.rank() == 4 && t.dim(0) == 1) t.shape.erase(t.shape.begin());
  if (t.rank() != 3) {
    input_error(t.source + ": " + what + " of shape " + shape_string(t.shape) +
                ", expected [S, H, D] (tokens, heads, head dim) or [1, S, H, D]");
  }
}

void check_finite(const FloatTensor& t) {
  for (size_t n = 0; n < t.data.size(); ++n) {
    if (std::isfinite(t.data[n])) continue;
    std::string index;
    size_t rest = n;
    std::vector<int64_t> idx(t.rank());
    for (size_t k = t.rank(); k-- > 0;) {
      idx[k] = int64_t(rest % size_t(t.dim(k)));
      rest /= size_t(t.dim(k));
    }
    char value[32];
    std::snprintf(value, sizeof value, "%g", double(t.data[n]));
    input_error(t.source + ": element " + shape_string(idx) + " is " + value +
                " (inputs must be finite)");
  }
}

void check_size(int64_t heads, int64_t seq) {
  if (heads > kMaxRealHeads) {
    input_error(std::to_string(heads) + " heads, at most " + std::to_string(kMaxRealHeads) +
                " are drawn");
  }
  if (seq > kMaxWeights / seq || heads * seq * seq > kMaxWeights) {
    char mib[32];
    std::snprintf(mib, sizeof mib, "%.0f",
                  double(heads) * double(seq) * double(seq) * 4 / (1 << 20));
    input_error("the weights of " + std::to_string(heads) + " heads over " + std::to_string(seq) +
                " tokens would take " + mib +
                " MiB, more than the 256 MiB drawn at once (H * S^2 <= 2^26)");
  }
}

// Runs attngen_attention() with options.weights on q [S, H, D], k [S, Hkv, D]: one call, all
// heads. Returns the exit status (0, 1 or 3 for no kernel).
int compute_weights(const FloatTensor& q, const FloatTensor& k, RealHeads& r) {
  const int64_t seq = r.seq, heads = r.heads, hkv = r.heads_kv, dim = r.dim;
  std::vector<float> v(k.data.size(), 0.0f), o(q.data.size(), 0.0f);  // V is not drawn
  r.weights.assign(size_t(heads * seq * seq), 0.0f);
  const int64_t qs[4] = {1, seq, heads, dim}, ks[4] = {1, seq, hkv, dim};
  const int64_t ws[4] = {1, heads, seq, seq};
  const attngen_tensor qt =
      attngen_tensor_contiguous(const_cast<float*>(q.data.data()), ATTNGEN_F32, 4, qs);
  const attngen_tensor kt =
      attngen_tensor_contiguous(const_cast<float*>(k.data.data()), ATTNGEN_F32, 4, ks);
  const attngen_tensor vt = attngen_tensor_contiguous(v.data(), ATTNGEN_F32, 4, ks);
  attngen_tensor ot = attngen_tensor_contiguous(o.data(), ATTNGEN_F32, 4, qs);
  attngen_tensor wt = attngen_tensor_contiguous(r.weights.data(), ATTNGEN_F32, 4, ws);
  attngen_attention_options opt = attngen_attention_options_default();
  opt.mask = r.causal ? ATTNGEN_MASK_CAUSAL : ATTNGEN_MASK_NONE;  // Sq = Skv: either alignment
  opt.weights = &wt;
  const auto t0 = std::chrono::steady_clock::now();
  const attngen_status st = attngen_attention(&qt, &kt, &vt, &ot, &opt);
  r.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (st != ATTNGEN_OK) {
    std::fprintf(stderr, "attngen viz: attngen_attention failed: %s: %s\n", attngen_status_name(st),
                 attngen_last_error());
    if (st == ATTNGEN_ERROR_NO_KERNEL) {
      std::fprintf(stderr,
                   "The kernels with a weights output (WEIGHTS in generated/variants.cmake) "
                   "take head dims: %s; this input has D = %lld.\n",
                   weights_head_dims().c_str(), static_cast<long long>(dim));
      return kExitNoKernel;
    }
    return 1;
  }
  r.kernel = attngen_last_kernel();
  return 0;
}

// Weights [S, S], [H, S, S] or [1, H, S, S]: finite, >= 0, rows summing to 1 (or all 0).
void take_weights(FloatTensor w, bool causal_flag, RealHeads& r) {
  if (w.rank() == 4 && w.dim(0) == 1) w.shape.erase(w.shape.begin());
  if (w.rank() == 2) w.shape.insert(w.shape.begin(), 1);
  if (w.rank() != 3 || w.dim(1) != w.dim(2)) {
    input_error(w.source + ": weights of shape " + shape_string(w.shape) +
                ", expected [H, S, S], [S, S] or [1, H, S, S] (self-attention: square)");
  }
  check_finite(w);
  r.heads = w.dim(0);
  r.seq = w.dim(1);
  check_size(r.heads, r.seq);
  const int64_t seq = r.seq;
  bool upper_zero = true;
  for (int64_t h = 0; h < r.heads; ++h) {
    for (int64_t i = 0; i < seq; ++i) {
      const float* row = &w.data[size_t((h * seq + i) * seq)];
      double sum = 0;
      for (int64_t j = 0; j < seq; ++j) {
        if (row[j] < 0) {
          input_error(w.source + ": weight [" + std::to_string(h) + ", " + std::to_string(i) +
                      ", " + std::to_string(j) + "] is negative (" + std::to_string(row[j]) + ")");
        }
        sum += row[j];
        if (j > i && row[j] != 0) upper_zero = false;
      }
      if (sum != 0 && std::fabs(sum - 1.0) > kRowSumTolerance) {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%.6g", sum);
        input_error(w.source + ": row " + std::to_string(i) + " of head " + std::to_string(h) +
                    " sums to " + buf + ", expected 1 (within 1e-3) or 0 for a masked row");
      }
    }
  }
  if (causal_flag && !upper_zero) {
    input_error(w.source + ": --causal, but the weights attend keys after the query (j > i)");
  }
  r.causal = causal_flag || (upper_zero && seq > 1);
  r.causal_detected = !causal_flag && r.causal;
  r.from_weights = true;
  r.weights = std::move(w.data);
}

// Reads the inputs the options name. Returns the exit status of computing the weights.
int load_real(const ParsedArgs& a, RealHeads& r) {
  std::string q_path, k_path, w_path, tokens_path = a.text("tokens", "");
  if (a.has("dir")) {
    if (a.has("q") || a.has("k") || a.has("weights") || a.has("tensors")) {
      throw UsageError(
          "attngen viz: --dir picks the files itself; give --q/--k, --weights or "
          "--tensors without it");
    }
    const std::filesystem::path dir = a.text("dir", "");
    if (!a.has("layer")) {
      std::set<int64_t> layers;
      std::error_code ec;
      for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
        const std::string n = e.path().filename().string();
        if (n.size() > 11 && n.compare(0, 5, "layer") == 0 &&
            n.compare(n.size() - 6, 6, "_q.npy") == 0) {
          const std::string num = n.substr(5, n.size() - 11);
          if (!num.empty() && num.find_first_not_of("0123456789") == std::string::npos &&
              num.size() < 10) {
            layers.insert(std::stoll(num));
          }
        }
      }
      std::string found;
      for (const int64_t l : layers) found += (found.empty() ? "" : " ") + std::to_string(l);
      throw UsageError("attngen viz: --dir needs --layer L (" +
                       (ec              ? "cannot list " + dir.string() + ": " + ec.message()
                        : found.empty() ? "no layer<L>_q.npy in " + dir.string()
                                        : "layers in " + dir.string() + ": " + found) +
                       ")");
    }
    const int64_t layer = a.integer("layer", 0, 0, 1000000);
    const std::string stem = "layer" + std::to_string(layer);
    q_path = (dir / (stem + "_q.npy")).string();
    k_path = (dir / (stem + "_k.npy")).string();
    if (tokens_path.empty() && std::filesystem::exists(dir / "tokens.txt")) {
      tokens_path = (dir / "tokens.txt").string();
    }
    r.source = dir.string() + " layer " + std::to_string(layer);
  } else {
    if (a.has("layer")) throw UsageError("attngen viz: --layer goes with --dir");
    if (!a.has("q") && !a.has("k") && !a.has("weights") && !a.has("tensors")) {
      throw UsageError(
          "attngen viz: --tokens labels real inputs: give --q and --k, --weights, "
          "--tensors or --dir too");
    }
    const int sources =
        int(a.has("q") || a.has("k")) + int(a.has("weights")) + int(a.has("tensors"));
    if (sources > 1) {
      throw UsageError("attngen viz: give one of --q/--k, --weights, --tensors, --dir");
    }
    if (a.has("q") != a.has("k")) throw UsageError("attngen viz: --q and --k go together");
    if (a.has("tensors")) {
      const std::string f = a.text("tensors", "");
      if (is_npy_file(f)) {
        input_error(f +
                    ": --tensors reads a safetensors file; give an .npy file to --q, --k "
                    "or --weights");
      }
      if (safetensors_has(f, "weights")) {
        w_path = f;
      } else {
        q_path = k_path = f;
      }
      r.source = f;
    } else if (a.has("weights")) {
      w_path = a.text("weights", "");
      r.source = w_path;
    } else {
      q_path = a.text("q", "");
      k_path = a.text("k", "");
      r.source = q_path + ", " + k_path;
    }
  }
  if (!tokens_path.empty()) r.tokens = read_tokens(tokens_path);

  const bool causal = a.flag("causal");
  if (!w_path.empty()) {
    take_weights(read_tensor(w_path, "weights"), causal, r);
  } else {
    FloatTensor q = read_tensor(q_path, "q"), k = read_tensor(k_path, "k");
    as_shd(q, "q");
    as_shd(k, "k");
    if (q.dim(0) != k.dim(0)) {
      input_error(q.source + " and " + k.source + ": q has " + std::to_string(q.dim(0)) +
                  " tokens, k " + std::to_string(k.dim(0)) + " (self-attention: S must agree)");
    }
    if (q.dim(2) != k.dim(2)) {
      input_error(q.source + " and " + k.source + ": head dims differ, q " +
                  std::to_string(q.dim(2)) + ", k " + std::to_string(k.dim(2)));
    }
    if (q.dim(1) % k.dim(1) != 0) {
      input_error(q.source + " and " + k.source + ": q has " + std::to_string(q.dim(1)) +
                  " heads, k " + std::to_string(k.dim(1)) +
                  " (grouped-query: a multiple of k's heads)");
    }
    check_finite(q);
    check_finite(k);
    r.seq = q.dim(0);
    r.heads = q.dim(1);
    r.heads_kv = k.dim(1);
    r.dim = q.dim(2);
    r.causal = causal;
    check_size(r.heads, r.seq);
    if (!r.tokens.empty() || !tokens_path.empty()) {
      if (int64_t(r.tokens.size()) != r.seq) {
        input_error(tokens_path + ": " + std::to_string(r.tokens.size()) +
                    " tokens, but the inputs have S = " + std::to_string(r.seq));
      }
    }
    return compute_weights(q, k, r);
  }
  if (!tokens_path.empty() && int64_t(r.tokens.size()) != r.seq) {
    input_error(tokens_path + ": " + std::to_string(r.tokens.size()) +
                " tokens, but the weights have S = " + std::to_string(r.seq));
  }
  return 0;
}

// The centre of cell c of an seq-long axis in a panel of side pixels, from the panel's edge.
double cell_centre(int64_t seq, int side, int64_t c) {
  if (side >= seq) return (double(c) + 0.5) * double(side / seq);
  return (double(c) + 0.5) / double(ceil_div(seq, side));
}

struct PanelPlace {
  int x = 0, y = 0, side = 0;
};

// A real head: the heatmap with the tokens on both axes (queries down the left, keys along the
// top, read bottom to top), two lines of title, and the colour bar. Every step-th token is
// labelled, where step keeps labels a glyph apart; labels are cut at kLabelChars.
Image labelled_head_image(const float* w, const std::vector<uint8_t>& allowed, int64_t seq,
                          const std::vector<std::string>& labels, const std::string& title,
                          const std::string& subtitle, bool linear, PanelPlace& place) {
  const int side = panel_side(seq, kHeadCap), scale = text_scale(side), line = line_height(scale);
  const double pitch = double(side) / double(seq);   // pixels per cell
  const int ls = pitch >= 20 && scale == 2 ? 2 : 1;  // label font scale
  const int64_t step = std::max<int64_t>(1, int64_t(std::ceil((kGlyphHeight + 2) * ls / pitch)));
  const int max_label = text_width(std::string(kLabelChars, 'x'), ls);
  int label_w = 0;
  for (int64_t t = 0; t < seq; t += step) {
    label_w = std::max(label_w, text_width(fit_text(labels[size_t(t)], ls, max_label), ls));
  }
  const int x0 = kMargin + label_w + kGap, y0 = kMargin + 2 * line + label_w + kGap;
  Image img(x0 + side + kMargin, y0 + side + kGap + kColourBar + 2 + line + kMargin, kBackground);
  place = {x0, y0, side};
  const int room = img.width() - 2 * kMargin;  // a line too long at scale 2 is drawn at 1
  const auto fitting = [&](const std::string& t) {
    return text_width(t, scale) <= room ? scale : 1;
  };
  img.text(kMargin, kMargin, title, kText, fitting(title), room);
  img.text(kMargin, kMargin + line, subtitle, kDimText, fitting(subtitle), room);
  float vmax = 0.0f;
  for (int64_t i = 0; i < seq * seq; ++i) vmax = std::max(vmax, w[i]);
  const ColourScale colour(vmax, linear);
  for (int y = 0; y < side; ++y) {
    const CellRange rows = cells_of_pixel(seq, side, y);
    for (int x = 0; x < side; ++x) {
      const CellRange cols = cells_of_pixel(seq, side, x);
      float v = -1.0f;
      for (int64_t i = rows.begin; i < rows.end; ++i) {
        for (int64_t j = cols.begin; j < cols.end; ++j) {
          if (allowed[size_t(i * seq + j)]) v = std::max(v, w[i * seq + j]);
        }
      }
      img.set(x0 + x, y0 + y, colour(v));
    }
  }
  img.frame(x0 - 1, y0 - 1, side + 2, side + 2, kFrame);
  const int glyph_half = kGlyphHeight * ls / 2;
  for (int64_t t = 0; t < seq; t += step) {
    const std::string l = fit_text(labels[size_t(t)], ls, max_label);
    const int c = int(std::lround(cell_centre(seq, side, t)));
    img.text(x0 - kGap - text_width(l, ls), y0 + c - glyph_half + ls / 2, l, kText, ls);
    img.text_up(x0 + c - glyph_half + ls / 2, y0 - kGap, l, kText, ls);
  }
  const int bar_y = y0 + side + kGap;
  for (int x = 0; x < side; ++x) {
    img.fill_rect(x0 + x, bar_y, 1, kColourBar, viridis(double(x) / (side - 1)));
  }
  colour.draw_labels(img, x0, bar_y + kColourBar + 2, side, scale);
  return img;
}

std::string fixed(double v, int digits = 3) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string join_flags(const std::vector<std::string>& flags, const char* sep) {
  std::string s;
  for (const std::string& f : flags) s += (s.empty() ? "" : sep) + f;
  return s;
}

void print_real_table(const RealHeads& r, const std::vector<HeadStats>& stats) {
  std::printf("attngen viz: %s: %lld tokens, %lld head%s", r.source.c_str(),
              static_cast<long long>(r.seq), static_cast<long long>(r.heads),
              r.heads == 1 ? "" : "s");
  if (!r.from_weights) {
    std::printf(" of dim %lld (%lld kv heads)", static_cast<long long>(r.dim),
                static_cast<long long>(r.heads_kv));
  }
  std::printf("%s\n", r.causal ? (r.causal_detected ? ", causal (detected: no weight above the "
                                                      "diagonal)"
                                                    : ", causal")
                               : "");
  if (!r.kernel.empty())
    std::printf("kernel %s: %.2f ms (weights written)\n", r.kernel.c_str(), r.ms);
  std::printf("\n%-4s  %-18s %7s %6s %6s %6s %6s %6s %6s %6s %6s %7s %6s  %s\n", "head", "pattern",
              "entropy", "norm", "max w", "sat", "diag", "prev", "first", "sep", "local", "dist",
              "ratio", "flags");
  for (size_t h = 0; h < stats.size(); ++h) {
    const HeadStats& s = stats[h];
    std::printf(
        "%-4zu  %-18s %7.3f %6.3f %6.3f %6.3f %6.3f %6.3f %6.3f %6s %6.3f %7.2f %6.3f  %s\n", h,
        pattern_display(s.pattern, r.tokens).c_str(), s.entropy, s.entropy_norm, s.max_weight,
        s.saturation, s.diagonal, s.previous, s.first,
        s.separator < 0 ? "-" : fixed(s.separator).c_str(), s.local, s.distance, s.distance_ratio,
        join_flags(s.flags, ", ").c_str());
  }
  std::printf(
      "\nentropy in bits (norm: of log2 of the keys a row may attend); sat: rows with a "
      "weight > %.2f;\nlocal: mass within |i - j| <= %lld; ratio: mean distance / "
      "uniform's. Flags: prune (near-uniform),\nscale (most rows saturated). "
      "tools/attngen/README.md defines each.\n\n",
      kSaturatedRow, static_cast<long long>(local_band(r.seq)));
}

bool write_text_file(const std::filesystem::path& path, const std::string& text,
                     std::vector<std::string>& written) {
  std::ofstream f(path, std::ios::binary);
  f << text;
  f.close();
  if (!f) {
    std::fprintf(stderr, "attngen viz: cannot write %s\n", path.string().c_str());
    return false;
  }
  written.push_back("  " + path.string());
  return true;
}

bool write_reports(const RealHeads& r, const std::vector<HeadStats>& stats,
                   const std::vector<PanelPlace>& places, const std::filesystem::path& out,
                   std::vector<std::string>& written) {
  std::string csv =
      "head,pattern,flags,rows,masked_rows,entropy_bits,entropy_norm,max_weight,saturation,"
      "diagonal,previous,first,separator,local,band,distance,distance_ratio\n";
  nlohmann::json heads = nlohmann::json::array();
  for (size_t h = 0; h < stats.size(); ++h) {
    const HeadStats& s = stats[h];
    char line[512];
    std::snprintf(line, sizeof line,
                  "%zu,%s,%s,%lld,%lld,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%s,%.6f,%lld,%.6f,"
                  "%.6f\n",
                  h, s.pattern.c_str(), join_flags(s.flags, ";").c_str(),
                  static_cast<long long>(s.rows), static_cast<long long>(s.masked_rows), s.entropy,
                  s.entropy_norm, s.max_weight, s.saturation, s.diagonal, s.previous, s.first,
                  s.separator < 0 ? "" : fixed(s.separator, 6).c_str(), s.local,
                  static_cast<long long>(s.band), s.distance, s.distance_ratio);
    csv += line;
    heads.push_back(
        {{"head", h},
         {"pattern", s.pattern},
         {"pattern_name", pattern_display(s.pattern, r.tokens)},
         {"flags", s.flags},
         {"rows", s.rows},
         {"masked_rows", s.masked_rows},
         {"entropy_bits", s.entropy},
         {"entropy_norm", s.entropy_norm},
         {"max_weight", s.max_weight},
         {"saturation", s.saturation},
         {"diagonal", s.diagonal},
         {"previous", s.previous},
         {"first", s.first},
         {"separator", s.separator < 0 ? nlohmann::json(nullptr) : nlohmann::json(s.separator)},
         {"local", s.local},
         {"band", s.band},
         {"distance", s.distance},
         {"distance_ratio", s.distance_ratio},
         {"image", "head_" + std::to_string(h) + ".png"},
         {"panel", {{"x", places[h].x}, {"y", places[h].y}, {"side", places[h].side}}}});
  }
  nlohmann::json j = {
      {"source", r.source},
      {"seq", r.seq},
      {"heads", r.heads},
      {"causal", r.causal},
      {"causal_detected", r.causal_detected},
      {"from_weights", r.from_weights},
      {"kernel", r.kernel.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.kernel)},
      {"tokens", r.tokens},
      {"thresholds",
       {{"saturated_row", kSaturatedRow},
        {"scale_problem", kScaleProblem},
        {"broad_entropy", kBroadEntropy},
        {"pattern_mass", kPatternMass},
        {"local_mass", kLocalMass},
        {"long_range_ratio", kLongRangeRatio}}},
      {"head_stats", heads},
  };
  if (!r.from_weights) {
    j["head_dim"] = r.dim;
    j["heads_kv"] = r.heads_kv;
  }
  // Tokens need not be valid UTF-8: replace what is not rather than throw.
  return write_text_file(out / "report.csv", csv, written) &&
         write_text_file(out / "report.json",
                         j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n",
                         written);
}

bool prepare_out_dir(const std::filesystem::path& out) {
  std::error_code ec;
  std::filesystem::create_directories(out, ec);
  if (ec || !std::filesystem::is_directory(out)) {
    std::fprintf(stderr, "attngen viz: cannot create the directory %s: %s\n", out.string().c_str(),
                 ec ? ec.message().c_str() : "not a directory");
    return false;
  }
  return true;
}

int run_real(const ParsedArgs& a) {
  for (const char* synthetic : {"seq", "heads", "pattern", "window", "stride", "block", "density",
                                "seed", "global", "local"}) {
    if (a.has(synthetic)) {
      throw UsageError(std::string("attngen viz: --") + synthetic +
                       " is for the synthetic heads; real inputs set their own shape");
    }
  }
  const std::filesystem::path out = a.text("out", default_out_dir());
  if (out.empty()) throw UsageError("attngen viz: --out: expected a directory, got ''");
  RealHeads r;
  if (const int st = load_real(a, r); st != 0) return st;
  const bool linear = a.flag("linear");
  const int64_t seq = r.seq;
  std::vector<HeadStats> stats;
  for (int64_t h = 0; h < r.heads; ++h) {
    stats.push_back(head_stats(&r.weights[size_t(h * seq * seq)], seq, r.causal, r.tokens));
  }
  print_real_table(r, stats);
  if (!prepare_out_dir(out)) return 1;

  std::vector<std::string> labels;
  for (int64_t t = 0; t < seq; ++t) {
    labels.push_back(r.tokens.empty() ? std::to_string(t) : ascii_label(r.tokens[size_t(t)]));
  }
  std::vector<uint8_t> allowed(size_t(seq * seq), 1);
  if (r.causal) {
    for (int64_t i = 0; i < seq; ++i) {
      for (int64_t j = i + 1; j < seq; ++j) allowed[size_t(i * seq + j)] = 0;
    }
  }
  std::vector<std::string> written;
  std::vector<PanelPlace> places(size_t(r.heads));
  std::vector<Image> cells;
  for (int64_t h = 0; h < r.heads; ++h) {
    const HeadStats& s = stats[size_t(h)];
    const float* w = &r.weights[size_t(h * seq * seq)];
    std::string title = "head " + std::to_string(h) + ": " + pattern_display(s.pattern, r.tokens);
    if (!s.flags.empty()) title += " (" + join_flags(s.flags, ", ") + ")";
    const std::string subtitle = "rows: query, cols: key, entropy " + fixed(s.entropy_norm, 2);
    const Image img =
        labelled_head_image(w, allowed, seq, labels, title, subtitle, linear, places[size_t(h)]);
    if (!save(img, out / ("head_" + std::to_string(h) + ".png"), written)) return 1;
    cells.push_back(head_image(w, allowed, seq, kSmallCap,
                               std::to_string(h) + ": " + pattern_display(s.pattern, r.tokens),
                               linear));
  }
  const int cols = int(std::ceil(std::sqrt(double(r.heads))));
  const int grid_rows = int(ceil_div(r.heads, cols));
  const int side = panel_side(seq, kSmallCap), line = line_height(text_scale(side));
  const int cw = cells[0].width(), ch = cells[0].height();
  Image grid(cols * cw, kMargin + line + grid_rows * ch, kBackground);
  grid.text(kMargin, kMargin,
            ascii_label(r.source) + ", " + std::to_string(seq) + " tokens, " +
                (linear ? "linear" : "log") + " colour scale",
            kText, text_scale(side), grid.width() - 2 * kMargin);
  for (int64_t h = 0; h < r.heads; ++h) {
    grid.blit(cells[size_t(h)], int(h % cols) * cw, kMargin + line + int(h / cols) * ch);
  }
  if (!save(grid, out / "heads_grid.png", written)) return 1;
  if (!write_reports(r, stats, places, out, written)) return 1;
  std::printf("wrote (width x height):\n");
  for (const std::string& w : written) std::printf("%s\n", w.c_str());
  return 0;
}

int run_synthetic(const ParsedArgs& a) {
  PatternParams params = default_pattern_params();
  params.seq = a.integer("seq", 128, 1, kMaxSeq);
  const int64_t heads = a.integer("heads", 6, 1, kMaxHeads);
  const PatternId id = parse_pattern("attngen viz", a.text("pattern", "dense"));
  const std::filesystem::path out = a.text("out", default_out_dir());
  if (out.empty()) throw UsageError("attngen viz: --out: expected a directory, got ''");

  const bool causal = a.flag("causal");
  const attngen_kernel_info* kernel = find_weights_kernel(id, causal);
  if (kernel != nullptr) take_kernel_params(*kernel, id, params);
  read_pattern_options(a, params);  // explicit options win over the kernel's parameters
  if (kernel != nullptr && !kernel_matches_params(*kernel, id, params)) kernel = nullptr;
  if (kernel == nullptr) kernel = find_weights_kernel(id, causal, /*generic=*/true);
  if (kernel == nullptr) {
    std::fprintf(stderr,
                 "attngen viz: no kernel writes the attention weights for --pattern %s%s with "
                 "these parameters.\nKernels with a weights output (WEIGHTS in "
                 "generated/variants.cmake):\n",
                 a.text("pattern", "dense").c_str(), causal ? " --causal" : "");
    list_weights_kernels(stderr);
    return kExitNoKernel;
  }
  params.heads = heads;
  params.dim = kernel->generic ? 64 : kernel->head_dim_qk;  // a generic kernel takes any
  const PatternSet set(params);
  const std::vector<PatternRow> rows = pattern_rows(set);

  if (!prepare_out_dir(out)) return 1;

  WeightsRun run;
  if (!run_weights_kernel(*kernel, set, id, params, causal, heads, run)) return 1;
  print_head_stats(*kernel, run, params.seq, heads, params.dim);
  std::vector<std::string> written;
  if (!write_images(*kernel, run, set, rows, params.seq, heads, out, written)) return 1;
  std::printf("wrote (width x height):\n");
  for (const std::string& w : written) std::printf("%s\n", w.c_str());
  std::printf("\n");
  print_pattern_table(stdout, set, rows);
  return 0;
}

}  // namespace

int run_viz(const std::vector<std::string>& args) {
  const ParsedArgs a = parse_args("attngen viz", viz_specs(), args);
  const bool real = a.has("q") || a.has("k") || a.has("weights") || a.has("tensors") ||
                    a.has("dir") || a.has("layer") || a.has("tokens");
  if (real) return run_real(a);
  if (a.flag("linear")) throw UsageError("attngen viz: --linear is for real heads");
  const int st = run_synthetic(a);
  if (st == 0) {
    std::printf(
        "%sReal heads: attngen viz --q layer0_q.npy --k layer0_k.npy --tokens tokens.txt "
        "--out DIR\n  (or --dir DIR --layer L, --weights FILE; `attngen viz --help`)\n",
        args.empty() ? "\nNo inputs given: this was the synthetic demo (--seq 128, 6 heads). "
                       "The files are above.\n"
                     : "\n");
  }
  return st;
}

}  // namespace attngen::cli
