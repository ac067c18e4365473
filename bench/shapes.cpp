// The shape-file reader (bench/shapes.h).
#include "bench/shapes.h"

#include <fstream>
#include <sstream>

#include "bench/flops.h"

namespace attngen::bench {

std::string sizes_of(const ModelShape& m) {
  return "B" + std::to_string(m.b) + "_H" + std::to_string(m.h) + "_S" + std::to_string(m.s) +
         "_D" + std::to_string(m.d) + (m.causal ? "_causal" : "");
}

double flops_of(const ModelShape& m) { return self_attention_flops(m.b, m.h, m.s, m.d, m.causal); }

bool read_shape_file(const std::string& path, std::vector<ModelShape>* shapes, std::string* error) {
  std::ifstream in(path);
  if (!in) {
    *error = "cannot read shape file " + path;
    return false;
  }
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    line = line.substr(0, line.find('#'));
    std::istringstream fields(line);
    ModelShape m;
    if (!(fields >> m.name)) continue;  // blank or comment
    std::string mask, extra;
    const bool sizes = static_cast<bool>(fields >> m.b >> m.h >> m.s >> m.d);
    fields >> mask >> extra;
    m.causal = mask == "causal";
    if (!sizes || m.b <= 0 || m.h <= 0 || m.s <= 0 || m.d <= 0 ||
        !(mask.empty() || mask == "causal" || mask == "dense") || !extra.empty()) {
      *error = path + ":" + std::to_string(number) +
               ": expected \"name B H S D [causal]\", got \"" + line + "\"";
      return false;
    }
    shapes->push_back(m);
  }
  return true;
}

bool read_shape_files(const std::string& list, std::vector<ModelShape>* shapes,
                      std::string* error) {
  std::istringstream paths(list);
  std::string path;
  while (std::getline(paths, path, ',')) {
    if (!path.empty() && !read_shape_file(path, shapes, error)) return false;
  }
  return true;
}

}  // namespace attngen::bench
