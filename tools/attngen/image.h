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
// (All 95 printable ASCII characters have a glyph.)
constexpr int kGlyphWidth = 5;
constexpr int kGlyphHeight = 8;  // 7 above the baseline, 1 descender row
constexpr int kGlyphAdvance = 6;

// Width in pixels of s drawn at scale.
int text_width(const std::string& s, int scale);

// s cut to max_width pixels at scale (if max_width > 0 and it is wider), ending in '.'.
std::string fit_text(const std::string& s, int scale, int max_width);

// A token as the font can draw it: printable ASCII kept, control characters and each UTF-8
// sequence one '?', except the word-start markers of SentencePiece and byte-level BPE, '_'.
std::string ascii_label(const std::string& s);

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
  // The same rotated a quarter turn counter-clockwise (read bottom to top): (x, y) is the
  // bottom-left corner of the rotated text, which spans kGlyphHeight * scale pixels across and
  // its width upwards, cut at max_height.
  int text_up(int x, int y, const std::string& s, Rgb c, int scale, int max_height = 0);
  // Writes an 8-bit RGB PNG; on failure returns false with libpng's message in *error.
  bool write_png(const std::string& path, std::string* error) const;

 private:
  void draw_glyphs(int x, int y, const std::string& shown, Rgb c, int scale, bool up);

  int width_, height_;
  std::vector<uint8_t> pixels_;  // RGB, row-major
};

}  // namespace attngen::cli
