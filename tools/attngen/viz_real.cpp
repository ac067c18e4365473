// Real heads for `attngen viz` (viz_real.h): reading and checking the inputs, computing the
// weights, and drawing the heads with their tokens.
#include "tools/attngen/viz_real.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <set>

#include "attngen/attngen.h"
#include "tools/attngen/head_stats.h"
#include "tools/attngen/image.h"
#include "tools/attngen/tensor_io.h"
#include "tools/attngen/viz.h"
#include "tools/attngen/viz_figures.h"
#include "tools/attngen/viz_kernels.h"
#include "tools/attngen/viz_report.h"

namespace attngen::cli::viz {

namespace {

constexpr int64_t kMaxRealHeads = 256;
constexpr int64_t kMaxWeights = int64_t(1) << 26;  // H * S^2 floats: 256 MiB
constexpr double kRowSumTolerance = 1e-3;          // weights files: |row sum - 1|

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

}  // namespace

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
  const std::string title = ascii_label(r.source) + ", " + std::to_string(seq) + " tokens, " +
                            (linear ? "linear" : "log") + " colour scale";
  if (!save(heads_grid(cells, seq, title), out / "heads_grid.png", written)) return 1;
  if (!write_reports(r, stats, places, out, written)) return 1;
  std::printf("wrote (width x height):\n");
  for (const std::string& w : written) std::printf("%s\n", w.c_str());
  return 0;
}

}  // namespace attngen::cli::viz
