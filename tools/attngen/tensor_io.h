// Reading real attention inputs for `attngen viz`: float32 tensors from NumPy .npy files
// (format 1.0, 2.0 and 3.0) or safetensors files, and token lists (one token a line). Every
// problem with a file's contents is an InputError naming the file and what was wrong (exit
// status 2); a file that cannot be opened or read is an InputError too, as the user named it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace attngen::cli {

struct FloatTensor {
  std::vector<int64_t> shape;  // outermost first
  std::vector<float> data;     // C order
  std::string source;          // "FILE" or "FILE (tensor 'q')", for messages

  int64_t dim(size_t k) const { return shape[k]; }
  size_t rank() const { return shape.size(); }
};

// The most float elements one input tensor may hold (1 GiB of float32).
constexpr int64_t kMaxTensorElements = int64_t(1) << 28;

// Reads a float32 tensor from path: a .npy file (recognised by its magic "\x93NUMPY") or a
// safetensors file (anything else that parses as one), in which case the tensor named `name`
// is read. Only little-endian float32 in C order is accepted; the data must fill the file
// exactly. Throws InputError.
FloatTensor read_tensor(const std::string& path, const std::string& name);

// Whether path is a .npy file (starts with the magic "\x93NUMPY"); false if it cannot be read.
bool is_npy_file(const std::string& path);

// Whether a safetensors file at path holds a tensor of that name (false for .npy files and
// unreadable files; read_tensor then says what is wrong).
bool safetensors_has(const std::string& path, const std::string& name);

// One token per line ("\n" or "\r\n"); a final newline ends the last token rather than adding
// an empty one. Throws InputError.
std::vector<std::string> read_tokens(const std::string& path);

// "[3, 12, 64]".
std::string shape_string(const std::vector<int64_t>& shape);

}  // namespace attngen::cli
