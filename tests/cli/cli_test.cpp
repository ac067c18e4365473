// Tests of the attngen command-line tool, run as a child process (ATTNGEN_CLI_PATH):
// - `viz` writes PNG files that decode (libpng) with the sizes its layout rules give, and whose
//   pixels show what they claim at a few known places;
// - `patterns` pair counts equal a brute-force count over every (i, j) done here, from the
//   definitions of docs/semantics.md (not from the tool's code);
// - bad arguments exit with status 2 and a message, never a crash.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "tests/cli/cli_util.h"

namespace fs = std::filesystem;
using namespace attngen_cli_test;

namespace {

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "attngen_cli_test.XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr) << std::strerror(errno);
    dir_ = tmpl;
  }
  void TearDown() override {
    if (!HasFailure()) {
      std::error_code ec;
      fs::remove_all(dir_, ec);
    } else {
      std::printf("outputs kept in %s\n", dir_.c_str());
    }
  }

  RunResult run(const std::vector<std::string>& args,
                const std::map<std::string, std::string>& env = {}) {
    return run_tool(dir_, args, env);
  }

  fs::path dir_;
};

// ---- The image layout of `attngen viz --help` / tools/attngen/README.md, restated.

struct Size {
  int width, height;
};
Size head_size(int64_t seq, int cap) {
  const int p = panel_side(seq, cap), l = line_height(p);
  return {p + 16, p + 2 * l + 30};  // margins 8; title; panel; gap 4, bar 8, 2; labels
}
Size grid_size(int64_t seq, int heads) {
  const Size cell = head_size(seq, 256);
  const int cols = int(std::ceil(std::sqrt(double(heads))));
  const int rows = (heads + cols - 1) / cols;
  return {cols * cell.width, 8 + line_height(panel_side(seq, 256)) + rows * cell.height};
}
Size patterns_size(int64_t seq) {
  const int p = panel_side(seq, 256), l = line_height(p);
  return {5 * p + 6 * 8, p + 5 * l + 24};  // title, gap, panels, gap, 4 lines of labels
}
// Top-left pixel of patterns.png panel k (0 dense, 1 local, 2 strided, 3 block, 4 global).
std::pair<int, int> patterns_panel(int64_t seq, int k) {
  const int p = panel_side(seq, 256);
  return {8 + k * (p + 8), 8 + line_height(p) + 4};
}

void expect_png(const fs::path& path, Size want, Png* out = nullptr) {
  Png png;
  ASSERT_TRUE(read_png(path, png));
  EXPECT_EQ(png.width, want.width) << path;
  EXPECT_EQ(png.height, want.height) << path;
  if (out != nullptr) *out = std::move(png);
}

// ---- Brute-force pair counts from the definitions (docs/semantics.md, Masks), p = i.

struct Layout {
  int64_t rows = 0, cols = 0, block = 0;
  std::vector<std::string> on;
};

struct Params {
  int64_t window, stride, global, local;
  Layout layout;
};

bool attends(const std::string& pattern, const Params& p, int64_t i, int64_t j) {
  const int64_t d = i > j ? i - j : j - i;
  if (pattern == "dense") return true;
  if (pattern == "local") return d < p.window;
  if (pattern == "strided") return d < p.stride || (i - j) % p.stride == 0;
  if (pattern == "block_sparse") return p.layout.on[i / p.layout.block][j / p.layout.block] == '1';
  if (pattern == "global_local") return d <= p.local || j < p.global || i < p.global;
  ADD_FAILURE() << "unknown pattern " << pattern;
  return false;
}

int64_t brute_force(const std::string& pattern, bool causal, const Params& p, int64_t seq) {
  int64_t n = 0;
  for (int64_t i = 0; i < seq; ++i) {
    for (int64_t j = 0; j < seq; ++j) n += (!causal || j <= i) && attends(pattern, p, i, j);
  }
  return n;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, sep)) out.push_back(cur);
  return out;
}

Layout read_layout(const fs::path& path) {
  Layout l;
  std::ifstream f(path);
  f >> l.rows >> l.cols >> l.block;
  std::string row;
  while (f >> row) l.on.push_back(row);
  return l;
}

}  // namespace

TEST_F(Cli, Help) {
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"--help"},
                                             {"help"},
                                             {"help", "viz"},
                                             {"patterns", "--help"},
                                             {"viz", "--help"},
                                             {"viz", "--seq", "x", "-h"}}) {
    const RunResult r = run(args);
    EXPECT_TRUE(r.exited && r.status == 0) << show(args) << ": " << r.status << "\n" << r.err;
    EXPECT_NE(r.out.find("usage: attngen"), std::string::npos) << show(args) << "\n" << r.out;
  }
}

TEST_F(Cli, BadArguments) {
  const std::string out = (dir_ / "viz").string();
  const std::vector<std::vector<std::string>> cases = {
      {},
      {"bogus"},
      {"help", "bogus"},
      {"patterns"},
      {"patterns", "--seq"},
      {"patterns", "--seq", "abc"},
      {"patterns", "--seq", ""},
      {"patterns", "--seq", "0"},
      {"patterns", "--seq", "-3"},
      {"patterns", "--seq", "12x"},
      {"patterns", "--seq", "99999999999999999999999"},
      {"patterns", "--seq", "10", "--seq", "11"},
      {"patterns", "--seq", "10", "extra"},
      {"patterns", "--seq", "10", "-x"},
      {"patterns", "--seq", "10", "--frobnicate", "1"},
      {"patterns", "--seq", "10", "--causal=1"},
      {"patterns", "--seq", "10", "--window", "0"},
      {"patterns", "--seq", "10", "--stride", "-1"},
      {"patterns", "--seq", "10", "--density", "1.5"},
      {"patterns", "--seq", "10", "--density", "0"},
      {"patterns", "--seq", "10", "--density", "nan"},
      {"patterns", "--seq", "10", "--density", "inf"},
      {"patterns", "--seq", "10", "--global", "-1"},
      {"patterns", "--seq", "10", "--heads", "0"},
      {"patterns", "--seq", "1048576", "--block", "1"},         // a 2^40-block layout
      {"patterns", "--seq", "1048576", "--window", "1048576"},  // 2^40 pairs to test
      {"viz", "--seq", "16", "--out", ""},
      {"viz", "--seq", "16", "--out", out, "--linear"},
      {"viz", "--seq", "16", "--out", out, "--layer", "3"},
      {"viz", "--seq", "16", "--out", out, "--tokens", out},
      {"viz", "--seq", "4096", "--out", out},
      {"viz", "--seq", "16", "--out", out, "--heads", "0"},
      {"viz", "--seq", "16", "--out", out, "--heads", "17"},
      {"viz", "--seq", "16", "--out", out, "--pattern", "bogus"},
      {"viz", "--seq", "16", "--out", out, "--causal", "yes"},
  };
  for (const std::vector<std::string>& args : cases) {
    const RunResult r = run(args);
    EXPECT_TRUE(r.exited) << show(args) << ": killed by signal " << -r.status << "\n" << r.err;
    EXPECT_EQ(r.status, 2) << show(args) << "\n" << r.err;
    EXPECT_NE(r.err.find("attngen"), std::string::npos) << show(args) << ": no message";
    EXPECT_EQ(r.out, "") << show(args);
  }
  EXPECT_FALSE(fs::exists(out)) << "a failed viz wrote files";
}

// Pair counts, FLOPs and bytes for every pattern, with and without causal, against a brute force.
void check_counts(Cli* self, RunResult r, int64_t seq, int64_t heads, int64_t dim,
                  const Params& params_without_layout, const fs::path& layout_file) {
  (void)self;
  ASSERT_TRUE(r.exited && r.status == 0) << r.err;
  Params params = params_without_layout;
  params.layout = read_layout(layout_file);
  const int64_t nb = (seq + params.layout.block - 1) / params.layout.block;
  ASSERT_EQ(params.layout.rows, nb);
  ASSERT_EQ(params.layout.cols, nb);
  ASSERT_EQ(int64_t(params.layout.on.size()), nb);
  for (int64_t b = 0; b < nb; ++b) {
    ASSERT_EQ(int64_t(params.layout.on[b].size()), nb);
    EXPECT_EQ(params.layout.on[b][b], '1') << "diagonal block " << b << " off";
  }
  const std::vector<std::string> lines = split(r.out, '\n');
  ASSERT_GE(lines.size(), 11u) << r.out;
  EXPECT_EQ(lines[0], "pattern,causal,pairs,fraction,flops,dense_score_bytes,kernel_bytes,params");
  std::map<std::string, int> seen;
  for (size_t k = 1; k < lines.size(); ++k) {
    const std::vector<std::string> f = split(lines[k], ',');
    ASSERT_EQ(f.size(), 8u) << lines[k];
    const std::string& pattern = f[0];
    const bool causal = f[1] == "1";
    ++seen[pattern + (causal ? "+causal" : "")];
    const int64_t pairs = std::stoll(f[2]);
    const int64_t want = brute_force(pattern, causal, params, seq);
    EXPECT_EQ(pairs, want) << lines[k];
    EXPECT_DOUBLE_EQ(std::stod(f[4]), 4.0 * heads * double(want) * dim) << lines[k];
    EXPECT_NEAR(std::stod(f[3]), double(want) / double(seq * seq), 1e-8) << lines[k];
    EXPECT_EQ(std::stoll(f[5]), 4 * heads * seq * seq) << lines[k];
    const int64_t layout_bytes = pattern == "block_sparse" ? nb * nb : 0;
    EXPECT_EQ(std::stoll(f[6]), 16 * seq * heads * dim + layout_bytes) << lines[k];
  }
  for (const char* p : {"dense", "local", "strided", "block_sparse", "global_local"}) {
    EXPECT_EQ(seen[p], 1) << p;
    EXPECT_EQ(seen[std::string(p) + "+causal"], 1) << p << " causal";
  }
}

TEST_F(Cli, PatternCounts) {
  const fs::path layout = dir_ / "layout.txt";
  const RunResult r = run({"patterns",
                           "--seq",
                           "257",
                           "--heads",
                           "3",
                           "--dim",
                           "40",
                           "--window",
                           "17",
                           "--stride",
                           "10",
                           "--block",
                           "16",
                           "--density",
                           "0.3",
                           "--seed",
                           "7",
                           "--global",
                           "3",
                           "--local",
                           "9",
                           "--causal",
                           "--csv",
                           "--layout-out",
                           layout.string()});
  check_counts(this, r, 257, 3, 40, Params{17, 10, 3, 9, {}}, layout);
  // The layout has round(density * blocks) blocks on: 0.3 * 17^2 = 86.7.
  const Layout l = read_layout(layout);
  int on = 0;
  for (const std::string& row : l.on) on += int(std::count(row.begin(), row.end(), '1'));
  EXPECT_EQ(on, 87);
}

TEST_F(Cli, PatternCountsSmall) {
  // Edge cases: one token; windows wider than the sequence; stride 1; a partial last block;
  // more global tokens than tokens; local 0.
  for (const std::vector<std::string>& extra : std::vector<std::vector<std::string>>{
           {"--seq", "1"},
           {"--seq", "5", "--window", "100", "--stride", "1", "--block", "3", "--global", "10",
            "--local", "0", "--density", "1"},
           {"--seq", "64", "--window", "1", "--stride", "64", "--block", "64", "--global", "0",
            "--local", "63"},
           {"--seq", "130", "--window", "7", "--stride", "3", "--block", "7", "--density", "0.05",
            "--global", "1", "--local", "2", "--seed", "123"}}) {
    const fs::path layout = dir_ / "layout.txt";
    std::vector<std::string> args = {"patterns", "--causal", "--csv", "--layout-out",
                                     layout.string()};
    args.insert(args.end(), extra.begin(), extra.end());
    // The tool's defaults are the built-in kernels' parameters; the test gives every one.
    std::map<std::string, std::string> v = {{"--window", "32"},
                                            {"--stride", "16"},
                                            {"--block", "64"},
                                            {"--global", "4"},
                                            {"--local", "16"}};
    for (size_t k = 0; k + 1 < extra.size(); k += 2) v[extra[k]] = extra[k + 1];
    for (const char* o : {"--window", "--stride", "--block", "--global", "--local"}) {
      if (std::find(extra.begin(), extra.end(), o) == extra.end()) {
        args.push_back(o);
        args.push_back(v[o]);
      }
    }
    SCOPED_TRACE(show(args));
    const int64_t seq = std::stoll(v["--seq"]);
    check_counts(this, run(args), seq, 1, 64,
                 Params{std::stoll(v["--window"]),
                        std::stoll(v["--stride"]),
                        std::stoll(v["--global"]),
                        std::stoll(v["--local"]),
                        {}},
                 layout);
  }
}

TEST_F(Cli, PatternsFast) {
  const auto t0 = std::chrono::steady_clock::now();
  const RunResult r =
      run({"patterns", "--seq", "16384", "--window", "256", "--stride", "64", "--block", "64",
           "--density", "0.25", "--global", "16", "--local", "128", "--causal"});
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(r.exited && r.status == 0) << r.err;
  EXPECT_LT(s, 3.0) << "patterns at seq 16384 took " << s << " s";  // ~0.1 s idle
  EXPECT_NE(r.out.find("global 16 + local 128"), std::string::npos) << r.out;
}

TEST_F(Cli, VizDense) {
  const fs::path out = dir_ / "dense";
  const RunResult r = run({"viz", "--seq", "100", "--heads", "5", "--out", out.string()});
  ASSERT_TRUE(r.exited && r.status == 0) << r.err;
  EXPECT_NE(r.out.find("kernel attn_"), std::string::npos) << r.out;
  Png head0, patterns;
  for (int h = 0; h < 5; ++h) {
    expect_png(out / ("head_" + std::to_string(h) + ".png"), head_size(100, 512),
               h == 0 ? &head0 : nullptr);
  }
  EXPECT_FALSE(fs::exists(out / "head_5.png"));
  expect_png(out / "heads_grid.png", grid_size(100, 5));
  expect_png(out / "patterns.png", patterns_size(100), &patterns);
  if (HasFatalFailure()) return;
  // head 0 is the local head: weights peak on the diagonal (viridis yellow, high green) and
  // fall below the colour scale's four decades far from it (viridis purple, low green).
  const int u = panel_side(100, 512) / 100, top = 8 + line_height(panel_side(100, 512));
  EXPECT_GT(head0.at(8 + 50 * u + u / 2, top + 50 * u + u / 2)[1], 180);
  EXPECT_LT(head0.at(8 + 95 * u, top + 2 * u)[1], 60);
  // patterns.png: dense is bright everywhere; local is bright on the diagonal, dark far away.
  const int p = panel_side(100, 256);
  const auto [dx, dy] = patterns_panel(100, 0);
  const auto [lx, ly] = patterns_panel(100, 1);
  EXPECT_GT(patterns.luma(dx + p - 2, dy + 1), 200);
  EXPECT_GT(patterns.luma(lx + p / 2, ly + p / 2), 200);
  EXPECT_LT(patterns.luma(lx + p - 2, ly + 1), 40);
}

TEST_F(Cli, VizLocalCausal) {
  const fs::path out = dir_ / "local";
  const RunResult r = run({"viz", "--seq", "300", "--heads", "2", "--pattern", "local", "--causal",
                           "--out", out.string()});
  ASSERT_TRUE(r.exited && r.status == 0) << r.err;
  Png head0;
  expect_png(out / "head_0.png", head_size(300, 512), &head0);
  expect_png(out / "head_1.png", head_size(300, 512));
  expect_png(out / "heads_grid.png", grid_size(300, 2));
  expect_png(out / "patterns.png", patterns_size(300));
  if (HasFatalFailure()) return;
  // One pixel per cell (300 <= 512): above the diagonal (causal) and 32 or more below it (the
  // window) the weights are 0, drawn black; on the diagonal the local head is bright.
  const int top = 8 + line_height(300);
  const uint8_t* above = head0.at(8 + 200, top + 10);
  const uint8_t* below = head0.at(8 + 10, top + 200);
  EXPECT_EQ(above[0] + above[1] + above[2], 0);
  EXPECT_EQ(below[0] + below[1] + below[2], 0);
  EXPECT_GT(head0.at(8 + 150, top + 150)[1], 180);
}

// Pattern parameters no specialised weights kernel was built for run on the generic one of the
// pattern's kind (docs/variants.md, "Generic kernels").
TEST_F(Cli, VizGenericKernel) {
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"--pattern", "strided", "--stride", "8"},
                                             {"--pattern", "local"},
                                             {"--pattern", "local", "--causal", "--window", "5"}}) {
    const std::string out = (dir_ / ("generic" + std::to_string(args.size()))).string();
    std::vector<std::string> call = {"viz", "--seq", "64", "--heads", "2", "--out", out};
    call.insert(call.end(), args.begin(), args.end());
    const RunResult r = run(call);
    EXPECT_TRUE(r.exited && r.status == 0) << show(call) << ": " << r.status << "\n" << r.err;
    EXPECT_NE(r.out.find("_generic_"), std::string::npos) << r.out;
    EXPECT_TRUE(fs::exists(fs::path(out) / "heads_grid.png")) << show(call);
  }
}

// With no arguments at all, viz runs the synthetic demo into $TMPDIR/attngen-viz and says how to
// view real heads; --seq and --out have defaults too.
TEST_F(Cli, VizNoArguments) {
  const fs::path tmp = dir_ / "tmp";
  fs::create_directories(tmp);
  const RunResult r = run({"viz"}, {{"TMPDIR", tmp.string()}});
  ASSERT_TRUE(r.exited && r.status == 0) << r.status << "\n" << r.err;
  const fs::path out = tmp / "attngen-viz";
  for (int h = 0; h < 6; ++h) {
    expect_png(out / ("head_" + std::to_string(h) + ".png"), head_size(128, 512));
  }
  expect_png(out / "heads_grid.png", grid_size(128, 6));
  expect_png(out / "patterns.png", patterns_size(128));
  EXPECT_NE(r.out.find((out / "heads_grid.png").string()), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("No inputs given"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--q layer0_q.npy --k layer0_k.npy"), std::string::npos) << r.out;
  // --out alone: the default length, 128.
  const fs::path only_out = dir_ / "only_out";
  const RunResult r2 = run({"viz", "--out", only_out.string(), "--heads", "1"});
  ASSERT_TRUE(r2.exited && r2.status == 0) << r2.err;
  expect_png(only_out / "head_0.png", head_size(128, 512));
  EXPECT_EQ(r2.out.find("No inputs given"), std::string::npos) << r2.out;
}
