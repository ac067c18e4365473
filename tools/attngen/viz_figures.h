// The figures of `attngen viz` and the files they go to: the colour scheme, the map from a weight
// to a colour (viridis, log or linear), the layout of a panel's pixels over a matrix's cells, the
// heatmaps of one head (plain, or with the tokens on both axes), the grid of all heads, the
// panels of the sparse patterns' masks, and writing PNG files into the output directory. The
// sizes follow viz.h's layout constants (tools/attngen/README.md restates them).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "tools/attngen/image.h"
#include "tools/attngen/patterns.h"

namespace attngen::cli::viz {

constexpr Rgb kBackground{24, 24, 28};
constexpr Rgb kText{232, 232, 232};
constexpr Rgb kDimText{160, 160, 168};

// Where labelled_head_image put its heatmap: top-left corner and side, in pixels.
struct PanelPlace {
  int x = 0, y = 0, side = 0;
};

// One head's weights (seq x seq, row = query) as a heatmap with a title and a colour bar.
// allowed (seq x seq) says which pairs the kernel's mask lets through: the others are drawn
// black, apart from the colour scale, whose bottom also holds weights that underflowed to 0.
Image head_image(const float* w, const std::vector<uint8_t>& allowed, int64_t seq, int cap,
                 const std::string& title, bool linear = false);

// A real head: the heatmap with the tokens (labels, seq of them) on both axes (queries down the
// left, keys along the top, read bottom to top), two lines of title, and the colour bar; place
// says where the heatmap went.
Image labelled_head_image(const float* w, const std::vector<uint8_t>& allowed, int64_t seq,
                          const std::vector<std::string>& labels, const std::string& title,
                          const std::string& subtitle, bool linear, PanelPlace& place);

// The heads' small images (head_image at kSmallCap, all of one size) in a near-square grid under
// one line of title.
Image heads_grid(const std::vector<Image>& cells, int64_t seq, const std::string& title);

// The masks of dense and the four sparse patterns at the set's length, side by side, each with
// its name, parameters, attended pairs and FLOPs (rows: pattern_rows of the set).
Image patterns_image(const PatternSet& set, const std::vector<PatternRow>& rows);

// $TMPDIR/attngen-viz (/tmp/attngen-viz without TMPDIR).
std::string default_out_dir();

// Creates the directory (and its parents); false, with a message, where it cannot.
bool prepare_out_dir(const std::filesystem::path& out);

// Writes img as a PNG and adds "  <path>  <width> x <height>" to written; false, with a
// message, on a write error.
bool save(const Image& img, const std::filesystem::path& path, std::vector<std::string>& written);

}  // namespace attngen::cli::viz
