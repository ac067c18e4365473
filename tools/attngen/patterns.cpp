#include "tools/attngen/patterns.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <random>

#include "attngen/kernel.h"
#include "bench/flops.h"  // the FLOP count attngen_bench and the peers use

namespace attngen::cli {

namespace {

constexpr int64_t kMaxSeq = int64_t{1} << 20;
constexpr int64_t kMaxParam = int64_t{1} << 20;
constexpr int64_t kMaxLayoutBlocks = int64_t{1} << 26;
// Beyond this many candidate keys counting would take seconds; refused with a message.
constexpr double kMaxCountCost = double(int64_t{1} << 30);

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

int64_t count_interval(const attngen_pattern& p, int64_t i, int64_t lo, int64_t hi) {
  int64_t n = 0;
  for (int64_t j = lo; j <= hi; ++j) n += attngen_pattern_attends(&p, i, i, j) != 0;
  return n;
}

// The layout is consulted once per block: attngen_pattern_attends is constant over a block.
int64_t count_block_sparse(const attngen_pattern& p, bool causal, int64_t seq) {
  const int64_t b = p.block, nb = ceil_div(seq, b);
  int64_t total = 0;
  for (int64_t r = 0; r < nb; ++r) {
    const int64_t r0 = r * b, rows = std::min(seq, r0 + b) - r0;
    for (int64_t c = 0; c < nb; ++c) {
      const int64_t c0 = c * b, width = std::min(seq, c0 + b) - c0;
      if (causal && c > r) break;  // every key of the block is above the diagonal
      if (!attngen_pattern_attends(&p, r0, r0, c0)) continue;
      // On the diagonal block query r0 + t sees keys r0 .. r0 + t under causal.
      total += causal && c == r ? rows * (rows + 1) / 2 : rows * width;
    }
  }
  return total;
}

std::string percent(double fraction) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f%%", 100.0 * fraction);
  return buf;
}

// Three significant digits with a unit prefix: 1000-based (SI) or 1024-based (binary).
std::string scaled(double v, double base, const char* const* units, int n_units) {
  int u = 0;
  while (u + 1 < n_units && v >= 999.5) {
    v /= base;
    ++u;
  }
  char buf[48];
  if (u == 0 || v >= 99.95) {
    std::snprintf(buf, sizeof buf, "%.0f %s", v, units[u]);
  } else if (v >= 9.995) {
    std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
  } else {
    std::snprintf(buf, sizeof buf, "%.2f %s", v, units[u]);
  }
  return buf;
}

}  // namespace

std::string si_flops(double flops) {
  static const char* const units[] = {"FLOP", "kFLOP", "MFLOP", "GFLOP", "TFLOP", "PFLOP", "EFLOP"};
  return scaled(flops, 1000.0, units, 7);
}

std::string binary_bytes(double bytes) {
  static const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  return scaled(bytes, 1024.0, units, 6);
}

PatternParams default_pattern_params() {
  PatternParams p;
  bool window = false, stride = false, block = false, global = false;
  for (size_t i = 0; i < attngen_kernel_count(); ++i) {
    const attngen_kernel_info* k = attngen_kernel_at(i);
    if (k->op != ATTNGEN_OP_ATTENTION || k->generic) continue;  // generic: no parameters
    const attngen_pattern& kp = k->pattern;
    if (kp.kind == ATTNGEN_PATTERN_WINDOW && !window && kp.window_left >= 0 &&
        kp.window_left == kp.window_right) {
      p.window = kp.window_left + 1;
      window = true;
    } else if (kp.kind == ATTNGEN_PATTERN_STRIDED && !stride) {
      p.stride = kp.stride;
      stride = true;
    } else if (kp.kind == ATTNGEN_PATTERN_BLOCK_SPARSE && !block) {
      p.block = kp.block;
      block = true;
    } else if (kp.kind == ATTNGEN_PATTERN_GLOBAL_LOCAL && !global) {
      p.global = kp.global_tokens;
      p.local = kp.local;
      global = true;
    }
  }
  return p;
}

std::vector<OptionSpec> pattern_option_specs() {
  return {
      {"window", "W", "local window: |p - j| < W"},
      {"stride", "L", "strided: |p - j| < L or (p - j) mod L == 0"},
      {"block", "B", "block-sparse: block size"},
      {"density", "P", "block-sparse: fraction of layout blocks on, in (0, 1] (default 0.25)"},
      {"seed", "S", "block-sparse: seed of the random layout (default 1)"},
      {"global", "G", "global + local: the first G tokens see and are seen by all"},
      {"local", "W", "global + local: |p - j| <= W"},
      {"causal", nullptr, "also each pattern combined with causal (j <= p)"},
  };
}

void read_pattern_options(const ParsedArgs& a, PatternParams& p) {
  p.window = static_cast<int32_t>(a.integer("window", p.window, 1, kMaxParam));
  p.stride = static_cast<int32_t>(a.integer("stride", p.stride, 1, kMaxParam));
  p.block = static_cast<int32_t>(a.integer("block", p.block, 1, kMaxParam));
  p.density = a.real("density", p.density, 0.0, 1.0);
  if (p.density <= 0.0) {
    throw UsageError(a.command() + ": --density: expected a number in (0, 1], got " +
                     a.text("density", ""));
  }
  p.seed = static_cast<uint64_t>(
      a.integer("seed", static_cast<int64_t>(p.seed), 0, std::numeric_limits<int64_t>::max()));
  p.global = static_cast<int32_t>(a.integer("global", p.global, 0, kMaxParam));
  p.local = static_cast<int32_t>(a.integer("local", p.local, 0, kMaxParam));
  p.causal = a.flag("causal");
  const int64_t nb = ceil_div(p.seq, p.block);
  if (nb > kMaxLayoutBlocks / nb) {
    throw UsageError(a.command() + ": --block " + std::to_string(p.block) + " gives a " +
                     std::to_string(nb) + " x " + std::to_string(nb) + " block layout for seq " +
                     std::to_string(p.seq) + "; at most " + std::to_string(kMaxLayoutBlocks) +
                     " blocks: use a larger --block");
  }
}

int64_t BlockLayout::count_on() const {
  return std::count_if(on.begin(), on.end(), [](uint8_t v) { return v != 0; });
}

BlockLayout make_block_layout(int64_t seq, int32_t block, double density, uint64_t seed) {
  BlockLayout l;
  l.block = block;
  l.rows = l.cols = ceil_div(seq, block);
  l.on.assign(static_cast<size_t>(l.rows * l.cols), 0);
  std::vector<int64_t> off;  // off-diagonal blocks, candidates for the random ones
  off.reserve(static_cast<size_t>(l.rows * l.cols - l.rows));
  for (int64_t r = 0; r < l.rows; ++r) {
    for (int64_t c = 0; c < l.cols; ++c) {
      if (r == c) {
        l.on[r * l.cols + c] = 1;
      } else {
        off.push_back(r * l.cols + c);
      }
    }
  }
  const int64_t target = std::llround(density * double(l.rows * l.cols));
  const int64_t extra = std::clamp<int64_t>(target - l.rows, 0, int64_t(off.size()));
  // A partial Fisher-Yates shuffle with mt19937_64, whose output the standard fixes: the same
  // seed gives the same layout everywhere.
  std::mt19937_64 rng(seed);
  for (int64_t k = 0; k < extra; ++k) {
    const int64_t pick = k + int64_t(rng() % uint64_t(off.size() - k));
    std::swap(off[k], off[pick]);
    l.on[off[k]] = 1;
  }
  return l;
}

PatternSet::PatternSet(const PatternParams& params)
    : params_(params),
      layout_(make_block_layout(params.seq, params.block, params.density, params.seed)) {
  const int64_t shape[2] = {layout_.rows, layout_.cols};
  layout_tensor_ = attngen_tensor_contiguous(layout_.on.data(), ATTNGEN_BOOL, 2, shape);
}

attngen_pattern PatternSet::pattern(PatternId id) const {
  attngen_pattern p{};
  switch (id) {
    case PatternId::kDense:
      p.kind = ATTNGEN_PATTERN_NONE;
      break;
    case PatternId::kLocal:
      p = attngen_pattern_local(params_.window);
      break;
    case PatternId::kStrided:
      p.kind = ATTNGEN_PATTERN_STRIDED;
      p.stride = params_.stride;
      break;
    case PatternId::kBlockSparse:
      p.kind = ATTNGEN_PATTERN_BLOCK_SPARSE;
      p.block = params_.block;
      p.layout = &layout_tensor_;
      break;
    case PatternId::kGlobalLocal:
      p.kind = ATTNGEN_PATTERN_GLOBAL_LOCAL;
      p.global_tokens = params_.global;
      p.local = params_.local;
      break;
  }
  return p;
}

const char* PatternSet::key(PatternId id) {
  switch (id) {
    case PatternId::kDense:
      return "dense";
    case PatternId::kLocal:
      return "local";
    case PatternId::kStrided:
      return "strided";
    case PatternId::kBlockSparse:
      return "block_sparse";
    case PatternId::kGlobalLocal:
      return "global_local";
  }
  return "?";
}

std::string PatternSet::short_name(PatternId id) const {
  switch (id) {
    case PatternId::kDense:
      return "dense";
    case PatternId::kLocal:
      return "local window";
    case PatternId::kStrided:
      return "strided";
    case PatternId::kBlockSparse:
      return "block-sparse";
    case PatternId::kGlobalLocal:
      return "global+local";
  }
  return "?";
}

std::string PatternSet::parameters(PatternId id) const {
  const PatternParams& p = params_;
  char buf[96];
  switch (id) {
    case PatternId::kDense:
      return "all pairs";
    case PatternId::kLocal:
      return "w=" + std::to_string(p.window);
    case PatternId::kStrided:
      return "l=" + std::to_string(p.stride);
    case PatternId::kBlockSparse:
      std::snprintf(buf, sizeof buf, "b=%d %lld/%lld on", p.block,
                    static_cast<long long>(layout_.count_on()),
                    static_cast<long long>(layout_.rows * layout_.cols));
      return buf;
    case PatternId::kGlobalLocal:
      return "G=" + std::to_string(p.global) + " w=" + std::to_string(p.local);
  }
  return "";
}

std::string PatternSet::name(PatternId id) const {
  const PatternParams& p = params_;
  switch (id) {
    case PatternId::kDense:
      return "dense";
    case PatternId::kLocal:
      return "local window " + std::to_string(p.window);
    case PatternId::kStrided:
      return "strided " + std::to_string(p.stride);
    case PatternId::kBlockSparse: {
      char buf[96];
      std::snprintf(buf, sizeof buf, "block-sparse %d (%.1f%% on)", p.block,
                    100.0 * double(layout_.count_on()) / double(layout_.rows * layout_.cols));
      return buf;
    }
    case PatternId::kGlobalLocal:
      return "global " + std::to_string(p.global) + " + local " + std::to_string(p.local);
  }
  return "?";
}

bool attended(const attngen_pattern& p, bool causal, int64_t i, int64_t j) {
  return (!causal || j <= i) && attngen_pattern_attends(&p, i, i, j) != 0;
}

double count_cost(const attngen_pattern& p, bool causal, int64_t seq) {
  (void)causal;  // causal at most halves the work; the bound ignores it
  const double n = double(seq);
  switch (p.kind) {
    case ATTNGEN_PATTERN_NONE:
      return n;
    case ATTNGEN_PATTERN_WINDOW: {
      if (p.window_left < 0 || p.window_right < 0) return n * n;
      return n * std::min(n, double(p.window_left) + double(p.window_right) + 1.0);
    }
    case ATTNGEN_PATTERN_STRIDED:
      return n * std::min(n, 2.0 * p.stride - 1.0);
    case ATTNGEN_PATTERN_BLOCK_SPARSE: {
      const double nb = double(ceil_div(seq, p.block));
      return nb * nb;
    }
    case ATTNGEN_PATTERN_GLOBAL_LOCAL:
      return std::min(n, double(p.global_tokens)) * n +
             n * std::min(n, double(p.global_tokens) + 2.0 * p.local + 1.0);
    default:
      return n * n;
  }
}

int64_t count_pairs(const attngen_pattern& p, bool causal, int64_t seq) {
  if (p.kind == ATTNGEN_PATTERN_BLOCK_SPARSE) return count_block_sparse(p, causal, seq);
  int64_t total = 0;
  for (int64_t i = 0; i < seq; ++i) {
    const int64_t hi = causal ? i : seq - 1;  // the keys j <= hi are candidates
    switch (p.kind) {
      case ATTNGEN_PATTERN_NONE:
        total += hi + 1;  // attngen_pattern_attends is 1 for every key
        break;
      case ATTNGEN_PATTERN_WINDOW: {
        const int64_t lo = p.window_left < 0 ? 0 : std::max<int64_t>(0, i - p.window_left);
        const int64_t up = p.window_right < 0 ? hi : std::min<int64_t>(hi, i + p.window_right);
        total += count_interval(p, i, lo, up);
        break;
      }
      case ATTNGEN_PATTERN_STRIDED: {
        const int64_t l = p.stride;
        // The band |i - j| < l, key by key; then the keys l, 2l, ... away on either side, which
        // all attend by definition ((p - j) mod l == 0): counted, not visited, as there are
        // about seq / l of them a row.
        total += count_interval(p, i, std::max<int64_t>(0, i - l + 1), std::min(hi, i + l - 1));
        total += i / l + (hi - i) / l;
        break;
      }
      case ATTNGEN_PATTERN_GLOBAL_LOCAL: {
        if (i < p.global_tokens) {  // a global query: every key is a candidate
          total += count_interval(p, i, 0, hi);
          break;
        }
        // The global keys [0, G), then the band |i - j| <= local past them.
        const int64_t g_up = std::min<int64_t>(hi, int64_t(p.global_tokens) - 1);
        total += count_interval(p, i, 0, g_up);
        total += count_interval(p, i, std::max<int64_t>(g_up + 1, i - p.local),
                                std::min<int64_t>(hi, i + p.local));
        break;
      }
      default:
        total += count_interval(p, i, 0, hi);
        break;
    }
  }
  return total;
}

std::vector<PatternRow> pattern_rows(const PatternSet& set) {
  const PatternParams& prm = set.params();
  const double s = double(prm.seq);
  std::vector<PatternRow> rows;
  for (PatternId id : kAllPatterns) {
    for (int causal = 0; causal <= (prm.causal ? 1 : 0); ++causal) {
      const attngen_pattern p = set.pattern(id);
      const double cost = count_cost(p, causal != 0, prm.seq);
      if (cost > kMaxCountCost) {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%.3g", cost);
        throw UsageError("attngen patterns: counting " + set.name(id) + " at seq " +
                         std::to_string(prm.seq) + " would test " + buf +
                         " candidate pairs (limit 2^30): use a smaller --seq or pattern width");
      }
      PatternRow r{};
      r.id = id;
      r.causal = causal != 0;
      r.pairs = count_pairs(p, r.causal, prm.seq);
      r.fraction = double(r.pairs) / (s * s);
      r.flops = attngen::bench::attention_flops(1, prm.heads, double(r.pairs), prm.dim, prm.dim);
      r.dense_score_bytes = 4 * prm.heads * prm.seq * prm.seq;
      r.kernel_bytes = 4 * 4 * prm.seq * prm.heads * prm.dim;
      if (id == PatternId::kBlockSparse) r.kernel_bytes += set.layout().rows * set.layout().cols;
      rows.push_back(r);
    }
  }
  return rows;
}

void print_pattern_table(FILE* f, const PatternSet& set, const std::vector<PatternRow>& rows) {
  const PatternParams& p = set.params();
  std::fprintf(f,
               "attngen patterns: seq %lld (self-attention, Sq = Skv, batch 1), %lld head%s of "
               "dim %lld\n",
               static_cast<long long>(p.seq), static_cast<long long>(p.heads),
               p.heads == 1 ? "" : "s", static_cast<long long>(p.dim));
  std::fprintf(f, "  local window %d: |p - j| < %d\n", p.window, p.window);
  std::fprintf(f, "  strided %d: |p - j| < %d or (p - j) mod %d == 0\n", p.stride, p.stride,
               p.stride);
  std::fprintf(f,
               "  block-sparse %d: %lld x %lld layout, %lld blocks on (diagonal + random, density "
               "%g, seed %llu)\n",
               p.block, static_cast<long long>(set.layout().rows),
               static_cast<long long>(set.layout().cols),
               static_cast<long long>(set.layout().count_on()), p.density,
               static_cast<unsigned long long>(p.seed));
  std::fprintf(f, "  global %d + local %d: |p - j| <= %d or j < %d or p < %d\n", p.global, p.local,
               p.local, p.global, p.global);
  std::fprintf(f,
               "  FLOPs = 4*H*pairs*D (QK^T and PV, 2 per multiply-add); dense scores = the F32 "
               "score matrix, 4*H*S^2 bytes;\n  kernel = Q, K, V, O (4*4*S*H*D bytes) + the "
               "layout (block-sparse, 1 byte a block)\n\n");
  std::fprintf(f, "%-32s %-6s %16s %10s %12s %13s %14s\n", "pattern", "causal", "pairs", "of dense",
               "FLOPs", "dense scores", "kernel memory");
  for (const PatternRow& r : rows) {
    std::fprintf(f, "%-32s %-6s %16lld %10s %12s %13s %14s\n", set.name(r.id).c_str(),
                 r.causal ? "yes" : "no", static_cast<long long>(r.pairs),
                 percent(r.fraction).c_str(), si_flops(r.flops).c_str(),
                 binary_bytes(double(r.dense_score_bytes)).c_str(),
                 binary_bytes(double(r.kernel_bytes)).c_str());
  }
}

void print_pattern_csv(FILE* f, const PatternSet& set, const std::vector<PatternRow>& rows) {
  std::fprintf(f, "pattern,causal,pairs,fraction,flops,dense_score_bytes,kernel_bytes,params\n");
  for (const PatternRow& r : rows) {
    std::fprintf(f, "%s,%d,%lld,%.9g,%.17g,%lld,%lld,%s\n", PatternSet::key(r.id), r.causal ? 1 : 0,
                 static_cast<long long>(r.pairs), r.fraction, r.flops,
                 static_cast<long long>(r.dense_score_bytes),
                 static_cast<long long>(r.kernel_bytes), set.parameters(r.id).c_str());
  }
}

namespace {

std::vector<OptionSpec> patterns_specs() {
  std::vector<OptionSpec> s = {
      {"seq", "N", "sequence length, Sq = Skv (required; up to 1048576)"},
      {"heads", "H", "heads, for FLOPs and memory (default 1)"},
      {"dim", "D", "head dim, for FLOPs and memory (default 64)"},
  };
  for (const OptionSpec& o : pattern_option_specs()) s.push_back(o);
  s.push_back({"csv", nullptr, "print CSV: pattern,causal,pairs,fraction,flops,..."});
  s.push_back(
      {"layout-out", "FILE", "write the block-sparse layout: 'rows cols block', then rows of 0/1"});
  return s;
}

}  // namespace

std::string patterns_help() {
  const PatternParams d = default_pattern_params();
  char defaults[256];
  std::snprintf(defaults, sizeof defaults,
                "Defaults are the parameters of the built-in pattern kernels: --window %d "
                "--stride %d --block %d\n--global %d --local %d.\n",
                d.window, d.stride, d.block, d.global, d.local);
  return "usage: attngen patterns --seq N [options]\n\n"
         "For self-attention over N tokens (one batch), counts the (query, key) pairs each\n"
         "pattern of docs/semantics.md attends (dense, local window, strided, block-sparse,\n"
         "global + local; each also with causal under --causal), exactly, with\n"
         "attngen_pattern_attends, and prints their fraction of dense, the FLOPs (4*H*pairs*D)\n"
         "and the memory of a dense score matrix versus the kernel's.\n\noptions:\n" +
         options_help(patterns_specs()) + "\n" + defaults +
         "Exit status: 0 done, 1 the layout file cannot be written, 2 bad arguments.\n";
}

int run_patterns(const std::vector<std::string>& args) {
  const ParsedArgs a = parse_args("attngen patterns", patterns_specs(), args);
  a.require("seq");
  PatternParams p = default_pattern_params();
  p.seq = a.integer("seq", 0, 1, kMaxSeq);
  p.heads = a.integer("heads", 1, 1, 4096);
  p.dim = a.integer("dim", 64, 1, 4096);
  read_pattern_options(a, p);
  const PatternSet set(p);
  const std::vector<PatternRow> rows = pattern_rows(set);
  if (a.has("layout-out")) {
    const std::string path = a.text("layout-out", "");
    std::ofstream out(path);
    out << set.layout().rows << ' ' << set.layout().cols << ' ' << set.layout().block << '\n';
    for (int64_t r = 0; r < set.layout().rows; ++r) {
      for (int64_t c = 0; c < set.layout().cols; ++c) {
        out << (set.layout().on[r * set.layout().cols + c] ? '1' : '0');
      }
      out << '\n';
    }
    if (!out.flush()) {
      std::fprintf(stderr, "attngen patterns: cannot write %s\n", path.c_str());
      return 1;
    }
  }
  if (a.flag("csv")) {
    print_pattern_csv(stdout, set, rows);
  } else {
    print_pattern_table(stdout, set, rows);
  }
  return 0;
}

}  // namespace attngen::cli
