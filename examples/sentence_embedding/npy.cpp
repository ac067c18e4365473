#include "examples/sentence_embedding/npy.h"

#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>

namespace embed {

std::string npy_header_f32(const std::vector<int64_t>& shape) {
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (";
  for (size_t i = 0; i < shape.size(); ++i) dict += (i ? ", " : "") + std::to_string(shape[i]);
  if (shape.size() == 1) dict += ",";  // a 1-tuple, as numpy writes it
  dict += "), }";
  // magic (6) + version (2) + length (2) + dict + padding + '\n' = a multiple of 64.
  const size_t unpadded = 10 + dict.size() + 1;
  dict.append((64 - unpadded % 64) % 64, ' ');
  dict += '\n';
  std::string h = "\x93NUMPY";
  h += char(1);
  h += char(0);
  h += char(dict.size() & 0xff);
  h += char(dict.size() >> 8);
  return h + dict;
}

void write_npy_f32(const std::string& path, const float* data, const std::vector<int64_t>& shape) {
  size_t n = 1;
  for (int64_t d : shape) n *= size_t(d);
  const std::string header = npy_header_f32(shape);
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "wb"), std::fclose);
  if (!f) throw std::runtime_error(path + ": cannot write");
  bool ok = std::fwrite(header.data(), 1, header.size(), f.get()) == header.size();
  // Little-endian bytes whatever the host.
  std::vector<unsigned char> bytes(4 * n);
  for (size_t i = 0; i < n; ++i) {
    uint32_t b;
    std::memcpy(&b, &data[i], 4);
    for (int k = 0; k < 4; ++k) bytes[4 * i + k] = (b >> (8 * k)) & 0xff;
  }
  ok = ok && std::fwrite(bytes.data(), 1, bytes.size(), f.get()) == bytes.size();
  ok = (std::fclose(f.release()) == 0) && ok;
  if (!ok) throw std::runtime_error(path + ": write failed");
}

}  // namespace embed
