// An RGB raster with a built-in 5x7 bitmap font, a tabulated viridis colour map, and PNG output
// through libpng.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace attngen::cli {

struct Rgb {
  uint8_t r, g, b;
};

// The font: 5 x 7 glyphs (plus descenders) on a 6-pixel advance (times the scale); printable ASCII,
// lower-case letters included; anything else draws as '?'.
constexpr int kGlyphWidth = 5;
constexpr int kGlyphHeight = 8;  // 7 above the baseline, 1 descender row
constexpr int kGlyphAdvance = 6;

// Width in pixels of s drawn at scale.
int text_width(const std::string& s, int scale);

// Perceptually uniform viridis, t in [0, 1] (clamped): dark purple to yellow.
Rgb viridis(double t);

// Linear blend of a and b, t in [0, 1].
Rgb mix(Rgb a, Rgb b, double t);

class Image {
 public:
  Image(int width, int height, Rgb fill);

  int width() const { return width_; }
  int height() const { return height_; }
  Rgb at(int x, int y) const;
  // Drawing clips to the image.
  void set(int x, int y, Rgb c);
  void fill_rect(int x, int y, int w, int h, Rgb c);
  void frame(int x, int y, int w, int h, Rgb c);  // a 1-pixel outline
  void blit(const Image& src, int x, int y);
  // Draws s with its top-left corner at (x, y), each font pixel a scale x scale square; returns
  // the width drawn. Text wider than max_width (if > 0) is cut, ending in '.'.
  int text(int x, int y, const std::string& s, Rgb c, int scale, int max_width = 0);
  // Writes an 8-bit RGB PNG; on failure returns false with libpng's message in *error.
  bool write_png(const std::string& path, std::string* error) const;

 private:
  int width_, height_;
  std::vector<uint8_t> pixels_;  // RGB, row-major
};

}  // namespace attngen::cli
