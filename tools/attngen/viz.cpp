#include "tools/attngen/viz.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>
#include <set>

#include "attngen/attngen.h"
#include "attngen/kernel.h"
#include "tools/attngen/args.h"
#include "tools/attngen/image.h"
#include "tools/attngen/patterns.h"

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
    std::fprintf(f, "  --pattern %-40s (%s)\n", describe_kernel(*k).c_str(),
                 variant_name(*k).c_str());
  }
  if (seen.empty()) std::fprintf(f, "  (none)\n");
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

// One head's weights (seq x seq, row = query) as a heatmap with a title and a colour bar.
// allowed (seq x seq) says which pairs the kernel's mask lets through: the others are drawn
// black, apart from the colour scale, whose bottom also holds weights that underflowed to 0.
Image head_image(const float* w, const std::vector<uint8_t>& allowed, int64_t seq, int cap,
                 const std::string& title) {
  const int side = panel_side(seq, cap), scale = text_scale(side), line = line_height(scale);
  Image img(side + 2 * kMargin, side + 2 * line + 2 * kMargin + kGap + kColourBar + 2, kBackground);
  float vmax = 0.0f;
  for (int64_t i = 0; i < seq * seq; ++i) vmax = std::max(vmax, w[i]);
  const double lo = std::log10(std::max(double(vmax), 1e-30)) - kDecades;
  const auto colour = [&](double v) {
    return v < 0.0 ? kMasked : viridis(v == 0.0 ? 0.0 : (std::log10(v) - lo) / kDecades);
  };
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
  const std::string low = format_weight(vmax * std::pow(10.0, -kDecades));
  const std::string mid = format_weight(vmax * std::pow(10.0, -kDecades / 2));
  const std::string high = format_weight(vmax);
  img.text(kMargin, label_y, low, kDimText, scale);
  img.text(kMargin + (side - text_width(mid, scale)) / 2, label_y, mid, kDimText, scale);
  img.text(kMargin + side - text_width(high, scale), label_y, high, kDimText, scale);
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
      {"seq", "N", "sequence length, Sq = Skv (required; up to 2048)"},
      {"out", "DIR", "directory for the PNG files (required; created if missing)"},
      {"heads", "H", "heads (default 6, up to 16)"},
      {"pattern", "NAME",
       "the kernel to run: dense (default), local, strided, block-sparse, global-local"},
  };
  for (OptionSpec o : pattern_option_specs()) {
    if (std::string(o.name) == "causal") {
      o.help = "run the causal kernel; the panels show each pattern with causal (j <= p)";
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
  return "usage: attngen viz --seq N --out DIR [options]\n\n"
         "Runs a built-in kernel that writes the attention weights (attngen_attention with\n"
         "options.weights) on structured inputs, q and k built per head from position\n"
         "encodings (a distance envelope, sinusoids of per-head frequencies, a sink on token\n"
         "0, token embeddings) plus noise, so that the heads differ: local, broad, previous\n"
         "token, sink, periodic, same content, repeating. It writes to DIR:\n"
         "  head_<h>.png     the weights of head h (row = query, column = key), viridis on a\n"
         "                   log scale over four decades below the head's largest weight;\n"
         "                   black = masked by the kernel's pattern or causal mask\n"
         "  heads_grid.png   all heads side by side\n"
         "  patterns.png     the masks of dense and the four sparse patterns at this length,\n"
         "                   each with its attended pairs and FLOPs\n"
         "and prints the numbers. Only kernels generated with WEIGHTS (generated/variants.cmake)\n"
         "can run; --pattern and --causal choose among them. The pattern options set the\n"
         "panels of patterns.png (a running pattern's are the kernel's). Image sizes follow\n"
         "the layout rules in tools/attngen/README.md.\n\noptions:\n" +
         options_help(viz_specs()) +
         "\nExit status: 0 done, 1 the kernel or a file write failed, 2 bad arguments, 3 no "
         "kernel\nwith a weights output for that pattern.\n";
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

}  // namespace

int run_viz(const std::vector<std::string>& args) {
  const ParsedArgs a = parse_args("attngen viz", viz_specs(), args);
  a.require("seq");
  a.require("out");
  PatternParams params = default_pattern_params();
  params.seq = a.integer("seq", 0, 1, kMaxSeq);
  const int64_t heads = a.integer("heads", 6, 1, kMaxHeads);
  const PatternId id = parse_pattern("attngen viz", a.text("pattern", "dense"));
  const std::filesystem::path out = a.text("out", "");
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

  std::error_code ec;
  std::filesystem::create_directories(out, ec);
  if (ec || !std::filesystem::is_directory(out)) {
    std::fprintf(stderr, "attngen viz: cannot create the directory %s: %s\n", out.string().c_str(),
                 ec ? ec.message().c_str() : "not a directory");
    return 1;
  }

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

}  // namespace attngen::cli
