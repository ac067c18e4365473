// Synthetic heads for `attngen viz` (viz_synthetic.h): structured q and k, the weights kernel's
// run, the per-head measures and the figures.
#include "tools/attngen/viz_synthetic.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "attngen/attngen.h"
#include "attngen/kernel.h"
#include "tools/attngen/patterns.h"
#include "tools/attngen/viz.h"
#include "tools/attngen/viz_figures.h"
#include "tools/attngen/viz_kernels.h"

namespace attngen::cli::viz {

namespace {

constexpr int64_t kMaxSeq = 2048;
constexpr int64_t kMaxHeads = 16;  // the weights, H * S^2 floats, stay within 256 MiB

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
  std::vector<Image> cells;
  for (int64_t h = 0; h < heads; ++h) {
    cells.push_back(head_image(&weights[size_t(h * seq * seq)], allowed, seq, kSmallCap,
                               std::to_string(h) + ": " + head_kind_name(head_kind(h))));
  }
  const std::string title =
      variant_name(kernel) + ", seq " + std::to_string(seq) + ", log colour scale";
  if (!save(heads_grid(cells, seq, title), out / "heads_grid.png", written)) return false;
  return save(patterns_image(set, rows), out / "patterns.png", written);
}

}  // namespace

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

}  // namespace attngen::cli::viz
