// NumPy .npy files (format version 1.0), float32 little-endian, C order: what `attngen viz`
// reads (the --dump-qk files of sentence_embedding).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace embed {

// The 1.0 header of a float32 C-order array: magic, version, header length, the dict
// "{'descr': '<f4', 'fortran_order': False, 'shape': (...), }" padded with spaces and a final
// newline so that the data starts at a multiple of 64 bytes.
std::string npy_header_f32(const std::vector<int64_t>& shape);

// Writes the array; throws std::runtime_error if the file cannot be written.
void write_npy_f32(const std::string& path, const float* data, const std::vector<int64_t>& shape);

}  // namespace embed
