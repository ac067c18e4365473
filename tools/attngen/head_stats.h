// What people look for in an attention head, from its weights: row entropy, saturation, and a
// classification of its pattern (diagonal, previous token, first-token / [CLS] sink, [SEP]
// sink, broad, local, long-range). tools/attngen/README.md ("Measures") defines each one and
// its threshold; the tests recompute them in float64 from those definitions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace attngen::cli {

// Thresholds (README.md, "Measures", says why these values).
constexpr double kSaturatedRow = 0.99;    // a row is saturated when its largest weight exceeds this
constexpr double kScaleProblem = 0.5;     // flag "scale" when more than this share of rows are
constexpr double kBroadEntropy = 0.9;     // normalised entropy at or above: broad, flag "prune"
constexpr double kPatternMass = 0.5;      // diagonal / previous / sink: mean mass at or above
constexpr double kLocalMass = 0.8;        // local: mean mass within the band at or above
constexpr double kLongRangeRatio = 1.25;  // long-range: mean distance / uniform's at or above

// The local band: |i - j| <= local_band(S).
int64_t local_band(int64_t seq);

// Token labels that mark a sequence's start ([CLS], <s>, ...) or a separator ([SEP], </s>, ...).
bool is_start_token(const std::string& t);
bool is_separator_token(const std::string& t);

struct HeadStats {
  int64_t rows = 0;         // scored rows: not fully masked and with at least 2 keys to attend
  int64_t masked_rows = 0;  // rows whose weights are all 0
  double entropy = 0;       // mean row entropy, bits
  double entropy_norm = 0;  // mean of row entropy / log2(keys the row may attend)
  double max_weight = 0;    // mean of the row maximum
  double saturation = 0;    // share of rows whose maximum exceeds kSaturatedRow
  double diagonal = 0;      // mean w[i][i]
  double previous = 0;      // mean w[i][i-1], rows i >= 1
  double first = 0;         // mean w[i][0], rows i >= 1
  double separator = -1;    // mean mass on separator tokens, rows that are none; -1: none
  double local = 0;         // mean mass within the band
  int64_t band = 0;
  double distance = 0;             // mean sum_j w[i][j] |i - j|
  double distance_ratio = 0;       // distance / the same mean for uniform weights over allowed keys
  std::string pattern;             // key: diagonal, previous_token, first_token_sink, ...
  std::vector<std::string> flags;  // "prune", "scale"
};

// w: seq x seq row-major (row = query), rows summing to 1 or all 0; causal: keys j > i are not
// attendable (so a row may attend i + 1 keys). tokens: seq labels, or empty.
HeadStats head_stats(const float* w, int64_t seq, bool causal,
                     const std::vector<std::string>& tokens);

// For people: "previous token", "[CLS] sink" (first_token_sink when token 0 is a start token).
std::string pattern_display(const std::string& key, const std::vector<std::string>& tokens);

}  // namespace attngen::cli
