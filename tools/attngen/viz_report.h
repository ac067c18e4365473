// The report of `attngen viz` on real heads: the per-head measures (head_stats.h) as a table on
// stdout and as report.csv and report.json in the output directory (tools/attngen/README.md
// defines each column), with where each head's heatmap lies in its image.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "tools/attngen/head_stats.h"
#include "tools/attngen/viz_figures.h"
#include "tools/attngen/viz_real.h"

namespace attngen::cli::viz {

// v with `digits` decimals.
std::string fixed(double v, int digits = 3);

// The flags joined by sep.
std::string join_flags(const std::vector<std::string>& flags, const char* sep);

// The heads' measures as a table on stdout, under a line saying what was read.
void print_real_table(const RealHeads& r, const std::vector<HeadStats>& stats);

// report.csv and report.json in out (places: each head's heatmap in head_<h>.png); adds their
// paths to written; false, with a message, on a write error.
bool write_reports(const RealHeads& r, const std::vector<HeadStats>& stats,
                   const std::vector<PanelPlace>& places, const std::filesystem::path& out,
                   std::vector<std::string>& written);

}  // namespace attngen::cli::viz
