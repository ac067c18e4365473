#include "tools/attngen/head_stats.h"

#include <algorithm>
#include <cmath>

namespace attngen::cli {

int64_t local_band(int64_t seq) { return std::max<int64_t>(2, (seq + 31) / 32); }

namespace {

std::string trimmed(const std::string& t) {
  const size_t b = t.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return t.substr(b, t.find_last_not_of(" \t") - b + 1);
}

}  // namespace

bool is_start_token(const std::string& t) {
  const std::string s = trimmed(t);
  return s == "[CLS]" || s == "<s>" || s == "<bos>" || s == "<|begin_of_text|>" ||
         s == "<|startoftext|>";
}

bool is_separator_token(const std::string& t) {
  const std::string s = trimmed(t);
  return s == "[SEP]" || s == "</s>" || s == "<eos>" || s == "<|end_of_text|>" ||
         s == "<|endoftext|>" || s == "<|eot_id|>";
}

HeadStats head_stats(const float* w, int64_t seq, bool causal,
                     const std::vector<std::string>& tokens) {
  HeadStats st;
  st.band = local_band(seq);
  std::vector<uint8_t> sep(size_t(seq), 0);
  bool any_sep = false;
  if (int64_t(tokens.size()) == seq) {
    for (int64_t j = 0; j < seq; ++j) {
      sep[size_t(j)] = is_separator_token(tokens[size_t(j)]);
      any_sep = any_sep || sep[size_t(j)];
    }
  }
  int64_t rows_after_first = 0, sep_rows = 0, saturated = 0;
  double sep_sum = 0, uniform_distance = 0;
  std::vector<double> row(static_cast<size_t>(seq));
  for (int64_t i = 0; i < seq; ++i) {
    const int64_t keys = causal ? i + 1 : seq;
    double sum = 0;
    for (int64_t j = 0; j < seq; ++j) sum += double(w[i * seq + j]);
    if (!(sum > 0)) {
      ++st.masked_rows;
      continue;
    }
    if (keys < 2) continue;  // no choice to measure (row 0 under causal)
    // Weights files may hold rows summing to 1 within a rounding tolerance: each row is
    // normalised, so that the measures are those of a distribution.
    double mx = 0, ent = 0, local = 0, dist = 0, on_sep = 0;
    for (int64_t j = 0; j < seq; ++j) {
      const double x = double(w[i * seq + j]) / sum;
      row[size_t(j)] = x;
      mx = std::max(mx, x);
      if (x > 0) ent -= x * std::log2(x);
      const int64_t d = i > j ? i - j : j - i;
      if (d <= st.band) local += x;
      dist += x * double(d);
      if (sep[size_t(j)]) on_sep += x;
    }
    ++st.rows;
    st.entropy += ent;
    st.entropy_norm += ent / std::log2(double(keys));
    st.max_weight += mx;
    saturated += mx > kSaturatedRow;
    st.diagonal += row[size_t(i)];
    st.local += local;
    st.distance += dist;
    // Uniform weights over the keys the row may attend: mean |i - j| over them.
    const double left = double(i) * double(i + 1) / 2.0;
    const double right = causal ? 0.0 : double(seq - 1 - i) * double(seq - i) / 2.0;
    uniform_distance += (left + right) / double(keys);
    if (i >= 1) {
      ++rows_after_first;
      st.previous += row[size_t(i - 1)];
      st.first += row[0];
    }
    if (any_sep && !sep[size_t(i)]) {
      ++sep_rows;
      sep_sum += on_sep;
    }
  }
  if (st.rows > 0) {
    const double n = double(st.rows);
    st.entropy /= n;
    st.entropy_norm /= n;
    st.max_weight /= n;
    st.saturation = double(saturated) / n;
    st.diagonal /= n;
    st.local /= n;
    st.distance /= n;
    st.distance_ratio = uniform_distance > 0 ? st.distance / (uniform_distance / n) : 0.0;
  }
  if (rows_after_first > 0) {
    st.previous /= double(rows_after_first);
    st.first /= double(rows_after_first);
  }
  if (sep_rows > 0) st.separator = sep_sum / double(sep_rows);

  if (st.rows == 0) {
    st.pattern = "masked";
  } else if (st.diagonal >= kPatternMass) {
    st.pattern = "diagonal";
  } else if (st.previous >= kPatternMass) {
    st.pattern = "previous_token";
  } else if (st.first >= kPatternMass) {
    st.pattern = "first_token_sink";
  } else if (st.separator >= kPatternMass) {
    st.pattern = "separator_sink";
  } else if (st.entropy_norm >= kBroadEntropy) {
    st.pattern = "broad";
  } else if (st.local >= kLocalMass) {
    st.pattern = "local";
  } else if (st.distance_ratio >= kLongRangeRatio) {
    st.pattern = "long_range";
  } else {
    st.pattern = "mixed";
  }
  if (st.rows > 0 && st.entropy_norm >= kBroadEntropy) st.flags.push_back("prune");
  if (st.rows > 0 && st.saturation > kScaleProblem) st.flags.push_back("scale");
  return st;
}

std::string pattern_display(const std::string& key, const std::vector<std::string>& tokens) {
  if (key == "previous_token") return "previous token";
  if (key == "first_token_sink") {
    return !tokens.empty() && is_start_token(tokens[0]) ? trimmed(tokens[0]) + " sink"
                                                        : "first-token sink";
  }
  if (key == "separator_sink") {
    for (const std::string& t : tokens) {
      if (is_separator_token(t)) return trimmed(t) + " sink";
    }
    return "separator sink";
  }
  if (key == "long_range") return "long-range";
  return key;
}

}  // namespace attngen::cli
