// Shape files of real models (bench/shapes/*.txt), read in one place: attngen_bench registers
// their benchmarks and describes them to the Python scripts (--describe_shapes), and the ggml peer
// times the same shapes. A file holds one shape per line, "name B H S D [causal|dense]",
// self-attention (Sq = Skv = S), with "#" comments and blank lines.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace attngen::bench {

struct ModelShape {
  std::string name;
  int64_t b = 0, h = 0, s = 0, d = 0;
  bool causal = false;
};

// "B4_H12_S512_D64", with "_causal" when causal: the shape's part of a benchmark's name.
std::string sizes_of(const ModelShape& m);

// FLOPs of one attention call on the shape (bench/flops.h).
double flops_of(const ModelShape& m);

// Appends the shapes of one file. False, with `error` saying which file and line and why, for an
// unreadable file or a malformed line.
bool read_shape_file(const std::string& path, std::vector<ModelShape>* shapes, std::string* error);

// The same for a comma-separated list of files, in order.
bool read_shape_files(const std::string& list, std::vector<ModelShape>* shapes, std::string* error);

}  // namespace attngen::bench
