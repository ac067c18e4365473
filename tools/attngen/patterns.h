// The four sparse patterns of docs/semantics.md (plus dense) for one sequence length: their
// parameters, the block-sparse layout, exact counts of attended pairs, FLOPs and memory.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "attngen/attngen.h"
#include "tools/attngen/args.h"

namespace attngen::cli {

struct PatternParams {
  int64_t seq = 0;  // Sq = Skv (self-attention, one batch), so a query's position p is i
  int64_t heads = 1;
  int64_t dim = 64;
  int32_t window = 32;    // local window w: |p - j| < w
  int32_t stride = 16;    // strided l
  int32_t block = 64;     // block-sparse block size
  double density = 0.25;  // block-sparse: fraction of layout blocks that are on
  uint64_t seed = 1;      // block-sparse: which blocks
  int32_t global = 4;     // global + local: G global tokens
  int32_t local = 16;     // global + local: |p - j| <= local
  bool causal = false;    // also each pattern combined with causal
};

// Defaults: the parameters of the built-in pattern kernels (generated/variants.cmake, read from
// the runtime's dispatch table), falling back to those of PatternParams.
PatternParams default_pattern_params();

// The options shared by `patterns` and `viz` that set PatternParams (not --seq).
std::vector<OptionSpec> pattern_option_specs();
// Applies them on top of p; throws UsageError for bad values or a layout too large.
void read_pattern_options(const ParsedArgs& args, PatternParams& p);

enum class PatternId { kDense, kLocal, kStrided, kBlockSparse, kGlobalLocal };
constexpr PatternId kAllPatterns[] = {PatternId::kDense, PatternId::kLocal, PatternId::kStrided,
                                      PatternId::kBlockSparse, PatternId::kGlobalLocal};

// Block-sparse layout, BOOL [ceil(S / block), ceil(S / block)] row-major. The diagonal blocks
// are always on (every query sees its own block, so no row is fully masked); further blocks,
// drawn at random with the seed, are added until round(density * blocks) are on.
struct BlockLayout {
  int64_t rows = 0, cols = 0;
  int32_t block = 0;
  std::vector<uint8_t> on;
  int64_t count_on() const;
};
BlockLayout make_block_layout(int64_t seq, int32_t block, double density, uint64_t seed);

// Owns the block layout that the block-sparse pattern points at.
class PatternSet {
 public:
  explicit PatternSet(const PatternParams& params);
  PatternSet(const PatternSet&) = delete;
  PatternSet& operator=(const PatternSet&) = delete;

  const PatternParams& params() const { return params_; }
  const BlockLayout& layout() const { return layout_; }
  attngen_pattern pattern(PatternId id) const;
  static const char* key(PatternId id);        // "dense", "local", "strided", ...
  std::string name(PatternId id) const;        // "local window 32"
  std::string short_name(PatternId id) const;  // for image labels: "local"
  std::string parameters(PatternId id) const;  // for image labels: "w=32"

 private:
  PatternParams params_;
  BlockLayout layout_;
  attngen_tensor layout_tensor_{};
};

// Whether query i attends key j: the pattern (attngen_pattern_attends) and, if causal, j <= i.
bool attended(const attngen_pattern& p, bool causal, int64_t i, int64_t j);

// Upper bound on the attngen_pattern_attends calls count_pairs makes.
double count_cost(const attngen_pattern& p, bool causal, int64_t seq);

// Exact number of attended (i, j) pairs, Sq = Skv = seq. Calls attngen_pattern_attends only on
// candidate keys (those the pattern's definition can admit), so the work is O(seq * window)
// rather than O(seq^2); block-sparse is evaluated once per layout block, and the keys a
// multiple of the stride away (all attended, by definition) are counted without a call.
int64_t count_pairs(const attngen_pattern& p, bool causal, int64_t seq);

struct PatternRow {
  PatternId id;
  bool causal;
  int64_t pairs;
  double fraction;            // of dense, seq^2
  double flops;               // 4 * H * pairs * D
  int64_t dense_score_bytes;  // 4 * H * seq^2: the F32 score matrix of dense attention
  int64_t kernel_bytes;       // Q, K, V, O: 4 * 4 * seq * H * D, + the layout (block-sparse)
};

// One row per pattern, and per pattern with causal when params().causal. Throws UsageError if
// counting would take too long (a window or local of the order of a very long seq).
std::vector<PatternRow> pattern_rows(const PatternSet& set);

void print_pattern_table(FILE* f, const PatternSet& set, const std::vector<PatternRow>& rows);
void print_pattern_csv(FILE* f, const PatternSet& set, const std::vector<PatternRow>& rows);

// "1.23 GFLOP", "64.0 MiB": three significant digits.
std::string si_flops(double flops);
std::string binary_bytes(double bytes);

// The `patterns` subcommand; returns the exit status.
int run_patterns(const std::vector<std::string>& args);
std::string patterns_help();

}  // namespace attngen::cli
