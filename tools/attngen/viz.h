// The `viz` subcommand: runs a built-in kernel that writes the attention weights on structured
// inputs and draws them, one heatmap per head and a grid of all heads, next to the masks of the
// sparse patterns.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace attngen::cli {

// Image layout, in pixels (README.md restates it; the tests check against it).
constexpr int kMargin = 8;
constexpr int kGap = 4;
constexpr int kColourBar = 8;
constexpr int kHeadCap = 512;   // head_<h>.png
constexpr int kSmallCap = 256;  // heads_grid.png cells and patterns.png panels

// Side of a square panel showing an seq x seq matrix: seq * floor(cap / seq) when seq <= cap
// (each cell a square of whole pixels), else ceil(seq / ceil(seq / cap)) (each pixel a square
// of cells). Always in (cap / 2, cap].
int panel_side(int64_t seq, int cap);
// Font scale of a panel's labels: 2 for panels of 240 pixels or more, else 1.
int text_scale(int side);
// Height of a line of text at that scale.
inline int line_height(int scale) { return 10 * scale; }

int run_viz(const std::vector<std::string>& args);
std::string viz_help();

}  // namespace attngen::cli
