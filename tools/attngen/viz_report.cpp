// The report of `attngen viz` on real heads (viz_report.h): the table, report.csv, report.json.
#include "tools/attngen/viz_report.h"

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

namespace attngen::cli::viz {

namespace {

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

}  // namespace

std::string fixed(double v, int digits) {
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

}  // namespace attngen::cli::viz
