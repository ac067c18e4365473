// A writer of safetensors files for the examples' tests (independent of the reader,
// safetensors.h): tensors given as their dtype name, shape and little-endian bytes.
#pragma once

#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace embed::test {

struct RawTensor {
  std::string dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};

inline std::string u64_le(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = char((v >> (8 * i)) & 0xff);
  return s;
}

// The file: the header's length, the JSON header ("__metadata__" and each tensor's dtype, shape
// and data offsets), padded with spaces to 8 bytes as the reference writer pads, then the data.
inline std::string safetensors_bytes(const std::map<std::string, RawTensor>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  header["__metadata__"] = {{"format", "pt"}};
  std::string data;
  for (const auto& [name, t] : tensors) {
    header[name] = {{"dtype", t.dtype},
                    {"shape", t.shape},
                    {"data_offsets", {data.size(), data.size() + t.bytes.size()}}};
    data += t.bytes;
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');
  return u64_le(h.size()) + h + data;
}

// F32 values as a tensor of that shape (little-endian, as this library's targets store them).
inline RawTensor f32_tensor(const std::vector<float>& values, std::vector<int64_t> shape) {
  RawTensor t{"F32", std::move(shape), std::string(values.size() * 4, '\0')};
  std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
  return t;
}

}  // namespace embed::test
