// A reader of the safetensors format (https://huggingface.co/docs/safetensors): an 8-byte
// little-endian header length N, N bytes of JSON header ({name: {dtype, shape, data_offsets}},
// optional "__metadata__"), then the data buffer the offsets index. The file is mapped
// read-only; every header field and offset is validated when the file is opened, so a
// malformed file is a SafeTensorsError naming what is wrong, never a read out of bounds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace embed {

class SafeTensorsError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct TensorInfo {
  std::string dtype;            // as written in the header: "F32", "F16", "BF16", "I64", ...
  std::vector<int64_t> shape;   // outermost first
  uint64_t begin = 0, end = 0;  // byte offsets into the data buffer
};

class SafeTensors {
 public:
  // Maps and validates the file; throws SafeTensorsError.
  static SafeTensors open(const std::string& path);
  // Validates an in-memory copy of a file (tests).
  static SafeTensors from_bytes(std::vector<uint8_t> bytes, const std::string& name = "<memory>");

  SafeTensors(SafeTensors&& other) noexcept;
  SafeTensors& operator=(SafeTensors&& other) noexcept;
  SafeTensors(const SafeTensors&) = delete;
  SafeTensors& operator=(const SafeTensors&) = delete;
  ~SafeTensors();

  bool contains(const std::string& name) const { return tensors_.count(name) != 0; }
  const TensorInfo& info(const std::string& name) const;  // throws if absent
  std::vector<std::string> names() const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // The tensor as float32 (F32 copied, F16 and BF16 converted exactly). Throws if it is absent,
  // of another dtype, or (when expected_shape is not empty) of another shape.
  std::vector<float> load_f32(const std::string& name,
                              const std::vector<int64_t>& expected_shape = {}) const;

 private:
  SafeTensors() = default;
  void parse();  // validates header and offsets of map_/size_

  std::string path_;
  const uint8_t* map_ = nullptr;  // whole file
  size_t size_ = 0;
  bool mmapped_ = false;
  std::vector<uint8_t> owned_;     // from_bytes
  const uint8_t* data_ = nullptr;  // the data buffer, after the header
  size_t data_size_ = 0;
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// Element size of a safetensors dtype name, 0 if unknown.
size_t dtype_size(const std::string& dtype);

// IEEE binary16 and bfloat16 bit patterns to float (exact).
float f16_to_f32(uint16_t h);
float bf16_to_f32(uint16_t b);

std::string shape_string(const std::vector<int64_t>& shape);

}  // namespace embed
