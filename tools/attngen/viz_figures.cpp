// The figures of `attngen viz` (viz_figures.h): colours, the weight -> colour map, the pixel
// layout of a panel, the heatmaps, the heads grid and the patterns panel, and the PNG files.
#include "tools/attngen/viz_figures.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iterator>

#include "tools/attngen/viz.h"

namespace attngen::cli {

namespace viz {
namespace {

constexpr double kDecades = 4.0;  // the colour scale spans [max * 1e-4, max], logarithmic
constexpr int kLabelChars = 12;   // longer tokens are cut, ending in '.'

constexpr Rgb kFrame{96, 96, 104};
constexpr Rgb kMasked{0, 0, 0};
constexpr Rgb kMaskOff{8, 8, 16};
constexpr Rgb kMaskOn{255, 238, 176};

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The cells [begin, end) of an seq-long axis that panel pixel x shows.
struct CellRange {
  int64_t begin, end;
};
CellRange cells_of_pixel(int64_t seq, int side, int x) {
  if (side >= seq) {
    const int64_t up = side / seq;
    return {x / up, x / up + 1};
  }
  const int64_t f = ceil_div(seq, side);
  return {x * f, std::min(seq, x * f + f)};
}

// The centre of cell c of an seq-long axis in a panel of side pixels, from the panel's edge.
double cell_centre(int64_t seq, int side, int64_t c) {
  if (side >= seq) return (double(c) + 0.5) * double(side / seq);
  return (double(c) + 0.5) / double(ceil_div(seq, side));
}

std::string format_weight(double v) {
  char buf[32];
  if (v >= 0.01) {
    std::snprintf(buf, sizeof buf, "%.3g", v);
  } else {
    std::snprintf(buf, sizeof buf, "%.0e", v);
  }
  return buf;
}

// Weight -> colour: viridis on a log scale over kDecades below the largest weight (or linear
// from 0 to it); negative: a masked pair, black.
class ColourScale {
 public:
  ColourScale(float vmax, bool linear) : vmax_(vmax), linear_(linear) {
    lo_ = std::log10(std::max(double(vmax), 1e-30)) - kDecades;
  }
  Rgb operator()(double v) const {
    if (v < 0.0) return kMasked;
    if (linear_) return viridis(vmax_ > 0 ? v / vmax_ : 0.0);
    return viridis(v == 0.0 ? 0.0 : (std::log10(v) - lo_) / kDecades);
  }
  // The values at the bar's left end, middle and right end, under a bar of width side at x.
  void draw_labels(Image& img, int x, int y, int side, int scale) const {
    const double low = linear_ ? 0.0 : vmax_ * std::pow(10.0, -kDecades);
    const double mid = linear_ ? vmax_ / 2 : vmax_ * std::pow(10.0, -kDecades / 2);
    const std::string l = linear_ ? "0" : format_weight(low), m = format_weight(mid),
                      h = format_weight(vmax_);
    img.text(x, y, l, kDimText, scale);
    img.text(x + (side - text_width(m, scale)) / 2, y, m, kDimText, scale);
    img.text(x + side - text_width(h, scale), y, h, kDimText, scale);
  }

 private:
  double vmax_, lo_ = 0;
  bool linear_;
};

// The colour scale of one head's weights (seq x seq): up to its largest weight.
ColourScale colour_scale(const float* w, int64_t seq, bool linear) {
  float vmax = 0.0f;
  for (int64_t i = 0; i < seq * seq; ++i) vmax = std::max(vmax, w[i]);
  return ColourScale(vmax, linear);
}

// The heatmap of w over a side x side panel at (x0, y0): each pixel shows the largest allowed
// weight of the cells it covers, so that peaks stay visible; a pixel of masked cells only is
// black.
void draw_heatmap(Image& img, int x0, int y0, int side, const float* w,
                  const std::vector<uint8_t>& allowed, int64_t seq, const ColourScale& colour) {
  for (int y = 0; y < side; ++y) {
    const CellRange rows = cells_of_pixel(seq, side, y);
    for (int x = 0; x < side; ++x) {
      const CellRange cols = cells_of_pixel(seq, side, x);
      float v = -1.0f;
      for (int64_t i = rows.begin; i < rows.end; ++i) {
        for (int64_t j = cols.begin; j < cols.end; ++j) {
          if (allowed[size_t(i * seq + j)]) v = std::max(v, w[i * seq + j]);
        }
      }
      img.set(x0 + x, y0 + y, colour(v));
    }
  }
}

// The colour bar under a heatmap of side pixels at (x0, y), and its values below it.
void draw_colour_bar(Image& img, int x0, int y, int side, int scale, const ColourScale& colour) {
  for (int x = 0; x < side; ++x) {
    img.fill_rect(x0 + x, y, 1, kColourBar, viridis(double(x) / (side - 1)));
  }
  colour.draw_labels(img, x0, y + kColourBar + 2, side, scale);
}

}  // namespace

Image head_image(const float* w, const std::vector<uint8_t>& allowed, int64_t seq, int cap,
                 const std::string& title, bool linear) {
  const int side = panel_side(seq, cap), scale = text_scale(side), line = line_height(scale);
  Image img(side + 2 * kMargin, side + 2 * line + 2 * kMargin + kGap + kColourBar + 2, kBackground);
  const ColourScale colour = colour_scale(w, seq, linear);
  img.text(kMargin, kMargin, title, kText, scale, side);
  const int y0 = kMargin + line;
  draw_heatmap(img, kMargin, y0, side, w, allowed, seq, colour);
  draw_colour_bar(img, kMargin, y0 + side + kGap, side, scale, colour);
  return img;
}

// Every step-th token is labelled, where step keeps labels a glyph apart; labels are cut at
// kLabelChars.
Image labelled_head_image(const float* w, const std::vector<uint8_t>& allowed, int64_t seq,
                          const std::vector<std::string>& labels, const std::string& title,
                          const std::string& subtitle, bool linear, PanelPlace& place) {
  const int side = panel_side(seq, kHeadCap), scale = text_scale(side), line = line_height(scale);
  const double pitch = double(side) / double(seq);   // pixels per cell
  const int ls = pitch >= 20 && scale == 2 ? 2 : 1;  // label font scale
  const int64_t step = std::max<int64_t>(1, int64_t(std::ceil((kGlyphHeight + 2) * ls / pitch)));
  const int max_label = text_width(std::string(kLabelChars, 'x'), ls);
  int label_w = 0;
  for (int64_t t = 0; t < seq; t += step) {
    label_w = std::max(label_w, text_width(fit_text(labels[size_t(t)], ls, max_label), ls));
  }
  const int x0 = kMargin + label_w + kGap, y0 = kMargin + 2 * line + label_w + kGap;
  Image img(x0 + side + kMargin, y0 + side + kGap + kColourBar + 2 + line + kMargin, kBackground);
  place = {x0, y0, side};
  const int room = img.width() - 2 * kMargin;  // a line too long at scale 2 is drawn at 1
  const auto fitting = [&](const std::string& t) {
    return text_width(t, scale) <= room ? scale : 1;
  };
  img.text(kMargin, kMargin, title, kText, fitting(title), room);
  img.text(kMargin, kMargin + line, subtitle, kDimText, fitting(subtitle), room);
  const ColourScale colour = colour_scale(w, seq, linear);
  draw_heatmap(img, x0, y0, side, w, allowed, seq, colour);
  img.frame(x0 - 1, y0 - 1, side + 2, side + 2, kFrame);
  const int glyph_half = kGlyphHeight * ls / 2;
  for (int64_t t = 0; t < seq; t += step) {
    const std::string l = fit_text(labels[size_t(t)], ls, max_label);
    const int c = int(std::lround(cell_centre(seq, side, t)));
    img.text(x0 - kGap - text_width(l, ls), y0 + c - glyph_half + ls / 2, l, kText, ls);
    img.text_up(x0 + c - glyph_half + ls / 2, y0 - kGap, l, kText, ls);
  }
  draw_colour_bar(img, x0, y0 + side + kGap, side, scale, colour);
  return img;
}

Image heads_grid(const std::vector<Image>& cells, int64_t seq, const std::string& title) {
  const int64_t heads = int64_t(cells.size());
  const int cols = int(std::ceil(std::sqrt(double(heads))));
  const int grid_rows = int(ceil_div(heads, cols));
  const int side = panel_side(seq, kSmallCap), line = line_height(text_scale(side));
  const int cw = cells[0].width(), ch = cells[0].height();
  Image grid(cols * cw, kMargin + line + grid_rows * ch, kBackground);
  grid.text(kMargin, kMargin, title, kText, text_scale(side), grid.width() - 2 * kMargin);
  for (int64_t h = 0; h < heads; ++h) {
    grid.blit(cells[size_t(h)], int(h % cols) * cw, kMargin + line + int(h / cols) * ch);
  }
  return grid;
}

Image patterns_image(const PatternSet& set, const std::vector<PatternRow>& rows) {
  const PatternParams& p = set.params();
  const int side = panel_side(p.seq, kSmallCap), scale = text_scale(side);
  const int line = line_height(scale);
  const int n = int(std::size(kAllPatterns));
  Image img(n * side + (n + 1) * kMargin, side + 5 * line + 2 * kMargin + 2 * kGap, kBackground);
  char title[160];
  std::snprintf(title, sizeof title, "seq %lld%s, %lld head%s of dim %lld: attended = bright",
                static_cast<long long>(p.seq), p.causal ? " causal" : "",
                static_cast<long long>(p.heads), p.heads == 1 ? "" : "s",
                static_cast<long long>(p.dim));
  img.text(kMargin, kMargin, title, kText, scale, img.width() - 2 * kMargin);
  const int y0 = kMargin + line + kGap;
  for (int k = 0; k < n; ++k) {
    const PatternId id = kAllPatterns[k];
    const attngen_pattern pattern = set.pattern(id);
    const int x0 = kMargin + k * (side + kMargin);
    for (int y = 0; y < side; ++y) {
      const CellRange qs = cells_of_pixel(p.seq, side, y);
      for (int x = 0; x < side; ++x) {
        const CellRange ks = cells_of_pixel(p.seq, side, x);
        int64_t on = 0;
        for (int64_t i = qs.begin; i < qs.end; ++i) {
          for (int64_t j = ks.begin; j < ks.end; ++j) on += attended(pattern, p.causal, i, j);
        }
        const double cover = double(on) / double((qs.end - qs.begin) * (ks.end - ks.begin));
        // Square root: a pixel a quarter attended still shows at half brightness.
        img.set(x0 + x, y0 + y, mix(kMaskOff, kMaskOn, std::sqrt(cover)));
      }
    }
    img.frame(x0 - 1, y0 - 1, side + 2, side + 2, kFrame);
    const PatternRow* row = nullptr;
    for (const PatternRow& r : rows) {
      if (r.id == id && r.causal == p.causal) row = &r;
    }
    char pairs[64], flops[64];
    std::snprintf(pairs, sizeof pairs, "%lld pairs", static_cast<long long>(row->pairs));
    std::snprintf(flops, sizeof flops, "%s (%.1f%%)", si_flops(row->flops).c_str(),
                  100.0 * row->fraction);
    const int ty = y0 + side + kGap;
    img.text(x0, ty, set.short_name(id), kText, scale, side);
    img.text(x0, ty + line, set.parameters(id), kDimText, scale, side);
    img.text(x0, ty + 2 * line, pairs, kText, scale, side);
    img.text(x0, ty + 3 * line, flops, kText, scale, side);
  }
  return img;
}

std::string default_out_dir() {
  const char* tmp = std::getenv("TMPDIR");
  const std::filesystem::path base = tmp != nullptr && tmp[0] != '\0' ? tmp : "/tmp";
  return (base / "attngen-viz").string();
}

bool prepare_out_dir(const std::filesystem::path& out) {
  std::error_code ec;
  std::filesystem::create_directories(out, ec);
  if (ec || !std::filesystem::is_directory(out)) {
    std::fprintf(stderr, "attngen viz: cannot create the directory %s: %s\n", out.string().c_str(),
                 ec ? ec.message().c_str() : "not a directory");
    return false;
  }
  return true;
}

bool save(const Image& img, const std::filesystem::path& path, std::vector<std::string>& written) {
  std::string error;
  if (!img.write_png(path.string(), &error)) {
    std::fprintf(stderr, "attngen viz: cannot write %s: %s\n", path.string().c_str(),
                 error.c_str());
    return false;
  }
  char buf[512];
  std::snprintf(buf, sizeof buf, "  %s  %d x %d", path.string().c_str(), img.width(), img.height());
  written.push_back(buf);
  return true;
}

}  // namespace viz

int panel_side(int64_t seq, int cap) {
  if (seq <= cap) return int(seq * (cap / seq));
  return int(viz::ceil_div(seq, viz::ceil_div(seq, cap)));
}

int text_scale(int side) { return side >= 240 ? 2 : 1; }

}  // namespace attngen::cli
